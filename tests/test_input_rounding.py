"""Input rounding beyond the cache's format ("q-int8-row": Q to int8, one fp32 scale per row and
head): the rounding against hand-computed values, the model's scores against an integer dot
product, the accuracy budget's verdict on fake numbers, and a plug-in kernel that declares the
rounding, judged by the runner on the numpy backend."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from pa_bench import runner
from pa_bench import variants as registry
from pa_bench.backends.numpy import NumpyBackend
from pa_bench.numerics import judge as J
from pa_bench.numerics.metrics import ParityMetrics, judge_budget
from pa_bench.numerics.model import input_rounding, model_attention
from pa_bench.numerics.reference import reference_attention
from pa_bench.numerics.rounding import round_q_int8_rows, rounded_q
from pa_bench.problem.config import DEFAULT_CONFIG, load_config
from pa_bench.problem.inputs import make_inputs
from pa_bench.problem.plan import Problem
from pa_bench.problem.shapes import parse_shape
from pa_bench.store.records import Record, read_csv, write_csv
from pa_bench.store.results import open_run

SMOKE = DEFAULT_CONFIG.parent / "smoke.yaml"
f16, f32 = np.float16, np.float32


# --------------------------------------------------------------------------- the rounding


def test_q_int8_rows_against_hand_computed_values():
    q = np.array([
        [127.0, -2.5, 0.5, 1.5, -126.5, 3.5],   # amax 127: inv = scale = 1, so q_i8 = rint(q):
                                                #   ties to even: -2.5 -> -2, 0.5 -> 0, 1.5 -> 2,
                                                #   -126.5 -> -126, 3.5 -> 4; amax -> exactly 127
        [0.0, 0.0, 0.0, 0.0, 0.0, 0.0],         # a zero row: scale 1, all zero
        [-2.0, 1.0, 2.0**-7, 0.5, -1.5, 0.0],   # amax 2 (negative): inv = 127/2 = 63.5 exactly;
                                                #   -2*63.5 = -127, 1*63.5 = 63.5 -> 64 (even),
                                                #   2^-7*63.5 = 0.496 -> 0, 0.5*63.5 = 31.75 -> 32,
                                                #   -1.5*63.5 = -95.25 -> -95
        [1000.0, -1000.0, 500.0, -3.0, 0.0, 1.0],  # inv = fp32(127/1000); 1000*inv rounds to
                                                #   127.0000076 in fp32 (above 127): rint -> 127,
                                                #   the clamp keeps every value in [-127, 127];
                                                #   500*inv = 63.5000038 -> 64; -3*inv = -0.381 -> 0
    ], dtype=f16)
    q_i8, scale = round_q_int8_rows(q)
    assert q_i8.dtype == np.int8 and scale.dtype == np.float32
    assert q_i8.tolist() == [
        [127, -2, 0, 2, -126, 4],
        [0, 0, 0, 0, 0, 0],
        [-127, 64, 0, 32, -95, 0],
        [127, -127, 64, 0, 0, 0],
    ]
    # 2/127 = 2^-6 * (1 + 2^-7 + 2^-14 + 2^-21 + 2^-28 ...): rounded to 24 bits, 0x1.020408p-6
    assert scale.tolist() == [1.0, 1.0, float.fromhex("0x1.020408p-6"), float(f32(1000) / f32(127))]
    assert float(f32(1000) * (f32(127) / f32(1000))) > 127       # the product the clamp guards


def test_the_amax_element_is_always_127_and_nothing_leaves_the_range():
    rng = np.random.default_rng(5)
    q = (rng.standard_normal((64, 128)) * np.logspace(-4, 4, 64)[:, None]).astype(f16)
    q[3, 7] = f16(-65504.0)                                       # fp16's largest magnitude
    q_i8, scale = round_q_int8_rows(q)
    top = np.argmax(np.abs(q.astype(f32)), axis=1)
    assert np.all(np.abs(q_i8[np.arange(64), top].astype(int)) == 127)
    assert int(q_i8.min()) >= -127 and int(q_i8.max()) <= 127
    # each element within half a step of its value (plus the fp32 rounding of inv and the product)
    err = np.abs(q_i8 * scale[:, None].astype(np.float64) - q.astype(np.float64))
    assert np.all(err <= scale[:, None] * (0.5 + 1e-5))


def test_rounded_q_is_exact_int8_times_scale_and_none_leaves_q_alone():
    q = np.array([[[-2.0, 1.0, 0.5]]], dtype=f16)
    assert rounded_q(q, None) is q
    r = rounded_q(q, "q-int8-row")
    assert r.dtype == np.float64
    scale = float.fromhex("0x1.020408p-6")
    assert r.tolist() == [[[-127 * scale, 64 * scale, 32 * scale]]]
    with pytest.raises(ValueError, match="'q-fp8'"):
        rounded_q(q, "q-fp8")


def test_the_registry_field_is_validated():
    v = registry.Variant("x", registry.CUDA_KERNEL, "x", source="x.cu", tile_keys=64, input_rounding="q-int8-row")
    assert v.input_rounding == "q-int8-row"
    assert registry.Variant("y", registry.CUDA_KERNEL, "y", source="y.cu", tile_keys=64).input_rounding is None
    with pytest.raises(ValueError, match=r"variant 'z': input_rounding .* not 'q-int4'"):
        registry.Variant("z", registry.CUDA_KERNEL, "z", source="z.cu", tile_keys=64, input_rounding="q-int4")
    assert all(registry.get(n).input_rounding is None for n in ("v1", "v2", "v2t", "v3", "triton"))


# --------------------------------------------------------------------------- the model


def _inputs(shape="200x70", hq=4, hkv=2, d=64, data="realistic"):
    pb = Problem(parse_shape(shape), heads_q=hq, heads_kv=hkv, head_dim=d, page=16, data=data, seed=3)
    return make_inputs(pb)


def test_the_models_scores_are_the_integer_dot_times_q_scale_in_fp32():
    """The model's s_raw (float64 dot of the rounded Q with int8 K, rounded once to fp32) against
    the contract's literal form: float32(float32(sum_d q_i8 * k_i8) * q_scale), at the extremes
    (|S| near 127*127*128) and on random values."""
    rng = np.random.default_rng(9)
    d = 128
    q = (rng.standard_normal((40, d)) * np.logspace(-3, 4, 40)[:, None]).astype(f16)
    q[0] = f16(-60000.0)                                          # every q_i8 = -127
    k = rng.integers(-127, 128, size=(300, d)).astype(np.int8)
    k[0] = -127                                                   # S = 127*127*128 with row 0
    q_i8, scale = round_q_int8_rows(q)
    s_int = q_i8.astype(np.int64) @ k.astype(np.int64).T         # exact
    assert s_int[0, 0] == 127 * 127 * 128 < 2**21
    contract = (s_int.astype(f32) * scale[:, None]).astype(f32)  # one fp32 multiply
    model = (rounded_q(q, "q-int8-row") @ k.astype(np.float64).T).astype(f32)
    assert np.array_equal(model.view(np.uint32), contract.view(np.uint32))


def test_a_q_already_on_the_int8_grid_gives_the_unrounded_models_bits():
    """Q whose rows are integers with amax 127 round to themselves with scale 1: the model with
    the rounding is then bit for bit the model without it (the rounding changes only Q)."""
    inp = _inputs()
    rng = np.random.default_rng(1)
    q = rng.integers(-127, 128, size=inp.q.shape).astype(f16)
    q[..., 0] = 127
    inp = replace(inp, q=q)
    for slack in (None, 8.0):
        off = model_attention(inp, 64, max_slack=slack)
        on = model_attention(inp, 64, max_slack=slack, input_rounding="q-int8-row")
        assert np.array_equal(on.view(np.uint32), off.view(np.uint32))


def test_the_rounded_model_follows_fp64_with_the_rounded_q():
    inp = _inputs()
    pb = inp.problem

    def fp64(q):
        return reference_attention(q, inp.k_i8, inp.v_i8, pb.context, pb.softmax_scale,
                                   k_scale=inp.k_scale, v_scale=inp.v_scale)

    ref, ref_rounded = fp64(inp.q), fp64(rounded_q(inp.q, "q-int8-row"))
    off = model_attention(inp, 64)
    on = model_attention(inp, 64, input_rounding="q-int8-row")
    round_err = float(np.max(np.abs(ref_rounded - ref)))
    assert round_err > 0 and not np.array_equal(on, off)
    # the rounded model is as close to FP64 with the rounded Q as the plain one is to plain FP64
    assert np.max(np.abs(on - ref_rounded)) < 4 * np.max(np.abs(off - ref)) + 1e-7
    # against the usual reference its error is the rounding's
    assert 0.5 * round_err < np.max(np.abs(on - ref)) < 2 * round_err


def test_the_numpy_backend_models_a_variant_that_declares_the_rounding():
    registry.register(registry.Variant("rq-test", registry.CUDA_KERNEL, "x", source="/nonexistent/rq.cu",
                                       tile_keys=64, input_rounding="q-int8-row"))
    try:
        assert input_rounding("rq-test") == "q-int8-row" and input_rounding("v1") is None
        inp = _inputs()
        be = NumpyBackend(check_determinism=False)
        out = be.compute(inp, "rq-test", None).out
        v1 = be.compute(inp, "v1", None).out
        assert np.array_equal(out, model_attention(inp, 64, input_rounding="q-int8-row"))
        assert np.array_equal(v1, model_attention(inp, 64)) and not np.array_equal(out, v1)
        assert np.array_equal(be.model(inp, 64, input_rounding="q-int8-row"), out)
    finally:
        registry.unregister("rq-test")


# --------------------------------------------------------------------------- the judgement


def _judgement(max_err: float, model_err: float, floor: float = 1e-7) -> J.Judgement:
    from pa_bench.numerics.metrics import err_ratio, judge_parity

    ok, reason = judge_parity(max_err, model_err, floor)
    pm = ParityMetrics(max_abs_err=max_err, rel_l2_err=0.0, nmse=0.0, cosine=1.0, nan_inf=0,
                       model_max_abs_err=model_err, err_ratio=err_ratio(max_err, model_err), floor=floor,
                       parity_pass=ok, reason=reason)
    return J.Judgement(pm, () if ok else (f"parity: {reason}",))


def test_budget_rule_on_fake_numbers():
    assert judge_budget(1e-3, 2e-3) == (True, "max err 0.001 <= KV quantisation error 0.002")
    assert judge_budget(2e-3, 2e-3)[0] is True                          # at most: equal passes
    ok, why = judge_budget(3e-3, 2e-3)
    assert ok is False and why == "max err 0.003 > KV quantisation error 0.002 (over by 0.001, 1.5x)"
    assert judge_budget(math.inf, 2e-3)[0] is False
    for missing in (None, math.nan):
        ok, why = judge_budget(1e-3, missing)
        assert ok is None and why.startswith("accuracy budget not judged: no KV quantisation error")


def test_a_row_passes_only_if_both_rules_hold():
    both = J.with_budget(_judgement(1e-3, 1e-3), quant_err=2e-3)        # parity and budget hold
    assert both.passed and both.budget_pass is True and both.notes == ()

    parity_only = J.with_budget(_judgement(5e-3, 1e-3), quant_err=1e-2)  # 5e-3 > 2*1e-3 + floor
    assert not parity_only.passed and parity_only.budget_pass is True
    assert len(parity_only.notes) == 1 and parity_only.notes[0].startswith("parity: max err 0.005 > 2 x model")

    budget_only = J.with_budget(_judgement(3e-3, 2e-3), quant_err=2e-3)  # 3e-3 <= 2*2e-3: parity holds
    assert budget_only.metrics.parity_pass and not budget_only.passed and budget_only.budget_pass is False
    assert budget_only.notes == ("accuracy budget: max err 0.003 > KV quantisation error 0.002 "
                                 "(over by 0.001, 1.5x)",)

    unknown = J.with_budget(_judgement(1e-3, 1e-3), quant_err=None)     # e.g. npz data: int8 K/V only
    assert unknown.passed and unknown.budget_pass is None               # the parity verdict stands
    assert unknown.notes[0].startswith("accuracy budget not judged")

    plain = _judgement(1e-3, 1e-3)                                      # no rounding: no budget
    assert plain.passed and plain.budget_pass is None


def test_the_new_columns_round_trip_and_old_files_read_them_empty(tmp_path):
    rec = Record(shape="256x64", variant="v4", input_round_err=1.25e-4, budget_pass=False)
    write_csv([rec], tmp_path / "r.csv")
    back = read_csv(tmp_path / "r.csv")[0]
    assert back.input_round_err == 1.25e-4 and back.budget_pass is False
    (tmp_path / "old.csv").write_text("shape,variant,max_abs_err,schema_version\n256x64,v1,1e-06,3\n")
    old = read_csv(tmp_path / "old.csv")[0]
    assert old.input_round_err is None and old.budget_pass is None and old.max_abs_err == 1e-6


# --------------------------------------------------------------------------- a plug-in, end to end


@pytest.fixture()
def rounding_plugin():
    """A plug-in kernel that declares "q-int8-row" (on the numpy backend its output is the model's,
    so its error against FP64 is the rounding's)."""
    registry.register(registry.Variant("mine-q8", registry.CUDA_KERNEL, "a plug-in kernel that rounds Q to int8",
                                       source="/nonexistent/mine_q8.cu", tile_keys=64, input_rounding="q-int8-row"))
    yield "mine-q8"
    registry.unregister("mine-q8")


def test_a_plugin_that_declares_the_rounding_is_judged_by_both_rules(tmp_path, rounding_plugin):
    config = load_config(SMOKE).with_overrides(variants=f"v1,{rounding_plugin}", shapes="1023x113,0x96")
    path = runner.run_parity(config, NumpyBackend(), results_root=tmp_path)
    rows = {(r.shape, r.variant): r for r in open_run(path).records()}
    for shape in ("1023x113", "0x96"):
        mine, v1 = rows[(shape, rounding_plugin)], rows[(shape, "v1")]
        assert v1.input_round_err is None and v1.budget_pass is None and v1.parity_pass is True
        assert mine.status == "ok" and mine.err_ratio == 1.0           # the kernel is the model
        assert mine.quant_max_abs_err == v1.quant_max_abs_err > 0
        assert mine.input_round_err > 0
        # its error against FP64 is the rounding's plus the model's own fp32 arithmetic
        assert abs(mine.max_abs_err - mine.input_round_err) <= 2 * v1.max_abs_err + 1e-6
        assert mine.budget_pass is (mine.max_abs_err <= mine.quant_max_abs_err)
        assert mine.parity_pass is mine.budget_pass
        assert mine.budget_pass is True                                 # realistic data: within budget


def _npz_run(tmp_path, variant: str, arrays: dict):
    path = tmp_path / "cap.npz"
    np.savez(path, **arrays)
    config = load_config(SMOKE).with_overrides(variants=variant, shapes="100x28", data="npz",
                                               data_file=str(path), layout="contiguous")
    (rec,) = open_run(runner.run_parity(config, NumpyBackend(), results_root=tmp_path)).records()
    return rec


def test_a_failed_budget_fails_the_row_and_says_why(tmp_path, rounding_plugin):
    """K/V already on the int8 grid (integers, each token's amax 127: scale 1) cost nothing to
    quantise, so the budget is zero and the rounding of Q is over it; parity itself holds."""
    rng = np.random.default_rng(2)
    k = rng.integers(-127, 128, (2, 128, 64)).astype(np.float32)
    v = rng.integers(-127, 128, (2, 128, 64)).astype(np.float32)
    k[..., 0] = v[..., 0] = 127
    q = (rng.standard_normal((4, 28, 64)) * 0.02).astype(np.float32)
    mine = _npz_run(tmp_path, rounding_plugin, dict(q=q, k=k, v=v))
    assert mine.quant_max_abs_err == 0.0 and mine.input_round_err > 0 and mine.max_abs_err > 0
    assert mine.err_ratio == 1.0                                        # parity held
    assert mine.budget_pass is False and mine.parity_pass is False and mine.status == "ok"
    assert "accuracy budget: max err" in mine.reason and "> KV quantisation error 0 " in mine.reason


def test_without_float_kv_the_budget_is_not_judged_and_parity_alone_stands(tmp_path, rounding_plugin):
    """An .npz capture of int8 K/V only has no quantisation error: the row says the budget was
    not judged (budget_pass empty) and passes on parity."""
    rng = np.random.default_rng(4)
    mine = _npz_run(tmp_path, rounding_plugin, dict(
        q=rng.standard_normal((4, 28, 64)).astype(np.float16),
        k_i8=rng.integers(-127, 128, (2, 128, 64), dtype=np.int8),
        v_i8=rng.integers(-127, 128, (2, 128, 64), dtype=np.int8),
        k_scale=rng.uniform(0.01, 0.1, (2, 128)).astype(np.float32),
        v_scale=rng.uniform(0.01, 0.1, (2, 128)).astype(np.float32)))
    assert mine.quant_max_abs_err is None and mine.input_round_err > 0
    assert mine.budget_pass is None and mine.parity_pass is True
    assert "accuracy budget not judged" in mine.reason


# --------------------------------------------------------------------------- where the columns show


def test_the_parity_table_shows_the_rounding_columns_only_when_a_row_has_them():
    from pa_bench.present.console import _parity_table

    plain = Record(shape="256x64", variant="v1", max_abs_err=1e-3, model_max_abs_err=1e-3, err_ratio=1.0,
                   parity_pass=True, quant_max_abs_err=0.3)
    rounded = Record(shape="256x64", variant="mine-q8", max_abs_err=0.4, model_max_abs_err=0.4, err_ratio=1.0,
                     parity_pass=False, quant_max_abs_err=0.3, input_round_err=0.39, budget_pass=False)
    for wide in (False, True):
        header, rows, right = _parity_table([plain], wide, ())
        assert "input round err" not in header and "budget" not in header
        header2, rows2, right2 = _parity_table([plain, rounded], wide, ())
        at = header2.index("quant err") + 1
        assert header2[at] == "input round err" and ("budget" in header2) is wide
        assert rows2[0][at] == "-" and rows2[1][at] != "-"
        assert len(header2) == len(rows2[1]) and at in right2
        if wide:
            assert rows2[1][header2.index("budget")] == "FAIL" and rows2[0][header2.index("budget")] == "-"
        # every other column is what the table without them shows
        assert [c for i, c in enumerate(header2) if header2[i] not in ("input round err", "budget")] == header


def test_the_report_and_compare_carry_the_rounding(tmp_path, rounding_plugin):
    from pa_bench.present.compare import compare_runs
    from pa_bench.present.report import render_report, rounding_notes

    assert rounding_notes([Record(shape="s", variant="v1", max_abs_err=1e-3)]) == []
    (line,) = rounding_notes([Record(shape="s", variant="mine-q8", max_abs_err=0.4, quant_max_abs_err=0.3,
                                     input_round_err=0.39, budget_pass=False)])
    assert line.startswith("mine-q8 rounds its input further than the cache: the rounding alone costs max abs")
    assert "accuracy budget **FAIL**: max err" in line and "> quantisation error" in line

    config = load_config(SMOKE).with_overrides(variants=f"v1,{rounding_plugin}", shapes="256x64")
    path = runner.run_parity(config, NumpyBackend(), results_root=tmp_path)
    (mine,) = [r for r in open_run(path).records() if r.variant == rounding_plugin]
    text = render_report(path, plots=False).text
    assert f"{rounding_plugin} rounds its input further than the cache" in text
    assert "accuracy budget pass: max err" in text
    df = compare_runs(path, path)
    got = dict(zip(df["variant"], df["round_err_b"]))
    assert got[rounding_plugin] == mine.input_round_err and math.isnan(got["v1"])


def test_pa_bench_parity_with_a_plugin_that_rounds_q(tmp_path):
    """As a user runs it: a plug-in file declaring the rounding, `pa-bench parity` on the numpy
    backend (a process of its own, so the registration stays there); the terminal table shows
    the rounding's column and the records carry both verdicts."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    plugin = tmp_path / "q8plug.py"
    plugin.write_text("from pa_bench import variants\n"
                      "variants.register(variants.Variant('mine-q8', variants.CUDA_KERNEL, 'rounds Q to int8',\n"
                      "    source='/nonexistent/mine_q8.cu', tile_keys=64, input_rounding='q-int8-row'))\n")
    root = Path(__file__).resolve().parent.parent
    proc = subprocess.run([sys.executable, "-m", "pa_bench", "parity", "--config", "smoke", "--backend", "numpy",
                           "--plugin", str(plugin), "--variant", "v1,mine-q8", "--shapes", "256x64",
                           "--results", str(tmp_path / "runs")], capture_output=True, text=True, cwd=root,
                          timeout=300, env={**os.environ, "COLUMNS": "160"})
    assert proc.returncode == 0, proc.stderr
    header = next(line for line in proc.stdout.splitlines() if line.startswith("shape"))
    assert header.split()[-3:] == ["input", "round", "err"]
    rows = {r.variant: r for r in open_run(next((tmp_path / "runs").iterdir())).records()}
    mine = rows["mine-q8"]
    assert rows["v1"].input_round_err is None and rows["v1"].budget_pass is None
    assert mine.input_round_err > 0 and mine.quant_max_abs_err > mine.max_abs_err
    assert mine.budget_pass is True and mine.parity_pass is True and mine.err_ratio == 1.0
