"""Which launch of a KV-group kernel runs a chunk fastest: CTA rows x key segments.

A variant whose CTA packs the query heads of one KV group into ``rows`` rows (pa_bench.variants
``fill_rows``; v3: 128 or 192) launches ``heads_kv * ceil(queries / (rows / group))`` CTAs, one an
SM, and may run the keys in ``n`` segments merged by pa_combine (the numerics model follows the
segments: their bits differ). Which (rows, n) is fastest depends on how the CTAs fill the SMs:
whole waves of CTAs of equal length at long contexts, uneven lengths at causal first chunks
(a row block's keys end at its last position), a nearly empty last wave where the CTAs are few.
So this module estimates each candidate's time by scheduling its CTAs, in launch order, onto
FILL_SMS SMs, each to the SM that frees first, and adds the merge's memory traffic:

- a CTA costs FILL_CTA_TILES plus its 64-key tiles, each ROW_COST[rows] (a 128-row tile is 1;
  rows it has not measured, a plug-in kernel's, cost in proportion: rows / 128);
- segments cost FILL_MERGE_TILES per query row and segment (the partial O each segment writes and
  pa_combine reads back);
- the fastest candidate wins, but fewer segments (then more rows) are kept while within
  FILL_PREFER of it.

Whether v3's CTAs share their converted tiles (shares_tiles) is decided here too, after the
launch: where a KV head and segment has SHARE_MIN_BLOCKS row blocks or more and its longest block
SHARE_MIN_TILES tiles or more, each tile is converted once for all of them (kernels/v3.cu,
PA_V3_SHARE); the bits are the same either way. Where those launches are at 128 rows and their
CTAs long (pair_steps), v3's consumers take 128-key steps (kernels/v3_pairs.cuh), which changes
the bits: the numerics model follows at 128-key tiles (pa_bench.launch step_keys).

The constants are H200 measurements (results/reference/h200/20261203-v3-fill-rule/EVIDENCE.md):
a 192-row tile takes 1.40 the 128-row one's time (1.5 the rows, a little more efficient); a
CTA's fixed work about two tiles; about 4,000 rows of partial O a segment (512 bytes a row at
D = 128 in fp32, written and read back) a tile's time. On 17 pairs of launches timed in turns
on one H200 (experiments/fill_pairs.py) the estimate ranks every pair as measured, within 2.8 % rms
and 7 % at worst. FILL_SMS is the SM count of the sm_90a GPUs v3 is built for (H100 SXM, H200):
a constant, so that the choice, and with it a row's bits, depends on the problem only, never on
the GPU.
"""

from __future__ import annotations

import heapq
from functools import lru_cache

FILL_SMS = 132
FILL_MAX_SEGMENTS = 8
FILL_MIN_KEYS = 512            # no segment under this many keys
ROW_COST = {128: 1.0, 192: 1.40}
FILL_CTA_TILES = 2.0
FILL_MERGE_TILES = 2.56e-4     # per query row (of every query head) and segment
FILL_PREFER = 1.03
TILE = 64
# v3's shared conversion (shares_tiles), from launches timed in turns on an H200
# (results/reference/h200/20261204-v3-shared-tiles/EVIDENCE.md): 3-8 % faster wherever a KV head
# and segment had 8 row blocks or more of 48 tiles or more (1Kx2048, 8Kx256 ... 32Kx1024), 1-3 %
# slower where the CTAs run two dozen tiles (0x1536, 2.1Kx256: each CTA's first tiles wait for
# another CTA's conversion and its publication).
SHARE_MIN_BLOCKS = 8
SHARE_MIN_TILES = 48
# v3's 128-key consumer steps (kernels/v3_pairs.cuh): on shared tiles at 128 rows a 64-key tile
# took 0.93 of the 64-key step's time at 32Kx1024 (128 rows, one segment, 528 tiles a row block;
# results/reference/h200/20261205-v3-pairs/EVIDENCE.md; on an H100 the launch this takes at
# 32Kx1024 ran in 0.955 of the previous one's time, estimated 0.961:
# results/reference/h100/20261205-v3-128-key-steps). Taken where a KV head and segment's longest
# row block has PAIR_MIN_TILES tiles or more: long CTAs, where each pair's fixed cost and the start
# of the K and V rings are spread over many steps.
PAIR_ROWS = 128
PAIR_COST = 0.93
PAIR_MIN_TILES = 256


def row_cost(rows: int) -> float:
    """A 64-key tile's time in a ``rows``-row CTA, in 128-row tile times."""
    return ROW_COST.get(rows, rows / 128)


def segment_size(keys: int, n: int) -> int:
    """Keys per segment of ``keys`` keys in ``n`` segments: whole tiles (0: one segment)."""
    return -(-keys // (TILE * n)) * TILE if n >= 2 else 0


def cta_costs(rows: int, seg_keys: int, context: int, queries: int, group: int, heads_kv: int,
              tile_cost: float | None = None) -> list[float]:
    """Each CTA's estimated time (128-row tile times), in launch order: grid (heads_kv, row
    blocks longest first, segments), x fastest. ``seg_keys`` 0: one segment. ``tile_cost``: a
    64-key tile's time (None: row_cost(rows))."""
    ppc = max(1, rows // max(1, group))
    blocks = -(-queries // ppc)
    keys = context + queries
    size = seg_keys or keys
    n = -(-keys // size)
    cost = row_cost(rows) if tile_cost is None else tile_cost
    out: list[float] = []
    for z in range(n):
        lo = z * size
        for y in range(blocks):
            end = context + min(queries, (blocks - y) * ppc)   # the row block's last key + 1
            tiles = -(-(min(lo + size, end) - lo) // TILE) if end > lo else 0
            out += [FILL_CTA_TILES + tiles * cost if tiles else FILL_CTA_TILES / 4] * heads_kv
    return out


def makespan(costs: list[float], sms: int = FILL_SMS) -> float:
    """The time the last SM finishes when each CTA, in order, goes to the SM that frees first."""
    if len(costs) > 32 * sms:   # many waves: the mean load plus half a CTA's tail
        return sum(costs) / sms + max(costs) / 2
    free = [0.0] * sms
    for c in costs:
        heapq.heappush(free, heapq.heappop(free) + c)
    return max(free)


def estimate(rows: int, seg_keys: int, context: int, queries: int, heads_q: int, heads_kv: int,
             pairs: bool | None = None) -> float:
    """A launch's estimated time in 128-row tile times: the CTAs' schedule plus the merge. ``pairs``:
    whether its consumers take 128-key steps (None: where pair_steps takes them)."""
    group = max(1, heads_q // max(1, heads_kv))
    keys = context + queries
    n = -(-keys // seg_keys) if seg_keys else 1
    merge = FILL_MERGE_TILES * heads_q * queries * n if n >= 2 else 0.0
    if pairs is None:
        pairs = pair_steps(rows, seg_keys, context, queries, heads_q, heads_kv)
    cost = row_cost(rows) * (PAIR_COST if pairs else 1.0)
    return makespan(cta_costs(rows, seg_keys, context, queries, group, heads_kv, cost)) + merge


def segment_candidates(keys: int, max_seg_keys: int = 0) -> list[int]:
    """The keys per segment ``fill_launch`` weighs for a chunk of ``keys`` keys (0: one segment),
    one for each segment count that whole 64-key tiles can make. Without ``max_seg_keys``: one
    segment, or 2 to FILL_MAX_SEGMENTS segments of FILL_MIN_KEYS keys or more. With it (contexts
    longer than SEGMENT_KEYS, which bounds a P.V chain): ``max_seg_keys`` itself (n0 segments, the
    last one short), and every count above n0 up to max(FILL_MAX_SEGMENTS, 2 * n0) with the keys
    split evenly: a chunk of few rows (256Kx64: 16 CTAs a segment) otherwise leaves most SMs idle."""
    if max_seg_keys:
        n0 = -(-keys // max_seg_keys)
        counts, segs, seen = range(n0 + 1, max(FILL_MAX_SEGMENTS, 2 * n0) + 1), [max_seg_keys], {n0}
    else:
        counts, segs, seen = range(2, min(FILL_MAX_SEGMENTS, keys // FILL_MIN_KEYS) + 1), [0], {1}
    for n in counts:
        size = segment_size(keys, n)
        if -(-keys // size) not in seen:   # n whose whole-tile segments make a count not yet seen
            seen.add(-(-keys // size))
            segs.append(size)
    return segs


@lru_cache(maxsize=4096)
def fill_launch(options: tuple[int, ...], context: int, queries: int, heads_q: int, heads_kv: int,
                max_seg_keys: int = 0) -> tuple[int, int]:
    """(rows, keys per segment; 0: one segment) of the fastest launch by ``estimate`` among
    ``options`` rows x ``segment_candidates(keys, max_seg_keys)``."""
    keys = context + queries
    segs = segment_candidates(keys, max_seg_keys)
    cands = [(estimate(r, s, context, queries, heads_q, heads_kv), s, r) for r in options for s in segs]
    best = min(c[0] for c in cands)
    near = [c for c in cands if c[0] <= FILL_PREFER * best]

    def count(seg: int) -> int:
        return -(-keys // seg) if seg else 1
    _, seg, rows = min(near, key=lambda c: (count(c[1]), -c[2]))
    return rows, seg


def shares_tiles(rows: int, seg_keys: int, context: int, queries: int, heads_q: int, heads_kv: int) -> bool:
    """Whether a launch of ``rows``-row CTAs (``seg_keys`` keys a segment, 0: one) converts each
    K/V tile once for all the row blocks of its KV head and segment: at least SHARE_MIN_BLOCKS
    blocks, and SHARE_MIN_TILES tiles in the longest one."""
    group = max(1, heads_q // max(1, heads_kv))
    blocks = -(-queries // max(1, rows // group))
    keys = context + queries
    tiles = -(-min(seg_keys or keys, keys) // TILE)
    return blocks >= SHARE_MIN_BLOCKS and tiles >= SHARE_MIN_TILES


def pair_steps(rows: int, seg_keys: int, context: int, queries: int, heads_q: int, heads_kv: int) -> bool:
    """Whether a launch of ``rows``-row CTAs runs v3's 128-key consumer steps: shared tiles
    (shares_tiles) at PAIR_ROWS rows, PAIR_MIN_TILES tiles or more in a segment's longest row block."""
    if rows != PAIR_ROWS or not shares_tiles(rows, seg_keys, context, queries, heads_q, heads_kv):
        return False
    keys = context + queries
    return -(-min(seg_keys or keys, keys) // TILE) >= PAIR_MIN_TILES
