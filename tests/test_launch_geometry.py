"""How v2/v2t CTAs cover a chunk (pa_bench.backends.kernels.launch_geometry / choose_tiles), on the CPU.

The kernels' warp_tiles() maps warp task w = 2*blockIdx.y + warp (with split keys: w = blockIdx.y
for both warps) to its tiles; this re-derives that map in Python and checks that every (query
head, 16-row block) of a chunk is owned by exactly one tile of one warp task, for each layout the
geometry can choose, and with split keys by both warps of one CTA.
"""

from __future__ import annotations

import itertools

import pytest

from pa_bench import variants as registry
from pa_bench.backends import kernels as K


def _tiles_covered(variant, queries, hq, hkv, tiles, split_keys=0):
    geo = K.launch_geometry(variant, queries, hq, hkv, tiles=tiles, split_keys=split_keys)
    gx, gy = geo.grid
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
    assert K.choose_tiles(256, 32, 8, 132) == 1
    assert K.choose_tiles(512, 32, 8, 132) == 2
    assert K.choose_tiles(1024, 32, 8, 132) == 2
    assert K.choose_tiles(1024, 32, 8, 1000) == 1
    # split keys double the warps: 2.1Kx256 keeps two tiles per warp then
    assert K.choose_tiles(256, 32, 8, 132, split_keys=912) == 2


def test_only_v2_builds_carry_the_tile_count():
    assert not any("PA_TILES" in d for d in K.KernelBuild("v1", tiles=2).defines())
    assert "-DPA_TILES=1" in K.KernelBuild("v2t", tiles=1).defines()
