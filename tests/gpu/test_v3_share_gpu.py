"""v3-share (pa_bench/peers/v3_share.py) on a Hopper GPU (`pytest -m gpu`): v3 with each tile
converted once by the CTA that takes its ticket must give v3's output bit for bit, on every one of many
launches (the tickets race differently each time, and flags and counters carry over), on
both CTA sizes, with and without key segments, paged and contiguous, at D 64 and 128, with the
cache's ragged last tile. Skipped on GPUs other than sm_90."""

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
    "contig-d128-192-rows": ("3000x1000", 128, 32, 8, "contiguous", 64, "normal", "float32"),
    "pr-2.1Kx256-segments": ("2.1Kx256", 128, 32, 8, "paged", 64, "normal", "float32"),
    "pr-0x1536-192-rows": ("0x1536", 128, 32, 8, "paged", 64, "normal", "float32"),
    "8Kx1024-192-rows-segments": ("8Kx1024", 128, 32, 8, "paged", 64, "realistic", "float32"),
}
LAUNCHES = 12


@pytest.fixture(scope="module")
def backend():
    be = CudaBackend()
    if be.cc != 90:
        pytest.skip(f"v3-share runs on sm_90a only, this GPU is sm_{be.cc}")
    from pa_bench.peers import v3_share

    v3_share.register()
    yield be
    registry.unregister(v3_share.NAME)


@pytest.mark.parametrize("case", list(CASES))
def test_v3_share_gives_v3s_bits_on_every_launch(backend, case):
    shape, d, hq, hkv, layout, page, data, out = CASES[case]
    pb = Problem(parse_shape(shape), heads_q=hq, heads_kv=hkv, head_dim=d, layout=layout, page=page,
                 data=data, seed=1, out_dtype=out)
    prep = backend.prepare(make_inputs(pb))
    try:
        v3 = backend.compute(prep, "v3", check_determinism=False)
        ref = v3.out.view(np.uint32)
        backend.compute(prep, "v3-share", check_determinism=False)   # prepares the peer
        peer = prep.runners["v3-share"]
        for launch in range(LAUNCHES):
            got = peer.output()
            assert np.isfinite(got).all(), f"launch {launch}: an element is NaN/Inf (or was left unwritten)"
            same = got.view(np.uint32) == ref
            assert same.all(), f"{case}, launch {launch}: {int((~same).sum())} of {same.size} elements differ from v3's"
    finally:
        backend.release(prep)
