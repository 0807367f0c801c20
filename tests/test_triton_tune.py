"""scripts/triton_tune.py on the CPU: its arguments, the candidates it enumerates for the PR shapes,
its one-line errors, the table entry it prints, and (through Triton's interpreter) one candidate of
each kernel switch on a tiny shape against FP64 and the numerics model."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import triton_tune as T  # noqa: E402

from pa_bench.backends import triton_runner  # noqa: E402

_reason = triton_runner.unavailable_reason(need_gpu=False)
if _reason:
    pytest.skip(_reason, allow_module_level=True)


def test_arguments():
    a = T.parse_args([])
    assert (a.config, a.shapes, a.candidates, a.out, a.rows, a.budget_s, a.list) == (
        "configs/pr2092.yaml", None, None, None, 32, 200.0, False)
    assert (a.min_seconds, a.max_seconds) == (0.2, 1.5)
    a = T.parse_args(["--shapes", "32Kx1024,0x1536", "--out", "x", "--candidates", "m64-w4-s5-asm-tma", "--no-v2"])
    assert (a.shapes, a.out, a.candidates, a.no_v2) == ("32Kx1024,0x1536", "x", "m64-w4-s5-asm-tma", True)
    with pytest.raises(SystemExit) as exc:
        T.parse_args(["--rows", "0"])
    assert exc.value.code == 2
    settings = T.Settings(max_seconds=1.5)
    assert (settings.hot, settings.min_seconds, settings.max_seconds) == (False, 0.2, 1.5)


def test_candidates_of_the_pr_shapes(capsys):
    args = T.parse_args([])
    pbs = T.problems(args)
    assert [p.shape.label for p in pbs] == ["32Kx1024", "64Kx512", "1.5K", "2.1Kx256"]
    mod = triton_runner.kernel_module()
    for pb in pbs:
        cfgs = T.enumerate_candidates(pb, 132)
        assert cfgs[0] == mod.default_config(128, 4, pb.queries, 32, 132)
        assert 15 <= len(cfgs) <= 30 and len(set(cfgs)) == len(cfgs)
        assert {c.convert for c in cfgs} == {"cast", "bits", "asm"} and {c.loads for c in cfgs} == {"gather", "tile", "tma"}
        assert [T.arithmetic(c) for c in cfgs].count("same") == len(cfgs) - 1
    assert T.main(["--list"]) == 0
    out = capsys.readouterr().out
    for label in ("32Kx1024 (d128-h32.8-paged64-q1024-k65536)", "64Kx512", "1.5K", "2.1Kx256", "m128-w8-s5-asm-tile",
                  "tile 128 (changes tile_keys)"):
        assert label in out


def test_named_candidates_put_the_default_first_and_drop_what_cannot_run():
    args = T.parse_args(["--shapes", "2.1Kx256"])
    pb = T.problems(args)[0]
    cfgs = T.enumerate_candidates(pb, 132, "m128-w8-s5-asm-tile,m64-w4-s3-cast-gather")
    assert [c.name for c in cfgs] == ["m64-w4-s3-cast-gather", "m128-w8-s5-asm-tile"]
    from pa_bench.problem.plan import Problem

    page16 = Problem(pb.shape, page=16)
    assert [c.name for c in T.enumerate_candidates(page16, 132, "m64-w4-s5-asm-tma")] == ["m64-w4-s3-cast-gather"]


def test_bad_input_is_one_line_error(capsys):
    assert T.main(["--list", "--candidates", "m64-w4-s5-asm-warp"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: not a triton configuration name") and err.count("\n") == 1
    assert T.main(["--list", "--shapes", "12xx3"]) == 2
    assert capsys.readouterr().err.startswith("error: ")


def test_best_per_shape_and_the_table_entry(monkeypatch):
    rows = [
        {"shape": "A", "candidate": "m128-w8-s3-cast-gather", "status": "ok", "arithmetic": "same", "ms": 3.0},
        {"shape": "A", "candidate": "m128-w8-s5-asm-tile", "status": "ok", "arithmetic": "same", "ms": 1.5,
         "vs_default": 2.0},
        {"shape": "A", "candidate": "m64-w4-s5-asm-gather-n128", "status": "ok", "arithmetic": "tile 128", "ms": 1.0},
        {"shape": "A", "candidate": "m64-w4-s5-asm-tma", "status": "failed", "arithmetic": "same", "ms": 0.5},
        {"shape": "B", "candidate": "m64-w4-s3-cast-gather", "status": "ok", "arithmetic": "same", "ms": 0.1},
        {"shape": "B", "candidate": "v2", "status": "reference", "arithmetic": "cuda kernel", "ms": 0.05},
    ]
    best = T.best_per_shape(rows)
    assert {s: r["candidate"] for s, r in best.items()} == {"A": "m128-w8-s5-asm-tile", "B": "m64-w4-s3-cast-gather"}
    monkeypatch.setattr(triton_runner, "TUNED", {"Other GPU": {"c0": "m64-w4-s3-cast-gather"}})
    text = T.table_entry("NVIDIA H200", best, {"A": "cA", "B": "cB"})
    scope = {}
    exec(text, scope)
    assert scope["TUNED"] == {"Other GPU": {"c0": "m64-w4-s3-cast-gather"},
                              "NVIDIA H200": {"cA": "m128-w8-s5-asm-tile", "cB": "m64-w4-s3-cast-gather"}}
    assert "1.5 ms, 2.00x the default" in text


def test_one_candidate_of_each_switch_in_the_interpreter(monkeypatch):
    """The representatives of every switch value among a tiny paged shape's candidates, run by the
    interpreter (the PTX conversion replaced by the bit conversion, which the interpreter runs),
    pass parity against FP64; those at the default's launch parameters give its bits."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    from pa_bench.problem.inputs import make_inputs
    from pa_bench.problem.plan import Problem
    from pa_bench.problem.shapes import parse_shape

    pb = Problem(parse_shape("150x40"), heads_q=4, heads_kv=2, head_dim=64, layout="paged", page=64, seed=2)
    cfgs = T.enumerate_candidates(pb, 132)
    reps = T.switch_representatives(cfgs)
    assert reps[0] == cfgs[0]
    seen = {(k, getattr(c, k)) for c in reps for k in ("convert", "loads", "k_trans", "warp_specialize", "block_n")}
    assert {("convert", "asm"), ("loads", "tma"), ("k_trans", True), ("warp_specialize", True), ("block_n", 128)} <= seen
    mod = triton_runner.kernel_module()
    inputs = make_inputs(pb)
    default = T.cpu_check(inputs, reps[0])
    assert default["parity"], default["why"]
    for cfg in reps[1:]:
        if cfg.convert not in mod.INTERPRETER_CONVERTS:
            cfg = mod.Config.parse(cfg.name.replace("-asm-", "-bits-"))
        res = T.cpu_check(inputs, cfg, default["out"])
        assert res["parity"], f"{cfg.name}: {res['why']}"
        same_launch = (cfg.block_m, cfg.block_n) == (reps[0].block_m, reps[0].block_n)
        if same_launch:
            assert res["bitwise"], cfg.name
    assert np.isfinite(default["out"]).all()
