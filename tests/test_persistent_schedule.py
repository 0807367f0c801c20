"""v3's persistent launch on the CPU: the work items' key tiles and the schedule the kernel reads
(Args::sched), checked against what the items must cover and what a schedule must be."""

from __future__ import annotations

import numpy as np
import pytest

from pa_bench.backends import kernels as K


def _geo(queries, context, heads_q=32, heads_kv=8, segment_keys=0):
    return K.launch_geometry("v3", queries, heads_q, heads_kv, context=context, segment_keys=segment_keys)


def _split(sched, ctas):
    offs = sched[:ctas + 1]
    items = sched[ctas + 1:]
    return [list(items[offs[b]:offs[b + 1]]) for b in range(ctas)]


@pytest.mark.parametrize("queries,context,hq,hkv", [(1536, 0, 32, 8), (113, 1023, 24, 8), (37, 1000, 16, 16),
                                                    (256, 2100, 32, 8)])
def test_each_item_covers_exactly_the_tiles_its_last_row_sees(queries, context, hq, hkv):
    geo = _geo(queries, context, hq, hkv)
    tiles = K.kv_group_item_tiles(geo, queries, context, hq)
    heads_kv, rbs, segs = geo.grid
    assert len(tiles) == heads_kv * rbs * segs and segs == 1
    ppc = 128 // (hq // hkv)
    for item, t in enumerate(tiles):
        y = item // heads_kv
        last = min(queries, (rbs - y) * ppc) - 1          # longest first: y = 0 holds the last positions
        assert (t - 1) * 64 <= context + last < t * 64, (item, t)
        assert tiles[y * heads_kv] == t                    # every KV head of a row block alike


def test_segments_split_an_items_tiles_without_loss():
    queries, context = 200, 16000
    whole = K.kv_group_item_tiles(_geo(queries, context), queries, context, 32)
    geo = _geo(queries, context, segment_keys=4096)
    seg = K.kv_group_item_tiles(geo, queries, context, 32)
    per_z = len(whole)
    assert len(seg) == per_z * geo.segments
    for i in range(per_z):
        parts = [seg[z * per_z + i] for z in range(geo.segments)]
        assert sum(parts) == whole[i] and all(0 <= p <= 4096 // 64 for p in parts)


def test_the_schedule_runs_every_item_once_longest_first_and_balanced():
    costs = [5, 0, 3, 9, 9, 1, 4, 0, 7, 2, 8, 6]
    ctas = 4
    sched = K.persistent_schedule(costs, ctas)
    assert sched.dtype == np.int32
    lists = _split(sched, ctas)
    ran = sorted(i for x in lists for i in x)
    assert ran == [i for i, c in enumerate(costs) if c > 0]      # each once; cost 0 left out
    for x in lists:
        assert [costs[i] for i in x] == sorted((costs[i] for i in x), reverse=True)
    loads = [sum(costs[i] for i in x) for x in lists]
    assert max(loads) <= sum(costs) / ctas + max(costs)          # list scheduling's bound
    assert max(loads) - min(loads) <= max(c for c in costs if c) # greedy: no CTA ahead by more than an item
    assert np.array_equal(sched, K.persistent_schedule(costs, ctas))   # deterministic


def test_the_schedule_refuses_no_ctas():
    with pytest.raises(ValueError, match="ctas"):
        K.persistent_schedule([1, 2], 0)


def test_a_persistent_launch_has_one_cta_an_sm_at_most_and_one_an_item_on_request():
    geo = _geo(1536, 0)
    grid, sched = K.persistent_launch(geo, 1536, 0, 32, sm_count=132)
    assert grid == (132,) and len(_split(sched, 132)) == 132
    assert sorted(i for x in _split(sched, 132) for i in x) == list(range(8 * 48))
    grid1, sched1 = K.persistent_launch(geo, 1536, 0, 32, sm_count=132, one_item_per_cta=True)
    assert grid1 == (384,) and all(len(x) == 1 for x in _split(sched1, 384))
    small = _geo(113, 1023)                                     # 32 items: fewer than the SMs
    assert K.persistent_launch(small, 113, 1023, 32, sm_count=132)[0] == (32,)
    assert geo.persistent and not K.launch_geometry("v2", 1536, 32, 8).persistent
