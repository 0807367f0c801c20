"""The interval of a median across worker processes (pa_bench.measure.xproc), with known answers:
processes that agree, one shifted by 2 %, a single process, the seed; and the A/B rule on it."""

from __future__ import annotations

import numpy as np
import pytest

from pa_bench.measure import xproc
from pa_bench.measure.stats import median_interval


def _process(median: float, n: int = 300, spread: float = 0.002, seed: int = 0) -> list[float]:
    """n samples around ``median`` (relative normal spread), their median exactly ``median``."""
    x = median * (1.0 + spread * np.random.default_rng(seed).standard_normal(n))
    return list(x - np.median(x) + median)


def test_processes_that_agree_give_a_narrow_interval_that_contains_every_median():
    procs = [_process(1.0, seed=s) for s in range(3)]
    iv = xproc.process_interval(procs)
    assert iv.kind == "processes" and iv.processes == 3
    assert iv.medians == pytest.approx((1.0, 1.0, 1.0))
    assert iv.lo <= 1.0 <= iv.hi
    # no spread between the processes: only the within-process precision, a few 0.01 %
    assert iv.hi / iv.lo - 1 < 0.001
    assert iv.median == pytest.approx(float(np.median(np.concatenate(procs))))


def test_one_process_two_percent_slower_widens_the_interval_to_cover_it():
    agree = xproc.process_interval([_process(1.0, seed=s) for s in range(3)])
    procs = [_process(1.0, seed=0), _process(1.0, seed=1), _process(1.02, seed=2)]
    iv = xproc.process_interval(procs)
    assert iv.kind == "processes"
    assert iv.medians == pytest.approx((1.0, 1.0, 1.02))
    # the interval reaches from about the agreeing processes to about the shifted one:
    # the draws of the shifted process alone (1 in 27) hold its upper end
    assert iv.lo <= 1.0005 and iv.hi >= 1.02 * 0.999
    assert iv.hi - iv.lo > 10 * (agree.hi - agree.lo)
    # one process's order-statistic interval of the pooled samples would not cover the shift
    assert median_interval([x for p in procs for x in p])[1] < 1.01


def test_one_process_falls_back_to_its_own_interval_and_says_so():
    one = _process(1.0, n=101, seed=4)
    iv = xproc.process_interval([one])
    assert iv.kind == "samples" and iv.processes == 1
    assert (iv.lo, iv.hi) == median_interval(one)
    # a process with no finite sample is left out, not counted
    iv2 = xproc.process_interval([one, [float("nan")], []])
    assert iv2.kind == "samples" and (iv2.lo, iv2.hi) == (iv.lo, iv.hi)


def test_the_interval_is_deterministic_under_its_seed():
    procs = [_process(1.0, seed=0), _process(1.01, seed=1), _process(0.995, seed=2)]
    a = xproc.process_interval(procs, seed=7)
    b = xproc.process_interval([list(p) for p in procs], seed=7)
    assert (a.lo, a.hi) == (b.lo, b.hi)
    c = xproc.process_interval(procs, seed=8)
    assert (c.lo, c.hi) != (a.lo, a.hi)        # another seed, another stream
    assert c.lo <= c.median <= c.hi


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="at least one finite sample"):
        xproc.process_interval([[], [float("inf")]])
    with pytest.raises(ValueError, match="confidence"):
        xproc.process_interval([[1.0], [1.0]], confidence=1.0)


def test_verdict_calls_a_change_only_where_the_intervals_do_not_overlap():
    same = xproc.xproc_verdict(1.0, 0.995, 1.005, 1.003, 0.998, 1.008)
    assert same.verdict == "same" and same.lo < 0 < same.hi
    slow = xproc.xproc_verdict(1.0, 0.995, 1.005, 1.02, 1.015, 1.025)
    assert slow.verdict == "slower" and slow.change == pytest.approx(0.02)
    assert slow.lo == pytest.approx(1.015 / 1.005 - 1) and slow.hi == pytest.approx(1.025 / 0.995 - 1)
    # swapped, the mirror image
    fast = xproc.xproc_verdict(1.02, 1.015, 1.025, 1.0, 0.995, 1.005)
    assert fast.verdict == "faster"
    assert np.log1p(fast.lo) == pytest.approx(-np.log1p(slow.hi))
    assert np.log1p(fast.hi) == pytest.approx(-np.log1p(slow.lo))
    # a change smaller than 1 % is called when the intervals are apart (no --min-change)
    assert xproc.xproc_verdict(1.0, 0.999, 1.001, 1.004, 1.003, 1.005).verdict == "slower"
    with pytest.raises(ValueError):
        xproc.xproc_verdict(1.0, 1.01, 1.0, 1.0, 1.0, 1.0)


def test_medians_cell_round_trips_and_the_label_names_the_kind():
    assert xproc.parse_medians(xproc.format_medians([0.07414, 0.07325, 0.07299])) == \
        [0.07414, 0.07325, 0.07299]
    assert xproc.parse_medians(None) == []

    class Row:
        def __init__(self, kind, n=None):
            self.ci_kind, self.processes, self.ms_ci_lo = kind, n, 1.0

    assert "across 3 worker processes" in xproc.interval_text([Row("processes", 3)])
    assert "one process's median" in xproc.interval_text([Row(None)])
    assert "placements" in xproc.interval_text([Row("placements")])
    assert xproc.interval_text([]) is None
