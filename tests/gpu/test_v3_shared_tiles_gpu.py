"""v3's shared tiles on a Hopper GPU (`pytest -m gpu`): with each tile converted once by the CTA
that takes its ticket (kernels/v3.cu, PA_V3_SHARE; Pins.share) v3 must give the bits of its
own converting producer, on every one of many launches (the tickets race differently each time, and
the flags and counters carry over), on both CTA sizes, with and without key segments, paged and
contiguous, at D 64 and 128, with the cache's ragged last tile; and the launch rule must pick it
where fill.shares_tiles says. Skipped on GPUs other than sm_90."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from pa_bench.launch import Pins
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
    "contig-d128": ("3000x1000", 128, 32, 8, "contiguous", 64, "normal", "float32"),
    "pr-2.1Kx256-segments": ("2.1Kx256", 128, 32, 8, "paged", 64, "normal", "float32"),
    "pr-0x1536": ("0x1536", 128, 32, 8, "paged", 64, "normal", "float32"),
    "8Kx1024": ("8Kx1024", 128, 32, 8, "paged", 64, "realistic", "float32"),
}
LAUNCHES = 12


@pytest.fixture(scope="module")
def backend():
    be = CudaBackend()
    if be.cc != 90:
        pytest.skip(f"v3 runs on sm_90a only, this GPU is sm_{be.cc}")
    return be


def _problem(case):
    shape, d, hq, hkv, layout, page, data, out = CASES[case]
    return Problem(parse_shape(shape), heads_q=hq, heads_kv=hkv, head_dim=d, layout=layout, page=page,
                   data=data, seed=1, out_dtype=out)


@pytest.mark.parametrize("rows", [None, 192])
@pytest.mark.parametrize("case", list(CASES))
def test_shared_tiles_give_v3s_bits_on_every_launch(backend, case, rows):
    """At the launch's rows and segments (None) and at 192-row CTAs with 1,024-key segments."""
    pb = _problem(case)
    prep = backend.prepare(make_inputs(pb))
    pins = Pins() if rows is None else Pins(rows=rows, segments=1024)
    try:
        own_producer = backend.with_pins(replace(pins, share=False))
        assert not own_producer.build("v3", pb).kv_shared
        own = own_producer.compute(prep, "v3", check_determinism=False)
        ref = own.out.view(np.uint32).copy()
        shared = backend.with_pins(replace(pins, share=True))
        assert shared.build("v3", pb).kv_shared
        for launch in range(LAUNCHES):
            got = shared.compute(prep, "v3", check_determinism=False)
            assert got.canary_ok, f"launch {launch}: guard overwritten or an element left unwritten"
            same = got.out.view(np.uint32) == ref
            assert same.all(), f"{case}, launch {launch}: {int((~same).sum())} of {same.size} elements differ"
        assert prep.shared, "the shared-tile build kept no workspace"
        assert next(iter(prep.shared.values()))["epoch"] == LAUNCHES
    finally:
        backend.release(prep)


def test_the_rule_shares_where_fill_says(backend):
    """8Kx1024 (32 row blocks of 128 rows, 128 tiles a block) shares; 0x1536 (24 tiles at most) does not."""
    from pa_bench.launch import fill

    for case, expect in (("8Kx1024", True), ("pr-0x1536", False)):
        pb = _problem(case)
        launch = backend.launch("v3", pb)
        rows, seg = launch.rows, launch.segment_keys
        assert fill.shares_tiles(rows, seg, pb.context, pb.queries, pb.heads_q, pb.heads_kv) is expect
        assert backend.build("v3", pb).kv_shared is expect


def test_segment_counts_on_one_shape_take_their_own_workspaces(backend):
    """One shape, one shared-tile build, launches with 1, 5 and 3 key segments (9,216 keys in 2,048 and 4,096) and 1 again, each
    twice: each gives the bits of v3's own producer at the same launch. The images lie past the
    segment floats, so each segment count has its own workspace (a workspace sized for the first
    launch was overrun by the next: a hang or an illegal address)."""
    pb = _problem("8Kx1024")
    prep = backend.prepare(make_inputs(pb))
    try:
        for segments in (False, 2048, 4096, False):
            own_producer = backend.with_pins(Pins(rows=128, segments=segments, share=False))
            ref = own_producer.compute(prep, "v3", check_determinism=False).out.view(np.uint32).copy()
            shared = backend.with_pins(Pins(rows=128, segments=segments, share=True))
            for launch in range(2):
                got = shared.compute(prep, "v3", check_determinism=False)
                assert got.canary_ok, f"segments {segments}, launch {launch}: guard overwritten"
                same = got.out.view(np.uint32) == ref
                assert same.all(), f"segments {segments}, launch {launch}: {int((~same).sum())} elements differ"
        assert sorted(layout[1] for layout in prep.shared) == [0, 3, 5], "one workspace per segment count"
    finally:
        backend.release(prep)
