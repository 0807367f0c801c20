"""How v2/v2t CTAs cover a chunk (pa_bench.backends.kernels.launch_geometry / choose_tiles), on the CPU.

The kernels' warp_tiles() maps warp task w = 2*blockIdx.y + warp (with split keys: w = blockIdx.y
for both warps) to its tiles; this re-derives that map in Python and checks that every (query
head, 16-row block) of a chunk is owned by exactly one tile of one warp task, for each layout the
geometry can choose, and with split keys by both warps of one CTA. With key segments it re-derives
the keys each CTA of grid.z = z visits (v1.cu's loop bounds, pipelined_warp_begin's slices) and
checks that every row's keys are covered once, and that pa_combine reads only what was written.
"""

from __future__ import annotations

import itertools

import pytest

from pa_bench import variants as registry
from pa_bench.backends import kernels as K
from pa_bench import launch as L


def _tiles_covered(variant, queries, hq, hkv, tiles, split_keys=0):
    geo = K.launch_geometry(variant, queries, hq, hkv, tiles=tiles, split_keys=split_keys)
    gx, gy, gz = geo.grid
    assert gz == 1 and geo.segments == 1
    owned = []
    if variant == "v1":
        for bx, hy in itertools.product(range(gx), range(gy)):
            rb = gx - 1 - bx
            owned += [(hy, (4 * rb + w) * 16) for w in range(4)]
        return geo, owned
    warps = geo.block // 32
    for bx, by, warp in itertools.product(range(gx), range(gy), range(warps)):
        w, rb = (by if split_keys else by * warps + warp), gx - 1 - bx
        if tiles == 1 or geo.pair_heads:
            heads = [tiles * w + t for t in range(tiles)]
            rows = [rb * 16] * tiles
        else:
            heads = [w] * tiles
            rows = [(rb * tiles + t) * 16 for t in range(tiles)]
        if heads[-1] >= hq:
            continue                      # the warp returns at once
        owned += [(h, r, (bx, by)) if split_keys else (h, r) for h, r in zip(heads, rows)]
    return geo, owned


@pytest.mark.parametrize("variant,tiles", [("v1", 1), ("v2", 1), ("v2", 2), ("v2t", 2)])
@pytest.mark.parametrize("queries,hq,hkv", [(1024, 32, 8), (113, 16, 16), (97, 12, 4), (16, 2, 1), (1, 6, 2)])
def test_every_tile_is_owned_once(variant, tiles, queries, hq, hkv):
    geo, owned = _tiles_covered(variant, queries, hq, hkv, tiles)
    needed = {(h, r) for h in range(hq) for r in range(0, queries, 16)}
    in_chunk = [o for o in owned if o[1] < queries]
    assert sorted(in_chunk) == sorted(needed)          # each once, none missing
    assert geo.block == registry.get(variant).threads


@pytest.mark.parametrize("variant,tiles", [("v2", 1), ("v2", 2), ("v2t", 2)])
@pytest.mark.parametrize("queries,hq,hkv", [(512, 32, 8), (113, 16, 16), (97, 12, 4), (1, 6, 2)])
def test_split_keys_give_each_task_both_warps_of_one_cta(variant, tiles, queries, hq, hkv):
    geo, owned = _tiles_covered(variant, queries, hq, hkv, tiles, split_keys=64)
    assert geo.split_keys == 64
    in_chunk = [o for o in owned if o[1] < queries]
    tiles_owned = sorted((h, r) for h, r, _ in in_chunk)
    needed = sorted({(h, r) for h in range(hq) for r in range(0, queries, 16)})
    assert tiles_owned == sorted(needed * 2)            # each tile by exactly two warps ...
    ctas = {}
    for h, r, cta in in_chunk:
        ctas.setdefault((h, r), []).append(cta)
    assert all(len(c) == 2 and c[0] == c[1] for c in ctas.values())   # ... of the same CTA
    unsplit = K.launch_geometry(variant, queries, hq, hkv, tiles=tiles)
    assert geo.grid[0] == unsplit.grid[0] and geo.grid[1] >= unsplit.grid[1]


def test_split_keys_are_whole_slices_and_not_for_v1():
    with pytest.raises(ValueError, match="split_keys"):
        K.launch_geometry("v2", 512, 32, 8, split_keys=8)
    with pytest.raises(ValueError, match="split"):
        K.launch_geometry("v1", 512, 32, 8, split_keys=64)


def test_pairing_needs_an_even_group():
    assert K.launch_geometry("v2", 1024, 32, 8, tiles=2).pair_heads          # 4 heads per KV head
    assert not K.launch_geometry("v2", 1024, 12, 4, tiles=2).pair_heads      # 3: rows pair instead
    assert not K.launch_geometry("v2", 1024, 32, 8, tiles=1).pair_heads
    assert not K.launch_geometry("v2", 1024, 32, 8, tiles=2, pair_heads=False).pair_heads
    with pytest.raises(ValueError):
        K.launch_geometry("v2", 1024, 32, 8, tiles=3)


def test_choose_tiles_keeps_two_warps_per_sm():
    # H200: 132 SMs. 2.1Kx256 with 32 query heads has 256 two-tile warps: one tile per warp.
    assert L.choose_tiles(256, 32, 8, 132) == 1
    assert L.choose_tiles(512, 32, 8, 132) == 2
    assert L.choose_tiles(1024, 32, 8, 132) == 2
    assert L.choose_tiles(1024, 32, 8, 1000) == 1
    # split keys double the warps: 2.1Kx256 keeps two tiles per warp then
    assert L.choose_tiles(256, 32, 8, 132, split_keys=912) == 2


def test_only_v2_builds_carry_the_tile_count():
    assert not any("PA_TILES" in d for d in K.KernelBuild("v1", tiles=2).defines())
    assert "-DPA_TILES=1" in K.KernelBuild("v2t", tiles=1).defines()


# ---------------------------------------------------------------- key segments

def _segment_cover(variant, ctx, queries, hq, hkv, tiles, seg):
    """{(head, row): [(z, first key, end key), ...]} of every CTA/warp that writes the row's
    segment state: v1.cu's [j_begin, j_end) and pipelined_warp_begin's slices, re-derived."""
    geo = K.launch_geometry(variant, queries, hq, hkv, tiles=tiles, context=ctx, segment_keys=seg)
    gx, gy, gz = geo.grid
    assert gz == -(-(ctx + queries) // seg) == geo.segments
    written = {}
    for bx, by, z in itertools.product(range(gx), range(gy), range(gz)):
        rb = gx - 1 - bx
        owners = []                       # (query head, first row, rows, first key, end key)
        if variant == "v1":
            needed = ctx + min(64 * rb + 64, queries)                 # keys_needed(cta_row0, 64)
            owners.append((by, 64 * rb, 64, z * seg, min(needed, z * seg + seg)))
        else:
            for warp in range(geo.block // 32):
                w = by * (geo.block // 32) + warp
                if tiles == 1 or geo.pair_heads:
                    heads, rows0 = [tiles * w + t for t in range(tiles)], [16 * rb] * tiles
                else:
                    heads, rows0 = [w] * tiles, [(rb * tiles + t) * 16 for t in range(tiles)]
                if heads[-1] >= hq:
                    continue                                          # no tiles: returns at once
                n_slices = -(-(ctx + min(rows0[-1] + 16, queries)) // 16)
                b, e = z * seg // 16, min(n_slices, z * seg // 16 + seg // 16)
                owners += [(h, r0, 16, 16 * b, 16 * e) for h, r0 in zip(heads, rows0)]
        for h, r0, n, begin, end in owners:
            if begin >= end:
                continue                                              # no key here: returns at once
            for r in range(r0, min(r0 + n, queries)):
                written.setdefault((h, r), []).append((z, begin, min(end, ctx + r + 1)))
    return written


@pytest.mark.parametrize("variant,tiles", [("v1", 1), ("v2", 1), ("v2", 2), ("v2t", 2)])
@pytest.mark.parametrize("ctx,queries,hq,hkv,seg", [(300, 113, 4, 2, 64), (1000, 70, 6, 2, 128), (64, 1, 2, 2, 64),
                                                     (4096, 200, 12, 4, 1024)])
def test_segments_cover_every_key_once_and_combine_reads_only_written_state(variant, tiles, ctx, queries, hq, hkv, seg):
    written = _segment_cover(variant, ctx, queries, hq, hkv, tiles, seg)
    assert set(written) == {(h, r) for h in range(hq) for r in range(queries)}
    for (h, r), parts in written.items():
        combined = (ctx + r) // seg + 1                      # pa_combine's segments for row r
        zs = [z for z, _, _ in parts]
        assert len(zs) == len(set(zs))                       # one writer per (row, segment)
        assert set(range(combined)) <= set(zs)               # nothing read uninitialised
        seen = [z for z, b, e in parts if b < e]             # segments with a key the row sees
        assert seen == list(range(combined))
        keys = sorted((b, e) for z, b, e in parts if z < combined)
        assert keys[0][0] == 0 and keys[-1][1] == ctx + r + 1
        assert all(e0 == b1 for (_, e0), (b1, _) in zip(keys, keys[1:]))   # contiguous, no overlap


def test_long_context_gets_n_seg_ctas_per_row_block():
    from pa_bench.launch import segment_keys
    from pa_bench.variants import SEGMENT_KEYS

    ctx, nq = 1 << 20, 64                                    # 1M x 64 with 8/8 heads
    seg = segment_keys(ctx)
    assert seg == SEGMENT_KEYS == 65536
    for variant in ("v1", "v2", "v2t"):
        plain = K.launch_geometry(variant, nq, 8, 8, tiles=2)
        geo = K.launch_geometry(variant, nq, 8, 8, tiles=2, context=ctx, segment_keys=seg)
        assert geo.grid[:2] == plain.grid[:2] and geo.grid[2] == geo.segments == 17   # ceil((2^20+64)/2^16)
        assert K.workspace_floats(geo, nq, 8, 128) == 17 * 8 * 64 * 130
    assert K.combine_geometry(nq, 8) == ((128,), 128)      # a warp per row: 512 rows, 4 per CTA
    # 8 two-tile warps become 136 CTAs: two tiles per warp again
    assert L.choose_tiles(nq, 8, 8, 132) == 1
    assert L.choose_tiles(nq, 8, 8, 132, segments=17) == 2


def test_no_segments_up_to_64k_context():
    from pa_bench.launch import segment_keys

    for ctx in (0, 2150, 32768, 65536):
        assert segment_keys(ctx) == 0
        geo = K.launch_geometry("v2", 512, 32, 8, context=ctx, segment_keys=segment_keys(ctx))
        assert geo.grid[2] == geo.segments == 1 and geo.segment_keys == 0
        assert K.workspace_floats(geo, 512, 32, 128) == 0
    assert segment_keys(65537) == 65536


def test_segments_are_whole_v1_tiles_and_exclude_split_keys():
    with pytest.raises(ValueError, match="segment_keys"):
        K.launch_geometry("v1", 512, 32, 8, context=4096, segment_keys=48)
    with pytest.raises(ValueError, match="split_keys and segment_keys"):
        K.launch_geometry("v2", 512, 32, 8, context=4096, segment_keys=1024, split_keys=64)


# ---------------------------------------------------------------- v3's key segments that fill the GPU

def test_v3_fills_a_small_grid_with_key_segments():
    """2.1Kx256 with 32/8 heads: 192-row CTAs would be 8 x 6 = 48 (96 in two segments, a wave
    of slower CTAs short of the H200's 132 SMs), so v3 takes 128-row CTAs, 8 x 8 = 64, and runs
    the 2,406 keys in two segments of 1,216 (pa_combine merges them), 128 CTAs of 384 threads in
    all. 32Kx1024, whose CTAs are long enough for 128-key steps, takes those at 128 rows."""
    from pa_bench.launch import cta_rows, segment_keys

    assert cta_rows("v3", 2150, 256, 32, 8) == 128
    seg = segment_keys(2150, "v3", 256, 32, 8)
    assert seg == 1216
    geo = K.launch_geometry("v3", 256, 32, 8, context=2150, segment_keys=seg, cta_rows=128)
    assert geo.grid == (8, 8, 2) and geo.segments == 2 and geo.block == 384
    # 32Kx1024: 128-row CTAs on shared tiles with 128-key steps, 8 x 32 = 256, no segments
    assert cta_rows("v3", 32768, 1024, 32, 8) == 128 and segment_keys(32768, "v3", 1024, 32, 8) == 0
    geo = K.launch_geometry("v3", 1024, 32, 8, context=32768, segment_keys=11264, cta_rows=192)
    assert geo.grid == (8, 22, 3) and geo.block == 512   # 192 rows in three segments: four full waves
    assert segment_keys(0, "v3", 1536, 32, 8) == 0 and cta_rows("v3", 0, 1536, 32, 8) == 192   # 256 CTAs
    assert segment_keys(2150, "v1", 256, 32, 8) == segment_keys(2150, "v2", 256, 32, 8) == 0   # v3 only
    assert cta_rows("v1", 2150, 256, 32, 8) == cta_rows("v2", 2150, 256, 32, 8) == 0
    assert segment_keys(2150, "v3", 256, 32, 8) != segment_keys(2150)                        # not the context's rule


def test_v3_builds_carry_their_rows_and_the_others_do_not():
    from types import SimpleNamespace

    small = SimpleNamespace(context=2150, queries=256, heads_q=32, heads_kv=8)
    first = SimpleNamespace(context=0, queries=1536, heads_q=32, heads_kv=8)
    long = SimpleNamespace(context=32768, queries=1024, heads_q=32, heads_kv=8)
    assert L.choose("v3", small).rows == 128 and L.choose("v3", first).rows == 192
    assert L.choose("v2", long).rows == 0
    assert "-DPA_CTA_ROWS=128" in K.KernelBuild("v3", cta_rows=128).defines()
    assert not any("PA_CTA_ROWS" in d for d in K.KernelBuild("v3").defines())
    assert K.kv_group_threads(128) == 384 and K.kv_group_threads(192) == 512


@pytest.mark.parametrize("ctx, queries, hq, hkv", [
    (32768, 1024, 32, 8), (65536, 512, 32, 8), (0, 1536, 32, 8), (2150, 256, 32, 8), (1023, 113, 32, 8),
    (16384, 200, 32, 8), (4096, 64, 16, 16), (100, 2000, 32, 8), (3000, 1, 32, 8), (65000, 64, 8, 1),
    (20000, 700, 64, 8), (70000, 16, 32, 8), (16384, 256, 32, 8), (1024, 2048, 32, 8), (131072, 2048, 32, 8),
    (262144, 64, 32, 8), (262144, 256, 32, 8), (1048576, 64, 32, 8), (262144, 1, 8, 1)])
def test_v3_fill_launch_follows_its_launch_geometry(ctx, queries, hq, hkv):
    """The launch v3 takes, checked against the CTAs its launch geometry really has and against
    every other candidate: the estimate schedules exactly the geometry's CTAs; the segments are
    whole 64-key tiles, none under FILL_MIN_KEYS keys, at most FILL_MAX_SEGMENTS (long contexts:
    none over SEGMENT_KEYS keys); no candidate, rows x segments, is estimated more than FILL_PREFER faster;
    and none with fewer segments (then more rows) is within FILL_PREFER of the fastest."""
    from pa_bench.launch import fill
    from pa_bench.launch import cta_rows, segment_keys
    from pa_bench.variants import SEGMENT_KEYS

    keys = ctx + queries
    rows = cta_rows("v3", ctx, queries, hq, hkv)
    seg = segment_keys(ctx, "v3", queries, hq, hkv)
    geo = K.launch_geometry("v3", queries, hq, hkv, context=ctx, segment_keys=seg, cta_rows=rows)
    assert geo.block == 128 * (1 + rows // 64)
    costs = fill.cta_costs(rows, seg, ctx, queries, hq // hkv, hkv)
    assert len(costs) == geo.grid[0] * geo.grid[1] * geo.grid[2]
    n = geo.segments if seg else 1
    if ctx > SEGMENT_KEYS:
        # no segment longer than SEGMENT_KEYS: SEGMENT_KEYS itself, or more segments split evenly
        n0 = -(-keys // SEGMENT_KEYS)
        assert seg == SEGMENT_KEYS or (seg % 64 == 0 and seg == fill.segment_size(keys, n) and n0 < n <= max(fill.FILL_MAX_SEGMENTS, 2 * n0))
        cands = [(r, s) for r in (128, 192) for s in
                 [SEGMENT_KEYS] + [fill.segment_size(keys, m) for m in range(n0 + 1, max(fill.FILL_MAX_SEGMENTS, 2 * n0) + 1)]]
    else:
        if seg:
            assert seg % 64 == 0 and seg >= fill.FILL_MIN_KEYS and 2 <= n <= fill.FILL_MAX_SEGMENTS
        cands = [(r, fill.segment_size(keys, m)) for r in (128, 192)
                 for m in range(1, max(1, min(fill.FILL_MAX_SEGMENTS, keys // fill.FILL_MIN_KEYS)) + 1)]
    est = {c: fill.estimate(c[0], c[1], ctx, queries, hq, hkv) for c in cands}
    mine = est[(rows, seg)]
    best = min(est.values())
    assert mine <= fill.FILL_PREFER * best + 1e-9

    def count(s):
        return -(-keys // s) if s else 1
    for (r, s), e in est.items():
        if e <= fill.FILL_PREFER * best:
            assert (count(s), -r) >= (n, -rows), (r, s, e, rows, seg, mine)


# Launch pairs measured on one H200 in one process, each pair timed in turns (experiments/fill_pairs.py,
# results/reference/h200/20261203-v3-fill-rule/fill_pairs.txt): (context, queries, (rows,
# segments) of A, (rows, segments) of B, B's time / A's).
MEASURED_PAIRS = [
    (32768, 1024, (128, 1), (192, 3), 0.984), (65536, 512, (128, 1), (192, 3), 0.973),
    (0, 1536, (128, 1), (192, 1), 0.870), (2150, 256, (128, 2), (192, 2), 1.233),
    (16384, 200, (128, 3), (128, 7), 0.759), (16384, 200, (128, 3), (192, 3), 0.735),
    (4096, 256, (128, 2), (192, 5), 1.251), (16384, 256, (128, 2), (192, 5), 1.161),
    (65536, 256, (128, 2), (192, 5), 1.154), (1024, 2048, (128, 1), (192, 3), 1.323),
    (2048, 2048, (128, 1), (192, 3), 1.216), (8192, 2048, (128, 1), (192, 3), 1.049),
    (28672, 1024, (128, 1), (192, 3), 0.994), (32768, 2048, (128, 1), (192, 3), 0.973),
    (65536, 2048, (128, 1), (192, 3), 0.967), (131072, 256, (128, 3), (192, 3), 1.396),
    (131072, 2048, (128, 3), (192, 3), 1.054)]


@pytest.mark.parametrize("ctx, queries, a, b, measured", MEASURED_PAIRS)
def test_the_fill_estimate_orders_the_measured_launches_as_the_h200_did(ctx, queries, a, b, measured):
    """The estimate's constants were fitted to such pairs: it must rank each pair as measured and
    come within 10 % of the measured ratio (32/8 heads, D 128). The pairs were timed with 64-key
    consumer steps at both CTA sizes (pairs=False)."""
    from pa_bench.launch import fill
    from pa_bench.variants import SEGMENT_KEYS

    keys = ctx + queries

    def seg(n):
        return SEGMENT_KEYS if ctx > SEGMENT_KEYS else fill.segment_size(keys, n)
    ratio = (fill.estimate(b[0], seg(b[1]), ctx, queries, 32, 8, pairs=False)
             / fill.estimate(a[0], seg(a[1]), ctx, queries, 32, 8, pairs=False))
    assert (ratio < 1) == (measured < 1)
    assert abs(ratio / measured - 1) < 0.10


def test_makespan_puts_each_cta_on_the_sm_that_frees_first():
    from pa_bench.launch.fill import makespan

    assert makespan([1.0] * 132) == 1.0
    assert makespan([1.0] * 133) == 2.0
    assert makespan([3.0, 1.0, 1.0, 1.0], sms=2) == 3.0      # the three short ones share one SM
    assert makespan([1.0, 1.0, 1.0, 3.0], sms=2) == 4.0      # the long one last waits for a free SM


def test_the_fill_estimate_takes_row_counts_it_has_not_measured():
    """A plug-in kernel's fill_rows (here 64) costs in proportion to its rows, so the choice works
    for it too: one size gives its own rows, with the segments that fill the GPU."""
    from pa_bench.launch import fill

    assert fill.row_cost(64) == 0.5 and fill.row_cost(192) == fill.ROW_COST[192]
    rows, seg = fill.fill_launch((64,), 2150, 256, 32, 8)
    assert rows == 64 and seg % 64 == 0
    assert fill.estimate(64, seg, 2150, 256, 32, 8) <= fill.estimate(64, 0, 2150, 256, 32, 8)


@pytest.mark.parametrize("ctx,queries,expect", [
    (31744, 1024, True),     # 32Kx1024: 22 row blocks of 192 rows a KV head and segment, 176 tiles
    (65024, 512, True),      # 64Kx512: 11 blocks, 344 tiles
    (4096, 2048, True),      # 4Kx2048: 64 blocks of 128 rows, 96 tiles
    (1024, 2048, True),      # 1Kx2048: 48 tiles
    (4096, 256, False),      # 4Kx256: 8 blocks of 34 tiles a segment
    (0, 1536, False),        # 0x1536: 32 blocks, but 24 tiles at most
    (2048, 256, False),      # 2.1Kx256: 8 blocks of 20 tiles
    (65472, 64, False),      # 64Kx64: 2 row blocks
])
def test_v3_shares_tiles_where_many_long_row_blocks_read_them(ctx, queries, expect):
    from pa_bench.launch import fill
    from pa_bench.launch import cta_rows, segment_keys, shares_tiles

    rows, seg = cta_rows("v3", ctx, queries, 32, 8), segment_keys(ctx, "v3", queries, 32, 8)
    assert fill.shares_tiles(rows, seg, ctx, queries, 32, 8) is expect
    assert shares_tiles("v3", ctx, queries, 32, 8) is expect
    assert shares_tiles("v2", ctx, queries, 32, 8) is False     # no tile_sharing: never


def test_tile_sharing_thresholds_are_inclusive():
    from pa_bench.launch import fill

    tiles = fill.SHARE_MIN_TILES
    ppc = 128 // 4                                   # 128-row CTAs, 4 query heads a KV head
    queries = fill.SHARE_MIN_BLOCKS * ppc
    keys = tiles * 64
    assert fill.shares_tiles(128, 0, keys - queries, queries, 32, 8)
    assert not fill.shares_tiles(128, 0, keys - queries - 64, queries, 32, 8)      # one tile short
    assert not fill.shares_tiles(128, 0, keys - queries + ppc, queries - ppc, 32, 8)   # one block short
    assert not fill.shares_tiles(128, 64 * (tiles - 1), keys - queries, queries, 32, 8)   # segments too short


def test_v3_builds_carry_tile_sharing_and_share_workspace_bytes_grow_with_it():
    b = K.KernelBuild("v3", kv_shared=True, cta_rows=192)
    assert "-DPA_V3_SHARE=1" in b.defines() and "-DPA_CTA_ROWS=192" in b.defines()
    small = K.share_workspace_bytes(0, 8, 10, 33280, 1)
    assert K.share_workspace_bytes(0, 8, 11, 33280, 1) - small == 8 * (33280 + 4)
    assert K.share_workspace_bytes(0, 8, 10, 33280, 3) - small == 8 * 8 * 2


def test_v3_takes_128_key_steps_where_its_shared_tile_ctas_are_long():
    """fill.pair_steps: shared tiles at 128 rows and 256 tiles or more in a segment's longest row
    block. The model's tile and the CUDA build follow (model.step_keys, KernelBuild.step_keys)."""
    from pa_bench.launch import fill
    from pa_bench.launch import step_keys

    assert step_keys("v3", 32768, 1024, 32, 8) == step_keys("v3", 65536, 512, 32, 8) == 128
    assert step_keys("v3", 0, 1536, 32, 8) == step_keys("v3", 2150, 256, 32, 8) == 64   # short CTAs
    assert step_keys("v3", 12288, 1024, 32, 8) == 64                                     # 208 tiles a block
    assert step_keys("v2", 32768, 1024, 32, 8) == 16 and step_keys("v1", 32768, 1024, 32, 8) == 64
    assert fill.pair_steps(128, 0, 32768, 1024, 32, 8) and not fill.pair_steps(192, 0, 32768, 1024, 32, 8)
    # the estimate gives a pair launch PAIR_COST of the tile time it gives a 64-key launch
    one = fill.estimate(128, 0, 32768, 1024, 32, 8, pairs=False)
    assert fill.estimate(128, 0, 32768, 1024, 32, 8) < one


def test_v3_long_context_of_few_rows_takes_more_segments_than_other_kernels():
    """Past SEGMENT_KEYS keys the other kernels keep SEGMENT_KEYS; v3 takes more, shorter
    segments where its 16 CTAs a segment would leave most SMs idle (256Kx64 at 32/8 heads: eight
    segments, 128 CTAs), and none longer than SEGMENT_KEYS anywhere."""
    from pa_bench.launch import fill
    from pa_bench.launch import segment_keys
    from pa_bench.variants import SEGMENT_KEYS

    assert segment_keys(262144, "v1", 64, 32, 8) == SEGMENT_KEYS
    seg = segment_keys(262144, "v3", 64, 32, 8)
    assert seg == fill.segment_size(262144 + 64, 8) == 32832
    geo = K.launch_geometry("v3", 64, 32, 8, context=262144, segment_keys=seg, cta_rows=128)
    assert geo.segments == 8 and geo.grid[0] * geo.grid[1] * geo.grid[2] == 128
    for ctx in (65537, 100000, 262144, 1048576):
        for q in (1, 64, 256, 2048):
            s = segment_keys(ctx, "v3", q, 32, 8)
            assert 0 < s <= SEGMENT_KEYS and s % 64 == 0, (ctx, q, s)
