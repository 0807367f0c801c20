"""The FP64 reference against an independent naive implementation, and row sampling."""

import math

import numpy as np
import pytest

from pa_bench.problem.inputs import make_inputs
from pa_bench.problem.plan import Problem
from pa_bench.numerics.reference import dequantize, reference_attention, sample_rows
from pa_bench.problem.shapes import parse_shape


def naive_attention(q, k, v, ctx, scale, rows):
    """Row by row, key by key: scores with one dot product each, softmax with math.exp."""
    hq, nq, d = q.shape
    hkv = k.shape[0]
    k, v = np.asarray(k, dtype=np.float64), np.asarray(v, dtype=np.float64)
    out = np.zeros((hq, len(rows), d))
    for h in range(hq):
        g = h // (hq // hkv)
        for r, i in enumerate(rows):
            visible = ctx + i + 1  # keys 0 .. ctx+i
            scores = [float(np.dot(q[h, i].astype(np.float64), k[g, j])) * scale
                      for j in range(visible)]
            top = max(scores)
            weights = [math.exp(s - top) for s in scores]
            total = math.fsum(weights)
            acc = np.zeros(d)
            for j in range(visible):
                acc += weights[j] * v[g, j]
            out[h, r] = acc / total
    return out


CASES = [
    # shape, heads_q, heads_kv, rows (None: all)
    ("1023x113", 4, 2, [0, 1, 56, 111, 112]),  # non-aligned, GQA 2:1
    ("256x64", 2, 2, None),  # Hq == Hkv
    ("0x96", 4, 1, None),  # no context, GQA 4:1
    ("0x1", 2, 1, None),  # one query, one key
    ("17x3", 3, 3, None),
]


def inputs_for(shape, hq, hkv, data="realistic", layout="paged"):
    pb = Problem(parse_shape(shape), heads_q=hq, heads_kv=hkv, head_dim=64, page=16,
                 data=data, layout=layout, seed=7)
    return make_inputs(pb)


@pytest.mark.parametrize("shape, hq, hkv, rows", CASES)
def test_reference_matches_naive(shape, hq, hkv, rows):
    inp = inputs_for(shape, hq, hkv)
    pb = inp.problem
    k = dequantize(inp.k_i8, inp.k_scale)
    v = dequantize(inp.v_i8, inp.v_scale)
    sel = np.arange(pb.queries) if rows is None else np.array(rows)
    expected = naive_attention(inp.q, k, v, pb.context, pb.softmax_scale, sel)
    got = reference_attention(inp.q, k, v, pb.context, pb.softmax_scale,
                              rows=None if rows is None else sel)
    assert got.dtype == np.float64 and got.shape == (hq, len(sel), 64)
    scale = np.abs(expected).max()
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12 * scale)
    # Dequantising one KV head at a time inside gives the same numbers.
    fused = reference_attention(inp.q, inp.k_i8, inp.v_i8, pb.context, pb.softmax_scale,
                                rows=None if rows is None else sel,
                                k_scale=inp.k_scale, v_scale=inp.v_scale)
    np.testing.assert_array_equal(fused, got)


def test_reference_on_unquantised_floats_matches_naive():
    inp = inputs_for("100x20", 2, 1, data="normal")
    pb = inp.problem
    sel = np.array([0, 7, 19])
    expected = naive_attention(inp.q, inp.k_float, inp.v_float, pb.context, pb.softmax_scale, sel)
    got = reference_attention(inp.q, inp.k_float, inp.v_float, pb.context, pb.softmax_scale,
                              rows=sel)
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12 * np.abs(expected).max())


def test_first_row_of_a_first_chunk_is_its_own_value():
    inp = inputs_for("0x8", 2, 2)
    pb = inp.problem
    v = dequantize(inp.v_i8, inp.v_scale)
    out = reference_attention(inp.q, dequantize(inp.k_i8, inp.k_scale), v, 0, pb.softmax_scale)
    np.testing.assert_array_equal(out[:, 0], v[:, 0])  # row 0 sees key 0 only


def test_paged_pool_gathers_to_the_same_reference():
    paged = inputs_for("1023x113", 4, 2, layout="paged")
    contiguous = inputs_for("1023x113", 4, 2, layout="contiguous")
    pb = paged.problem
    k_i8, v_i8, k_scale, v_scale = paged.paged.gather(pb.keys)
    rows = np.array([0, 50, 112])
    via_pool = reference_attention(paged.q, dequantize(k_i8, k_scale), dequantize(v_i8, v_scale),
                                   pb.context, pb.softmax_scale, rows=rows)
    logical = reference_attention(contiguous.q, dequantize(contiguous.k_i8, contiguous.k_scale),
                                  dequantize(contiguous.v_i8, contiguous.v_scale), pb.context,
                                  pb.softmax_scale, rows=rows)
    np.testing.assert_array_equal(via_pool, logical)
    assert np.all(np.isfinite(via_pool))


def test_sampled_rows_equal_the_same_rows_of_the_full_reference():
    inp = inputs_for("1023x113", 4, 2)
    pb = inp.problem
    args = (inp.q, inp.k_i8, inp.v_i8, pb.context, pb.softmax_scale)
    scales = dict(k_scale=inp.k_scale, v_scale=inp.v_scale)
    full = reference_attention(*args, **scales)
    rows = sample_rows(pb.queries, 9, seed=3)
    part = reference_attention(*args, rows=rows, **scales)
    np.testing.assert_allclose(part, full[:, rows], rtol=0, atol=1e-13 * np.abs(full).max())
    small_blocks = reference_attention(*args, block_rows=7, **scales)
    np.testing.assert_allclose(small_blocks, full, rtol=0, atol=1e-13 * np.abs(full).max())


def test_reference_rejects_inconsistent_sizes():
    q = np.zeros((2, 4, 8))
    k = np.zeros((1, 10, 8))
    with pytest.raises(ValueError, match="Nk"):
        reference_attention(q, k, k, 5, 1.0)
    with pytest.raises(ValueError, match="Hkv"):
        reference_attention(np.zeros((3, 4, 8)), np.zeros((2, 10, 8)), np.zeros((2, 10, 8)), 6, 1.0)


def test_dequantize():
    x = np.array([[[1, -127], [0, 3]]], dtype=np.int8)
    s = np.array([[0.5, 0.25]], dtype=np.float32)
    out = dequantize(x, s)
    assert out.dtype == np.float64
    np.testing.assert_array_equal(out, [[[0.5, -63.5], [0.0, 0.75]]])


@pytest.mark.parametrize("nq, n", [(1536, 64), (113, 10), (2, 1), (3, 2), (1000, 999)])
def test_sample_rows(nq, n):
    rows = sample_rows(nq, n, seed=0)
    assert rows.dtype == np.int64
    assert rows[0] == 0 and rows[-1] == nq - 1
    assert np.all(np.diff(rows) > 0)  # sorted and unique
    assert len(rows) == max(n, min(nq, 2))
    np.testing.assert_array_equal(rows, sample_rows(nq, n, seed=0))  # seeded


def test_sample_rows_all_and_seeds():
    np.testing.assert_array_equal(sample_rows(10, 10, 1), np.arange(10))
    np.testing.assert_array_equal(sample_rows(10, 50, 1), np.arange(10))
    np.testing.assert_array_equal(sample_rows(10, None, 1), np.arange(10))
    np.testing.assert_array_equal(sample_rows(1, 1, 1), [0])
    assert not np.array_equal(sample_rows(1000, 20, 1), sample_rows(1000, 20, 2))
    with pytest.raises(ValueError):
        sample_rows(10, 0, 1)


def test_reference_uses_only_functions_cupy_also_has():
    """Run with an `xp` that has only the functions written for both NumPy and CuPy."""
    from types import SimpleNamespace

    xp = SimpleNamespace(**{name: getattr(np, name) for name in (
        "asarray", "float64", "matmul", "exp", "max", "sum", "where", "arange", "empty")})
    inp = inputs_for("60x20", 4, 2)
    pb = inp.problem
    args = (inp.q, inp.k_i8, inp.v_i8, pb.context, pb.softmax_scale)
    scales = dict(k_scale=inp.k_scale, v_scale=inp.v_scale)
    np.testing.assert_array_equal(reference_attention(*args, xp=xp, rows=np.array([0, 19]), **scales),
                                  reference_attention(*args, rows=np.array([0, 19]), **scales))
