"""v3 at 128-key tiles on a Hopper GPU (`pytest -m gpu`). The int8 variant v3-n128 (the plug-in
pa_bench/v3_n128.py: v3.cu -DPA_V3_BN=128): parity with FP64 against the numerics model at its
128-key tiles, canaries and determinism, as tests/gpu/test_v3_gpu.py checks v3. The control
v3-f16-n128 (pa_bench/peers/v3_f16_n128.py: -DPA_KV_F16=1 -DPA_V3_BN=128) through the cuda backend
as a run computes a peer: deterministic, every element written (a peer has no canaries: its
output is NaN-filled before each call), close to FP64 attention on the fp16 K/V it reads (tight)
and on the int8 K/V (looser). The shapes cover the copy
paths of both producers: pages of 16 keys (a page-table entry per round, or a bulk copy per
page), pages of 64 (two per tile), pages of 256 and the contiguous cache (whole tiles), the
zero-filled or stale tail past the cache (a half tile with no key at all included), and v3's key
segments in whole 128-key tiles. Skipped on GPUs other than sm_90."""

from __future__ import annotations

import numpy as np
import pytest

from pa_bench import variants as registry
from pa_bench.numerics.metrics import error_metrics, evaluate_parity
from pa_bench.numerics.model import model_arrays, model_attention, pv_chain_keys, tile_keys
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
    # 1,037 keys over 16-key pages: a page-table entry per round, and the last tile's tail zero-filled
    "ragged-d128-gqa-p16": ("1000x37", 128, 32, 8, "paged", 16, "realistic", "float32"),
    # pages of 64 keys: two page-table entries per 128-key tile
    "d128-gqa-p64": ("700x300", 128, 32, 8, "paged", 64, "normal", "float32"),
    # pages longer than a tile, and a single-tile chunk (one K and one V stage used)
    "d128-mqa-p256-short": ("0x100", 128, 8, 1, "paged", 256, "normal", "float32"),
    "odd-d64-mha-contig-f16": ("1023x113", 64, 16, 16, "contiguous", 64, "normal", "float16"),
    # a PR shape: 64 CTAs, so v3's rule runs its keys in segments (rounded to 128 keys), merged by pa_combine
    "pr-2.1Kx256-d128-gqa-p64": ("2.1Kx256", 128, 32, 8, "paged", 64, "normal", "float32"),
    # 1,150 keys: the last tile's second half holds 62 keys; 1,037 keys (above): it holds none
    "ragged-d64-gqa-p64-f16": ("1000x150", 64, 32, 8, "paged", 64, "realistic", "float16"),
    "long-d128-gqa-p64": ("16Kx200", 128, 32, 8, "paged", 64, "normal", "float32"),
}
TIGHT = 2e-3     # relative L2 error against FP64 on the same fp16 K/V
LOOSE = 1e-2     # ... against FP64 on the int8 K/V (pa-bench's reference)


@pytest.fixture(scope="module")
def backend():
    be = CudaBackend()
    if be.cc != 90:
        pytest.skip(f"v3 at 128-key tiles runs on sm_90a only, this GPU is sm_{be.cc}")
    from pa_bench import v3_n128
    from pa_bench.peers import v3_f16, v3_f16_n128

    v3_f16_n128.register()
    v3_n128.register()
    yield be
    for name in (v3_f16_n128.NAME, v3_f16.NAME, v3_n128.NAME):
        if registry.find(name) is not None:
            registry.unregister(name)


def _problem(case):
    shape, d, hq, hkv, layout, page, data, out = CASES[case]
    return Problem(parse_shape(shape), heads_q=hq, heads_kv=hkv, head_dim=d, layout=layout, page=page,
                   data=data, seed=1, out_dtype=out)


# ---- the int8 variant v3-n128, against the numerics model at 128-key tiles
def _check_int8(backend, case: str, segments=None, sample=None):
    from pa_bench.numerics.reference import sample_rows

    pb = _problem(case)
    inp = make_inputs(pb)
    rows = None if sample is None else sample_rows(pb.queries, sample, seed=1)
    backend.segments = segments
    prep = backend.prepare(inp)
    try:
        ko = backend.compute(prep, "v3-n128", rows=rows, check_determinism=True)
        ref = backend.reference(inp, rows)
        assert tile_keys("v3-n128") == 128 and pv_chain_keys("v3-n128") == 0
        model = cp.asnumpy(model_attention(model_arrays(inp, cp), tile_keys("v3-n128"), rows,
                                           segment_keys=backend.segment_keys("v3-n128", pb),
                                           pv_chain_keys=pv_chain_keys("v3-n128"), engine="kernel"))
        pm = evaluate_parity(ko.out, ref, model_out=model, canary_ok=ko.canary_ok)
        assert ko.canary_ok, "guard region overwritten or an output element left unwritten"
        assert ko.deterministic, "two launches differ"
        assert pm.parity_pass, f"{case}: {pm.reason}"
    finally:
        backend.segments = None
        backend.release(prep)


@pytest.mark.parametrize("case", [c for c in CASES if not c.startswith("long")])
def test_v3_n128_parity(backend, case):
    _check_int8(backend, case)


def test_v3_n128_many_tiles_sampled(backend):
    """128 key tiles per row block: both stage rings and the half-slot rings wrap many times."""
    _check_int8(backend, "long-d128-gqa-p64", sample=32)


def test_v3_n128_key_segments(backend):
    """Segments of 512 keys (four tiles) over 1,037 keys: three CTAs per row block and pa_combine."""
    _check_int8(backend, "ragged-d128-gqa-p16", segments=512)


# ---- the fp16 control v3-f16-n128
@pytest.mark.parametrize("case", [c for c in CASES if not c.startswith("long")])
def test_v3_f16_n128_against_fp64(backend, case):
    pb = _problem(case)
    inp = make_inputs(pb)
    assert backend.unsupported_parity("v3-f16-n128", pb) is None
    prep = backend.prepare(inp)
    try:
        ko = backend.compute(prep, "v3-f16-n128", check_determinism=True)
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


def test_v3_f16_n128_segments_are_whole_tiles(backend):
    """On the PR shape with segments, the launch's segment size is a multiple of 128 and covers
    the keys (the kernel starts segment z at tile z * segment_keys / 128)."""
    pb = _problem("pr-2.1Kx256-d128-gqa-p64")
    inp = make_inputs(pb)
    prep = backend.prepare(inp)
    try:
        backend.compute(prep, "v3-f16-n128", check_determinism=False)
        desc = backend._peer(prep, "v3-f16-n128").describe()
        assert desc["segment_keys"] > 0 and desc["segment_keys"] % 128 == 0
        assert desc["segments"] * desc["segment_keys"] >= pb.context + pb.queries
        assert "-DPA_V3_BN=128" in desc["build"]
    finally:
        backend.release(prep)
