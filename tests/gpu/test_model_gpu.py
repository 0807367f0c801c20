"""The numerics model and the FP64 reference on the GPU (`pytest -m gpu`): the CuPy model gives
the same bits as the NumPy model (every step is exact or one IEEE rounding, so the order of the
GPU's sums cannot move a bit), with the array-module steps and with the fused kernel
kernels/pa_model.cu (engine "kernel"), and the CuPy reference agrees with NumPy's to float64
rounding."""

from __future__ import annotations

import numpy as np
import pytest

from pa_bench.launch import split_point
from pa_bench.numerics.model import model_arrays, model_attention
from pa_bench.numerics.reference import reference_attention, sample_rows
from pa_bench.problem.inputs import make_inputs
from pa_bench.problem.plan import Problem
from pa_bench.problem.shapes import parse_shape

pytestmark = pytest.mark.gpu

from gpu_env import require_cupy_gpu  # noqa: E402  (tests/gpu/gpu_env.py)

cp = require_cupy_gpu()


def inputs(shape, data, hq=8, hkv=2, d=128, out_dtype="float32"):
    pb = Problem(parse_shape(shape), heads_q=hq, heads_kv=hkv, head_dim=d, data=data, seed=3,
                 layout="contiguous", out_dtype=out_dtype)
    return make_inputs(pb)


@pytest.mark.parametrize("mma, mma_k", [("emulated", 16), ("emulated", 8), ("rn", 16)])
@pytest.mark.parametrize("data", ["normal", "realistic"])
@pytest.mark.parametrize("tile, split, segment", [(16, 0, 0), (64, 0, 0), (16, "half", 0),
                                                  (64, 0, 1024), (16, 0, 1024)])
def test_gpu_model_gives_the_cpu_models_bits(data, tile, split, segment, mma, mma_k):
    inp = inputs("4Kx96", data)
    rows = sample_rows(96, 12, 0)
    split = split_point(inp.problem.context) if split == "half" else split
    kw = dict(split_keys=split, segment_keys=segment, mma=mma, mma_k=mma_k)
    cpu = model_attention(inp, tile, rows, **kw)
    gpu = model_attention(model_arrays(inp, cp), tile, rows, **kw)
    np.testing.assert_array_equal(cp.asnumpy(gpu), cpu)


def test_gpu_model_gives_the_cpu_models_bits_on_a_long_context_with_fp16_output():
    inp = inputs("70Kx32", "realistic", hq=4, hkv=1, out_dtype="float16")   # two segments
    rows = np.array([0, 31])
    cpu = model_attention(inp, 16, rows)
    np.testing.assert_array_equal(cp.asnumpy(model_attention(model_arrays(inp, cp), 16, rows)), cpu)


KERNEL_CASES = [  # (tile, split, segment, pv_chain, D)
    (16, 0, 0, 0, 128), (64, 0, 0, 0, 128), (16, "half", 0, 0, 128), (64, "half", 0, 0, 64),
    (64, 0, 1024, 0, 128), (16, 0, 1024, 0, 64), (64, 0, 0, 64, 128), (64, 0, 1024, 64, 64),
    (64, 0, 0, 16, 128)]


@pytest.mark.parametrize("mma, mma_k", [("emulated", 16), ("emulated", 8), ("rn", 16)])
@pytest.mark.parametrize("data", ["normal", "realistic"])
@pytest.mark.parametrize("tile, split, segment, chain, d", KERNEL_CASES)
def test_kernel_engine_gives_the_cpu_models_bits(data, tile, split, segment, chain, d, mma, mma_k):
    """The fused kernel (kernels/pa_model.cu, engine "kernel") against the NumPy model."""
    inp = inputs("4Kx96", data, d=d)
    rows = sample_rows(96, 12, 0)
    split = split_point(inp.problem.context) if split == "half" else split
    kw = dict(split_keys=split, segment_keys=segment, mma=mma, mma_k=mma_k, pv_chain_keys=chain)
    cpu = model_attention(inp, tile, rows, **kw)
    gpu = model_attention(model_arrays(inp, cp), tile, rows, engine="kernel", **kw)
    np.testing.assert_array_equal(cp.asnumpy(gpu), cpu)


def test_kernel_engine_on_every_row_in_several_row_chunks():
    inp = inputs("1Kx600", "realistic", hq=8, hkv=2, d=64)      # 256 rows per chunk: 3 chunks
    for tile in (16, 64):
        cpu = model_attention(inp, tile)
        gpu = model_attention(model_arrays(inp, cp), tile, engine="kernel")
        np.testing.assert_array_equal(cp.asnumpy(gpu), cpu)


@pytest.mark.parametrize("tile, chain", [(16, 0), (64, 64)])
def test_kernel_engine_on_a_long_context_with_segments(tile, chain):
    inp = inputs("70Kx32", "realistic", hq=4, hkv=1, out_dtype="float16")   # two segments
    rows = np.array([0, 17, 31])
    cpu = model_attention(inp, tile, rows, pv_chain_keys=chain)
    gpu = model_attention(model_arrays(inp, cp), tile, rows, engine="kernel", pv_chain_keys=chain)
    np.testing.assert_array_equal(cp.asnumpy(gpu), cpu)


def test_cuda_backend_model_is_the_gpu_model():
    from pa_bench.backends.cuda import CudaBackend

    be = CudaBackend()
    inp = inputs("2.1Kx256", "realistic", hq=32, hkv=8)
    rows = sample_rows(256, 16, 0)
    split = be.split_keys("v2", inp.problem)
    got = be.model(inp, 16, rows, split_keys=split)
    np.testing.assert_array_equal(got, model_attention(inp, 16, rows, split_keys=split))


@pytest.mark.parametrize("data", ["normal", "realistic"])
def test_gpu_reference_agrees_with_numpy(data):
    inp = inputs("4Kx96", data)
    pb = inp.problem
    rows = sample_rows(96, 12, 0)
    args = (pb.context, pb.softmax_scale)
    cpu = reference_attention(inp.q, inp.k_i8, inp.v_i8, *args, rows=rows,
                              k_scale=inp.k_scale, v_scale=inp.v_scale)
    gpu = reference_attention(cp.asarray(inp.q), cp.asarray(inp.k_i8), cp.asarray(inp.v_i8), *args,
                              rows=rows, xp=cp, k_scale=cp.asarray(inp.k_scale),
                              v_scale=cp.asarray(inp.v_scale))
    np.testing.assert_allclose(cp.asnumpy(gpu), cpu, rtol=0, atol=1e-12 * np.abs(cpu).max())


@pytest.mark.parametrize("engine", ["xp", "kernel"])
def test_the_gpu_model_with_q_rounded_to_int8_gives_the_cpu_models_bits(engine):
    """"q-int8-row" (v4's Q): the rounded Q is formed on the host and both GPU engines give the
    CPU model's bits, through the cuda backend's model too."""
    from pa_bench.backends.cuda import CudaBackend

    inp = inputs("4Kx96", "realistic")
    rows = sample_rows(96, 12, 0)
    kw = dict(pv_chain_keys=64, max_slack=8.0, input_rounding="q-int8-row")
    cpu = model_attention(inp, 64, rows, **kw)
    gpu = model_attention(model_arrays(inp, cp), 64, rows, engine=engine, **kw)
    np.testing.assert_array_equal(cp.asnumpy(gpu), cpu)
    if engine == "kernel":
        np.testing.assert_array_equal(CudaBackend().model(inp, 64, rows, **kw), cpu)
