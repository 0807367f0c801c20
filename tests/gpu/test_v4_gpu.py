"""v4 on a Hopper GPU (`pytest -m gpu`), through the public API: parity against FP64 judged by the
numerics model of v4's arithmetic (Q rounded to int8 per row and head, the exact int32 S, then
v3's), bitwise determinism, the canaries, the accuracy budget of a kernel that rounds its inputs
(its error at most the KV quantisation error of the same rows), and the same bits at either CTA
size. Skipped on GPUs other than sm_90."""

from __future__ import annotations

import numpy as np
import pytest

import pa_bench

pytestmark = pytest.mark.gpu

from gpu_env import require_cupy_gpu  # noqa: E402  (tests/gpu/gpu_env.py)

cp = require_cupy_gpu()
if cp.cuda.Device().compute_capability != "90":
    pytest.skip("v4 runs on sm_90a only", allow_module_level=True)

# (shape, head_dim, heads_q, heads_kv, layout, page, data, out_dtype)
CASES = {
    # non-aligned rows and keys, odd head groups (24/8: three query heads a KV head), 16-key pages
    "odd-d128-g3-p16": ("1023x113", 128, 24, 8, "paged", 16, "realistic", "float32"),
    "odd-d64-g3-p16": ("1023x113", 64, 24, 8, "paged", 16, "normal", "float32"),
    "odd-d128-gqa-p64": ("1023x113", 128, 32, 8, "paged", 64, "realistic", "float32"),
    "odd-d64-mha-contig-f16": ("1023x113", 64, 16, 16, "contiguous", 64, "normal", "float16"),
    # 1,037 keys: the last tile holds 13 keys (the copies stop at the cache's end)
    "ragged-d128-gqa-p16": ("1000x37", 128, 32, 8, "paged", 16, "realistic", "float32"),
    "first-d128-gqa-p64": ("0x1536", 128, 32, 8, "paged", 64, "realistic", "float32"),
    "pr-d128-gqa-p64": ("2.1Kx256", 128, 32, 8, "paged", 64, "realistic", "float32"),
    "long-d128-gqa-p64": ("16Kx200", 128, 32, 8, "paged", 64, "normal", "float32"),
}


def _overrides(case: str) -> dict:
    shape, d, hq, hkv, layout, page, data, out = CASES[case]
    return dict(shapes=shape, heads_q=hq, heads_kv=hkv, head_dim=d, layout=layout, page=page, data=data,
                out_dtype=out, seed=1)


@pytest.mark.parametrize("case", list(CASES))
def test_v4_parity_determinism_canaries(case, tmp_path):
    """Every row compared (the long case sampled): parity against the model, two launches with the
    same bits, the guard region intact; and v3 on the same inputs passes beside it."""
    sample = 32 if case.startswith("long") else 0
    df = pa_bench.check(variants="v3,v4", backend="cuda", sample_rows=sample, results=tmp_path, **_overrides(case))
    rows = {r["variant"]: r for r in df.to_dict("records")}
    assert set(rows) == {"v3", "v4"}, df[["variant", "status", "reason"]]
    for variant in ("v3", "v4"):
        r = rows[variant]
        assert r["status"] == "ok", f"{variant}: {r['status']} {r['reason']}"
        assert r["parity_pass"], f"{case} {variant}: {r['reason']}"
        assert r["deterministic"], f"{case} {variant}: two launches differ"
        assert r["canary_ok"], f"{case} {variant}: guard region overwritten or an output left unwritten"
        assert np.isfinite(r["max_abs_err"]) and r["max_abs_err"] > 0


@pytest.mark.parametrize("case", ["odd-d128-g3-p16", "pr-d128-gqa-p64", "first-d128-gqa-p64"])
def test_v4_error_within_the_kv_quantisation_error(case, tmp_path):
    """The accuracy budget of a kernel that rounds an input beyond the cache's format: v4's error
    against FP64 (on the fp16 Q) is at most the KV quantisation error of the same rows."""
    df = pa_bench.check(variants="v4", backend="cuda", sample_rows=0, results=tmp_path, **_overrides(case))
    r = df.to_dict("records")[0]
    assert r["parity_pass"], r["reason"]
    assert r["max_abs_err"] <= r["quant_max_abs_err"], (r["max_abs_err"], r["quant_max_abs_err"])


def test_v4_key_segments(tmp_path):
    """Segments of 512 keys over 1,136 keys: three CTAs a row block and pa_combine, against the
    model of the same segments."""
    with pa_bench.session(pa_bench.make_problem("1023x113", heads_q=24, heads_kv=8, seed=1)) as s:
        pins = pa_bench.Pins(segments=512)
        ko = s.compute("v4", launch=pins)
        ref = s.reference()
        verdict = pa_bench.parity_verdict(ko.out, ref, s.model("v4", launch=pins), ko.canary_ok)
        assert s.launch_of("v4", launch=pins).segment_keys == 512
        assert ko.deterministic and ko.canary_ok and verdict.parity_pass, verdict.reason


@pytest.mark.parametrize("head_dim", [128, 64])
def test_v4_rows_per_cta_do_not_change_a_bit(head_dim):
    """128-row and 192-row CTAs at the same key segments give every output element the same bits."""
    with pa_bench.session(pa_bench.make_problem("1023x113", heads_q=24, heads_kv=8, head_dim=head_dim, seed=1)) as s:
        outs = [s.compute("v4", launch=pa_bench.Pins(rows=rows, segments=512), check_determinism=False).out.copy()
                for rows in (128, 192)]
    assert outs[0].tobytes() == outs[1].tobytes()


def test_v4_is_not_v3():
    """v4 rounds Q, so its output is not v3's bit for bit (a build that ran v3's S would be), and
    both are within parity of FP64 on the same rows (the parity tests judge how close)."""
    with pa_bench.session(pa_bench.make_problem("2.1Kx256", seed=1)) as s:
        rows = s.sample_rows(32, seed=1)
        v3 = s.compute("v3", rows, check_determinism=False).out
        v4 = s.compute("v4", rows, check_determinism=False).out
    assert v3.shape == v4.shape and np.isfinite(v4).all()
    assert v3.tobytes() != v4.tobytes()
