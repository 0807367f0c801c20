"""How kernels are timed, as one frozen dataclass: the defaults every timing entry point uses.

``configs/*.yaml``'s ``timing:`` section loads into :class:`TimingSettings`
(pa_bench.problem.config validates it at load, each error naming its key); the sampling loop
(pa_bench.measure.timing) and its stopping rule (pa_bench.measure.stats) read the same object,
so a default lives here only.
"""

from __future__ import annotations

from dataclasses import dataclass

L2_FLUSHES = ("read", "discard")
MAX_PLACEMENTS = 8
MAX_ROUND_SAMPLES = 16


@dataclass(frozen=True)
class TimingSettings:
    """How kernels are timed (measure/timing.py) and when a shape has been sampled enough.

    A variant has converged when it has ``min_samples`` samples and the 95 % interval of its
    median lies within ``max_noise`` of the median on both sides. The shape stops when every
    variant has converged and its samples (all variants together) hold ``min_seconds`` of GPU
    time, or at a ceiling: ``max_seconds`` of wall time, ``max_samples`` rounds.

    The criterion is the precision of the estimate, not the spread of the samples: cold samples
    of a 40-us kernel spread by a few per cent, yet their median is known to 0.1 % after a
    second. (nvbench's entropy criterion, the other principled choice, stops when the samples'
    histogram stops changing; it gives no interval, and pa-bench reports one.) ``min_seconds`` is
    counted over the shape's variants together because they are interleaved: every variant has
    been sampled across the same stretch of wall time, which is what averages slow drift.
    """

    hot: bool = False               # back-to-back launches, no L2 flush
    warmup: int = 5                 # untimed calls of each variant first (at least one is made)
    min_seconds: float = 0.5        # GPU time of a shape's samples (all variants) before it may stop
    max_seconds: float = 15.0       # wall-time ceiling of a shape's sampling
    max_noise: float = 0.005        # the median's 95 % interval within this of it: converged
    min_samples: int = 20
    max_samples: int = 10000        # rounds (``round_samples`` samples of every variant each)
    l2_flush: str = "read"          # cold samples: "read" twice L2, or that and "discard" its lines
    placements: int = 1             # copies of a shape's inputs in GPU memory, sampled in turn
    prime: bool = True              # cold samples: one untimed call of a variant before its samples in a round
    round_samples: int = 2          # samples of each variant per round (after its prime)
    slow: str = ""                  # a test instrument, never a measurement: "VARIANT=FRACTION[,...]"
                                    # slows those variants on purpose by that fraction (slow_spec;
                                    # docs/TIMING.md); "": off


__all__ = ["TimingSettings", "L2_FLUSHES", "MAX_PLACEMENTS", "MAX_ROUND_SAMPLES"]


def slow_spec(text: str) -> dict[str, float]:
    """``timing.slow``'s {variant: fraction} ({} for ""); a bad entry is one line (ValueError
    naming it)."""
    import math

    out: dict[str, float] = {}
    for item in (t.strip() for t in text.split(",") if t.strip()):
        name, sep, frac = item.partition("=")
        try:
            value = float(frac)
        except ValueError:
            value = math.nan
        if not sep or not name.strip() or not 0 < value < 1:
            raise ValueError(f"timing.slow: {item!r} is not VARIANT=FRACTION with 0 < FRACTION < 1 "
                             "(e.g. v3=0.02)")
        out[name.strip()] = value
    return out
