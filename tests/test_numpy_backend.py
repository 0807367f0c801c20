"""The numpy backend (model outputs, NumPy FP64 reference, no timing) and backend selection."""

from __future__ import annotations

import numpy as np
import pytest

from pa_bench import backends
from pa_bench.backends import KernelOutput, make_backend
from pa_bench.errors import BackendUnavailable, PaBenchError
from pa_bench.problem.inputs import make_inputs
from pa_bench import variants as registry
from pa_bench.numerics.model import max_slack, model_attention, pv_chain_keys, tile_keys
from pa_bench.backends.numpy import NumpyBackend
from pa_bench.problem.plan import Problem
from pa_bench.numerics.reference import dequantize, reference_attention, sample_rows
from pa_bench.problem.shapes import parse_shape


@pytest.fixture(scope="module")
def inputs():
    problem = Problem(shape=parse_shape("100x37"), heads_q=4, heads_kv=2, head_dim=64,
                      layout="paged", page=16, data="realistic", seed=3)
    return make_inputs(problem)


def test_compute_is_the_model_of_the_variants_tile(inputs):
    be = NumpyBackend()
    rows = sample_rows(37, 9, 0)
    for variant, tile in ((v, tile_keys(v)) for v in registry.names("kernel")):
        ko = be.compute(be.prepare(inputs), variant, rows)
        assert isinstance(ko, KernelOutput)
        assert ko.out.dtype == np.float32 and ko.out.shape == (4, len(rows), 64)
        # the variant's tile, P.V chain, running maximum and input rounding (the registry's)
        assert np.array_equal(ko.out, model_attention(inputs, tile, rows, pv_chain_keys=pv_chain_keys(variant),
                                                      max_slack=max_slack(variant),
                                                      input_rounding=registry.get(variant).input_rounding))
        assert ko.canary_ok is True
        assert ko.deterministic is True  # small: checked by running twice


def test_compute_splits_the_keys_where_the_kernels_do():
    # 2Kx64 with 4 query heads: 256 rows after 2048 keys: v2/v2t split at key 1024
    inp = make_inputs(Problem(shape=parse_shape("2Kx64"), heads_q=4, heads_kv=2, head_dim=64, page=16))
    be = NumpyBackend()
    rows = sample_rows(64, 5, 0)
    assert be.split_keys("v1", inp.problem) == 0
    assert be.split_keys("v2", inp.problem) == be.split_keys("v2t", inp.problem) == 1024
    v2 = be.compute(be.prepare(inp), "v2", rows).out
    assert np.array_equal(v2, model_attention(inp, 16, rows, split_keys=1024))
    assert not np.array_equal(v2, model_attention(inp, 16, rows))


def test_compute_runs_v3s_key_segments_where_its_fill_rule_does():
    # 2Kx64 with 4/2 heads: v3 packs 64 positions per CTA, 2 CTAs: 2112 keys in four segments of
    # 576 (no fewer than FILL_MIN_KEYS = 512 keys each)
    inp = make_inputs(Problem(shape=parse_shape("2Kx64"), heads_q=4, heads_kv=2, head_dim=64, page=16))
    be = NumpyBackend()
    rows = sample_rows(64, 5, 0)
    assert be.segment_keys("v3", inp.problem) == 576 and be.segment_keys("v1", inp.problem) == 0
    v3 = be.compute(be.prepare(inp), "v3", rows).out
    assert np.array_equal(v3, model_attention(inp, 64, rows, segment_keys=576, max_slack=8.0))
    assert not np.array_equal(v3, model_attention(inp, 64, rows, segment_keys=0, max_slack=8.0))
    assert not np.array_equal(v3, model_attention(inp, 64, rows, segment_keys=576))   # the exact maximum


def test_pins_give_the_model_of_another_launch():
    """make_backend(..., pins=) and with_pins: the launch the pins say, and its model's bits (the
    split turned off by pinned segments, as on the GPU)."""
    from pa_bench.launch import Pins

    inp = make_inputs(Problem(shape=parse_shape("2Kx64"), heads_q=4, heads_kv=2, head_dim=64, page=16))
    rows = sample_rows(64, 5, 0)
    be = make_backend("numpy", pins=Pins(segments=512))
    launch = be.launch("v2", inp.problem)
    assert (launch.segment_keys, launch.split_keys) == (512, 0)
    got = be.compute(be.prepare(inp), "v2", rows).out
    assert np.array_equal(got, model_attention(inp, 16, rows, segment_keys=512))
    unsplit = be.with_pins(Pins(split=False))
    assert unsplit.launch("v2", inp.problem).split_keys == 0 and be.launch("v2", inp.problem).segment_keys == 512
    assert np.array_equal(unsplit.compute(unsplit.prepare(inp), "v2", rows).out, model_attention(inp, 16, rows))


def test_v2_and_v2t_are_bitwise_equal_and_differ_from_v1(inputs):
    be = NumpyBackend()
    prep = be.prepare(inputs)
    v1, v2, v2t = (be.compute(prep, v, None).out for v in ("v1", "v2", "v2t"))
    assert v2.tobytes() == v2t.tobytes()
    assert not np.array_equal(v1, v2)  # 64-key vs 16-key tiles sum in another order
    assert v1.shape == (4, 37, 64)


def test_determinism_check_can_be_turned_off(inputs):
    be = NumpyBackend(check_determinism=False)
    assert be.compute(be.prepare(inputs), "v1", None).deterministic is None


def test_reference_is_fp64_on_dequantised_or_float_kv(inputs):
    be = NumpyBackend()
    rows = np.array([0, 5, 36])
    p = inputs.problem
    ref = be.reference(inputs, rows, quantised=True)
    expect = reference_attention(inputs.q, dequantize(inputs.k_i8, inputs.k_scale),
                                 dequantize(inputs.v_i8, inputs.v_scale), p.context,
                                 p.softmax_scale, rows=rows)
    assert ref.dtype == np.float64 and ref.shape == (4, 3, 64)
    np.testing.assert_allclose(ref, expect, rtol=1e-12, atol=1e-12)
    ref_f = be.reference(inputs, rows, quantised=False)
    expect_f = reference_attention(inputs.q, inputs.k_float, inputs.v_float, p.context,
                                   p.softmax_scale, rows=rows)
    np.testing.assert_allclose(ref_f, expect_f, rtol=1e-12, atol=1e-12)
    assert np.max(np.abs(ref_f - ref)) > 0  # the quantisation error is not zero


def test_reference_on_float_kv_is_none_without_floats(inputs):
    from dataclasses import replace

    loaded = replace(inputs, k_float=None, v_float=None)
    assert NumpyBackend().reference(loaded, None, quantised=False) is None


def test_support_and_description(inputs):
    be = NumpyBackend()
    p = inputs.problem
    for v in ("v1", "v2", "v2t"):
        assert be.unsupported_parity(v, p) is None
        assert "does not time" in be.unsupported_timing(v, p)
    for peer in ("torch-sdpa", "torch-sdpa-flash", "torch-sdpa-cudnn", "torch-sdpa+dequant", "torch-flex"):
        assert be.unsupported_parity(peer, p) == f"{peer} runs on the cuda backend only"
        assert "needs CuPy and a GPU" in be.unsupported_timing(peer, p)
    d = be.describe()
    assert d["gpu"] == "cpu" and d["arch"] == "cpu" and be.name == "numpy"
    assert isinstance(be.meta(), dict)
    timed = be.time(be.prepare(inputs), ["v1", "v2t"], None)
    assert set(timed) == {"v1", "v2t"} and all(isinstance(r, str) for r in timed.values())


# --------------------------------------------------------------------------- selection


def test_make_backend_numpy():
    assert isinstance(make_backend("numpy"), NumpyBackend)


def test_auto_falls_back_to_numpy_with_one_line_notice(monkeypatch):
    monkeypatch.setattr(backends, "cuda_problem", lambda: "CuPy is not installed or cannot be imported")
    notes = []
    be = make_backend("auto", notice=notes.append)
    assert isinstance(be, NumpyBackend)
    assert len(notes) == 1 and "\n" not in notes[0]
    assert "numpy" in notes[0] and "CuPy" in notes[0]


def test_cuda_without_cupy_is_a_clear_one_line_error(monkeypatch):
    monkeypatch.setattr(backends, "cuda_problem", lambda: "CuPy is not installed or cannot be imported")
    with pytest.raises(BackendUnavailable) as err:
        make_backend("cuda")
    msg = str(err.value)
    assert "\n" not in msg
    assert "CuPy" in msg and "NVIDIA GPU" in msg
    assert "pip install 'pa-bench[cuda12]'" in msg and "cuda13" in msg
    assert err.value.exit_code == 2


def test_unknown_backend_name():
    with pytest.raises(PaBenchError, match="unknown backend"):
        make_backend("opencl")


def test_cuda_problem_names_cupy_when_it_is_absent():
    try:
        import cupy  # noqa: F401
    except Exception:
        assert "CuPy" in backends.cuda_problem()
    else:  # pragma: no cover - only on a machine with CuPy
        pytest.skip("CuPy is installed here")


def test_numpy_backend_is_a_backend():
    from pa_bench.backends.base import Backend

    assert isinstance(NumpyBackend(), Backend)
    assert NumpyBackend().max_diff(None, "v1", "v2") is None


def test_a_variants_pv_chain_reaches_the_model_and_changes_bits(inputs):
    # a kernel that restarts its P.V accumulator every 64 keys (as v3 did): the registry says so,
    # the numpy backend's model follows, and the bits differ from one chain (within fp32 noise)
    import dataclasses

    assert pv_chain_keys("v3") == 0 and pv_chain_keys("torch-sdpa") == 0
    registry.register(dataclasses.replace(registry.get("v3"), name="v3-fresh-pv", pv_chain_keys=64))
    try:
        assert pv_chain_keys("v3-fresh-pv") == 64
        rows = sample_rows(37, 9, 0)
        be = NumpyBackend()
        per_tile = be.compute(be.prepare(inputs), "v3-fresh-pv", rows).out
        one_chain = model_attention(inputs, 64, rows, max_slack=8.0)
        assert np.array_equal(per_tile, model_attention(inputs, 64, rows, pv_chain_keys=64, max_slack=8.0))
        assert not np.array_equal(one_chain, per_tile)
        np.testing.assert_allclose(per_tile, one_chain, atol=1e-5)
    finally:
        registry.unregister("v3-fresh-pv")