"""The launch of a kernel on a chunk, and the one policy that picks it.

A :class:`Launch` says everything a kernel launch and the numerics model need beyond the problem:
the rows of a CTA, the m16 tiles of a warp, where the keys split between a CTA's two warps, the
keys of a key segment, whether v3 converts each K/V tile once for all its row blocks, and the
keys of a consumer step and of an online-softmax tile. :func:`choose` picks it from the variant,
the problem, the device facts and what a caller pins (:class:`Pins`); the cuda backend launches
what it says, and the numerics model emulates it.

The rules, each on the problem only (so a row's bits never depend on the GPU), except the tiles
of a warp (the bits are the same at either) and a Triton kernel's tile (its configuration on the
GPU it runs on):

- **key segments** (:func:`segment_keys`): on contexts longer than SEGMENT_KEYS every kernel runs
  the online softmax separately on each block of SEGMENT_KEYS keys and merges them per row, so no
  MMA accumulator lives for more than SEGMENT_KEYS / 16 slices; a variant whose CTA packs the
  query heads of one KV group (``fill_rows``, v3) takes the rows and segments of its fastest
  launch by :mod:`pa_bench.launch.fill`'s schedule estimate;
- **split keys** (:func:`split_keys`): v2 and v2t split a warp task's keys between a CTA's two
  warps on chunks of few rows after a long context (SPLIT_MAX_ROWS, SPLIT_MIN_CONTEXT), never with
  segments;
- **tiles per warp** (:func:`choose_tiles`): 2 unless that leaves fewer than two warps an SM;
- **shared tiles and 128-key steps** (v3): where fill.shares_tiles and fill.pair_steps say.
"""

from __future__ import annotations

from dataclasses import dataclass

from pa_bench import variants as registry
from pa_bench.launch import fill

TILE_ROWS = 16          # query rows of one m16 MMA tile
DEFAULT_TILES = 2       # warp_tiles variants: m16 tiles per warp where nothing says otherwise
STEP_KEYS = (64, 128)   # v3's consumer steps: one 64-key tile, or two (kernels/v3_pairs.cuh)
SEGMENT_ALIGN = 64      # segment boundaries align with 64-key tiles

# Variants with splits_keys (v2, v2t) split a warp task's keys between the two warps of a CTA
# when the chunk has few query rows (over all heads) and a long context: few warp tasks with
# many keys each, so both halves then run at once. Measured on the H200 (docs/PERF_NOTES.md):
# 64Kx512 and 2.1Kx256 with 32 heads (16,384 and 8,192 rows) gain 30-40 %, 32Kx1024 and 64Kx2048
# (32,768 and 65,536 rows) lose about 1 %.
SPLIT_MAX_ROWS = 16384         # query rows x query heads
SPLIT_MIN_CONTEXT = 1024       # keys before the chunk


@dataclass(frozen=True)
class Device:
    """What the policy reads of the GPU a launch runs on: its name (a Triton kernel's tuned
    configurations are kept per GPU) and its SM count (tiles per warp)."""

    gpu: str | None
    sm_count: int

    def __post_init__(self):
        if not isinstance(self.sm_count, int) or isinstance(self.sm_count, bool) or self.sm_count < 1:
            raise ValueError(f"Device.sm_count: a positive int, not {self.sm_count!r}")


@dataclass(frozen=True)
class Pins:
    """What a caller fixes of a launch; None leaves it to the policy, which derives the rest from
    it as it would from its own choice (segments pinned on turn the split off; a shared-tile launch
    pinned off takes 64-key steps ...).

    ``tiles``: m16 tiles per warp of v2/v2t (1 or 2). ``pair_heads``: whether a warp's two tiles
    may be two query heads of one KV group (v2/v2t; else 32 rows of one head). ``split``: v2/v2t's
    split keys on (at half the context) or off. ``segments``: key segments off (False), on at
    SEGMENT_KEYS (True), or on at this many keys (an int, a multiple of 64; 0: off). ``rows``: a
    ``fill_rows`` variant's CTA rows (v3: 128 or 192). ``share``: v3's shared tiles on or off.
    ``step``: v3's consumer step, 64 or 128 keys (128 takes effect at 128 rows on shared tiles)."""

    tiles: int | None = None
    pair_heads: bool = True
    split: bool | None = None
    segments: bool | int | None = None
    rows: int | None = None
    share: bool | None = None
    step: int | None = None

    def __post_init__(self):
        def bad(key: str, want: str) -> ValueError:
            return ValueError(f"Pins.{key}: {want}, not {self.__dict__[key]!r}")

        for key, value in (("split", self.split), ("share", self.share)):
            if value is not None and not isinstance(value, bool):
                raise bad(key, "None, True or False")
        if not isinstance(self.pair_heads, bool):
            raise bad("pair_heads", "True or False")
        if self.tiles is not None and (isinstance(self.tiles, bool) or self.tiles not in (1, 2)):
            raise bad("tiles", "None, 1 or 2")
        seg = self.segments
        if seg is not None and not isinstance(seg, bool) and (not isinstance(seg, int) or seg < 0
                                                              or seg % SEGMENT_ALIGN):
            raise bad("segments", f"None, True, False or a non-negative multiple of {SEGMENT_ALIGN}")
        if self.rows is not None and (isinstance(self.rows, bool) or not isinstance(self.rows, int)
                                      or self.rows <= 0 or self.rows % 64):
            raise bad("rows", "None or a positive multiple of 64 (v3: 128 or 192)")
        if self.step is not None and (isinstance(self.step, bool) or self.step not in STEP_KEYS):
            raise bad("step", "None, 64 or 128")


#: Nothing pinned: the policy's own launch.
NO_PINS = Pins()


@dataclass(frozen=True)
class Launch:
    """One variant's launch on one chunk: what the kernel is built and launched with, and what the
    numerics model emulates (``tile_keys``, ``split_keys``, ``segment_keys``).

    ``tile_keys``: keys per online-softmax tile (the registry's; v3: its consumer step; a Triton
    kernel: its configuration's block_n; 0: not a kernel). ``step_keys``: v3's consumer step (64,
    or 128: two tiles, K and V staged apart); 64 for the others. ``rows``: the CTA rows of a
    ``fill_rows`` variant (-DPA_CTA_ROWS), 0: the kernel's own. ``tiles``: m16 tiles per warp (v2,
    v2t: 1 or 2; 1 for the others). ``pair_heads``: whether a warp's two tiles may be two query
    heads of one KV group (the geometry pairs them where the group is even). ``split_keys``: the
    key where the second warp's half starts (0: no split). ``segment_keys``: keys per key segment
    (0: one segment). ``shares_tiles``: v3 converts each K/V tile once for all the row blocks of a
    KV head and segment (-DPA_V3_SHARE)."""

    variant: str
    tile_keys: int = 0
    step_keys: int = 64
    rows: int = 0
    tiles: int = 1
    pair_heads: bool = True
    split_keys: int = 0
    segment_keys: int = 0
    shares_tiles: bool = False

    def __post_init__(self):
        if self.tile_keys < 0 or self.tile_keys % TILE_ROWS:
            raise ValueError(f"Launch.tile_keys: a non-negative multiple of {TILE_ROWS}, not {self.tile_keys}")
        if self.step_keys not in STEP_KEYS:
            raise ValueError(f"Launch.step_keys: 64 or 128, not {self.step_keys}")
        if self.rows < 0:
            raise ValueError(f"Launch.rows: 0 or a row count, not {self.rows}")
        if self.tiles not in (1, 2):
            raise ValueError(f"Launch.tiles: 1 or 2, not {self.tiles}")
        if self.split_keys < 0 or self.split_keys % TILE_ROWS:
            raise ValueError(f"Launch.split_keys: a non-negative multiple of {TILE_ROWS}, not {self.split_keys}")
        if self.segment_keys < 0 or self.segment_keys % SEGMENT_ALIGN:
            raise ValueError(f"Launch.segment_keys: a non-negative multiple of {SEGMENT_ALIGN}, "
                             f"not {self.segment_keys}")
        if self.segment_keys and self.split_keys:
            raise ValueError("Launch: split_keys and segment_keys exclude each other")

    def segments(self, problem) -> int:
        """Key segments of this launch on ``problem`` (1 without segments)."""
        return -(-(problem.context + problem.queries) // self.segment_keys) if self.segment_keys else 1


# --------------------------------------------------------------------------- the rules


def _fill_options(variant: str | None) -> tuple[int, ...]:
    entry = registry.find(variant) if variant else None
    rows = entry.fill_rows if entry is not None else None
    if not rows:
        return ()
    return tuple(sorted(rows)) if isinstance(rows, tuple) else (int(rows),)


def _fill(variant: str | None, context: int, queries: int, heads_q: int, heads_kv: int) -> tuple[int, int]:
    """(rows, keys per segment) of ``variant``'s fastest launch on a chunk ((0, 0): no fill rows)."""
    options = _fill_options(variant)
    if not options or queries <= 0:
        return (options[-1] if options else 0), 0
    ctx = int(context)
    longest = registry.SEGMENT_KEYS if ctx > registry.SEGMENT_KEYS else 0
    return fill.fill_launch(options, ctx, int(queries), max(1, int(heads_q)), max(1, int(heads_kv)), longest)


def cta_rows(variant: str | None, context: int, queries: int, heads_q: int = 1, heads_kv: int = 1) -> int:
    """Rows of one CTA of ``variant`` on a chunk (0: the variant packs no rows, ``fill_rows``
    None): where it offers several (v3: 128 or 192, two or three consumer warpgroups), the one of
    the fastest launch by pa_bench.launch.fill's estimate. More rows share each converted K/V tile
    among more queries and hide one warpgroup's softmax under the others' wgmma, but a CTA takes
    longer, so fewer CTAs fill the SMs less well. Every row's bits are the same at either
    (segments aside)."""
    return _fill(variant, context, queries, heads_q, heads_kv)[0]


def shares_tiles(variant: str | None, context: int, queries: int, heads_q: int = 1, heads_kv: int = 1) -> bool:
    """Whether ``variant``'s launch on a chunk converts each K/V tile once for all the row blocks
    of a KV head and key segment (a Variant with ``tile_sharing``, v3; fill.shares_tiles). The bits
    are the same either way."""
    entry = registry.find(variant) if variant else None
    if entry is None or not entry.tile_sharing or queries <= 0:
        return False
    rows, seg = _fill(variant, context, queries, heads_q, heads_kv)
    return fill.shares_tiles(rows, seg, int(context), int(queries), max(1, int(heads_q)), max(1, int(heads_kv)))


def step_keys(variant: str | None, context: int, queries: int, heads_q: int = 1, heads_kv: int = 1) -> int:
    """Keys of one consumer step of ``variant``'s launch on a chunk, which its online softmax tiles
    follow: 128 where a v3 launch (a Variant with ``tile_sharing``) shares its tiles at 128 rows
    over long CTAs (fill.pair_steps), else the registry's tile_keys (0: not a kernel)."""
    entry = registry.find(variant) if variant else None
    if entry is None or not entry.tile_sharing or queries <= 0:
        return registry.get(variant).tile_keys if entry is not None and entry.is_kernel else 0
    rows, seg = _fill(variant, context, queries, heads_q, heads_kv)
    return 128 if fill.pair_steps(rows, seg, int(context), int(queries), max(1, int(heads_q)), max(1, int(heads_kv))) \
        else registry.get(variant).tile_keys


def segment_keys(context: int, variant: str | None = None, queries: int = 0, heads_q: int = 1,
                 heads_kv: int = 1) -> int:
    """The keys per segment for a chunk of ``queries`` rows after ``context`` keys (0: one
    segment, the whole key range). For a ``variant`` with ``fill_rows`` (v3), those of its fastest
    launch by pa_bench.launch.fill: whole 64-key tiles, and on contexts longer than SEGMENT_KEYS
    segments of at most SEGMENT_KEYS keys (fill.segment_candidates). For the other variants: the
    kernels' long-context rule (pa_bench.variants.context_segment_keys)."""
    if _fill_options(variant) and queries > 0:
        return _fill(variant, int(context), queries, heads_q, heads_kv)[1]
    return registry.context_segment_keys(context)


def split_point(context: int) -> int:
    """The key at which split keys start the second half: half the context, in whole 16-key
    slices (so the first half never reaches the causal diagonal); 0 if that is no key at all."""
    return TILE_ROWS * (int(context) // (2 * TILE_ROWS))


def split_keys(variant: str, queries: int, context: int, heads_q: int) -> int:
    """Where ``variant``'s kernel splits the keys of a chunk of ``queries`` rows of ``heads_q``
    query heads after ``context`` keys (0: it does not). See SPLIT_MAX_ROWS, SPLIT_MIN_CONTEXT."""
    entry = registry.find(variant)
    if entry is None or not entry.splits_keys or segment_keys(context):
        return 0
    if context < SPLIT_MIN_CONTEXT or queries * heads_q > SPLIT_MAX_ROWS:
        return 0
    return split_point(context)


def warp_tile_warps(queries: int, heads_q: int, heads_kv: int, split_keys: int = 0, segments: int = 1) -> int:
    """Warps of a warp_tiles launch (v2, v2t: CTAs of two warps) at two tiles per warp: row blocks
    of 16 rows holding two query heads of a KV group where the group is even, else 32 rows of one
    head; a CTA holds two warp tasks, or one whose keys its warps split."""
    pair = (heads_q // heads_kv) % 2 == 0
    rows = TILE_ROWS * (1 if pair else 2)
    tasks = heads_q // 2 if pair else heads_q
    per_cta = 1 if split_keys else 2
    return -(-queries // rows) * -(-tasks // per_cta) * 2 * segments


def choose_tiles(queries: int, heads_q: int, heads_kv: int, sm_count: int, split_keys: int = 0,
                 segments: int = 1) -> int:
    """m16 tiles per warp of a warp_tiles variant (v2, v2t) for a chunk: 2 unless that leaves fewer
    than two warps per SM (``segments``: key segments, each a CTA of its own).

    Two tiles halve the int8 conversion work per MMA, but also halve the number of warps; on a
    small chunk (2.1Kx256 with 32 heads: 256 warps on the H200's 132 SMs) one tile per warp is
    faster. Either way every row gets the same bits (a GPU test checks it).
    """
    warps = warp_tile_warps(queries, heads_q, heads_kv, split_keys, segments)
    return 2 if warps >= 2 * sm_count else 1


# --------------------------------------------------------------------------- the one policy


def choose(variant: str, problem, device: Device | None = None, pins: Pins = NO_PINS) -> Launch:
    """The launch of ``variant`` on ``problem`` (a Problem: context, queries, heads_q, heads_kv):
    the rules above, on ``device`` (None: no GPU, the numpy backend's arithmetic: a Triton
    kernel's tile is the registry's), with what ``pins`` fixes taken as given. A peer gets a
    Launch with nothing in it (tile_keys 0): it runs its own."""
    entry = registry.get(variant)
    if not entry.is_kernel:
        return Launch(variant)
    pb = problem
    ctx, nq, hq, hkv = pb.context, pb.queries, pb.heads_q, pb.heads_kv

    def segments_of(name: str) -> int:
        if pins.segments is None:
            return segment_keys(ctx, name, nq, hq, hkv)
        if pins.segments is False:
            return 0
        if pins.segments is True:
            return registry.SEGMENT_KEYS
        return int(pins.segments)

    def split_of(name: str) -> int:
        if segments_of(name):
            return 0                    # split keys are off with segments
        if pins.split is None or not registry.get(name).splits_keys:
            return split_keys(name, nq, ctx, hq)
        return split_point(ctx) if pins.split else 0

    seg = segments_of(variant)
    rows = cta_rows(variant, ctx, nq, hq, hkv) if isinstance(entry.fill_rows, tuple) else 0
    if rows and pins.rows is not None:
        rows = pins.rows
    shared = False
    if entry.tile_sharing:
        shared = pins.share if pins.share is not None else fill.shares_tiles(rows, seg, ctx, nq, hq, hkv)
    step = 64
    if entry.tile_sharing and rows == 128 and shared and pins.step != 64:
        step = 128 if pins.step == 128 or fill.pair_steps(rows, seg, ctx, nq, hq, hkv) else 64
    tiles = 1
    if entry.warp_tiles:
        if pins.tiles is not None:
            tiles = pins.tiles
        elif device is None:
            tiles = DEFAULT_TILES
        else:   # the v2 launch's warps (v2 and v2t launch alike)
            seg_v2 = segments_of("v2")
            tiles = choose_tiles(nq, hq, hkv, device.sm_count, split_keys=split_of("v2"),
                                 segments=-(-(ctx + nq) // seg_v2) if seg_v2 else 1)
    return Launch(variant, tile_keys=_tile_keys(entry, pb, device, step), step_keys=step, rows=rows,
                  tiles=tiles, pair_heads=pins.pair_heads, split_keys=split_of(variant), segment_keys=seg,
                  shares_tiles=bool(shared))


def _tile_keys(entry: registry.Variant, problem, device: Device | None, step: int) -> int:
    """Keys per online-softmax tile: v3's 128-key consumer step where it takes one; a Triton kernel's configuration's block_n
    on ``device`` as its runner plans it without tuning (its runner module's optional
    ``planned_tile_keys``); else the registry's."""
    if entry.tile_sharing and step == 128:
        return step
    if entry.kind == registry.TRITON_KERNEL and device is not None:
        planned = getattr(entry.resolve_runner(), "planned_tile_keys", None)
        if planned is not None:
            return int(planned(problem, device.gpu, device.sm_count))
    return entry.tile_keys


__all__ = ["Launch", "Pins", "NO_PINS", "Device", "choose", "cta_rows", "shares_tiles", "step_keys", "segment_keys",
           "split_keys", "split_point", "choose_tiles", "warp_tile_warps", "SPLIT_MAX_ROWS", "SPLIT_MIN_CONTEXT",
           "TILE_ROWS", "DEFAULT_TILES", "SEGMENT_ALIGN"]
