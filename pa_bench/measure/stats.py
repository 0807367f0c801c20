"""Timing statistics: summaries, nvbench's stopping rule, paired speed-ups and A/B verdicts.

Pure functions on lists of milliseconds; no GPU, no pandas.

- `summarize(samples_ms)` -> `TimingStats` (median, quartiles, mean, sample stdev ...).
- `should_stop(...)` is nvbench's "cold measurement" rule: sample until there are at least
  `min_samples` samples, at least `min_seconds` of GPU time and a relative standard deviation
  of at most `max_noise`; give up at `max_seconds` of wall time or `max_samples` samples.
- `paired_speedup(base, other)` uses interleaved samples (round k of both was taken at the same
  time), so the per-round ratio cancels drift that hits both alike.
- `ratio_interval(a_ms, b_ms)` is a seeded block-bootstrap interval on median(b) / median(a)
  from the raw samples; `interval_verdict` judges B against A with it. Each side's resamples
  are seeded by the seed and that side's samples, so swapping A and B mirrors the interval
  exactly (A-vs-B 'faster' is B-vs-A 'slower', at every bound).
- `verdict(a, b)` is the fallback where raw samples are not stored: a noise bound built from
  each side's robust relative spread (IQR / (1.349 * median), which is the relative standard
  deviation for normally distributed samples), judged in log space so that it is symmetric too.
"""

from __future__ import annotations

import functools
import math
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

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


def relative_stdev(samples_ms: Sequence[float]) -> float:
    """stdev(ddof=1) / mean; inf for fewer than two samples (noise unknown)."""
    arr = _clean(samples_ms)
    if arr.size < 2:
        return math.inf
    return _rel(float(arr.std(ddof=1)), float(arr.mean()))


_STOP_DEFAULTS = {
    "min_seconds": 0.5,
    "max_seconds": 15.0,
    "max_noise": 0.005,
    "min_samples": 10,
    "max_samples": 10000,
}


class RunningStats:
    """Count, GPU time and relative stdev of a growing list of samples, kept as running totals
    (Welford), so the stop rule costs O(1) per new sample instead of rebuilding arrays."""

    __slots__ = ("count", "_mean", "_m2")

    def __init__(self) -> None:
        self.count = 0
        self._mean = 0.0
        self._m2 = 0.0

    def add(self, ms: float) -> None:
        x = float(ms)
        if not math.isfinite(x):
            return
        self.count += 1
        d = x - self._mean
        self._mean += d / self.count
        self._m2 += d * (x - self._mean)

    @property
    def total_ms(self) -> float:
        return self._mean * self.count

    @property
    def rel_stdev(self) -> float:
        """stdev(ddof=1) / mean; inf for fewer than two samples (noise unknown)."""
        if self.count < 2:
            return math.inf
        return _rel(math.sqrt(max(self._m2, 0.0) / (self.count - 1)), self._mean)


def should_stop(
    samples_ms: "Sequence[float] | RunningStats",
    elapsed_gpu_s: float | None,
    wall_s: float,
    settings: Any = None,
    *,
    min_seconds: float | None = None,
    max_seconds: float | None = None,
    max_noise: float | None = None,
    min_samples: int | None = None,
    max_samples: int | None = None,
) -> tuple[bool, str]:
    """nvbench's cold-measurement stopping rule.

    Limits come from keyword arguments, else from attributes of `settings` (e.g. a
    `TimingSettings`), else the defaults (0.5 s, 15 s, 0.5 %, 10, 10000).
    `elapsed_gpu_s` is the GPU time of the samples so far (None: the sum of `samples_ms`).

    Returns (stop, reason): reason is 'noise' (converged), 'max_samples' or 'timeout' when
    stopping, and '' otherwise.
    """
    given = {
        "min_seconds": min_seconds,
        "max_seconds": max_seconds,
        "max_noise": max_noise,
        "min_samples": min_samples,
        "max_samples": max_samples,
    }
    lim = {}
    for name, value in given.items():
        if value is None and settings is not None:
            value = getattr(settings, name, None)
        lim[name] = _STOP_DEFAULTS[name] if value is None else value

    if isinstance(samples_ms, RunningStats):
        count, total_ms, rel = samples_ms.count, samples_ms.total_ms, samples_ms.rel_stdev
    else:
        count, total_ms, rel = len(samples_ms), float(np.sum(_clean(samples_ms))), relative_stdev(samples_ms)
    gpu_s = total_ms / 1e3 if elapsed_gpu_s is None else elapsed_gpu_s
    if count >= max(lim["min_samples"], 1) and gpu_s >= lim["min_seconds"] and rel <= lim["max_noise"]:
        return True, STOP_NOISE
    if count >= lim["max_samples"]:
        return True, STOP_MAX_SAMPLES
    if wall_s >= lim["max_seconds"]:
        return True, STOP_TIMEOUT
    return False, ""


def paired_speedup(
    base_ms: Sequence[float], other_ms: Sequence[float]
) -> tuple[float | None, float | None, float | None]:
    """Speed-up of `other` over `base` from interleaved samples.

    Round k of both lists was taken back to back, so the per-round ratio base_k / other_k is
    free of slow drift. Returns (median, q1, q3) of those ratios over the common prefix of the
    two lists (rounds with a non-positive or non-finite time are left out); (None, None, None)
    if no round remains.
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
    q1, med, q3 = (float(x) for x in np.percentile(ratios, [25.0, 50.0, 75.0]))
    return med, q1, q3


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
