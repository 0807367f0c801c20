"""Timing statistics: summaries, stopping rule, paired speed-ups, verdicts (no GPU)."""

import math
from types import SimpleNamespace

import numpy as np
import pytest

from pa_bench.measure import stats
from pa_bench.measure.settings import TimingSettings
from pa_bench.measure.stats import (
    TimingStats,
    flag_throttled,
    gbps,
    paired_speedup,
    MedianTracker,
    ceiling,
    median_interval,
    median_rank_interval,
    summarize,
    tflops,
    verdict,
)


# --- summarize -------------------------------------------------------------------------


def test_summarize_known_list():
    s = summarize([4.0, 1.0, 3.0, 2.0, 5.0])
    assert s.median == 3.0
    assert s.q1 == 2.0 and s.q3 == 4.0
    assert s.min == 1.0 and s.max == 5.0
    assert s.mean == 3.0
    assert s.stdev == pytest.approx(math.sqrt(2.5))  # sample stdev, ddof=1
    assert s.rel_stdev == pytest.approx(math.sqrt(2.5) / 3.0)
    assert s.count == 5 and s.total_ms == 15.0


def test_summarize_even_count_interpolates():
    s = summarize([1.0, 2.0, 3.0, 4.0])
    assert s.median == 2.5
    assert s.q1 == 1.75 and s.q3 == 3.25
    assert s.iqr == 1.5


def test_summarize_single_sample():
    s = summarize([7.5])
    assert (s.median, s.min, s.max, s.q1, s.q3, s.mean) == (7.5,) * 6
    assert s.stdev == 0.0 and s.rel_stdev == 0.0 and s.count == 1


def test_summarize_drops_nonfinite_and_rejects_empty():
    assert summarize([1.0, float("nan"), 3.0]).count == 2
    with pytest.raises(ValueError):
        summarize([])


# --- the stop rule: the interval of the median -------------------------------------------


def test_median_rank_interval_is_exact_for_small_n_and_symmetric():
    assert median_rank_interval(1) == (0, 0)
    assert median_rank_interval(5) == (0, 4)          # 2 * 0.5**5 = 0.0625 > 0.05: the whole range
    assert median_rank_interval(6) == (0, 5)          # P(X=0) = 1/64 <= 0.025, P(X<=1) = 7/64 > it
    assert median_rank_interval(12) == (2, 9)         # P(X<=2) = 79/4096 <= 0.025 < P(X<=3)
    for n in (7, 50, 999, 1000, 1001, 5000):
        lo, hi = median_rank_interval(n)
        assert lo + hi == n - 1 and 0 <= lo <= (n - 1) // 2
    lo, hi = median_rank_interval(10000)               # normal approximation: about n/2 -+ 0.98 sqrt(n)
    assert abs((hi - lo + 1) - 1.96 * 100) < 4


def test_median_interval_covers_the_true_median_95_percent_of_the_time():
    rng = np.random.default_rng(11)
    for n in (30, 400, 1500):                          # exact tails and the normal approximation
        trials, hits = 600, 0
        true = 1.0 + np.log(2.0)                       # median of 1 + Exp(1): skewed, like GPU times
        for _ in range(trials):
            lo, hi = median_interval(1.0 + rng.exponential(1.0, n))
            hits += lo <= true <= hi
        assert 0.925 <= hits / trials <= 0.985, (n, hits / trials)


def test_median_interval_drops_nonfinite_and_rejects_empty():
    assert median_interval([3.0, float("nan"), 3.0, 3.0]) == (3.0, 3.0)
    with pytest.raises(ValueError):
        median_interval([float("inf")])


def _tracker(values):
    t = MedianTracker()
    for v in values:
        t.add(v)
    return t


def test_tracker_median_and_interval_match_the_sorted_sample():
    rng = np.random.default_rng(5)
    values = list(rng.normal(10.0, 0.3, 257)) + [float("nan")]
    t = _tracker(values)
    assert t.count == 257 and t.median == pytest.approx(float(np.nanmedian(values)))
    assert t.interval() == median_interval(values)
    assert t.total_ms == pytest.approx(float(np.nansum(values)))
    assert _tracker([4.0, 1.0, 3.0, 2.0]).median == 2.5


def test_converged_needs_min_samples_and_a_narrow_interval():
    rule = TimingSettings(max_noise=0.005, min_samples=10)
    assert not _tracker([10.0] * 9).converged(rule)
    assert _tracker([10.0] * 10).converged(rule)
    rng = np.random.default_rng(0)
    spread = list(10.0 * (1 + 0.03 * rng.standard_normal(40)))    # 3 % spread, 40 samples: +-1.2 %
    assert not _tracker(spread).converged(rule)
    more = spread + list(10.0 * (1 + 0.03 * rng.standard_normal(760)))   # 800: about +-0.26 %
    assert _tracker(more).converged(rule)


def test_ceilings_and_the_rule_from_settings():
    rule = TimingSettings(max_noise=0.01, min_samples=3, min_seconds=0.2, max_seconds=2.0, max_samples=50)
    assert ceiling(rule, 49, 1.99) == ""
    assert ceiling(rule, 50, 0.1) == "max_samples"
    assert ceiling(rule, 3, 2.0) == "timeout"


# --- paired_speedup ---------------------------------------------------------------------


def test_paired_speedup_exact_two_x():
    base = [2.0, 4.0, 6.0, 8.0]  # drift hits both alike
    other = [1.0, 2.0, 3.0, 4.0]
    assert paired_speedup(base, other) == (2.0, 2.0, 2.0)


def test_paired_speedup_noisy_spread_contains_true_ratio():
    rng = np.random.default_rng(3)
    drift = np.linspace(1.0, 1.3, 400)  # the GPU slows down over the run
    base = 13.0 * drift * (1 + 0.02 * rng.standard_normal(400))
    other = 7.6 * drift * (1 + 0.02 * rng.standard_normal(400))
    med, lo, hi = paired_speedup(list(base), list(other))
    true = 13.0 / 7.6
    assert lo < true < hi
    assert lo < med < hi
    assert med == pytest.approx(true, rel=0.01)


def test_paired_speedup_uses_common_prefix_and_handles_empty():
    assert paired_speedup([2.0, 2.0, 100.0], [1.0, 1.0]) == (2.0, 2.0, 2.0)
    assert paired_speedup([], [1.0]) == (None, None, None)


def test_tflops_and_gbps():
    assert tflops(2e12, 1000.0) == pytest.approx(2.0)
    assert tflops(1e9, 1.0) == pytest.approx(1.0)
    assert gbps(1e9, 1.0) == pytest.approx(1000.0)
    assert tflops(1e9, None) is None and gbps(1e9, 0.0) is None


def test_flag_throttled():
    flags = flag_throttled([1650.0, 1200.0, None, 1240.0, float("nan")], 1650.0)
    # 0.75 * 1650 = 1237.5
    assert flags == [False, True, False, False, False]
    assert flag_throttled([100.0, 200.0], None) == [False, False]
    assert flag_throttled([800.0], 1000.0, threshold=0.9) == [True]


# --- verdict ----------------------------------------------------------------------------


def _stats(median, rel):
    """A TimingStats with a normal-like spread of `rel` (relative stdev)."""
    half_iqr = 0.5 * stats.IQR_TO_SIGMA * rel * median
    return TimingStats(
        median=median, min=median * 0.9, max=median * 1.1, q1=median - half_iqr,
        q3=median + half_iqr, mean=median, stdev=rel * median, rel_stdev=rel, count=100,
        total_ms=100 * median,
    )


def test_verdict_identical_distributions_same():
    rng = np.random.default_rng(4)
    x = summarize(list(10.0 * (1 + 0.005 * rng.standard_normal(500))))
    kind, change, noise = verdict(x, x)
    assert kind == "same" and change == 0.0 and noise >= 0.01


def test_verdict_ten_percent_slower_with_half_percent_noise():
    kind, change, noise = verdict(_stats(10.0, 0.005), _stats(11.0, 0.005))
    assert kind == "slower"
    assert change == pytest.approx(0.10)
    assert noise == pytest.approx(2 * math.sqrt(2) * 0.005)


def test_verdict_within_noise_is_same():
    # 3 % apart, but each side has 5 % spread: noise bound ~14 %
    kind, change, noise = verdict(_stats(10.0, 0.05), _stats(10.3, 0.05))
    assert kind == "same" and change == pytest.approx(0.03) and noise > 0.1


def test_verdict_min_change_floor():
    # no spread at all: the 1 % floor still applies
    assert verdict(_stats(10.0, 0.0), _stats(10.05, 0.0))[0] == "same"
    assert verdict(_stats(10.0, 0.0), _stats(10.05, 0.0), min_change=0.001)[0] == "slower"


def test_verdict_faster():
    kind, change, _ = verdict(_stats(13.0, 0.004), _stats(7.6, 0.004))
    assert kind == "faster" and change == pytest.approx(7.6 / 13.0 - 1)


def test_verdict_falls_back_to_rel_stdev_and_reads_records():
    a = {"ms_median": 10.0, "ms_rel_spread": 0.05}
    b = {"ms_median": 11.0, "ms_rel_spread": 0.05}
    kind, _, noise = verdict(a, b)
    assert kind == "same" and noise == pytest.approx(2 * math.sqrt(2) * 0.05)
    a = SimpleNamespace(median=10.0, q1=None, q3=None, rel_stdev=0.001)
    b = SimpleNamespace(median=11.0, q1=None, q3=None, rel_stdev=0.001)
    assert verdict(a, b)[0] == "slower"


# --- ratio_interval / interval_verdict (from raw samples) --------------------------------


def test_ratio_interval_is_seeded_and_exactly_mirrored():
    rng = np.random.default_rng(11)
    a = list(2.0 * (1 + 0.01 * rng.standard_normal(300)))
    b = list(2.1 * (1 + 0.01 * rng.standard_normal(500)))
    ab, ba = stats.ratio_interval(a, b), stats.ratio_interval(b, a)
    assert ab == stats.ratio_interval(a, b)  # reproducible
    assert (ba.log_ratio, ba.log_lo, ba.log_hi) == (-ab.log_ratio, -ab.log_hi, -ab.log_lo)
    assert ab.lo < 1.05 < ab.hi and ab.ratio == pytest.approx(np.median(b) / np.median(a))
    assert stats.interval_verdict(ab) == "slower" and stats.interval_verdict(ba) == "faster"
    assert stats.ratio_interval(a, b, seed=1) != ab  # the seed matters


def test_interval_verdict_needs_the_whole_interval_beyond_min_change():
    iv = stats.RatioInterval(math.log(1.02), math.log(1.005), math.log(1.035))
    assert stats.interval_verdict(iv) == "same"  # 2 % point, but 0.5 % is inside the interval
    assert stats.interval_verdict(iv, min_change=0.001) == "slower"
    mirror = stats.RatioInterval(-iv.log_ratio, -iv.log_hi, -iv.log_lo)
    assert stats.interval_verdict(mirror, min_change=0.001) == "faster"


def test_drift_inside_a_run_widens_the_interval():
    """Block resampling: a slow drift makes the median less certain than i.i.d. noise does."""
    rng = np.random.default_rng(5)
    noise = 0.002 * rng.standard_normal(600)
    flat = 1.0 + noise
    drift = 1.0 + noise + np.linspace(-0.02, 0.02, 600)
    width = lambda x: (lambda iv: iv.log_hi - iv.log_lo)(stats.ratio_interval(flat, x))
    assert width(list(drift)) > 2 * width(list(flat[::-1]))


def test_ratio_interval_rejects_empty_sides():
    with pytest.raises(ValueError):
        stats.ratio_interval([], [1.0])
    with pytest.raises(ValueError):
        stats.ratio_interval([1.0, float("nan")], [0.0])


def test_quartile_verdict_is_symmetric_at_the_bound():
    a, b = _stats(10.0, 0.0), _stats(10.1, 0.0)  # +1.0 % against a 1 % floor
    assert verdict(a, b)[0] == "same" and verdict(b, a)[0] == "same"
    a, b = _stats(10.0, 0.0), _stats(10.102, 0.0)
    assert verdict(a, b)[0] == "slower" and verdict(b, a)[0] == "faster"
