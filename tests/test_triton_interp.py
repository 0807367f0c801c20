"""The triton variant's kernel (kernels/triton_pa.py) on the CPU, through Triton's interpreter
(TRITON_INTERPRET=1): paged and contiguous layouts, GQA (packed and odd groups), a ragged 113-row
chunk over 1023 keys, a first chunk with no context, fp16 output and key segments, each judged
against the FP64 reference by the parity rule with the numerics model of 64-key tiles.

Needs ``pip install 'pa-bench[triton]'`` (triton and torch); skipped with the reason otherwise.
Shapes are tiny: the interpreter runs every program op by op in NumPy.
"""

from __future__ import annotations

import numpy as np
import pytest

from pa_bench.backends import triton_runner
from pa_bench.numerics.metrics import error_metrics, judge_parity, parity_floor
from pa_bench.numerics.model import model_attention
from pa_bench.numerics.reference import reference_attention
from pa_bench.problem.inputs import make_inputs
from pa_bench.problem.plan import Problem
from pa_bench.problem.shapes import parse_shape

_reason = triton_runner.unavailable_reason(need_gpu=False)
if _reason:
    pytest.skip(_reason, allow_module_level=True)

import torch  # noqa: E402

GUARD = 256
CANARY = -12345.0


@pytest.fixture(autouse=True)
def interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")


def _problem(shape, layout="paged", hq=2, hkv=1, d=64, page=16, out="float32", data="normal"):
    return Problem(parse_shape(shape), heads_q=hq, heads_kv=hkv, head_dim=d, layout=layout, page=page,
                   data=data, seed=3, out_dtype=out)


def _run(inputs, seg_keys=None, config=None):
    """The kernel's output [Hq, Nq, D] (float32) and whether the guards after it are intact."""
    pb = inputs.problem
    var = triton_runner.TritonVariant(inputs, device="cpu", config=config)
    if seg_keys is not None:   # a short segment, so that a tiny shape has several
        mod = var.mod
        var.launch = mod.plan_launch(
            queries=pb.queries, context=pb.context, heads_q=pb.heads_q, heads_kv=pb.heads_kv,
            head_dim=pb.head_dim, paged=pb.layout == "paged", page=pb.page,
            kv_stride=int(var.t["k"].shape[1]) if pb.layout != "paged" else 0,
            scale_stride=int(var.t["ks"].shape[-1]) if pb.layout != "paged" else 0, seg_keys=seg_keys,
            qk_scale_log2=inputs.qk_scale_log2, p_scale=inputs.p_scale, config=var.config)
        assert var.launch.constants["SEGMENTED"]
    n = pb.heads_q * pb.queries * pb.head_dim
    dtype = torch.float16 if pb.out_dtype == "float16" else torch.float32
    out = torch.full((n + GUARD,), CANARY, dtype=dtype)
    var.launcher(out)()
    body = out[:n].float().numpy().reshape(pb.heads_q, pb.queries, pb.head_dim)
    guards_ok = bool((out[n:] == CANARY).all())
    return body, guards_ok


def _check(inputs, out, guards_ok):
    pb = inputs.problem
    ref = reference_attention(inputs.q, inputs.k_i8, inputs.v_i8, pb.context, pb.softmax_scale,
                              k_scale=inputs.k_scale, v_scale=inputs.v_scale)
    model = model_attention(inputs, triton_runner.tile_keys())
    kern, mod = error_metrics(out, ref), error_metrics(model, ref)
    ok, why = judge_parity(kern["max_abs_err"], mod["max_abs_err"], parity_floor(ref), kern["nan_inf"], guards_ok)
    assert kern["nan_inf"] == 0 and guards_ok
    assert ok, f"triton {kern['max_abs_err']:.3e} vs model {mod['max_abs_err']:.3e}: {why}"
    return out, mod["max_abs_err"]


def test_tile_keys_is_the_kernels_block_n():
    assert triton_runner.tile_keys() == triton_runner.kernel_module().BLOCK_N == 64
    from pa_bench import variants

    entry = variants.find("triton")
    if entry is not None:
        assert entry.tile_keys == triton_runner.tile_keys() and entry.is_kernel


@pytest.mark.parametrize("layout", ["paged", "contiguous"])
def test_ragged_gqa_chunk(layout):
    """113 rows over 1023 keys of context, two query heads per KV head packed into a program;
    pages of 16 keys, so every 64-key tile gathers four shuffled pages."""
    inputs = make_inputs(_problem("1023x113", layout))
    out, _ = _check(inputs, *_run(inputs))
    model = model_attention(inputs, triton_runner.tile_keys())
    assert np.abs(out - model).max() < 1e-5   # the same arithmetic up to the order of fp32 sums


def test_first_chunk_odd_group_fp16_out():
    """No context (0x40), three query heads per KV head (a group that is no power of two, so a
    program leaves M slots empty), fp16 output."""
    inputs = make_inputs(_problem("0x40", "paged", hq=6, hkv=2, out="float16", data="realistic"))
    _check(inputs, *_run(inputs))


def test_empty_chunk_launches_nothing():
    inputs = make_inputs(_problem("100x1"))
    var = triton_runner.TritonVariant(inputs, device="cpu")
    assert var.launch.grid[1] == 1
    mod = var.mod
    zero = mod.plan_launch(queries=0, context=100, heads_q=2, heads_kv=1, head_dim=64, paged=True, page=16,
                           kv_stride=0, scale_stride=0, seg_keys=0, qk_scale_log2=1.0, p_scale=1.0,
                           config=mod.Config())
    assert zero.grid[1] == 0 and mod.launcher(zero, *[None] * 7)() is None


def test_key_segments_merge_to_the_same_answer():
    """Segments of 128 keys (the real rule uses 65,536) merged in order: the parity rule still
    holds, and the result differs from the unsegmented one by no more than the model's error
    (P is rounded to fp16 against each segment's own running max)."""
    inputs = make_inputs(_problem("300x50", "contiguous", hq=2, hkv=1))
    seg, model_err = _check(inputs, *_run(inputs, seg_keys=128))
    whole, _ = _run(inputs)
    assert 0 < np.abs(seg - whole).max() <= 2 * model_err


def test_heads_packed_and_default_config():
    mod = triton_runner.kernel_module()
    assert mod.heads_packed(4, 128) == 4 and mod.heads_packed(8, 64) == 4 and mod.heads_packed(3, 128) == 3
    assert mod.heads_packed(1, 128) == 1 and mod.heads_packed(16, 128) == 8
    # 64Kx512 with 32/8 heads on 132 SMs: 8 x 16 programs of 128 rows is under two per SM
    assert mod.default_config(128, 4, 512, 32, sm_count=132).block_m == 64
    assert mod.default_config(128, 4, 1024, 32, sm_count=132).block_m == 128
    with pytest.raises(ValueError, match="seg_keys"):
        mod.plan_launch(queries=8, context=0, heads_q=1, heads_kv=1, head_dim=64, paged=False, page=16,
                        kv_stride=8, scale_stride=8, seg_keys=100, qk_scale_log2=1.0, p_scale=1.0,
                        config=mod.Config())
