"""The NumPy model of the kernels' arithmetic: close to FP64, tile-size effects at rounding level."""

import math

import numpy as np
import pytest

from pa_bench.problem.inputs import make_inputs
from pa_bench import variants as registry
from pa_bench.numerics.model import model_attention, tile_keys, round_fp16, split_keys, split_point
from pa_bench.problem.plan import Problem
from pa_bench.numerics.reference import reference_attention, sample_rows
from pa_bench.problem.shapes import parse_shape


def inputs_for(shape="1023x113", data="realistic", hq=4, hkv=2, d=64, **kw):
    pb = Problem(parse_shape(shape), heads_q=hq, heads_kv=hkv, head_dim=d, page=16, data=data,
                 seed=11, **kw)
    return make_inputs(pb)


def reference(inp, rows=None):
    pb = inp.problem
    return reference_attention(inp.q, inp.k_i8, inp.v_i8, pb.context, pb.softmax_scale, rows=rows,
                               k_scale=inp.k_scale, v_scale=inp.v_scale)


def naive_model(inp, tile, rows, split=0):
    """DESIGN.md's per-tile arithmetic, one row and one tile at a time, in float32 scalars; with
    ``split``, keys [0, split) and [split, ...) run separately and are merged at the end."""
    f32 = np.float32
    hq, nq, d = inp.q.shape
    hkv, nk, _ = inp.k_i8.shape
    ctx = nk - nq

    def run(h, g, i, k0, k1):
        m, l, acc = f32(-np.inf), f32(0), np.zeros(d, dtype=f32)
        for t0 in range(k0, k1, tile):  # tiles from k0 up to the row's last key
            keys = [j for j in range(t0, min(t0 + tile, k1)) if j <= ctx + i]
            s = [f32(np.dot(inp.q[h, i].astype(f32), inp.k_i8[g, j].astype(f32)))
                 * (inp.k_scale[g, j] * f32(inp.qk_scale_log2)) for j in keys]
            m_new = max(m, max(s))
            alpha = f32(0) if m == -np.inf else f32(np.exp2(f32(m - m_new)))
            p = [f32(np.exp2(f32(sj - m_new))) for sj in s]
            l = f32(l * alpha + f32(math.fsum(p)))
            acc = acc * alpha
            for j, pj in zip(keys, p):
                big_p = f32(np.float16(pj * (inp.v_scale[g, j] * f32(inp.p_scale))))
                acc = acc + big_p * inp.v_i8[g, j].astype(f32)
            m = m_new
        return m, l, acc

    out = np.zeros((hq, len(rows), d), dtype=f32)
    for h in range(hq):
        g = h // (hq // hkv)
        for r, i in enumerate(rows):
            if split:
                (m0, l0, acc0), (m1, l1, acc1) = run(h, g, i, 0, split), run(h, g, i, split, ctx + i + 1)
                m = max(m0, m1)
                a0, a1 = f32(np.exp2(f32(m0 - m))), f32(np.exp2(f32(m1 - m)))
                l, acc = f32(l0 * a0 + l1 * a1), acc0 * a0 + acc1 * a1
            else:
                m, l, acc = run(h, g, i, 0, ctx + i + 1)
            out[h, r] = acc * (f32(1) / l) * f32(1 / inp.p_scale)
    return out


def test_tile_sizes():
    assert {v: tile_keys(v) for v in registry.names("kernel")} == {"v1": 64, "v2": 16, "v2t": 16}


@pytest.mark.parametrize("tile", [16, 64])
def test_model_follows_the_per_tile_arithmetic(tile):
    inp = inputs_for("40x13", hq=2, hkv=1)
    rows = np.array([0, 5, 12])
    expected = naive_model(inp, tile, rows)
    got = model_attention(inp, tile, rows)
    assert got.dtype == np.float32 and got.shape == (2, 3, 64)
    # Only the order of fp32 sums differs (and, rarely, an fp16 rounding that it flips).
    np.testing.assert_allclose(got, expected, rtol=0, atol=2e-6 * np.abs(expected).max())
    assert np.mean(got == expected) > 0.5


@pytest.mark.parametrize("split", [16, 48, 80])
def test_split_keys_follow_the_per_row_merge(split):
    inp = inputs_for("97x13", hq=2, hkv=1)
    rows = np.array([0, 6, 12])
    expected = naive_model(inp, 16, rows, split=split)
    got = model_attention(inp, 16, rows, split_keys=split)
    tol = 2e-6 * np.abs(expected).max()
    np.testing.assert_allclose(got, expected, rtol=0, atol=tol)
    # The tolerance tells a split from no split: the fp16 roundings of P move with the running
    # max, so the unsplit arithmetic lands further away (at the fp16 rounding level).
    whole = naive_model(inp, 16, rows)
    assert tol < np.abs(whole - expected).max() < 1e-3 * np.abs(expected).max()


@pytest.mark.parametrize("data", ["normal", "realistic"])
def test_split_model_error_against_fp64_stays_at_the_unsplit_level(data):
    inp = inputs_for("2Kx64", data=data, hq=4, hkv=2)
    ref = reference(inp)
    whole = np.abs(model_attention(inp, 16).astype(np.float64) - ref).max()
    split = np.abs(model_attention(inp, 16, split_keys=split_point(inp.problem.context)).astype(np.float64) - ref).max()
    assert 0 < split <= 2 * whole


def test_split_keys_must_be_whole_tiles_within_the_context():
    inp = inputs_for("97x13", hq=2, hkv=1)
    for bad in (8, -16, 112):
        with pytest.raises(ValueError, match="split_keys"):
            model_attention(inp, 16, split_keys=bad)


def test_split_rule():
    # H200 measurements (docs/PERF_NOTES.md): split where the chunk has few rows x heads
    assert split_keys("v2", 512, 65536, 32) == split_point(65536) == 32768       # 64Kx512
    assert split_keys("v2t", 256, 2150, 32) == split_point(2150) == 1072         # 2.1Kx256
    assert split_keys("v2", 1024, 32768, 32) == 0      # 32Kx1024: enough warps already
    assert split_keys("v2", 113, 1023, 16) == 0        # context too short
    assert split_keys("v1", 512, 65536, 32) == 0       # v1 keeps the PR's design
    assert split_point(15) == 0 and split_point(47) == 16


@pytest.mark.parametrize("data", ["normal", "realistic"])
@pytest.mark.parametrize("shape, hq, hkv", [("1023x113", 4, 2), ("0x96", 4, 4), ("256x64", 2, 1)])
def test_model_error_against_fp64_is_small_and_not_zero(data, shape, hq, hkv):
    inp = inputs_for(shape, data=data, hq=hq, hkv=hkv)
    ref = reference(inp)
    for variant, tile in ((v, tile_keys(v)) for v in registry.names("kernel")):
        err = np.abs(model_attention(inp, tile).astype(np.float64) - ref).max()
        assert 0 < err < 1e-3 * np.abs(ref).max(), (variant, err)


def test_tile_16_and_64_differ_only_at_rounding_level():
    inp = inputs_for("1023x113", data="realistic")
    ref = reference(inp)
    m16, m64 = model_attention(inp, 16), model_attention(inp, 64)
    err16 = np.abs(m16 - ref).max()
    err64 = np.abs(m64 - ref).max()
    diff = np.abs(m16.astype(np.float64) - m64).max()
    assert 0 < diff <= 2 * max(err16, err64)
    assert diff < 1e-3 * np.abs(ref).max()


def test_row_subset_equals_full_model_rows():
    inp = inputs_for("1023x113")
    full = model_attention(inp, 16)
    for rows in (sample_rows(113, 10, seed=5), np.array([0, 1, 2]), np.array([112])):
        part = model_attention(inp, 16, rows)
        np.testing.assert_allclose(part, full[:, rows], rtol=0, atol=1e-6 * np.abs(full).max())


def test_model_is_deterministic_and_handles_gqa_layouts():
    inp = inputs_for("100x50", hq=8, hkv=2)
    a, b = model_attention(inp, 16), model_attention(inp, 16)
    np.testing.assert_array_equal(a, b)
    # Each query head uses KV head h // 4: swapping KV heads swaps the outputs' head groups.
    swapped = inputs_for("100x50", hq=8, hkv=2)
    for name in ("k_i8", "v_i8", "k_scale", "v_scale"):
        setattr(swapped, name, getattr(inp, name)[::-1].copy())
    swapped.q = np.concatenate([inp.q[4:], inp.q[:4]])
    np.testing.assert_array_equal(model_attention(swapped, 16), np.concatenate([a[4:], a[:4]]))


def test_first_row_of_a_first_chunk_only_rounds_its_value_scale():
    inp = inputs_for("0x20", data="normal")
    out = model_attention(inp, 16, np.array([0]))
    f32 = np.float32
    vs = np.repeat(inp.v_scale[:, 0], 2)  # KV head of each query head
    big_p = (vs * f32(inp.p_scale)).astype(np.float16).astype(f32)
    expected = big_p[:, None] * np.repeat(inp.v_i8[:, 0], 2, axis=0) * f32(1 / inp.p_scale)
    np.testing.assert_array_equal(out[:, 0], expected.astype(f32))


def test_float16_output_is_rounded():
    inp = inputs_for("64x16", out_dtype="float16")
    out = model_attention(inp, 64)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, out.astype(np.float16).astype(np.float32))


def test_round_fp16_matches_numpy_conversion():
    rng = np.random.default_rng(0)
    m = rng.integers(0, 1024, 20000)
    e = rng.integers(-14, 16, 20000)
    ties = ((1024 + m + 0.5) * np.exp2(e - 10.0))  # exactly halfway between two fp16 values
    sub_ties = (np.arange(2048) + 0.5) * 2.0 ** -24  # halfway between fp16 subnormals
    x = np.concatenate([
        rng.random(50000), np.exp2(rng.uniform(-40, 0, 50000)), ties[ties < 65504], sub_ties,
        [0.0, 2.0 ** -14, 2.0 ** -24, 2.0 ** -25, 3 * 2.0 ** -25, 1.0, 65504.0]]).astype(np.float32)
    np.testing.assert_array_equal(round_fp16(x).view(np.uint32),
                                  x.astype(np.float16).astype(np.float32).view(np.uint32))
