"""Where a run's time goes: named phases, timed and reported to the progress display.

The runner wraps each piece of work of a shape in ``clock.phase(name)``; the clock tells the
progress sink which phase is running (so a long shape never sits silent) and sums the seconds
of each phase over all shapes, which ``meta.json`` records as ``phase_seconds``. Time is
exclusive: a phase started inside another pauses the outer one, so the phases never add up to
more than the wall time.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Callable, Iterator

#: The phases of a run, in the order they are listed in ``meta.json``.
PHASES = ("inputs", "reference", "model", "kernels", "timing", "report")


class PhaseClock:
    """Seconds per phase (summed over shapes) and the phase now running."""

    def __init__(self, progress=None, clock: Callable[[], float] = time.perf_counter):
        self.progress = progress
        self.clock = clock
        self.seconds: dict[str, float] = {}
        self.parts: dict[str, dict[str, float]] = {}   # phase -> {part (a variant): seconds}
        self._stack: list[tuple[str, str | None]] = []
        self._since = 0.0

    @property
    def current(self) -> str | None:
        return self._stack[-1][0] if self._stack else None

    def _charge(self) -> None:
        now = self.clock()
        if self._stack:
            name, part = self._stack[-1]
            self.seconds[name] = self.seconds.get(name, 0.0) + (now - self._since)
            if part is not None:
                by = self.parts.setdefault(name, {})
                by[part] = by.get(part, 0.0) + (now - self._since)
        self._since = now

    def _tell(self, name: str | None) -> None:
        if self.progress is not None and name is not None:
            self.progress.phase(name)

    @contextmanager
    def phase(self, name: str, part: str | None = None) -> Iterator[None]:
        """Time the block as phase ``name`` (one of PHASES) and show it on the progress sink;
        ``part`` (e.g. the variant whose kernels are built and run) also sums it per part."""
        if name not in PHASES:
            raise ValueError(f"unknown phase {name!r} (one of {', '.join(PHASES)})")
        self._charge()
        self._stack.append((name, part))
        self._tell(name)
        try:
            yield
        finally:
            self._charge()
            self._stack.pop()
            self._tell(self.current)

    def rounded(self) -> dict[str, float]:
        """Every phase that ran, in PHASES order, in seconds rounded to milliseconds."""
        return {p: round(self.seconds[p], 3) for p in PHASES if p in self.seconds}

    def rounded_parts(self, name: str) -> dict[str, float]:
        """Seconds of phase ``name`` per part, slowest first (meta.json's ``kernel_seconds``: where
        the kernels phase goes, variant by variant: builds, compiles, first calls, checks)."""
        by = self.parts.get(name, {})
        return {k: round(v, 3) for k, v in sorted(by.items(), key=lambda kv: -kv[1])}


def phase_summary(meta: dict) -> str | None:
    """``wall 57.3 s: inputs 4.1 s, reference 3.0 s, ...`` from a run's meta.json (None if
    the run has no wall time)."""
    wall = meta.get("wall_seconds")
    if wall is None:
        return None
    seconds = meta.get("phase_seconds") or {}
    by_variant = meta.get("kernel_seconds") or {}
    parts = [f"{p} {seconds[p]:.1f} s" for p in PHASES if p in seconds]
    if "kernels" in seconds and by_variant:   # the kernels phase's three largest variants
        top = sorted(by_variant.items(), key=lambda kv: -kv[1])[:3]
        at = [p for p in PHASES if p in seconds].index("kernels")
        parts[at] += " (" + ", ".join(f"{v} {s:.1f}" for v, s in top) + ")"
    rest = wall - sum(seconds.values())
    if parts:
        parts.append(f"other {max(rest, 0.0):.1f} s")
    return f"wall {wall:.1f} s" + (": " + ", ".join(parts) if parts else "")


__all__ = ["PHASES", "PhaseClock", "phase_summary"]
