"""The v3-f16 control (pa_bench/backends/v3_f16.py) on a Hopper GPU (`pytest -m gpu`), through the cuda
backend as a run computes a peer: deterministic, every element written, and close to FP64
attention on the fp16 K/V it reads (tight: fp16 P, fp32 sums) and on the int8 K/V (looser: the
fp16 rounding of K and V). Skipped on GPUs other than sm_90."""

from __future__ import annotations

import numpy as np
import pytest

from pa_bench import variants as registry
from pa_bench.numerics.metrics import error_metrics
from pa_bench.numerics.reference import reference_attention
from pa_bench.problem.inputs import make_inputs
from pa_bench.problem.plan import Problem
from pa_bench.problem.shapes import parse_shape

pytestmark = pytest.mark.gpu

from gpu_env import require_cupy_gpu  # noqa: E402  (tests/gpu/gpu_env.py)

cp = require_cupy_gpu()

from pa_bench.backends.cuda import CudaBackend  # noqa: E402

# (shape, head_dim, heads_q, heads_kv, layout, page, data, out_dtype)
CASES = {
    # 1,037 keys over 16-key pages: the general copy path (a page-table entry per round) and the
    # zero-filled tail past the cache
    "ragged-d128-gqa-p16": ("1000x37", 128, 32, 8, "paged", 16, "realistic", "float32"),
    "odd-d64-mha-contig-f16": ("1023x113", 64, 16, 16, "contiguous", 64, "normal", "float16"),
    # a PR shape: 64 CTAs, so v3's rule runs its keys in segments and pa_combine merges them
    "pr-2.1Kx256-d128-gqa-p64": ("2.1Kx256", 128, 32, 8, "paged", 64, "normal", "float32"),
    # where v3 takes 128-key steps the control does too: whole tiles (one page-table entry a tile),
    # and 16-key pages with an odd tile count (the last pair's second tile past the CTA's keys)
    "16Kx512-128-key-steps": ("16Kx512", 128, 32, 8, "paged", 64, "normal", "float32"),
    "ragged-odd-tiles-128-key-steps": ("16400x500", 128, 32, 8, "paged", 16, "realistic", "float32"),
}
TIGHT = 2e-3     # relative L2 error against FP64 on the same fp16 K/V
LOOSE = 1e-2     # ... against FP64 on the int8 K/V (pa-bench's reference)


@pytest.fixture(scope="module")
def backend():
    be = CudaBackend()
    if be.cc != 90:
        pytest.skip(f"v3-f16 runs on sm_90a only, this GPU is sm_{be.cc}")
    from pa_bench.backends import v3_f16

    v3_f16.register()
    yield be
    registry.unregister(v3_f16.NAME)


@pytest.mark.parametrize("case", list(CASES))
def test_v3_f16_against_fp64(backend, case):
    shape, d, hq, hkv, layout, page, data, out = CASES[case]
    pb = Problem(parse_shape(shape), heads_q=hq, heads_kv=hkv, head_dim=d, layout=layout, page=page,
                 data=data, seed=1, out_dtype=out)
    inp = make_inputs(pb)
    assert backend.unsupported_parity("v3-f16", pb) is None
    from pa_bench.backends.v3_f16 import build_for

    assert build_for(pb).step_keys == backend.launch("v3", pb).step_keys == (128 if "128-key" in case else 64)
    prep = backend.prepare(inp)
    try:
        ko = backend.compute(prep, "v3-f16", check_determinism=True)
        assert ko.deterministic, "two calls differ"
        assert np.isfinite(ko.out).all(), "an element is NaN/Inf (or was left unwritten)"
        ref_q = backend.reference(inp)                                   # FP64 on the int8 K/V
        k16 = inp.k_i8.astype(np.float16) * inp.k_scale.astype(np.float16)[..., None]
        v16 = inp.v_i8.astype(np.float16) * inp.v_scale.astype(np.float16)[..., None]
        ref_16 = cp.asnumpy(reference_attention(cp.asarray(inp.q), cp.asarray(k16, dtype=cp.float64),
                                                cp.asarray(v16, dtype=cp.float64), pb.context,
                                                pb.softmax_scale, xp=cp))
        tight, loose = error_metrics(ko.out, ref_16)["rel_l2_err"], error_metrics(ko.out, ref_q)["rel_l2_err"]
        assert tight < TIGHT, f"{case}: {tight:.2e} against FP64 on its fp16 K/V"
        assert loose < LOOSE, f"{case}: {loose:.2e} against FP64 on the int8 K/V"
    finally:
        backend.release(prep)
