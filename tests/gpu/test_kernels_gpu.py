"""The kernels on a real GPU (`pytest -m gpu`): parity with FP64, canaries, determinism,
v2t == v2 bitwise, the forced Turing path, timing sanity, and the peers' alignment."""

from __future__ import annotations

import numpy as np
import pytest

from pa_bench.launch import Pins
from pa_bench.problem.inputs import make_inputs
from pa_bench.numerics.metrics import error_metrics, judge_parity, parity_floor
from pa_bench.numerics.reference import sample_rows

pytestmark = pytest.mark.gpu

from gpu_env import LAYOUTS, VARIANTS, problem, require_cupy_gpu  # noqa: E402  (tests/gpu/gpu_env.py)

cp = require_cupy_gpu()

SHAPES = ("2.1Kx256", "0x1536", "1023x113")


_cache: dict = {}


def _case(backend, shape, layout_key, rows_n=None):
    """Inputs, device buffers and the FP64 reference of one problem (cached per module)."""
    key = (shape, layout_key, rows_n)
    if key not in _cache:
        _cache.clear()
        pb = problem(shape, layout_key)
        inputs = make_inputs(pb)
        rows = None if rows_n is None else sample_rows(pb.queries, rows_n, seed=1)
        ref = backend.reference(inputs, rows)
        _cache[key] = (pb, inputs, backend.prepare(inputs), rows, ref)
    return _cache[key]


def _check_parity(backend, prep, inputs, rows, ref, variant):
    res = backend.compute(prep, variant, rows)
    # the model on the GPU (tests/gpu/test_model_gpu.py ties it to the CPU model bit for bit):
    # the CPU model's emulated accumulation made every case here take a minute; at the tile size
    # of what ran (a tuned Triton configuration may take 128 keys)
    model = backend.model(inputs, backend.tile_keys(variant, inputs.problem), rows,
                          split_keys=backend.split_keys(variant, inputs.problem))
    if inputs.problem.out_dtype == "float16":
        model = model.astype(np.float16).astype(np.float32)
    kern = error_metrics(res.out, ref)
    mod = error_metrics(model, ref)
    floor = parity_floor(ref)
    ok, why = judge_parity(kern["max_abs_err"], mod["max_abs_err"], floor, kern["nan_inf"], res.canary_ok)
    assert kern["nan_inf"] == 0, f"{variant}: {kern['nan_inf']} NaN/Inf"
    assert res.canary_ok, f"{variant}: output guard canaries overwritten or output left unwritten"
    assert res.deterministic, f"{variant}: two launches differ"
    assert ok, f"{variant}: kernel {kern['max_abs_err']:.3e} vs model {mod['max_abs_err']:.3e} ({why})"
    assert kern["cosine"] > 0.99999, f"{variant}: cosine {kern['cosine']:.7f}"
    return res


@pytest.mark.parametrize("layout_key", list(LAYOUTS))
@pytest.mark.parametrize("shape", SHAPES)
def test_parity_every_variant(backend, shape, layout_key):
    pb, inputs, prep, rows, ref = _case(backend, shape, layout_key)
    hashes = {}
    for v in VARIANTS:
        hashes[v] = _check_parity(backend, prep, inputs, rows, ref, v).full_hash
    assert hashes["v2t"] == hashes["v2"], "v2t must be bitwise identical to v2 on the same MMA path"
    assert backend.max_diff(prep, "v2t", "v2") == 0.0


def test_parity_32k_sampled(backend):
    pb, inputs, prep, rows, ref = _case(backend, "32Kx1024", "d128-gqa-paged64-realistic", rows_n=96)
    hashes = {v: _check_parity(backend, prep, inputs, rows, ref, v).full_hash for v in VARIANTS}
    assert hashes["v2t"] == hashes["v2"]


def test_parity_64k_split_sampled(backend):
    """64Kx512 splits the keys between a CTA's two warps (pa_bench.launch.split_keys)."""
    pb, inputs, prep, rows, ref = _case(backend, "64Kx512", "d128-gqa-paged64-realistic", rows_n=32)
    assert backend.split_keys("v2", pb) == 32768 and backend.split_keys("v1", pb) == 0
    hashes = {v: _check_parity(backend, prep, inputs, rows, ref, v).full_hash for v in VARIANTS}
    assert hashes["v2t"] == hashes["v2"]


@pytest.mark.parametrize("layout_key", list(LAYOUTS))
@pytest.mark.parametrize("split", [True, False])
def test_parity_with_split_forced(backend, layout_key, split):
    """Split keys on a ragged shape whose rule says no (and 2.1Kx256, where it says yes, without)."""
    shape = "1023x113" if split else "2.1Kx256"
    pb, inputs, prep, rows, ref = _case(backend, shape, layout_key)
    pinned = backend.with_pins(Pins(split=split))
    assert bool(pinned.split_keys("v2", pb)) == split
    hashes = {v: _check_parity(pinned, prep, inputs, rows, ref, v).full_hash for v in ("v2", "v2t")}
    assert hashes["v2t"] == hashes["v2"]


@pytest.mark.parametrize("layout_key", ["d128-gqa-paged64-realistic", "d64-mha-paged16-normal"])
@pytest.mark.parametrize("shape", ["2.1Kx256", "1023x113"])
def test_forced_turing_path(turing_backend, shape, layout_key):
    pb, inputs, prep, rows, ref = _case(turing_backend, shape, layout_key)
    assert turing_backend.unsupported_parity("v2", pb) is not None
    assert turing_backend.describe()["mma"] == "m16n8k8"
    for v in ("v1", "v2t"):
        _check_parity(turing_backend, prep, inputs, rows, ref, v)


@pytest.mark.parametrize("layout_key", list(LAYOUTS))
def test_tile_layouts_agree_bitwise(backend, layout_key):
    """A row's arithmetic does not depend on the tile or warp that computes it: v2/v2t with two
    query heads per warp, two 16-row blocks of one head per warp, and one tile per warp give the
    same bits (and v2t the same as v2 in each), with split keys and without."""
    pb, inputs, prep, rows, ref = _case(backend, "1023x113", layout_key)
    for split in (False, True):
        hashes = {}
        for tiles, pair in ((2, True), (2, False), (1, True)):
            pinned = backend.with_pins(Pins(tiles=tiles, pair_heads=pair, split=split))
            hashes[(tiles, pair)] = {v: pinned.compute(prep, v, None).full_hash for v in ("v2", "v2t")}
        assert all(h["v2"] == h["v2t"] for h in hashes.values()), (split, hashes)
        assert len({h["v2"] for h in hashes.values()}) == 1, (split, hashes)


def test_nan_in_unused_pool_slots_never_leaks(backend):
    """The pool's unused pages and the last page's tail hold NaN scales: a kernel reading them
    would produce NaN; parity above already covers it, this states it on a ragged shape."""
    pb, inputs, prep, rows, ref = _case(backend, "1023x113", "d64-mha-paged16-normal")
    assert np.isnan(inputs.paged.k_scale_pool).any()
    for v in VARIANTS:
        out = backend.compute(prep, v, None).out
        assert np.isfinite(out).all()


def test_timing_sanity(backend):
    from pa_bench.problem.config import TimingSettings

    pb, inputs, prep, rows, ref = _case(backend, "2.1Kx256", "d128-gqa-paged64-realistic")
    settings = TimingSettings(hot=False, warmup=2, min_seconds=0.05, max_seconds=3.0, max_noise=0.02,
                              min_samples=5, max_samples=200)
    res = backend.time(prep, ["v1", "v2t"], settings)
    for v in ("v1", "v2t"):
        r = res[v]
        assert not isinstance(r, str), r
        assert len(r.samples_ms) >= 5 and len(r.samples_ms) == len(res["v1"].samples_ms)  # interleaved
        med = float(np.median(r.samples_ms))
        assert 0.001 < med < 1000.0
        assert pb.flops / (med * 1e-3) / 1e12 < 2000.0, "faster than any GPU's tensor cores: timing is wrong"


def test_timing_samples_every_variant_on_every_placement_of_the_inputs(backend):
    """Three copies of the inputs, each variant (kernels and a torch peer) sampled on each in every
    round; the peer on a copy reads that copy's tensors, not the first's."""
    from pa_bench.measure import stats
    from pa_bench.peers import torch_util
    from pa_bench.problem.config import TimingSettings

    pb, inputs, prep, rows, ref = _case(backend, "2.1Kx256", "d128-gqa-paged64-realistic")
    settings = TimingSettings(warmup=2, min_seconds=0.05, max_seconds=3.0, max_noise=0.02, min_samples=5,
                              max_samples=200, placements=3)
    names = ["v1", "v3", "torch-sdpa"] if backend.cc >= 90 else ["v1", "torch-sdpa"]
    res = backend.time(prep, names, settings)
    for v in names:
        r = res[v]
        assert not isinstance(r, str), r
        assert len(r.samples_ms) == len(res["v1"].samples_ms) and len(r.samples_ms) % 3 == 0
        assert r.placements[:6] == [0, 1, 2, 0, 1, 2] and sorted(set(r.placements)) == [0, 1, 2]
        lo, hi = stats.placed_interval(r.samples_ms, r.placements)
        assert lo <= float(np.median(r.samples_ms)) <= hi
    with torch_util.placement(1):
        other = torch_util.shared_tensors(inputs)
    assert other.k16.data_ptr() != torch_util.shared_tensors(inputs).k16.data_ptr()


@pytest.mark.parametrize("shape", ["1023x113", "0x256"])
@pytest.mark.parametrize("peer", ["torch-sdpa", "torch-sdpa-flash", "torch-sdpa-cudnn", "torch-sdpa+dequant"])
def test_sdpa_peers_match_fp64_and_name_their_kernel(backend, peer, shape):
    """Bottom-right causal and GQA right (against FP64), as a user calls SDPA and pinned; the impl
    is what ran (a pinned backend names itself)."""
    from pa_bench.errors import PaBenchError

    pb, inputs, prep, rows, ref = _case(backend, shape, "d128-gqa-paged64-realistic")
    reason = backend.unsupported_parity(peer, pb)
    if reason:
        pytest.skip(reason)
    try:
        ko = backend.compute(prep, peer, rows)
    except PaBenchError as exc:      # a pinned backend that refuses the shape: skipped with torch's reason
        assert peer == "torch-sdpa-cudnn", exc
        pytest.skip(str(exc))
    err = error_metrics(ko.out, ref)
    assert err["rel_l2_err"] < 5e-3, f"{peer} disagrees with FP64 ({err}): wrong causal alignment or GQA?"
    impl = backend.impl(prep, peer)
    assert impl in ("cudnn", "flash", "efficient", "math"), impl
    if peer in ("torch-sdpa-flash", "torch-sdpa-cudnn"):
        assert impl == peer.rsplit("-", 1)[1]


@pytest.mark.parametrize("segments", [None, 512])
def test_paged_and_contiguous_kv_give_the_same_bits(backend, segments):
    """The layout changes where a key's row is read from, not the arithmetic: every kernel gives
    the same bits from a paged pool (64-key pages, shuffled) as from contiguous K/V, with key
    segments (512 keys: several per row) and without; so a parity run on one layout answers for
    the other."""
    from dataclasses import replace

    pb = problem("1023x113", "d128-gqa-paged64-realistic")
    paged = make_inputs(pb)
    contig = make_inputs(replace(pb, layout="contiguous"))
    assert np.array_equal(paged.k_i8, contig.k_i8) and np.array_equal(paged.v_scale, contig.v_scale)
    pinned = backend.with_pins(Pins(segments=segments))
    pp, pc = pinned.prepare(paged), pinned.prepare(contig)
    for v in VARIANTS + ("v3", "triton"):
        if pinned.unsupported_parity(v, pb):
            continue
        a, b = pinned.compute(pp, v, None).out, pinned.compute(pc, v, None).out
        assert np.array_equal(a, b), f"{v} (segments {segments}): paged and contiguous differ"
