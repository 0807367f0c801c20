"""What timing one variant came to: timed, not timable here (skipped), or failed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pa_bench.measure.timing import TimingResult


@dataclass(frozen=True)
class TimingOutcome:
    """Exactly one of ``result``, ``skipped`` (why it could not be timed) and ``failed`` (the
    error that stopped it) is set."""

    result: "TimingResult | None" = None
    skipped: str | None = None
    failed: str | None = None

    @classmethod
    def of(cls, value: "TimingResult | str | None") -> "TimingOutcome":
        """A backend's answer for one variant: a TimingResult, or the reason it was not timed."""
        if value is None:
            return cls(skipped="not timed by the backend")
        if isinstance(value, str):
            return cls(skipped=value)
        return cls(result=value)

    @property
    def timed(self) -> bool:
        return self.result is not None


__all__ = ["TimingOutcome"]
