"""Timing on several placements of the inputs: the merge of their samples and the interval."""

from __future__ import annotations

import re

import pytest

from pa_bench.errors import ConfigError
from pa_bench.measure import stats
from pa_bench.measure.timing import TimingResult, merge_placements, placed_name, unplaced_name


def _result(samples, reason="noise", host_bound=False):
    n = len(samples)
    return TimingResult(samples_ms=list(samples), clocks_mhz=[1980.0] * n, nominal_mhz=1980.0,
                        throttled=[False] * n, stop_reason=reason, hot=False, clock_source="nvml",
                        host_bound=host_bound, late_samples=int(host_bound))


def test_names_carry_the_placement_and_give_it_back():
    assert placed_name("torch-sdpa+dequant", 2) == "torch-sdpa+dequant@2"
    assert unplaced_name("torch-sdpa+dequant@2") == "torch-sdpa+dequant"
    assert unplaced_name("v1") == "v1" and unplaced_name("my@kernel") == "my@kernel"


def test_samples_merge_round_by_round_so_that_pairs_stay_paired():
    res = {"v1@0": _result([1.0, 1.1, 1.2]), "v1@1": _result([2.0, 2.1, 2.2, 2.3]),
           "v3@0": _result([0.5, 0.6, 0.7]), "v3@1": _result([0.8, 0.9, 1.0], reason="timeout", host_bound=True)}
    out = merge_placements(res, ["v1", "v3"], 2)
    assert out["v1"].samples_ms == [1.0, 2.0, 1.1, 2.1, 1.2, 2.2]      # rounds both placements have
    assert out["v1"].placements == [0, 1, 0, 1, 0, 1]
    assert out["v3"].samples_ms == [0.5, 0.8, 0.6, 0.9, 0.7, 1.0]
    assert out["v1"].stop_reason == "noise" and out["v3"].stop_reason == "timeout"
    assert out["v3"].host_bound is True and out["v3"].late_samples == 1
    ratio = stats.paired_speedup(out["v1"].samples_ms, out["v3"].samples_ms)
    assert ratio[0] == pytest.approx(2.0 / 0.85, rel=0.15)


def test_the_interval_spans_every_placements_interval():
    a = [1.000 + 0.0001 * (k % 7) for k in range(200)]      # one placement near 1.000
    b = [1.005 + 0.0001 * (k % 7) for k in range(200)]      # another half a per cent slower
    pooled = [x for pair in zip(a, b) for x in pair]
    where = [0, 1] * 200
    lo, hi = stats.placed_interval(pooled, where)
    lo_a, _ = stats.median_interval(a)
    _, hi_b = stats.median_interval(b)
    assert (lo, hi) == (lo_a, hi_b)
    plo, phi = stats.median_interval(pooled)                 # the pooled samples' own interval inside it
    assert lo <= plo <= phi <= hi
    # three placements, the pooled median in the middle one: its own interval misses the other two
    three = [1.000] * 100 + [1.003] * 300 + [1.006] * 100
    plo, phi = stats.median_interval(three)
    assert (plo, phi) == (1.003, 1.003)
    assert stats.placed_interval(three, [0] * 100 + [1] * 300 + [2] * 100) == (1.000, 1.006)
    assert stats.placed_interval(a, None) == stats.median_interval(a)
    assert stats.placed_interval(a, [0] * 200) == stats.median_interval(a)
    with pytest.raises(ValueError):
        stats.placed_interval(a, [0, 1])


def test_placements_are_a_timing_setting_checked_at_load(tmp_path, smoke_yaml):
    from pa_bench.problem.config import load_config

    assert load_config(smoke_yaml).timing.placements == 1
    text = open(smoke_yaml).read()
    for bad, says in (("0", "must be at least 1"), ("9", "(9) must be at most 8"), ("two", "expected an integer")):
        p = tmp_path / "c.yaml"
        p.write_text(text.replace("timing:", f"timing:\n  placements: {bad}", 1))
        with pytest.raises(ConfigError, match=re.escape(f"timing.placements: {says}")):
            load_config(p)
