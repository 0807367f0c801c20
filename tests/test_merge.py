"""pa-bench merge: shard runs round-trip into the unsharded run's rows; runs that did not
measure the same thing are refused with one line; a merged run's report has a GPU column where
its rows ran on different GPUs."""

from __future__ import annotations

import json
import shutil

import pytest

from pa_bench import runner
from pa_bench.backends.numpy import NumpyBackend
from pa_bench.present.report import build_report
from pa_bench.problem.config import CONFIG_DIR, load_config
from pa_bench.problem.plan import make_plan
from pa_bench.shard import Shard
from pa_bench.store.merge import MergeConflict, merge_runs, prepare_output
from pa_bench.store.records import COLUMNS, format_cell
from pa_bench.store.results import RunDir, open_run

SHAPES = "64x16,200x40,0x32,130x24"


@pytest.fixture(scope="module")
def config():
    return make_plan(load_config(CONFIG_DIR / "smoke.yaml"), shapes=SHAPES,
                     variants=["v1", "v2t"]).config


def _run(config, root, shard=None):
    return runner.run_parity(config, NumpyBackend(), results_root=root, sample_rows=4,
                             shard=shard, write_report=False)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, config):
    """The unsharded run and its three shards (parity on the numpy backend, 4 rows)."""
    root = tmp_path_factory.mktemp("runs")
    whole = _run(config, root / "whole")
    shards = [_run(config, root / f"s{i}", Shard(i, 3)) for i in range(3)]
    return whole, shards


def cells(records):
    return [tuple(format_cell(c, getattr(r, c)) for c in COLUMNS) for r in records]


def copy_run(src, dst):
    shutil.copytree(src, dst)
    return RunDir(dst)


def edit_meta(run: RunDir, fn):
    meta = run.read_meta()
    fn(meta)
    run.write_meta(meta)


def test_merge_of_shards_equals_the_unsharded_run(runs, tmp_path):
    whole, shards = runs
    assert all(len(open_run(s).records()) < len(open_run(whole).records()) for s in shards)
    out = merge_runs([open_run(s) for s in reversed(shards)], prepare_output(tmp_path / "m"),
                     command=["pa-bench", "merge"])
    merged = out.records()
    expected = open_run(whole).records()
    assert [r.key() for r in merged] == [r.key() for r in expected]  # the plan's order
    assert cells(merged) == cells(expected)                         # parity columns and all
    assert all(r.parity_pass for r in merged)
    meta = out.read_meta()
    assert [p["shard"]["index"] for p in meta["parts"]] == [2, 1, 0]
    assert "shard" not in meta and meta["status"] == "complete"
    assert meta["config"] == open_run(whole).read_meta()["config"]
    from pa_bench.present.report import missing_rows
    assert missing_rows(merged, out.meta()) == []


def test_a_missing_shard_is_named_by_the_report(runs, tmp_path):
    _whole, shards = runs
    out = merge_runs([open_run(s) for s in shards[:2]], prepare_output(tmp_path / "m"))
    text = build_report(out, plots=False)
    assert "Incomplete run" in text and "missing: the run stopped before this row" in text


def test_an_identical_duplicate_row_is_kept_once(runs, tmp_path):
    _whole, shards = runs
    twin = copy_run(shards[0], tmp_path / "twin")
    out = merge_runs([open_run(shards[0]), twin], prepare_output(tmp_path / "m"))
    assert cells(out.records()) == cells(open_run(shards[0]).records())


@pytest.mark.parametrize("edit, needle", [
    (lambda m: m.update(seed=7), "the seed is 7 there but 0 in"),
    (lambda m: m["config"]["timing"].update(max_seconds=99.0),
     "config key timing.max_seconds is 99.0 there but"),
    (lambda m: m["config"].update(heads_q=8), "config key heads_q is 8 there but 4 in"),
    (lambda m: m.update(mode="run"), "the command is 'run' there but 'parity' in"),
    (lambda m: m.update(sample_rows=None), "--sample-rows is not set there but 4 in"),
    (lambda m: m["backend"].update(backend="cuda"), "the backend is 'cuda' there but 'numpy'"),
])
def test_merge_refuses_runs_that_measured_something_else(runs, tmp_path, edit, needle):
    _whole, shards = runs
    other = copy_run(shards[1], tmp_path / "other")
    edit_meta(other, edit)
    with pytest.raises(MergeConflict) as err:
        merge_runs([open_run(shards[0]), other], RunDir(tmp_path / "m"))
    msg = str(err.value)
    assert needle in msg and str(other.path) in msg and "\n" not in msg


def test_merge_refuses_another_kernel_source(runs, tmp_path):
    _whole, shards = runs
    a, b = copy_run(shards[0], tmp_path / "a"), copy_run(shards[1], tmp_path / "b")
    edit_meta(a, lambda m: m["backend_meta"].update(kernel_sources={"v1.cu": "aaa", "common.cuh": "c"}))
    edit_meta(b, lambda m: m["backend_meta"].update(kernel_sources={"v1.cu": "bbb", "common.cuh": "c"}))
    with pytest.raises(MergeConflict, match="the hash of v1.cu is 'bbb' there but 'aaa' in"):
        merge_runs([a, b], RunDir(tmp_path / "m"))


def test_merge_refuses_a_row_held_twice_with_other_values(runs, tmp_path):
    _whole, shards = runs
    twin = copy_run(shards[0], tmp_path / "twin")
    records = twin.records()
    records[0].max_abs_err = 1.0
    twin.write_records(records)
    with pytest.raises(MergeConflict, match=rf"{records[0].shape} {records[0].variant} is in .* "
                                            r"with a different max_abs_err"):
        merge_runs([open_run(shards[0]), twin], RunDir(tmp_path / "m"))


def test_merge_cli_one_line_exit_2_and_no_run_left(one_line_error, invoke, runs, tmp_path):
    _whole, shards = runs
    other = copy_run(shards[1], tmp_path / "other")
    edit_meta(other, lambda m: m.update(seed=7))
    res = invoke("merge", shards[0], other.path, "-o", tmp_path / "m")
    assert res.exit_code == 2
    assert one_line_error(res, "the seed").startswith("error: cannot merge")
    assert not (tmp_path / "m").exists()

    res = invoke("merge", *shards, "-o", tmp_path / "m")
    assert res.exit_code == 0, res.output
    assert len(open_run(tmp_path / "m").records()) == 8 and (tmp_path / "m" / "report.md").exists()
    res = invoke("merge", *shards, "-o", tmp_path / "m")
    assert res.exit_code == 2 and "is not an empty directory" in res.stderr


def test_report_of_a_cross_gpu_merge_has_a_gpu_column(runs, tmp_path):
    _whole, shards = runs
    parts = []
    for i, (name, idx) in enumerate([("NVIDIA H200", 0), ("NVIDIA A100-SXM4-80GB", 3)]):
        part = copy_run(shards[i], tmp_path / f"p{i}")
        records = part.records()
        for r in records:
            r.gpu, r.arch, r.device_index, r.device_uuid = name, f"sm_{90 - 10 * i}", idx, f"GPU-{i}"
        part.write_records(records)
        parts.append(part)
    single = build_report(parts[0], plots=False)
    assert "| variant | GPU |" not in single
    out = merge_runs(parts, prepare_output(tmp_path / "m"))
    assert {(r.gpu, r.device_index) for r in out.records()} == {("NVIDIA H200", 0),
                                                                 ("NVIDIA A100-SXM4-80GB", 3)}
    text = build_report(out, plots=False)
    assert "| variant | GPU |" in text
    assert "| NVIDIA H200 #0 |" in text and "| NVIDIA A100-SXM4-80GB #3 |" in text
    assert "Merged from 2 runs" in text
    assert json.loads((out.path / "meta.json").read_text())["parts"][1]["gpus"] == [
        "NVIDIA A100-SXM4-80GB"]
