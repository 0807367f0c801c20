"""experiments/fill_pairs.py's launch syntax without a GPU: rows/segments, the rule, and :own / :share."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from pa_bench.launch import fill
from pa_bench.problem.plan import Problem
from pa_bench.problem.shapes import parse_shape

_spec = importlib.util.spec_from_file_location("fill_pairs", Path(__file__).parents[1] / "experiments" / "fill_pairs.py")
fill_pairs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fill_pairs)


def test_launches_read_rows_segments_and_the_suffixes():
    pb = Problem(parse_shape("32Kx1024"))
    got = fill_pairs.launches("128/1,192/3:share,rule:own,rule,128/2:share:s128", pb)
    size = fill.segment_size(pb.context + pb.queries, 3)
    assert got[0] == ("128/1", 128, 0, None, 64)
    assert got[1] == ("192/3:share", 192, size, True, 64)
    assert got[2].label == "rule:128/1:own" and got[2][1:] == (128, 0, False, 64)   # 128-key steps need shared tiles
    assert got[3].share is None and got[3][1:3] == got[2][1:3]
    assert got[3].label == "rule:128/1:s128" and got[3].step == 128   # the rule's launch, its step too
    assert fill_pairs.launches("rule", Problem(parse_shape("2.1Kx256")))[0].step == 64
    assert got[4] == ("128/2:share:s128", 128, fill.segment_size(pb.context + pb.queries, 2), True, 128)


def test_a_bad_suffix_is_refused_by_name():
    for bad in ("128/1:both", "128/1:own:share"):
        with pytest.raises(SystemExit, match=f"'{bad}': the suffixes are :own or :share, and :s128"):
            fill_pairs.launches(bad, Problem(parse_shape("2.1Kx256")))
