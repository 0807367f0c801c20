"""The launch policy (pa_bench.launch): the Launch and Pins types check what they hold, and
choose() gives the launch recorded in tests/data/launch_choices.json.gz for every row of it: v1,
v2, v2t and v3 on 22 shapes (first chunks, PR shapes, long and ragged contexts, past 64K keys)
with four head layouts, with no GPU (the numpy backend's arithmetic) and on 132, 114 and 78 SMs,
and on 8 of the shapes with 18 sets of pins (tiles, pair_heads, split, segments, rows, share,
step, and combinations). The grid and block are the geometry's of that launch
(pa_bench.backends.kernels.launch_geometry)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from pa_bench.backends import kernels as K
from pa_bench.launch import NO_PINS, Device, Launch, Pins, choose
from pa_bench.problem.plan import Problem
from pa_bench.problem.shapes import parse_shape

TABLE = Path(__file__).parent / "data" / "launch_choices.json.gz"


def _rows():
    with gzip.open(TABLE, "rt") as fh:
        return json.load(fh)


def _got(row) -> dict:
    pb = Problem(shape=parse_shape(row["shape"]), heads_q=row["heads_q"], heads_kv=row["heads_kv"], head_dim=128,
                 page=16)
    device = None if row["device"] is None else Device("NVIDIA H100 80GB HBM3", row["device"])
    launch = choose(row["variant"], pb, device, Pins(**row["pins"]))
    if device is None:
        return {"tile_keys": launch.tile_keys, "split_keys": launch.split_keys, "segment_keys": launch.segment_keys}
    geo = K.launch_geometry(row["variant"], pb.queries, pb.heads_q, pb.heads_kv, tiles=launch.tiles,
                            pair_heads=launch.pair_heads, split_keys=launch.split_keys, context=pb.context,
                            segment_keys=launch.segment_keys, cta_rows=launch.rows)
    return {"tile_keys": launch.tile_keys, "split_keys": geo.split_keys, "segment_keys": geo.segment_keys,
            "rows": launch.rows, "tiles": launch.tiles, "shares_tiles": launch.shares_tiles,
            "step_keys": launch.step_keys, "grid": list(geo.grid), "block": geo.block, "pair_heads": geo.pair_heads}


def test_every_recorded_launch_is_chosen_again():
    rows = _rows()
    assert len(rows) == 3584
    keys = ("shape", "heads_q", "heads_kv", "variant", "device", "pins")
    wrong = [(r, got) for r in rows
             if (got := _got(r)) != {k: v for k, v in r.items() if k not in keys}]
    assert not wrong, f"{len(wrong)} of {len(rows)} launches differ, e.g. {wrong[:3]}"


def test_the_table_covers_what_the_policy_decides():
    """The rows hold both CTA sizes, both tile counts, split keys, segments, shared tiles and
    128-key steps: a policy that lost any of them would differ somewhere."""
    rows = [r for r in _rows() if r["device"] is not None]
    assert {r["rows"] for r in rows if r["variant"] == "v3"} == {128, 192}
    assert {r["tiles"] for r in rows if r["variant"] == "v2"} == {1, 2}
    assert any(r["split_keys"] for r in rows) and any(r["segment_keys"] for r in rows)
    assert {(r["shares_tiles"], r["step_keys"]) for r in rows if r["variant"] == "v3"} >= {(True, 128), (True, 64),
                                                                                             (False, 64)}


def test_pins_are_checked_where_they_are_made():
    for bad, key in ((dict(tiles=3), "tiles"), (dict(segments=100), "segments"), (dict(segments=-64), "segments"),
                     (dict(rows=100), "rows"), (dict(step=96), "step"), (dict(split=1), "split"),
                     (dict(share="on"), "share"), (dict(pair_heads=None), "pair_heads")):
        with pytest.raises(ValueError, match=f"Pins.{key}"):
            Pins(**bad)
    assert Pins(segments=0).segments == 0 and Pins(segments=True).segments is True and NO_PINS == Pins()


def test_a_launch_is_frozen_and_checks_what_it_holds():
    launch = Launch("v2", tile_keys=16, tiles=2, split_keys=512)
    with pytest.raises(AttributeError):
        launch.tiles = 1
    for bad in (dict(tile_keys=24), dict(step_keys=96), dict(tiles=3), dict(split_keys=8), dict(segment_keys=100),
                dict(split_keys=512, segment_keys=1024), dict(rows=-1)):
        with pytest.raises(ValueError, match="Launch"):
            Launch("v2", **{"tile_keys": 16, **bad})


def test_pinned_segments_turn_the_split_off_and_a_peer_has_no_launch():
    pb = Problem(shape=parse_shape("2.1Kx256"), heads_q=32, heads_kv=8)
    assert choose("v2", pb).split_keys == 1072                       # the rule splits this chunk
    pinned = choose("v2", pb, pins=Pins(segments=1024))
    assert (pinned.segment_keys, pinned.split_keys) == (1024, 0)
    assert choose("v2", pb, pins=Pins(split=False)).split_keys == 0
    assert choose("torch-sdpa", pb) == Launch("torch-sdpa")


def test_the_cuda_backend_takes_pins_not_launch_attributes():
    """What a caller fixes goes in at construction (CudaBackend(config, pins=...)) or through
    with_pins; setting one of the old launch attributes is an error naming the key."""
    from pa_bench.backends.cuda import CudaBackend

    be = object.__new__(CudaBackend)           # no GPU here: the members, not the device
    be.pins = NO_PINS
    for key in ("tiles", "split", "segments", "rows", "share", "step", "pair_heads"):
        with pytest.raises(AttributeError, match=f"CudaBackend.{key}: pin it instead"):
            setattr(be, key, 1)
    pinned = be.with_pins(Pins(rows=128))
    assert pinned.pins == Pins(rows=128) and be.pins == NO_PINS and type(pinned) is CudaBackend
