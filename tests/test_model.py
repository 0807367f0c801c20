"""The NumPy model of the kernels' arithmetic: close to FP64, tile-size effects at rounding level."""


import numpy as np
import pytest

from pa_bench.problem.inputs import make_inputs
from pa_bench import variants as registry
from pa_bench.numerics import mma as mma_mod
from pa_bench.numerics import model as model_mod
from pa_bench.launch import segment_keys, split_keys, split_point
from pa_bench.variants import SEGMENT_KEYS
from pa_bench.numerics.model import (exp2_ftz, key_parts, model_arrays, model_attention, round_fp16,
                                     tile_keys)
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


def naive_model(inp, tile, rows, split=0, segment=0, mma="rn", slack=None):
    """DESIGN.md's per-tile arithmetic, one row and one tile at a time: S exact then rounded to
    fp32, exp2 to the nearest fp32 (flushed below 2^-126), l summed per lane (lane t: keys
    4t..4t+3 of each 16-key slice) and P.V added per 16-key slice (``mma``). With ``split`` keys
    [0, split) and [split, ...) run separately and merge per lane; with ``segment`` each block of
    ``segment`` keys runs separately and the rows' sums merge in order. With ``slack`` the lazy
    running maximum (v3's): t = s_raw*kq - m rounded once, and the row's reference moves only
    where it has none yet or where a tile's t exceeds ``slack``."""
    f32 = np.float32
    hq, nq, d = inp.q.shape
    hkv, nk, _ = inp.k_i8.shape
    ctx = nk - nq

    def exp2(x):
        return f32(0) if x < -126 else f32(np.exp2(np.float64(x)))

    def run(h, g, i, k0, k1):
        m, lanes, acc = f32(-np.inf), np.zeros(4, f32), np.zeros(d, dtype=f32)
        for t0 in range(k0, k1, tile):
            keys = range(t0, t0 + tile)
            raw = [(f32(np.dot(inp.q[h, i].astype(np.float64), inp.k_i8[g, j].astype(np.float64))),
                    inp.k_scale[g, j] * f32(inp.qk_scale_log2)) if j < k1 and j <= ctx + i else None
                   for j in keys]
            if slack is None:
                s = [f32(-np.inf) if r is None else r[0] * r[1] for r in raw]
                m_new = max(m, max(s))
                msafe = f32(0) if m_new == -np.inf else m_new
                alpha = exp2(f32(m - msafe))
                p = [exp2(f32(sj - msafe)) for sj in s]
            else:
                mref = f32(0) if m == -np.inf else m
                t = [f32(-np.inf) if r is None else f32(np.float64(r[0]) * np.float64(r[1]) - np.float64(mref))
                     for r in raw]
                top = max(t)
                alpha, m_new = f32(1), m
                if top > (-np.inf if m == -np.inf else slack):
                    alpha = f32(0) if m == -np.inf else exp2(-top)
                    m_new = f32(top + mref)
                    t = [f32(tj - top) for tj in t]
                p = [exp2(tj) for tj in t]
            lanes = lanes * alpha
            for n in range(0, tile, 16):
                for t in range(4):
                    for j in range(4):
                        lanes[t] = f32(lanes[t] + p[n + 4 * t + j])
            acc = acc * alpha
            for n in range(0, tile, 16):
                ks = [j for j in keys[n:n + 16]]
                big_p = np.array([f32(np.float16(p[j - t0] * (inp.v_scale[g, j] * f32(inp.p_scale))))
                                  if j < nk else f32(0) for j in ks], dtype=f32)
                v = np.stack([inp.v_i8[g, min(j, nk - 1)] for j in ks]).astype(f32)
                if mma == "rn":
                    acc = acc + (np.float64(big_p) @ np.float64(v)).astype(f32)
                else:
                    acc = mma_mod.mma_accumulate(acc[None], big_p[None], v)[0]
            m = m_new
        return m, lanes, acc

    def lane_sum(x):
        return f32(f32(x[0] + x[1]) + f32(x[2] + x[3]))

    out = np.zeros((hq, len(rows), d), dtype=f32)
    for h in range(hq):
        g = h // (hq // hkv)
        for r, i in enumerate(rows):
            end = ctx + i + 1
            if segment:
                parts = [run(h, g, i, k0, min(k0 + segment, end)) for k0 in range(0, end, segment)]
            elif split:
                parts = [run(h, g, i, 0, split), run(h, g, i, split, end)]
            else:
                parts = [run(h, g, i, 0, end)]
            if len(parts) == 1:
                l, acc = lane_sum(parts[0][1]), parts[0][2]
            else:
                m = max(pz[0] for pz in parts)
                l, acc = (f32(0) if segment else np.zeros(4, f32)), np.zeros(d, f32)
                for mz, lz, accz in parts:
                    az = exp2(f32(mz - m))
                    l = l + (lane_sum(lz) * az if segment else lz * az)
                    acc = acc + accz * az
                l = l if segment else lane_sum(l)
            out[h, r] = acc * (f32(1) / l) * f32(1 / inp.p_scale)
    return out


def growing_scores(shape="300x13", hq=2, hkv=1, d=64, data="realistic", every=64):
    """Inputs whose K scales grow with the key, by 1 each ``every`` keys: a row's scores rise
    tile after tile, so a lazy running maximum moves mid-row, not only at a row's first key."""
    inp = inputs_for(shape, data=data, hq=hq, hkv=hkv, d=d)
    keys = np.arange(inp.k_scale.shape[1])
    inp.k_scale[...] = (inp.k_scale * (1 + keys / every)).astype(np.float32)
    return inp


def moves_counted(monkeypatch) -> list[int]:
    """model._lazy_tile wrapped: how many rows that had a reference moved it, per call."""
    moved, inner = [], model_mod._lazy_tile

    def counting(prod, m, slack, xp):
        out = inner(prod, m, slack, xp)
        moved.append(int(((out[0] != m) & (m != -np.inf)).sum()))
        return out

    monkeypatch.setattr(model_mod, "_lazy_tile", counting)
    return moved


@pytest.mark.parametrize("slack", [0.0, 8.0])
@pytest.mark.parametrize("tile, segment", [(16, 0), (64, 0), (64, 128)])
def test_lazy_maximum_follows_the_per_tile_rule(tile, segment, slack, monkeypatch):
    inp = growing_scores()
    rows = np.array([0, 7, 12])
    expected = naive_model(inp, tile, rows, segment=segment, mma="emulated", slack=slack)
    moved = moves_counted(monkeypatch)
    got = model_attention(inp, tile, rows, segment_keys=segment, mma="emulated", max_slack=slack)
    np.testing.assert_array_equal(got, expected)
    assert sum(moved) > 0                             # the rule's move path, not only first keys


@pytest.mark.parametrize("data", ["normal", "realistic", "growing"])
def test_lazy_maximum_keeps_the_exact_ones_error_against_fp64(data):
    inp = growing_scores("1Kx64", hq=4, hkv=2, every=256) if data == "growing" else inputs_for("1Kx64", data=data)
    ref = reference(inp)
    exact, lazy = model_attention(inp, 64), model_attention(inp, 64, max_slack=8.0)
    err_exact = np.abs(exact.astype(np.float64) - ref).max()
    err_lazy = np.abs(lazy.astype(np.float64) - ref).max()
    assert not np.array_equal(exact, lazy)            # another arithmetic: t rounded once, p up to 2^8
    assert 0 < err_lazy <= 2 * err_exact, (err_lazy, err_exact)


def test_lazy_maximum_moves_only_where_the_slack_is_exceeded(monkeypatch):
    """One tile by hand; then on growing scores a slack of 0 moves the references more often than
    8 does, and on realistic data (an attention sink first) 8 never moves them after a row's first
    tile."""
    from pa_bench.numerics.model import _lazy_tile

    prod = np.array([[0.0, 1.0, 2.0], [-3.0, -np.inf, 9.5]])          # two rows of one tile
    m = np.array([1.0, 1.0], np.float32)
    m2, alpha, p = _lazy_tile(prod, m, 8.0, np)
    assert m2.tolist() == [1.0, 9.5] and alpha[0] == 1 and alpha[1] == np.float32(2.0 ** -8.5)
    assert p[0].tolist() == [0.5, 1.0, 2.0] and p[1].tolist() == [np.float32(2.0 ** -12.5), 0.0, 1.0]
    fresh = np.full(2, -np.inf, np.float32)
    m3, alpha3, p3 = _lazy_tile(np.array([[-20.0, -30.0], [-np.inf, -np.inf]]), fresh, 8.0, np)
    assert m3[0] == -20 and m3[1] == -np.inf and alpha3.tolist() == [0.0, 1.0]   # a row's first key
    assert p3[0].tolist() == [1.0, 2.0 ** -10] and p3[1].tolist() == [0.0, 0.0]
    moved = moves_counted(monkeypatch)
    counts = {}
    for name, inp in (("growing", growing_scores("1Kx64", hq=4, hkv=2, every=256)),
                      ("realistic", inputs_for("1Kx64", hq=4, hkv=2))):
        for slack in (0.0, 8.0):
            moved.clear()
            model_attention(inp, 64, max_slack=slack)
            counts[name, slack] = sum(moved)
    assert counts["growing", 0.0] > counts["growing", 8.0] > 0
    assert counts["realistic", 8.0] == 0 < counts["realistic", 0.0]


def test_v3s_slack_is_the_kernels():
    import re
    from pathlib import Path

    src = (Path(model_mod.__file__).resolve().parents[2] / "kernels" / "v3.cu").read_text()
    found = re.search(r"constexpr float MAX_SLACK = ([0-9.]+)f;", src)
    assert found and model_mod.max_slack("v3") == float(found.group(1)) == 8.0
    assert model_mod.max_slack("v1") is None and model_mod.max_slack("v2t") is None
    with pytest.raises(ValueError, match="max_slack"):
        model_attention(inputs_for("40x13", hq=2, hkv=1), 16, max_slack=20.0)


def test_tile_sizes():
    assert {v: tile_keys(v) for v in ("v1", "v2", "v2t", "v3")} == {"v1": 64, "v2": 16, "v2t": 16, "v3": 64}


@pytest.mark.parametrize("mma", ["rn", "emulated"])
@pytest.mark.parametrize("tile", [16, 64])
def test_model_follows_the_per_tile_arithmetic(tile, mma):
    inp = inputs_for("40x13", hq=2, hkv=1)
    rows = np.array([0, 5, 12])
    got = model_attention(inp, tile, rows, mma=mma)
    assert got.dtype == np.float32 and got.shape == (2, 3, 64)
    np.testing.assert_array_equal(got, naive_model(inp, tile, rows, mma=mma))


@pytest.mark.parametrize("split", [16, 48, 80])
def test_split_keys_follow_the_per_lane_merge(split):
    inp = inputs_for("97x13", hq=2, hkv=1)
    rows = np.array([0, 6, 12])
    expected = naive_model(inp, 16, rows, split=split, mma="emulated")
    np.testing.assert_array_equal(model_attention(inp, 16, rows, split_keys=split, mma="emulated"), expected)
    # a split is not the same arithmetic: the fp16 roundings of P move with the running max
    whole = naive_model(inp, 16, rows, mma="emulated")
    assert 0 < np.abs(whole - expected).max() < 1e-3 * np.abs(expected).max()


@pytest.mark.parametrize("tile, segment", [(16, 64), (64, 64), (16, 128)])
def test_segments_follow_the_in_order_merge(tile, segment):
    inp = inputs_for("200x13", hq=2, hkv=1)
    rows = np.array([0, 7, 12])
    expected = naive_model(inp, tile, rows, segment=segment, mma="emulated")
    got = model_attention(inp, tile, rows, segment_keys=segment, mma="emulated")
    np.testing.assert_array_equal(got, expected)


def test_segments_follow_the_shared_rule(monkeypatch):
    assert segment_keys(65536) == 0 and segment_keys(65537) == SEGMENT_KEYS == 65536
    assert split_keys("v2", 256, 65537, 32) == 0            # no two-warp split with segments
    assert key_parts(200, segment=64) == [(0, 64), (64, 128), (128, 192), (192, 200)]
    assert key_parts(200, split=96) == [(0, 96), (96, 200)] and key_parts(200) == [(0, 200)]
    inp = inputs_for("200x13", hq=2, hkv=1)
    plain = model_attention(inp, 16)
    monkeypatch.setattr(registry, "SEGMENT_KEYS", 64)       # the default follows segment_keys()
    np.testing.assert_array_equal(model_attention(inp, 16), model_attention(inp, 16, segment_keys=64))
    assert not np.array_equal(model_attention(inp, 16), plain)
    with pytest.raises(ValueError, match="exclude"):
        model_attention(inp, 16, split_keys=64)


class ReorderedNumpy:
    """NumPy with what may differ on a GPU done differently: matmul and sum add in another order."""

    def __getattr__(self, name):
        return getattr(np, name)

    @staticmethod
    def matmul(a, b):
        h = a.shape[-1] // 2
        return np.matmul(a[..., h:], b[..., h:, :]) + np.matmul(a[..., :h], b[..., :h, :])

    @staticmethod
    def sum(x, axis=None, **kw):
        return np.flip(x, axis=axis).cumsum(axis=axis).take(-1, axis=axis)


@pytest.mark.parametrize("mma, mma_k", [("emulated", 16), ("emulated", 8), ("rn", 16)])
@pytest.mark.parametrize("data", ["normal", "realistic"])
def test_the_array_module_path_gives_the_same_bits_in_any_summation_order(mma, mma_k, data):
    # What CuPy runs (tests/gpu/test_model_gpu.py compares it on the device): every step is
    # exact or one IEEE rounding, so another order of the sums changes no bit.
    inp = inputs_for("300x40", data=data, hq=4, hkv=2)
    rows = np.array([0, 17, 39])
    twin = model_arrays(inp, ReorderedNumpy())
    for tile, split, seg in ((16, 0, 0), (64, 0, 128), (16, 160, 0)):
        got = model_attention(twin, tile, rows, split_keys=split, segment_keys=seg, mma=mma, mma_k=mma_k)
        want = model_attention(inp, tile, rows, split_keys=split, segment_keys=seg, mma=mma, mma_k=mma_k)
        np.testing.assert_array_equal(got, want)


def test_the_turing_path_chains_two_k8_mmas_per_slice():
    inp = inputs_for("300x40", data="normal", hq=2, hkv=1)
    k16, k8 = model_attention(inp, 16), model_attention(inp, 16, mma_k=8)
    assert 0 < np.abs(k16 - k8).max() < 1e-5 * np.abs(k16).max()


def test_exp2_ftz_is_exp2_to_the_nearest_float32_and_flushes_below_2_to_the_minus_126():
    rng = np.random.default_rng(3)
    x = np.concatenate([-rng.random(20000) * 130, -rng.random(20000), [0.0, -1.0, -126.0, -125.99]])
    x = x.astype(np.float32)
    got = exp2_ftz(x)
    want = np.exp2(x.astype(np.float64)).astype(np.float32)
    want[x < -126] = 0
    assert np.mean(got == want) > 0.9999 and np.all(np.abs(got - want) <= np.spacing(want))
    assert exp2_ftz(np.array([-np.inf, -126.5, -200], np.float32)).tolist() == [0, 0, 0]


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
