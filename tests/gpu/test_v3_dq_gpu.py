"""v3-dq (pa_bench/backends/v3_dq.py) on a Hopper GPU (`pytest -m gpu`): v3 with its conversion in a
pass of its own must give v3's output bit for bit, deterministically, on both CTA sizes, with and
without key segments, paged and contiguous, at D 64 and 128, with the cache's ragged last tile, and
at 128-key steps where v3 takes them (an odd tile count too).
Skipped on GPUs other than sm_90."""

from __future__ import annotations

import numpy as np
import pytest

from pa_bench import variants as registry
from pa_bench.problem.inputs import make_inputs
from pa_bench.problem.plan import Problem
from pa_bench.problem.shapes import parse_shape

pytestmark = pytest.mark.gpu

from gpu_env import require_cupy_gpu  # noqa: E402  (tests/gpu/gpu_env.py)

cp = require_cupy_gpu()

from pa_bench.backends.cuda import CudaBackend  # noqa: E402

# (shape, head_dim, heads_q, heads_kv, layout, page, data, out_dtype)
CASES = {
    "ragged-d128-gqa-p16": ("1000x37", 128, 32, 8, "paged", 16, "realistic", "float32"),
    "odd-d64-mha-contig-f16": ("1023x113", 64, 16, 16, "contiguous", 64, "normal", "float16"),
    "pr-2.1Kx256-segments": ("2.1Kx256", 128, 32, 8, "paged", 64, "normal", "float32"),
    "pr-0x1536-192-rows": ("0x1536", 128, 32, 8, "paged", 64, "normal", "float32"),
    "8Kx1024-192-rows-segments": ("8Kx1024", 128, 32, 8, "paged", 64, "normal", "float32"),
    # where v3 takes 128-key steps (model.step_keys): v3-dq follows, on both ends of a pair
    "16Kx512-128-key-steps": ("16Kx512", 128, 32, 8, "paged", 64, "normal", "float32"),
    "ragged-odd-tiles-128-key-steps": ("16400x500", 128, 32, 8, "paged", 16, "realistic", "float32"),
}


@pytest.fixture(scope="module")
def backend():
    be = CudaBackend()
    if be.cc != 90:
        pytest.skip(f"v3-dq runs on sm_90a only, this GPU is sm_{be.cc}")
    from pa_bench.backends import v3_dq

    v3_dq.register()
    yield be
    registry.unregister(v3_dq.NAME)


@pytest.mark.parametrize("case", list(CASES))
def test_v3_dq_gives_v3s_bits(backend, case):
    shape, d, hq, hkv, layout, page, data, out = CASES[case]
    pb = Problem(parse_shape(shape), heads_q=hq, heads_kv=hkv, head_dim=d, layout=layout, page=page,
                 data=data, seed=1, out_dtype=out)
    prep = backend.prepare(make_inputs(pb))
    try:
        from pa_bench.backends.v3_dq import build_for

        assert build_for(pb).step_keys == backend.launch("v3", pb).step_keys, "v3-dq and v3 take different steps"
        v3 = backend.compute(prep, "v3", check_determinism=False)
        dq = backend.compute(prep, "v3-dq", check_determinism=True)
        assert dq.deterministic, "two calls differ"
        assert np.isfinite(dq.out).all(), "an element is NaN/Inf (or was left unwritten)"
        same = v3.out.view(np.uint32) == dq.out.view(np.uint32)
        assert same.all(), f"{case}: {int((~same).sum())} of {same.size} elements differ from v3's"
    finally:
        backend.release(prep)
