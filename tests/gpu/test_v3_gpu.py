"""v3 on a Hopper GPU (`pytest -m gpu`): parity with FP64 against the numerics model, canaries and
determinism on the shapes and layouts the other kernels pass, key segments, and its refusals
elsewhere. Skipped on GPUs other than sm_90."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from pa_bench.launch import Pins
from pa_bench.numerics.metrics import evaluate_parity
from pa_bench.numerics.model import max_slack, model_arrays, model_attention, pv_chain_keys
from pa_bench.numerics.reference import sample_rows
from pa_bench.problem.inputs import make_inputs
from pa_bench.problem.plan import Problem
from pa_bench.problem.shapes import parse_shape

pytestmark = pytest.mark.gpu

from gpu_env import require_cupy_gpu  # noqa: E402  (tests/gpu/gpu_env.py)

cp = require_cupy_gpu()

from pa_bench.backends.cuda import CudaBackend  # noqa: E402

# (shape, head_dim, heads_q, heads_kv, layout, page, data, out_dtype)
CASES = {
    "odd-d128-gqa-p64": ("1023x113", 128, 32, 8, "paged", 64, "realistic", "float32"),
    "odd-d128-gqa-p16": ("1023x113", 128, 32, 8, "paged", 16, "normal", "float32"),
    "odd-d64-mha-contig": ("1023x113", 64, 16, 16, "contiguous", 64, "normal", "float32"),
    "odd-d128-mha-contig-f16": ("1023x113", 128, 16, 16, "contiguous", 64, "normal", "float16"),
    "odd-d64-g3-p16": ("1023x113", 64, 24, 8, "paged", 16, "realistic", "float32"),
    "first-d128-gqa-p64": ("0x1536", 128, 32, 8, "paged", 64, "realistic", "float32"),
    "pr-d128-gqa-p64": ("2.1Kx256", 128, 32, 8, "paged", 64, "realistic", "float32"),
    "long-d128-gqa-p64": ("16Kx200", 128, 32, 8, "paged", 64, "normal", "float32"),
    # 1,037 keys: the last tile holds 13 keys, not a multiple of 4 or 16 (the bulk copies stop at
    # the cache's end; the slot's stale rows past it must not reach the output)
    "ragged-d128-mha-contig": ("1000x37", 128, 16, 16, "contiguous", 64, "normal", "float32"),
    "ragged-d128-gqa-p16": ("1000x37", 128, 32, 8, "paged", 16, "realistic", "float32"),
    "ragged-d64-gqa-p64": ("1000x37", 64, 32, 8, "paged", 64, "normal", "float16"),
    # K scales that grow with the key (_check's ``grow``): rows' scores rise along the context, so
    # the lazy running maximum moves mid-row and the speculative softmax falls back
    "grow-d128-gqa-contig": ("16Kx200", 128, 32, 8, "contiguous", 64, "normal", "float32"),
}


@pytest.fixture(scope="module")
def backend():
    be = CudaBackend()
    if be.cc != 90:
        pytest.skip(f"v3 runs on sm_90a only, this GPU is sm_{be.cc}")
    return be


def _check(backend, case: str, segments=None, sample=None, rows_per_cta=None, step=None, launches=2,
           grow=0):
    """Parity against FP64 and the numerics model of the launch's tile (64 keys, or 128 for
    128-key steps: ``step``, which takes shared tiles at 128 rows), canaries, and ``launches``
    launches with the same bits. ``grow``: K scales multiplied by 1 + key/grow (contiguous
    layouts: the scales are read from the logical array)."""
    shape, d, hq, hkv, layout, page, data, out = CASES[case]
    pb = Problem(parse_shape(shape), heads_q=hq, heads_kv=hkv, head_dim=d, layout=layout, page=page,
                 data=data, seed=1, out_dtype=out)
    inp = make_inputs(pb)
    if grow:
        assert layout == "contiguous"
        keys = np.arange(inp.k_scale.shape[1])
        inp.k_scale[...] = (inp.k_scale * (1 + keys / grow)).astype(np.float32)
    rows = None if sample is None else sample_rows(pb.queries, sample, seed=1)
    pins = Pins(segments=segments, rows=rows_per_cta)
    if step:
        pins = replace(pins, rows=128, share=True, step=step)
    backend = backend.with_pins(pins)
    prep = backend.prepare(inp)
    try:
        assert backend.build("v3", pb).step_keys == (step or 64)
        ko = backend.compute(prep, "v3", rows=rows, check_determinism=True)
        for launch in range(launches - 2):
            again = backend.compute(prep, "v3", rows=rows, check_determinism=False)
            assert again.canary_ok and again.out.tobytes() == ko.out.tobytes(), f"launch {launch + 3} differs"
        ref = backend.reference(inp, rows)
        # the runner's model of v3 (the launch's tile, the P.V chain and the lazy running maximum
        # from the registry), on the GPU
        model = cp.asnumpy(model_attention(model_arrays(inp, cp), backend.tile_keys("v3", pb), rows,
                                           segment_keys=backend.segment_keys("v3", pb),
                                           pv_chain_keys=pv_chain_keys("v3"), max_slack=max_slack("v3"),
                                           engine="kernel"))
        pm = evaluate_parity(ko.out, ref, model_out=model, canary_ok=ko.canary_ok)
        assert ko.canary_ok, "guard region overwritten or an output element left unwritten"
        assert ko.deterministic, "two launches differ"
        assert pm.parity_pass, f"{case}: {pm.reason}"
    finally:
        backend.release(prep)


@pytest.mark.parametrize("rows_per_cta", [None, 128, 192])
@pytest.mark.parametrize("case", list(CASES))
def test_v3_parity(backend, case, rows_per_cta):
    """Each case at the rows the launch picks (None: pa_bench.launch.cta_rows) and at both CTA sizes."""
    _check(backend, case, rows_per_cta=rows_per_cta)


@pytest.mark.parametrize("case", ["odd-d128-gqa-p64", "first-d128-gqa-p64", "odd-d64-g3-p16"])
def test_v3_rows_per_cta_do_not_change_a_bit(backend, case):
    """128-row and 192-row CTAs (two or three consumer warpgroups) at the same key segments give
    every output element the same bits: a row's arithmetic does not depend on its CTA."""
    shape, d, hq, hkv, layout, page, data, out = CASES[case]
    pb = Problem(parse_shape(shape), heads_q=hq, heads_kv=hkv, head_dim=d, layout=layout, page=page,
                 data=data, seed=1, out_dtype=out)
    prep = backend.prepare(make_inputs(pb))
    try:
        outs = []
        for rows in (128, 192):
            pinned = backend.with_pins(Pins(rows=rows, segments=512))
            outs.append(pinned.compute(prep, "v3", rows=None, check_determinism=False).out.copy())
        assert outs[0].shape == outs[1].shape
        assert outs[0].tobytes() == outs[1].tobytes()
    finally:
        backend.release(prep)


def test_v3_many_tiles_sampled(backend):
    """256 key tiles per row block: the three-stage ring wraps many times, both warpgroups' turns."""
    _check(backend, "long-d128-gqa-p64", sample=32)


def test_v3_key_segments(backend):
    """Segments of 512 keys over 1136 keys: three CTAs per row block and pa_combine."""
    _check(backend, "odd-d128-gqa-p64", segments=512)


@pytest.mark.parametrize("segments", [None, 320])
@pytest.mark.parametrize("case", list(CASES))
def test_v3_128_key_steps(backend, case, segments):
    """128-key steps (two tiles a step, K and V staged apart; shared tiles at 128 rows) against the
    model at 128-key tiles, on every case, without segments and with 320-key ones (five tiles: the
    last pair of each segment holds one tile, whose copy in the other half is masked), each over
    six launches with the same bits (the tiles' tickets race differently each time)."""
    _check(backend, case, segments=segments, step=128, launches=6)


def test_v3_128_key_steps_many_tiles_sampled(backend):
    """256 tiles a row block: the K and V rings wrap many times."""
    _check(backend, "long-d128-gqa-p64", sample=32, step=128)


def test_v3_refused_on_the_turing_path(backend):
    pb = Problem(parse_shape("1023x113"))
    assert "no Turing path" in CudaBackend(force_turing=True).unsupported_parity("v3", pb)


@pytest.mark.parametrize("step", [None, 128])
def test_v3_parity_where_the_running_maximum_moves_mid_row(backend, step):
    """Scores that rise along the context (K scales x 1 + key/1024) move rows' lazy running maxima
    every few tiles: the 64-key steps take the rule's slow path, the 128-key steps fall back from
    their speculative softmax (S formed again). Parity with the model that follows the same rule,
    canaries, determinism."""
    _check(backend, "grow-d128-gqa-contig", sample=64, step=step, launches=3, grow=1024)
