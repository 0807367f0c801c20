"""A row's notes as data: what a phase said about the row (why it was skipped, failed, or judged
as it was), kept as :class:`Note` and joined into text only where it is written or shown.

records.csv holds them in its one ``reason`` column; :func:`join` writes that column and
:func:`parse` is the one reader of it. The form: the notes joined with ``"; "``, each note its
text, after ``"inputs: "`` or ``"timing: "`` when that phase wrote it; a note without either
prefix is a parity note (the check's own words: ``parity: max err ...``, a reason it cannot
run, the error that stopped it). A text is written once, under the first phase that said it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

INPUTS = "inputs"   # the shape's inputs could not be made or uploaded: every phase of the row
PARITY = "parity"
TIMING = "timing"
_PREFIXED = (INPUTS, TIMING)
SEPARATOR = "; "


@dataclass(frozen=True)
class Note:
    """One note of a row: the phase that wrote it (INPUTS, PARITY or TIMING) and its text."""

    phase: str
    text: str

    def render(self) -> str:
        """The note as records.csv and the tables show it."""
        return f"{self.phase}: {self.text}" if self.phase in _PREFIXED else self.text


def join(notes: Iterable[Note]) -> str | None:
    """records.csv's ``reason`` cell of these notes (None when there are none)."""
    seen: dict[str, Note] = {}
    for note in notes:
        seen.setdefault(note.text, note)
    return SEPARATOR.join(n.render() for n in seen.values()) or None


def parse(reason: str | None) -> list[Note]:
    """The notes of a ``reason`` cell, phases included (the inverse of :func:`join`)."""
    out = []
    for part in (reason or "").split(SEPARATOR):
        if not part:
            continue
        phase, sep, text = part.partition(": ")
        out.append(Note(phase, text) if sep and phase in _PREFIXED else Note(PARITY, part))
    return out


__all__ = ["Note", "INPUTS", "PARITY", "TIMING", "join", "parse"]
