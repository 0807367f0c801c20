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
        self._stack: list[str] = []
        self._since = 0.0

    @property
    def current(self) -> str | None:
        return self._stack[-1] if self._stack else None

    def _charge(self) -> None:
        now = self.clock()
        if self._stack:
            name = self._stack[-1]
            self.seconds[name] = self.seconds.get(name, 0.0) + (now - self._since)
        self._since = now

    def _tell(self, name: str | None) -> None:
        tell = getattr(self.progress, "phase", None)
        if tell is not None and name is not None:
            tell(name)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time the block as phase ``name`` (one of PHASES) and show it on the progress sink."""
        if name not in PHASES:
            raise ValueError(f"unknown phase {name!r} (one of {', '.join(PHASES)})")
        self._charge()
        self._stack.append(name)
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


def phase_summary(meta: dict) -> str | None:
    """``wall 57.3 s: inputs 4.1 s, reference 3.0 s, ...`` from a run's meta.json (None if
    the run has no wall time)."""
    wall = meta.get("wall_seconds")
    if wall is None:
        return None
    seconds = meta.get("phase_seconds") or {}
    parts = [f"{p} {seconds[p]:.1f} s" for p in PHASES if p in seconds]
    rest = wall - sum(seconds.values())
    if parts:
        parts.append(f"other {max(rest, 0.0):.1f} s")
    return f"wall {wall:.1f} s" + (": " + ", ".join(parts) if parts else "")


__all__ = ["PHASES", "PhaseClock", "phase_summary"]
