"""Timing statistics: summaries, nvbench's stopping rule, paired speed-ups and A/B verdicts.

Pure functions on lists of milliseconds; no GPU, no pandas.

- `summarize(samples_ms)` -> `TimingStats` (median, quartiles, mean, sample stdev ...).
- `median_interval(samples)`: a distribution-free 95 % interval of the median (order statistics).
- `MedianTracker.converged` and `ceiling`: the stopping rule of
  :class:`~pa_bench.measure.settings.TimingSettings`: sample until the median is known to
  `max_noise` (its interval within that of it), with `min_samples` and `min_seconds`; give up at
  `max_seconds` of wall time or `max_samples` rounds.
- `paired_speedup(base, other)` uses interleaved samples (round k of both was taken at the same
  time), so the per-round ratio cancels drift that hits both alike; it gives the median ratio and
  its interval.
- `ratio_interval(a_ms, b_ms)` is a seeded block-bootstrap interval on median(b) / median(a)
  from the raw samples; `interval_verdict` judges B against A with it. Each side's resamples
  are seeded by the seed and that side's samples, so swapping A and B mirrors the interval
  exactly (A-vs-B 'faster' is B-vs-A 'slower', at every bound).
- `verdict(a, b)` is the fallback where raw samples are not stored: a noise bound built from
  each side's robust relative spread (IQR / (1.349 * median), which is the relative standard
  deviation for normally distributed samples), judged in log space so that it is symmetric too.
"""

from __future__ import annotations

import bisect
import functools
import math
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pa_bench.measure.settings import TimingSettings

import numpy as np

#: IQR of a normal distribution in units of its standard deviation.
IQR_TO_SIGMA = 1.349

STOP_NOISE = "noise"
STOP_TIMEOUT = "timeout"
STOP_MAX_SAMPLES = "max_samples"


@dataclass(frozen=True)
class TimingStats:
    """Summary of one variant's timing samples (all in milliseconds)."""

    median: float
    min: float
    max: float
    q1: float
    q3: float
    mean: float
    stdev: float  # sample standard deviation (ddof=1); 0.0 for a single sample
    rel_stdev: float  # stdev / mean
    count: int
    total_ms: float

    @property
    def iqr(self) -> float:
        return self.q3 - self.q1

    @property
    def rel_iqr_spread(self) -> float:
        """Robust relative spread: IQR / (1.349 * median)."""
        return robust_rel_spread(self.median, self.q1, self.q3)


def _clean(samples_ms: Sequence[float]) -> np.ndarray:
    arr = np.asarray(list(samples_ms), dtype=np.float64)
    return arr[np.isfinite(arr)]


def _rel(num: float, den: float) -> float:
    if den == 0:
        return 0.0 if num == 0 else math.inf
    return float(num / den)


def summarize(samples_ms: Sequence[float]) -> TimingStats:
    """Summarise timing samples; non-finite samples are dropped. Raises ValueError if none remain."""
    arr = _clean(samples_ms)
    if arr.size == 0:
        raise ValueError("summarize() needs at least one finite timing sample")
    q1, med, q3 = (float(x) for x in np.percentile(arr, [25.0, 50.0, 75.0]))
    mean = float(arr.mean())
    stdev = float(arr.std(ddof=1)) if arr.size > 1 else 0.0
    return TimingStats(
        median=med,
        min=float(arr.min()),
        max=float(arr.max()),
        q1=q1,
        q3=q3,
        mean=mean,
        stdev=stdev,
        rel_stdev=_rel(stdev, mean),
        count=int(arr.size),
        total_ms=float(arr.sum()),
    )


#: Confidence of every interval pa-bench reports on a median (of times, of per-round ratios).
CONFIDENCE = 0.95
_Z = 1.959963984540054      # the standard normal's 97.5 % point (two-sided 95 %)


@functools.lru_cache(maxsize=4096)
def median_rank_interval(n: int, confidence: float = CONFIDENCE) -> tuple[int, int]:
    """0-based ranks (lo, hi) of the sorted sample whose values bound the median with at least
    ``confidence``, whatever the distribution: the count of samples below the true median is
    Binomial(n, 1/2), so [x_(lo), x_(hi)] covers it unless too many fall on one side. Exact
    binomial tails up to n = 1000, the normal approximation (with continuity) above; (0, n-1)
    where n is too small for the confidence."""
    if n <= 0:
        raise ValueError("median_rank_interval() needs at least one sample")
    alpha = (1.0 - confidence) / 2.0
    if n <= 1000:
        # the median lies below x_(j) when at most j samples fall below it: P(X <= j), X ~
        # Binomial(n, 1/2); take the largest j with that at most alpha (0 where none is)
        cdf, best, pmf = 0.0, 0, 0.5 ** n
        for j in range(n // 2):
            cdf += pmf
            if cdf > alpha:
                break
            best = j
            pmf *= (n - j) / (j + 1)          # P(X = j + 1) from P(X = j)
        return best, n - 1 - best
    half = _Z * math.sqrt(n) / 2.0
    j = max(0, int(math.floor(n / 2.0 - half - 0.5)))
    return j, n - 1 - j


def median_interval(samples_ms: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float]:
    """(lo, hi): a distribution-free ``confidence`` interval of the median of ``samples_ms``
    (order statistics, :func:`median_rank_interval`). Raises ValueError without a finite sample."""
    arr = np.sort(_clean(samples_ms))
    if arr.size == 0:
        raise ValueError("median_interval() needs at least one finite sample")
    lo, hi = median_rank_interval(int(arr.size), confidence)
    return float(arr[lo]), float(arr[hi])


def placed_interval(samples_ms: Sequence[float], placements: Sequence[int] | None = None,
                    confidence: float = CONFIDENCE) -> tuple[float, float]:
    """(lo, hi): the interval of a median over samples taken on several placements of the inputs
    in GPU memory (``placements[i]``: sample i's). Where the inputs sit moves a short kernel's
    median by up to about half a per cent (H200), more than the order-statistic interval of one
    placement's samples, so the interval spans every placement's: from the lowest of their lower
    bounds to the highest of their upper bounds (and the pooled samples' own interval). One
    placement (or None): :func:`median_interval`."""
    if placements is None or len(set(placements)) < 2:
        return median_interval(samples_ms, confidence)
    if len(placements) != len(samples_ms):
        raise ValueError(f"{len(samples_ms)} samples but {len(placements)} placements")
    x = np.asarray(samples_ms, dtype=np.float64)
    where = np.asarray(placements)
    bounds = [median_interval(x, confidence)]
    for p in sorted(set(placements)):
        part = x[where == p]
        if np.isfinite(part).any():
            bounds.append(median_interval(part, confidence))
    return min(b[0] for b in bounds), max(b[1] for b in bounds)


class MedianTracker:
    """One variant's samples kept sorted, so that the interval of the median costs O(1) a round
    (an insertion is O(n) but a memmove: negligible beside a GPU sample)."""

    __slots__ = ("_sorted", "total_ms")

    def __init__(self) -> None:
        self._sorted: list[float] = []
        self.total_ms = 0.0

    def add(self, ms: float) -> None:
        x = float(ms)
        if not math.isfinite(x):
            return
        bisect.insort(self._sorted, x)
        self.total_ms += x

    @property
    def count(self) -> int:
        return len(self._sorted)

    @property
    def median(self) -> float:
        n = len(self._sorted)
        mid = n // 2
        return self._sorted[mid] if n % 2 else (self._sorted[mid - 1] + self._sorted[mid]) / 2

    def interval(self) -> tuple[float, float]:
        lo, hi = median_rank_interval(len(self._sorted))
        return self._sorted[lo], self._sorted[hi]

    def converged(self, rule: TimingSettings) -> bool:
        """At least ``min_samples`` and the median's interval within ``max_noise`` of it."""
        if self.count < max(rule.min_samples, 1):
            return False
        med = self.median
        lo, hi = self.interval()
        return med > 0 and max(med - lo, hi - med) <= rule.max_noise * med


def ceiling(rule: TimingSettings, rounds: int, wall_s: float) -> str:
    """The ceiling a shape's sampling has hit ('max_samples', 'timeout'), or ''."""
    if rounds >= rule.max_samples:
        return STOP_MAX_SAMPLES
    if wall_s >= rule.max_seconds:
        return STOP_TIMEOUT
    return ""


def paired_speedup(
    base_ms: Sequence[float], other_ms: Sequence[float]
) -> tuple[float | None, float | None, float | None]:
    """Speed-up of `other` over `base` from interleaved samples.

    Round k of both lists was taken back to back, so the per-round ratio base_k / other_k is
    free of slow drift. Returns the median of those ratios over the common prefix of the two
    lists and its 95 % interval (:func:`median_interval`; rounds with a non-positive or
    non-finite time are left out); (None, None, None) if no round remains.
    """
    n = min(len(base_ms), len(other_ms))
    if n == 0:
        return None, None, None
    base = np.asarray(list(base_ms[:n]), dtype=np.float64)
    other = np.asarray(list(other_ms[:n]), dtype=np.float64)
    ok = np.isfinite(base) & np.isfinite(other) & (base > 0) & (other > 0)
    if not ok.any():
        return None, None, None
    ratios = base[ok] / other[ok]
    lo, hi = median_interval(ratios)
    return float(np.median(ratios)), lo, hi


def tflops(flops: float | None, ms: float | None) -> float | None:
    """TFLOP/s of `flops` floating-point operations done in `ms` milliseconds."""
    if flops is None or ms is None or not ms > 0:
        return None
    return float(flops) / (float(ms) * 1e-3) / 1e12


def gbps(nbytes: float | None, ms: float | None) -> float | None:
    """GB/s (1e9 bytes per second) of `nbytes` moved in `ms` milliseconds."""
    if nbytes is None or ms is None or not ms > 0:
        return None
    return float(nbytes) / (float(ms) * 1e-3) / 1e9


def flag_throttled(
    clocks_mhz: Sequence[float | None], nominal_mhz: float | None, threshold: float = 0.75
) -> list[bool]:
    """One flag per sample: True if its SM clock was below `threshold` x `nominal_mhz`.

    An unknown clock (None/NaN) or an unknown nominal clock is never flagged.
    """
    if nominal_mhz is None or not nominal_mhz > 0:
        return [False] * len(clocks_mhz)
    limit = threshold * float(nominal_mhz)
    flags = []
    for c in clocks_mhz:
        flags.append(c is not None and math.isfinite(float(c)) and float(c) < limit)
    return flags


def robust_rel_spread(median: float | None, q1: float | None, q3: float | None) -> float | None:
    """IQR / (1.349 * median): the relative stdev of a normal sample, robust to outliers."""
    if median is None or q1 is None or q3 is None:
        return None
    vals = (float(median), float(q1), float(q3))
    if not all(math.isfinite(v) for v in vals) or vals[0] <= 0:
        return None
    return max(vals[2] - vals[1], 0.0) / (IQR_TO_SIGMA * vals[0])


def _field(obj: Any, *names: str) -> Any:
    for name in names:
        if isinstance(obj, Mapping):
            value = obj.get(name)
        else:
            value = getattr(obj, name, None)
        if value is not None:
            try:
                if isinstance(value, float) and math.isnan(value):
                    continue
            except TypeError:
                pass
            return value
    return None


def _spread_of(obj: Any) -> float:
    """Robust relative spread of a TimingStats-like object (or Record, or mapping).

    Prefers IQR / (1.349 * median) from the quartiles; falls back to the relative stdev
    (`rel_stdev` or a record's `ms_rel_spread`); 0.0 if neither is known.
    """
    med = _field(obj, "median", "ms_median")
    q1 = _field(obj, "q1", "ms_q1")
    q3 = _field(obj, "q3", "ms_q3")
    rs = robust_rel_spread(med, q1, q3)
    if rs is not None:
        return rs
    rel = _field(obj, "rel_stdev", "ms_rel_spread")
    if rel is not None and math.isfinite(float(rel)):
        return abs(float(rel))
    return 0.0


def verdict(a: Any, b: Any, min_change: float = 0.01) -> tuple[str, float, float]:
    """Compare two timings: is `b` faster, slower or the same as `a`?

    `a` and `b` are TimingStats-like (attributes or keys `median`, `q1`, `q3`, `rel_stdev`;
    a Record's `ms_median`, `ms_q1`, `ms_q3`, `ms_rel_spread` work too).
    Returns (verdict, change, noise) with change = b.median / a.median - 1 and
    noise = max(min_change, 2 * sqrt(rs_a^2 + rs_b^2)); judged in log space, so that swapping
    a and b mirrors the verdict: 'slower' if log(b/a) > log(1 + noise), 'faster' if
    log(b/a) < -log(1 + noise), else 'same'.
    """
    med_a = _field(a, "median", "ms_median")
    med_b = _field(b, "median", "ms_median")
    if med_a is None or med_b is None or not float(med_a) > 0 or not float(med_b) > 0:
        raise ValueError("verdict() needs a positive median time on both sides")
    change = float(med_b) / float(med_a) - 1.0
    noise = max(float(min_change), 2.0 * math.hypot(_spread_of(a), _spread_of(b)))
    log_change = math.log(float(med_b)) - math.log(float(med_a))
    if log_change > math.log1p(noise):
        return "slower", change, noise
    if log_change < -math.log1p(noise):
        return "faster", change, noise
    return "same", change, noise


#: Bootstrap resamples behind an A/B interval, and its confidence.
BOOTSTRAP_RESAMPLES = 1000
BOOTSTRAP_CONFIDENCE = 0.95


@dataclass(frozen=True)
class RatioInterval:
    """median(b) / median(a) and a bootstrap interval around it (B against A), kept as logs
    so that B against A is exactly the negation of A against B."""

    log_ratio: float
    log_lo: float
    log_hi: float

    @property
    def ratio(self) -> float:
        return math.exp(self.log_ratio)

    @property
    def lo(self) -> float:
        return math.exp(self.log_lo)

    @property
    def hi(self) -> float:
        return math.exp(self.log_hi)

    @property
    def change(self) -> float:
        return math.expm1(self.log_ratio)


def _positive(samples_ms: Sequence[float]) -> np.ndarray:
    arr = _clean(samples_ms)
    return arr[arr > 0]


def _bootstrap_medians(samples: np.ndarray, n_boot: int, seed: int) -> np.ndarray:
    """Medians of ``n_boot`` moving-block resamples of ``samples`` (in time order).

    Blocks of about n^(1/3) consecutive samples (wrapping around the end) keep slow drift
    inside a run in each resample, so drift widens the interval instead of hiding in it. The
    stream is seeded by ``seed`` and by the samples themselves: a side gets the same resamples
    whether it is A or B (and the last results are cached, so B-vs-A after A-vs-B is cheap).
    """
    return _bootstrap_medians_of(np.ascontiguousarray(samples, dtype=np.float64).tobytes(),
                                 int(n_boot), int(seed))


@functools.lru_cache(maxsize=64)
def _bootstrap_medians_of(data: bytes, n_boot: int, seed: int) -> np.ndarray:
    samples = np.frombuffer(data, dtype=np.float64)
    n = samples.size
    block = max(1, round(n ** (1 / 3)))
    n_blocks = -(-n // block)
    wrapped = np.concatenate([samples, samples[:block - 1]])
    rng = np.random.default_rng([seed, zlib.crc32(data)])
    offsets = np.arange(block, dtype=np.int32)
    out = np.empty(n_boot)
    for first in range(0, n_boot, 128):
        m = min(128, n_boot - first)
        starts = rng.integers(0, n, size=(m, n_blocks, 1), dtype=np.int32)
        idx = (starts + offsets).reshape(m, -1)[:, :n]
        out[first:first + m] = _row_medians(wrapped[idx])
    out.flags.writeable = False
    return out


def _row_medians(x: np.ndarray) -> np.ndarray:
    """np.median(x, axis=1) with one partition (numpy's takes two for an even row length)."""
    h = x.shape[1] // 2
    part = np.partition(x, h, axis=1)
    upper = part[:, h]
    if x.shape[1] % 2:
        return upper
    return (part[:, :h].max(axis=1) + upper) / 2


def ratio_interval(a_ms: Sequence[float], b_ms: Sequence[float], *,
                   confidence: float = BOOTSTRAP_CONFIDENCE,
                   n_boot: int = BOOTSTRAP_RESAMPLES, seed: int = 0) -> RatioInterval:
    """median(b) / median(a) with a seeded block-bootstrap interval at ``confidence``.

    Both ends are order statistics of log(median_b*) - log(median_a*) over the resamples,
    taken k places in from either end, so swapping a and b gives exactly (1/hi, 1/lo).
    Raises ValueError when a side has no positive finite sample.
    """
    a, b = _positive(a_ms), _positive(b_ms)
    if a.size == 0 or b.size == 0:
        raise ValueError("ratio_interval() needs positive timing samples on both sides")
    if not 0 < confidence < 1 or n_boot < 2:
        raise ValueError("ratio_interval() needs 0 < confidence < 1 and n_boot >= 2")
    logs = np.log(_bootstrap_medians(b, n_boot, seed)) - np.log(_bootstrap_medians(a, n_boot, seed))
    logs.sort()
    k = int(math.floor((1 - confidence) / 2 * (n_boot - 1)))
    point = math.log(float(np.median(b))) - math.log(float(np.median(a)))
    return RatioInterval(log_ratio=point, log_lo=float(logs[k]),
                         log_hi=float(logs[n_boot - 1 - k]))


def interval_verdict(interval: RatioInterval, min_change: float = 0.01) -> str:
    """'slower' when the whole interval lies above 1 + min_change, 'faster' when it lies below
    1 / (1 + min_change) (the mirror image in log space), else 'same': a change is called only
    when it is both outside the noise and larger than min_change."""
    floor = math.log1p(float(min_change))
    if interval.log_lo > floor:
        return "slower"
    if interval.log_hi < -floor:
        return "faster"
    return "same"
