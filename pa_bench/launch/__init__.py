"""The launch: what a kernel runs a chunk with (:class:`Launch`) and the one policy that picks it
(:func:`choose`, pa_bench.launch.policy), with the SM schedule behind v3's choice
(pa_bench.launch.fill). Backends launch what a Launch says; the numerics model emulates it."""

from pa_bench.launch.policy import (DEFAULT_TILES, NO_PINS, SEGMENT_ALIGN, SPLIT_MAX_ROWS, SPLIT_MIN_CONTEXT, TILE_ROWS,
                                    Device, Launch, Pins, choose, choose_tiles, cta_rows, segment_keys, shares_tiles,
                                    split_keys, split_point, step_keys, warp_tile_warps)

__all__ = ["Launch", "Pins", "NO_PINS", "Device", "choose", "cta_rows", "shares_tiles", "step_keys", "segment_keys",
           "split_keys", "split_point", "choose_tiles", "warp_tile_warps", "SPLIT_MAX_ROWS", "SPLIT_MIN_CONTEXT",
           "TILE_ROWS", "DEFAULT_TILES", "SEGMENT_ALIGN"]
