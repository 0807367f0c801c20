"""Key segments on a real GPU (`pytest -m gpu`): every kernel with its keys in segments merged by
pa_combine (pa_common.cuh), checked against the numerics model of the same segments, bitwise
against the unsegmented launch where there is one segment, v2t == v2, canaries and determinism.

Small segments (the backend's ``segments`` switch set to a number of keys) put the combine to
work on small shapes; one test runs the rule itself on a context just above 64K keys."""

from __future__ import annotations

import pytest

from pa_bench.launch import Pins
from pa_bench.numerics.metrics import error_metrics, judge_parity, parity_floor
from pa_bench.numerics.model import max_slack, model_arrays, model_attention, pv_chain_keys, tile_keys
from pa_bench.numerics.reference import sample_rows
from pa_bench.problem.inputs import make_inputs

pytestmark = pytest.mark.gpu

from gpu_env import LAYOUTS, VARIANTS, problem, require_cupy_gpu  # noqa: E402  (tests/gpu/gpu_env.py)

cp = require_cupy_gpu()


_cache: dict = {}


def _case(backend, shape, layout_key, rows_n=None, heads=None):
    key = (id(backend), shape, layout_key, rows_n, heads)
    if key not in _cache:
        _cache.clear()
        pb = problem(shape, layout_key, heads=heads)
        inputs = make_inputs(pb)
        rows = None if rows_n is None else sample_rows(pb.queries, rows_n, seed=1)
        _cache[key] = (pb, inputs, backend.prepare(inputs), rows, backend.reference(inputs, rows))
    return _cache[key]


_model_inputs: dict = {}


def _model_arrays(inputs):
    """The GPU model's copy of ``inputs`` (uploaded once per case)."""
    if _model_inputs.get("inputs") is not inputs:
        _model_inputs.update(inputs=inputs, arrays=model_arrays(inputs, cp))
    return _model_inputs["arrays"]


def _with(backend, segments, fn, split=None):
    """``fn(b)``, ``b`` the backend launching with ``segments`` (and ``split``) pinned."""
    return fn(backend.with_pins(Pins(segments=segments, split=split)))


def _check(backend, inputs, prep, rows, ref, variant):
    """Parity against the model of the same segments, canaries, determinism; the launch's hash."""
    pb = inputs.problem
    res = backend.compute(prep, variant, rows)
    # the numerics model on the GPU (the NumPy model's bits: tests/gpu/test_model_gpu.py)
    model = cp.asnumpy(model_attention(_model_arrays(inputs), tile_keys(variant), rows,
                                       split_keys=backend.split_keys(variant, pb),
                                       segment_keys=backend.segment_keys(variant, pb),
                                       mma_k=8 if backend.describe()["mma"] == "m16n8k8" else 16,
                                       pv_chain_keys=pv_chain_keys(variant), max_slack=max_slack(variant),
                                       engine="kernel"))
    kern, mod = error_metrics(res.out, ref), error_metrics(model, ref)
    ok, why = judge_parity(kern["max_abs_err"], mod["max_abs_err"], parity_floor(ref), kern["nan_inf"], res.canary_ok)
    assert res.canary_ok, f"{variant}: guard canaries overwritten or output left unwritten"
    assert res.deterministic, f"{variant}: two launches differ"
    assert ok, f"{variant}: kernel {kern['max_abs_err']:.3e} vs model {mod['max_abs_err']:.3e} ({why})"
    return res.full_hash


@pytest.mark.parametrize("layout_key", list(LAYOUTS))
@pytest.mark.parametrize("shape,seg", [("1023x113", 256), ("2.1Kx256", 640), ("0x1536", 512)])
def test_small_segments_every_variant(backend, layout_key, shape, seg):
    """Several segments per row (and rows whose keys end before a segment: pa_combine skips it)."""
    pb, inputs, prep, rows, ref = _case(backend, shape, layout_key)

    def run(b):
        geo = b.geometry("v2", pb)
        assert geo.segment_keys == seg and geo.segments == -(-pb.keys // seg) > 1 and geo.split_keys == 0
        return {v: _check(b, inputs, prep, rows, ref, v) for v in VARIANTS}

    hashes = _with(backend, seg, run)
    assert hashes["v2t"] == hashes["v2"], "v2t must be bitwise identical to v2 with segments too"


@pytest.mark.parametrize("layout_key", list(LAYOUTS))
def test_one_segment_is_the_unsegmented_launch_bit_for_bit(backend, layout_key):
    """segments=True on a short context: one segment, so the kernel stores its state and
    pa_combine normalises it; that is warp_finish's arithmetic exactly (a_0 = 1, 0 + x = x)."""
    pb, inputs, prep, rows, ref = _case(backend, "1023x113", layout_key)
    on = _with(backend, True, lambda b: {v: (b.geometry(v, pb).segments, b.compute(prep, v, None).full_hash)
                                         for v in VARIANTS})
    # segments switch split keys off; compare like with like
    off = _with(backend, False, lambda b: {v: b.compute(prep, v, None).full_hash for v in VARIANTS}, split=False)
    for v in VARIANTS:
        assert on[v][0] == 1 and on[v][1] == off[v], v


@pytest.mark.parametrize("layout_key", ["d128-gqa-paged64-realistic", "d64-mha-paged16-normal"])
def test_small_segments_forced_turing_path(turing_backend, layout_key):
    pb, inputs, prep, rows, ref = _case(turing_backend, "1023x113", layout_key)
    _with(turing_backend, 256, lambda b: [_check(b, inputs, prep, rows, ref, v) for v in ("v1", "v2t")])


def test_the_rule_just_above_64k(backend):
    """80Kx64 with 8/8 heads: the rule's 65,536-key segments (two of them), no split keys."""
    pb, inputs, prep, rows, ref = _case(backend, "80Kx64", "d128-gqa-paged64-realistic", rows_n=8, heads=(8, 8))
    assert backend.segment_keys("v1", pb) == 65536 and backend.split_keys("v2", pb) == 0
    assert backend.geometry("v2", pb).grid[2] == 2
    hashes = {v: _check(backend, inputs, prep, rows, ref, v) for v in VARIANTS}
    assert hashes["v2t"] == hashes["v2"]
    launches = [m for m in backend.meta()["launches"] if m["shape"] == "80Kx64"]
    assert launches and all(m["segments"] == 2 and m["segment_keys"] == 65536 for m in launches)
