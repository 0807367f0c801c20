"""--shard I/N: the deal covers every shape once, is stable and balanced; a shard run
records its shard and runs only its shapes."""

from __future__ import annotations

import pytest

from pa_bench import runner
from pa_bench.backends.numpy import NumpyBackend
from pa_bench.problem.config import CONFIG_DIR, load_config
from pa_bench.problem.plan import make_plan
from pa_bench.shard import (Shard, ShardError, deal, parse_shard, shape_cost, shard_meta,
                            shard_problems)
from pa_bench.store.results import open_run

CONFIGS = ["smoke", "pr2092", "sweep", "long"]


def plan_of(name: str):
    return make_plan(load_config(CONFIG_DIR / f"{name}.yaml"))


@pytest.mark.parametrize("name", CONFIGS)
@pytest.mark.parametrize("n", range(1, 8))
def test_every_shape_in_exactly_one_shard(name, n):
    problems = plan_of(name).problems
    dealt = [shard_problems(problems, Shard(i, n)) for i in range(n)]
    keys = [p.shape.written for shard in dealt for p in shard]
    assert sorted(keys) == sorted(p.shape.written for p in problems)
    assert len(keys) == len(set(keys)) == len(problems)
    for shard in dealt:  # each shard keeps the config's order
        order = [problems.index(p) for p in shard]
        assert order == sorted(order)


@pytest.mark.parametrize("n", range(1, 8))
def test_the_deal_is_stable(n):
    a = [shard_problems(plan_of("sweep").problems, Shard(i, n)) for i in range(n)]
    b = [shard_problems(plan_of("sweep").problems, Shard(i, n)) for i in range(n)]
    assert [[p.shape.written for p in s] for s in a] == [[p.shape.written for p in s] for s in b]


@pytest.mark.parametrize("n", range(1, 8))
def test_sweep_shards_are_balanced(n):
    costs = [shape_cost(p) for p in plan_of("sweep").problems]
    loads = [sum(costs[i] for i in shard) for shard in deal(costs, n)]
    mean = sum(costs) / n
    # a shape is indivisible, so no deal beats max(mean, costliest shape); greedy LPT stays
    # within 4/3 of the best deal
    assert max(loads) <= 4 / 3 * max(mean, max(costs))
    if n == 2:  # the costliest shape (128Kx2048) alone against all the rest
        assert min(loads) >= 0.6 * max(loads)


def test_deal_by_cost_not_by_index():
    assert deal([1, 1, 1, 10], 2) == [[3], [0, 1, 2]]
    assert deal([5, 5, 5, 5], 2) == [[0, 2], [1, 3]]  # ties: config order, lowest shard
    assert deal([3, 7], 4) == [[1], [0], [], []]       # more shards than shapes: some idle


def test_cost_is_heads_times_causal_pairs():
    p = make_plan(load_config(CONFIG_DIR / "smoke.yaml"), shapes="10x4").problems[0]
    assert shape_cost(p) == p.heads_q * (11 + 12 + 13 + 14)


@pytest.mark.parametrize("text, needle", [
    ("4/4", "I must be 0..3 (0-based; with SLURM use --array=0-3)"),
    ("-1/4", "I must be 0..3"),
    ("0/0", "N must be at least 1"),
    ("1-4", "is not I/N"),
    ("a/b", "is not I/N"),
])
def test_bad_shard_is_one_line(text, needle):
    with pytest.raises(ShardError) as err:
        parse_shard(text)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_parse_shard():
    assert parse_shard(" 2 / 8 ") == Shard(2, 8) and str(Shard(2, 8)) == "2/8"


def test_a_shard_run_records_its_shard_and_runs_only_its_shapes(tmp_path):
    config = make_plan(load_config(CONFIG_DIR / "smoke.yaml"), shapes="64x16,200x40,0x32",
                       variants=["v1"]).config
    path = runner.run_parity(config, NumpyBackend(), results_root=tmp_path, sample_rows=4,
                             shard=Shard(0, 2), write_report=False)
    run = open_run(path)
    meta = run.read_meta()
    assert meta["shard"] == shard_meta(make_plan(config).problems, Shard(0, 2),
                                       lambda p: p.shape.written)
    assert meta["shard"]["shapes"] == ["200x40"] and meta["shard"]["index"] == 0
    assert meta["config"]["shapes"] == ["64x16", "200x40", "0x32"]  # the whole config
    assert [r.key() for r in run.records()] == [("200x40", "v1")]

    from pa_bench.present.report import missing_rows
    assert missing_rows(run.records(), run.meta()) == []  # other shards' rows are not "missing"

    with pytest.raises(ShardError, match="--shard is 1/2 here but the run is shard 0/2"):
        runner.run_parity(config, NumpyBackend(), results_root=tmp_path, resume_run=path,
                          shard=Shard(1, 2), write_report=False)
