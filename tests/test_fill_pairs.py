"""scripts/fill_pairs.py's launch syntax without a GPU: rows/segments, the rule, and :own / :share."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from pa_bench.numerics import fill
from pa_bench.problem.plan import Problem
from pa_bench.problem.shapes import parse_shape

_spec = importlib.util.spec_from_file_location("fill_pairs", Path(__file__).parents[1] / "scripts" / "fill_pairs.py")
fill_pairs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fill_pairs)


def test_launches_read_rows_segments_and_the_share_suffix():
    pb = Problem(parse_shape("32Kx1024"))
    got = fill_pairs.launches("128/1,192/3:share,rule:own,rule", pb)
    size = fill.segment_size(pb.context + pb.queries, 3)
    assert got[0] == ("128/1", 128, 0, None)
    assert got[1] == ("192/3:share", 192, size, True)
    assert got[2][0].startswith("rule:192/3") and got[2][1:] == (192, size, False)
    assert got[3][3] is None and got[3][1:3] == got[2][1:3]


def test_a_bad_suffix_is_refused_by_name():
    with pytest.raises(SystemExit, match="'128/1:both': the suffix is :own or :share"):
        fill_pairs.launches("128/1:both", Problem(parse_shape("2.1Kx256")))
