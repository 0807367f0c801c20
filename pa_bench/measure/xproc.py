"""The interval of a median across worker processes (``--processes N``), and the A/B rule on it.

One process's interval (:func:`pa_bench.measure.stats.median_interval`) is the precision of
that process's median on that placement of the inputs; a fresh process draws another placement,
flush buffer and memory pool, and its median may lie outside. With samples from several fresh
processes the interval of the median *across processes* is a hierarchical bootstrap:

1. draw P processes from the P with replacement;
2. within each drawn process, draw as many samples as it has from its samples, with replacement;
3. the resample's statistic is the median of all drawn samples pooled.

The interval is the 2.5 % and 97.5 % points of that statistic over ``n_boot`` resamples (order
statistics ``k`` places in from either end, as :func:`pa_bench.measure.stats.ratio_interval`
takes them). The first stage carries the spread between processes, the second the spread within
one; with three processes the all-one-process draws (1/27 each) hold the ends, so the interval
reaches from about the lowest process median to about the highest. The stream is seeded by
``seed`` and by the samples, so the same samples give the same interval.

With one process there is nothing to resample across: the interval falls back to the
order-statistic interval of that process's median (kind ``samples``), and says so.

The A/B rule (:func:`xproc_verdict`): B is slower than A when B's across-process interval lies
wholly above A's, faster when wholly below, else the same. Stated as a change: the change's
interval is ``[B.lo / A.hi - 1, B.hi / A.lo - 1]`` (every ratio the two intervals allow), and a
change is called when it excludes zero. No minimum change guards it: the intervals already hold
what moves a median between processes.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

#: ``ci_kind`` of an interval: one process's order statistics, several placements' union, or
#: the hierarchical bootstrap across processes.
KIND_SAMPLES = "samples"
KIND_PLACEMENTS = "placements"
KIND_PROCESSES = "processes"
KINDS = (KIND_SAMPLES, KIND_PLACEMENTS, KIND_PROCESSES)

XPROC_RESAMPLES = 1000
XPROC_CONFIDENCE = 0.95


@dataclass(frozen=True)
class ProcessInterval:
    """The median of the pooled samples, each process's median and the interval (``kind``:
    ``processes``, or ``samples`` where only one process had samples)."""

    median: float
    lo: float
    hi: float
    kind: str
    medians: tuple[float, ...]

    @property
    def processes(self) -> int:
        return len(self.medians)


def _finite(samples: Sequence[float]) -> np.ndarray:
    arr = np.asarray(list(samples), dtype=np.float64)
    return arr[np.isfinite(arr)]


def process_interval(per_process: Sequence[Sequence[float]], *,
                     confidence: float = XPROC_CONFIDENCE, n_boot: int = XPROC_RESAMPLES,
                     seed: int = 0) -> ProcessInterval:
    """The hierarchical-bootstrap interval of the pooled median over ``per_process`` samples
    (one list per process; a process without a finite sample is left out). Raises ValueError
    when no process has a sample, or for a confidence outside (0, 1) or n_boot < 2."""
    from pa_bench.measure.stats import median_interval

    if not 0 < confidence < 1 or n_boot < 2:
        raise ValueError("process_interval() needs 0 < confidence < 1 and n_boot >= 2")
    parts = [p for p in (_finite(s) for s in per_process) if p.size]
    if not parts:
        raise ValueError("process_interval() needs at least one finite sample")
    pooled = np.concatenate(parts)
    median = float(np.median(pooled))
    medians = tuple(float(np.median(p)) for p in parts)
    if len(parts) == 1:
        lo, hi = median_interval(parts[0], confidence)
        return ProcessInterval(median, lo, hi, KIND_SAMPLES, medians)
    stats = _resampled_medians(parts, int(n_boot), int(seed))
    k = int(math.floor((1 - confidence) / 2 * (n_boot - 1)))
    return ProcessInterval(median, float(stats[k]), float(stats[n_boot - 1 - k]),
                           KIND_PROCESSES, medians)


def _resampled_medians(parts: list[np.ndarray], n_boot: int, seed: int) -> np.ndarray:
    """Sorted medians of ``n_boot`` two-stage resamples (processes, then samples within)."""
    crc = 0
    for p in parts:
        crc = zlib.crc32(np.ascontiguousarray(p).tobytes(), crc)
    rng = np.random.default_rng([seed, crc, len(parts)])
    n_proc = len(parts)
    sizes = np.array([p.size for p in parts])
    out = np.empty(n_boot)
    for b in range(n_boot):
        chosen = rng.integers(0, n_proc, size=n_proc)
        drawn = [parts[c][rng.integers(0, sizes[c], size=sizes[c])] for c in chosen]
        out[b] = np.median(np.concatenate(drawn))
    out.sort()
    return out


@dataclass(frozen=True)
class XprocChange:
    """B against A from two across-process intervals: the medians' change and the change's
    interval (every ratio the two intervals allow), with the verdict."""

    change: float
    lo: float
    hi: float
    verdict: str


def xproc_verdict(a_median: float, a_lo: float, a_hi: float,
                  b_median: float, b_lo: float, b_hi: float) -> XprocChange:
    """'slower' when B's interval lies wholly above A's (``b_lo > a_hi``), 'faster' when wholly
    below (``b_hi < a_lo``), else 'same'. Swapping A and B mirrors it exactly (in log space).
    Raises ValueError unless every figure is positive and finite and each lo <= hi."""
    figures = (a_median, a_lo, a_hi, b_median, b_lo, b_hi)
    if not all(x is not None and math.isfinite(float(x)) and float(x) > 0 for x in figures):
        raise ValueError("xproc_verdict() needs positive finite medians and bounds")
    if a_lo > a_hi or b_lo > b_hi:
        raise ValueError("xproc_verdict(): an interval's lo is above its hi")
    lo, hi = b_lo / a_hi - 1.0, b_hi / a_lo - 1.0
    verdict = "slower" if lo > 0 else ("faster" if hi < 0 else "same")
    return XprocChange(change=b_median / a_median - 1.0, lo=lo, hi=hi, verdict=verdict)


def interval_text(rows) -> str | None:
    """What the 95 % interval of a table's medians is, for rows with ``ci_kind`` and
    ``processes`` (records); None where no row has an interval."""
    kinds = {r.ci_kind or KIND_SAMPLES for r in rows if r.ms_ci_lo is not None}
    if not kinds:
        return None
    parts = []
    if KIND_PROCESSES in kinds:
        counts = sorted({int(r.processes or 0) for r in rows if r.ci_kind == KIND_PROCESSES})
        n = "/".join(str(c) for c in counts)
        parts.append(f"across {n} worker processes (a bootstrap of the processes, then of the "
                     "samples within each)")
    if KIND_PLACEMENTS in kinds:
        parts.append("over the placements of the inputs within one process")
    if KIND_SAMPLES in kinds:
        parts.append("of one process's median (order statistics of its samples)")
    return "95 % interval of the median: " + "; ".join(parts)


def format_medians(medians: Sequence[float]) -> str:
    """Each process's median for records.csv's ``ms_proc_medians``: ``;``-separated, exact."""
    return ";".join(repr(float(m)) for m in medians)


def parse_medians(text: str | None) -> list[float]:
    """``ms_proc_medians`` back to floats ([] for an empty cell)."""
    if not text:
        return []
    return [float(x) for x in str(text).split(";") if x.strip()]


__all__ = ["KIND_SAMPLES", "KIND_PLACEMENTS", "KIND_PROCESSES", "KINDS", "ProcessInterval",
           "process_interval", "XprocChange", "xproc_verdict", "interval_text", "format_medians",
           "parse_medians"]
