"""Seeded data, per-token int8 quantisation, the shuffled paged pool and .npz loading."""

import math

import numpy as np
import pytest

from pa_bench.errors import ConfigError
from pa_bench.problem.inputs import (Inputs, check_capture, make_inputs, p_scale_for,
                                    qk_scale_log2_for, quantize_per_token, read_capture)
from pa_bench.problem.plan import Problem
from pa_bench.problem.shapes import parse_shape


def problem(shape="1023x113", **kw):
    args = dict(heads_q=4, heads_kv=2, head_dim=64, page=16, data="normal", seed=0)
    args.update(kw)
    return Problem(parse_shape(shape), **args)


# ---------------------------------------------------------------------- quantisation


def test_quantize_round_trip_within_half_a_step():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 500, 64)).astype(np.float32) * rng.uniform(0.01, 100, (3, 500, 1))
    x = x.astype(np.float32)
    x_i8, scale = quantize_per_token(x)
    assert x_i8.dtype == np.int8 and scale.dtype == np.float32
    assert x_i8.shape == x.shape and scale.shape == x.shape[:-1]
    assert np.all(np.abs(x_i8.astype(int)) <= 127)
    # The largest element of every token maps to +-127.
    assert np.all(np.abs(x_i8).max(axis=-1) == 127)
    err = np.abs(x.astype(np.float64) - x_i8 * scale[..., None].astype(np.float64))
    assert np.all(err <= scale[..., None] * (0.5 + 1e-6))
    np.testing.assert_array_equal(scale, (np.abs(x).max(-1) / np.float32(127)).astype(np.float32))


def test_quantize_zero_rows_and_chunking():
    x = np.zeros((70000, 8), dtype=np.float32)  # more rows than one chunk
    x[5] = np.arange(8) - 3
    x_i8, scale = quantize_per_token(x)
    assert scale[0] == 1 and np.all(x_i8[0] == 0)
    assert scale[5] == np.float32(4) / np.float32(127)
    assert np.all(scale[6:] == 1) and not x_i8[6:].any()


def test_p_scale_and_qk_scale():
    for vmax in (0.03, 0.5, 1.0, 0.25, 3.7, 1e-4, 2.0 ** -7):
        p = p_scale_for(np.array([vmax / 3, vmax], dtype=np.float32))
        assert math.log2(p) == int(math.log2(p))  # a power of two
        assert 0.5 < np.float32(vmax) * p <= 1
    assert p_scale_for(np.array([0.25], np.float32)) == 4.0
    assert qk_scale_log2_for(0.125) == float(np.float32(0.125 * math.log2(math.e)))


# ---------------------------------------------------------------------- generated inputs


@pytest.mark.parametrize("data", ["normal", "realistic"])
def test_inputs_have_the_contract_shapes_and_types(data):
    pb = problem(data=data)
    inp = make_inputs(pb)
    assert isinstance(inp, Inputs) and inp.problem is pb
    assert inp.q.dtype == np.float16 and inp.q.shape == (4, 113, 64)
    for a in (inp.k_i8, inp.v_i8):
        assert a.dtype == np.int8 and a.shape == (2, 1136, 64)
    for a in (inp.k_scale, inp.v_scale):
        assert a.dtype == np.float32 and a.shape == (2, 1136) and np.all(a > 0)
    assert inp.k_float.dtype == np.float32 and inp.k_float.shape == (2, 1136, 64)
    np.testing.assert_array_equal(quantize_per_token(inp.k_float)[0], inp.k_i8)
    assert inp.context == 1023
    assert 0.5 < inp.v_scale.max() * inp.p_scale <= 1
    assert inp.qk_scale_log2 == float(np.float32(pb.softmax_scale * math.log2(math.e)))
    assert np.all(np.isfinite(inp.q))


def test_reproducible_by_seed_and_shape():
    a, b = make_inputs(problem()), make_inputs(problem())
    for name in ("q", "k_i8", "v_i8", "k_scale", "v_scale"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    np.testing.assert_array_equal(a.paged.page_table, b.paged.page_table)
    np.testing.assert_array_equal(a.paged.k_pool, b.paged.k_pool)
    c = make_inputs(problem(seed=1))
    assert not np.array_equal(a.k_i8, c.k_i8)
    d = make_inputs(problem("1023x112"))
    assert not np.array_equal(a.q[:, :112], d.q)


def test_layout_and_page_do_not_change_logical_data():
    paged = make_inputs(problem(page=16))
    other = make_inputs(problem(page=64))
    contiguous = make_inputs(problem(layout="contiguous"))
    assert contiguous.paged is None
    for name in ("q", "k_i8", "v_i8", "k_scale", "v_scale"):
        np.testing.assert_array_equal(getattr(paged, name), getattr(contiguous, name))
        np.testing.assert_array_equal(getattr(paged, name), getattr(other, name))


@pytest.mark.parametrize("shape, page", [("1023x113", 16), ("0x96", 64), ("256x64", 64),
                                         ("0x1", 16)])
def test_paged_pool_gathers_to_the_logical_cache(shape, page):
    pb = problem(shape, page=page, data="realistic")
    inp = make_inputs(pb)
    pg = inp.paged
    needed = math.ceil(pb.keys / page)
    n_pages = 2 * needed + 1
    assert pg.k_pool.shape == (n_pages, 2, page, 64) and pg.k_pool.dtype == np.int8
    assert pg.v_scale_pool.shape == (n_pages, 2, page) and pg.v_scale_pool.dtype == np.float32
    assert pg.page_table.dtype == np.int32 and pg.page_table.shape == (needed,)
    assert len(set(pg.page_table.tolist())) == needed
    assert pg.page_table.min() >= 0 and pg.page_table.max() < n_pages
    k, v, ks, vs = pg.gather(pb.keys)
    np.testing.assert_array_equal(k, inp.k_i8)
    np.testing.assert_array_equal(v, inp.v_i8)
    np.testing.assert_array_equal(ks, inp.k_scale)
    np.testing.assert_array_equal(vs, inp.v_scale)
    # Every page not in the table is poison: NaN scales everywhere.
    unused = np.setdiff1d(np.arange(n_pages), pg.page_table)
    assert len(unused) == needed + 1
    assert np.all(np.isnan(pg.k_scale_pool[unused])) and np.all(np.isnan(pg.v_scale_pool[unused]))
    # ... and so is the unused tail of the last page.
    tail = needed * page - pb.keys
    last = pg.page_table[-1]
    assert np.all(np.isnan(pg.k_scale_pool[last, :, page - tail:]))
    assert np.all(np.isfinite(pg.k_scale_pool[last, :, :page - tail]))


def test_pages_are_shuffled_with_gaps_and_garbage():
    inp = make_inputs(problem("2Kx256", page=16))
    table = inp.paged.page_table
    assert not np.all(np.diff(table) > 0)  # not in pool order
    assert np.any(np.diff(np.sort(table)) > 1)  # unused pages lie between used ones
    unused = np.setdiff1d(np.arange(inp.paged.k_pool.shape[0]), table)
    garbage = inp.paged.k_pool[unused]
    assert garbage.std() > 30  # random int8, not zeros


def test_realistic_data_has_outlier_channels_and_a_sink():
    pb = problem("2Kx128", data="realistic")
    inp = make_inputs(pb)
    k = inp.k_float
    for g in range(pb.heads_kv):
        magnitude = np.abs(k[g, 8:]).mean(axis=0)  # per channel, sink tokens left out
        top = np.sort(magnitude)[::-1]
        assert top[3] > 5 * np.median(magnitude)  # 4 outlier channels
        assert top[4] < 3 * np.median(magnitude)



def softmax_probs(inp, n_rows=16):
    pb = inp.problem
    q = inp.q[:, -n_rows:].astype(np.float64)
    k = inp.k_i8.astype(np.float64) * inp.k_scale[..., None]
    s = np.einsum("hid,hjd->hij", q, np.repeat(k, pb.group, axis=0)) * pb.softmax_scale
    s -= s.max(axis=-1, keepdims=True)
    p = np.exp(s)
    p /= p.sum(axis=-1, keepdims=True)
    return p


def test_realistic_softmax_is_peaky_with_a_sink():
    normal = softmax_probs(make_inputs(problem("2Kx64", data="normal", heads_q=8)))
    realistic = softmax_probs(make_inputs(problem("2Kx64", data="realistic", heads_q=8)))
    # Peakier: the largest probability of a row is much larger.
    assert np.median(realistic.max(-1)) > 20 * np.median(normal.max(-1))
    assert np.median(realistic.max(-1)) > 0.05
    # An attention sink: the first 4 keys (0.2 % of them) hold a large share of the mass.
    sink = realistic[..., :4].sum(-1).mean()
    assert sink > 0.2 and sink > 50 * normal[..., :4].sum(-1).mean()


# ---------------------------------------------------------------------- .npz captures


def npz_problem(path, shape="100x28", **kw):
    return problem(shape, data="npz", data_file=str(path), **kw)


def test_npz_float_form_is_quantised(tmp_path):
    rng = np.random.default_rng(3)
    q = rng.standard_normal((4, 28, 64)).astype(np.float32)
    k = rng.standard_normal((2, 128, 64)).astype(np.float32)
    v = rng.standard_normal((2, 128, 64))  # float64 is fine too
    path = tmp_path / "cap.npz"
    np.savez(path, q=q, k=k, v=v)
    assert read_capture(path).shape.spec == "100x28"
    inp = make_inputs(npz_problem(path))
    np.testing.assert_array_equal(inp.q, q.astype(np.float16))
    np.testing.assert_array_equal(inp.k_float, k)
    k_i8, k_scale = quantize_per_token(k)
    np.testing.assert_array_equal(inp.k_i8, k_i8)
    np.testing.assert_array_equal(inp.k_scale, k_scale)
    assert inp.v_float.dtype == np.float32 and inp.paged is not None


def test_npz_int8_form_is_used_as_is(tmp_path):
    rng = np.random.default_rng(4)
    arrays = dict(
        q=rng.standard_normal((4, 28, 64)).astype(np.float16),
        k_i8=rng.integers(-127, 128, (2, 128, 64), dtype=np.int8),
        v_i8=rng.integers(-127, 128, (2, 128, 64), dtype=np.int8),
        k_scale=rng.uniform(0.01, 0.1, (2, 128)).astype(np.float32),
        v_scale=rng.uniform(0.01, 0.1, (2, 128)).astype(np.float32),
    )
    path = tmp_path / "cap8.npz"
    np.savez(path, **arrays)
    inp = make_inputs(npz_problem(path, layout="contiguous"))
    for name in ("q", "k_i8", "v_i8", "k_scale", "v_scale"):
        np.testing.assert_array_equal(getattr(inp, name), arrays[name])
    assert inp.k_float is None and inp.v_float is None and inp.paged is None


def _nan_at(shape, where):
    a = np.ones(shape, np.float32)
    a[where] = np.nan
    return a


INT8 = dict(k=None, v=None, k_i8=np.zeros((2, 128, 64), np.int8),
            v_i8=np.zeros((2, 128, 64), np.int8), k_scale=np.ones((2, 128), np.float32),
            v_scale=np.ones((2, 128), np.float32))


@pytest.mark.parametrize("change, words", [
    ({"k": np.zeros((3, 128, 64), np.float32)}, ["'v'", "[2, 128, 64]", "'k' has [3, 128, 64]"]),
    ({"k": np.zeros((2, 128, 32), np.float32)}, ["'k'", "head dim 32", "'q' has 64"]),
    ({"q": np.zeros((4, 28, 32), np.float32)}, ["'k'", "head dim 64", "'q' has 32"]),
    ({"q": np.zeros((28, 64), np.float32)}, ["'q'", "2 dims", "[Hq, Nq, D]"]),
    ({"q": np.zeros((4, 28, 64), np.int32)}, ["'q'", "int32", "floating point"]),
    ({"q": np.zeros((3, 28, 64), np.float32)}, ["'q' has 3 heads", "2 KV heads"]),
    ({"q": None}, ["no array 'q'", "['k', 'v']"]),
    ({"v": None}, ["has 'k' but not 'v'"]),
    ({"k": None, "v": None}, ["no keys", "['q']"]),
    ({"k": np.ones((2, 20, 64), np.float32), "v": np.ones((2, 20, 64), np.float32)},
     ["20 keys", "28 queries"]),
    ({"k_i8": np.zeros((2, 128, 64), np.int8)}, ["['k_i8']", "but not ['v_i8', 'k_scale', 'v_scale']"]),
    ({**INT8, "v_scale": None}, ["but not ['v_scale']"]),
    ({**INT8, "v_i8": np.zeros((2, 128, 64), np.int16)}, ["'v_i8'", "int16", "expected int8"]),
    ({**INT8, "k_scale": np.ones((2, 127), np.float32)}, ["'k_scale'", "[2, 127]", "[2, 128]"]),
    ({**INT8, "v_scale": np.zeros((2, 128), np.float32)}, ["'v_scale'", "positive", "[0, 0]"]),
    ({**INT8, "k_scale": _nan_at((2, 128), (1, 7))}, ["'k_scale'", "NaN", "[1, 7]"]),
    ({"k": _nan_at((2, 128, 64), (1, 5, 3))}, ["'k'", "1 NaN/Inf", "NaN at index [1, 5, 3]"]),
    ({"q": np.full((4, 28, 64), np.inf, np.float32)}, ["'q'", "Inf at index [0, 0, 0]"]),
])
def test_npz_errors_name_the_condition(tmp_path, change, words):
    arrays = dict(q=np.zeros((4, 28, 64), np.float32), k=np.ones((2, 128, 64), np.float32),
                  v=np.ones((2, 128, 64), np.float32))
    arrays.update(change)
    path = tmp_path / "bad.npz"
    np.savez(path, **{n: a for n, a in arrays.items() if a is not None})
    with pytest.raises(ConfigError) as info:
        make_inputs(npz_problem(path))
    for w in words:
        assert w in str(info.value), str(info.value)


def _write(path, content: bytes):
    path.write_bytes(content)
    return path


@pytest.mark.parametrize("make, words", [
    (lambda p: _write(p, b""), ["empty (0 bytes)"]),
    (lambda p: _write(p, b"q,k,v\n1,2,3\n"), ["not an .npz archive", "no zip header"]),
    (lambda p: _write(p, b"PK\x03\x04 truncated"), ["not a readable .npz archive"]),
    (lambda p: np.save(open(p, "wb"), np.zeros(3)), ["single .npy array", "numpy.savez"]),
    (lambda p: np.savez(p), ["holds no arrays"]),
    (lambda p: np.savez(p, q=np.array([{"a": 1}], dtype=object)), ["'q'", "Python objects"]),
])
def test_unreadable_npz_files_are_one_line_errors(tmp_path, make, words):
    path = tmp_path / "bad.npz"
    make(path)
    with pytest.raises(ConfigError) as info:
        read_capture(path)
    msg = str(info.value)
    assert "\n" not in msg and "allow_pickle" not in msg and "pickle" not in msg
    for w in words:
        assert w in msg, msg


def test_capture_must_match_the_runs_heads_head_dim_and_shapes(tmp_path):
    path = tmp_path / "cap.npz"
    np.savez(path, q=np.zeros((4, 28, 64), np.float32), k=np.ones((2, 128, 64), np.float32),
             v=np.ones((2, 128, 64), np.float32))
    cap = read_capture(path)
    assert (cap.heads_q, cap.heads_kv, cap.head_dim, cap.shape.spec) == (4, 2, 64, "100x28")
    check_capture(cap, heads_q=4, heads_kv=2, head_dim=64, shapes=[parse_shape("100x28")])
    with pytest.raises(ConfigError, match="holds 4/2 heads .* asks for 8/2 .*--heads"):
        check_capture(cap, heads_q=8, heads_kv=2, head_dim=64)
    with pytest.raises(ConfigError, match="head dim 64 but the run asks for 128 .*--head-dim"):
        check_capture(cap, heads_q=4, heads_kv=2, head_dim=128)
    with pytest.raises(ConfigError, match="100x28 chunk .* asks for shape 99x28 .*--shapes"):
        check_capture(cap, heads_q=4, heads_kv=2, head_dim=64, shapes=[parse_shape("99x28")])


def test_npz_shape_must_match_the_problem(tmp_path):
    path = tmp_path / "cap.npz"
    np.savez(path, q=np.zeros((4, 28, 64), np.float32), k=np.ones((2, 128, 64), np.float32),
             v=np.ones((2, 128, 64), np.float32))
    with pytest.raises(ConfigError, match="100x28"):
        make_inputs(npz_problem(path, shape="99x28"))
