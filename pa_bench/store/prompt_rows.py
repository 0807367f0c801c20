"""``prompt.csv``: one row per chunk x variant of a ``pa-bench prompt`` run.

Columns: ``chunk`` (0-based), ``start`` (the chunk's first token = its context), ``context``,
``queries``, ``variant``, ``ms`` (the chunk's attention time: the median of its samples where
it was measured, the interpolated value otherwise, empty where neither), ``source``
(``measured``, ``interpolated`` or ``skipped``), the measured chunks' ``ms_q1``, ``ms_q3``,
``samples``, ``stop_reason`` and ``throttled``, and ``reason`` (why a row has no time).
Written atomically like every file of a run directory; plain ``csv``, readable by any tool.
"""

from __future__ import annotations

import csv
import io
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from pa_bench.errors import RunError
from pa_bench.store.results import _atomic_write_text  # the run directory's one write rule

PROMPT_FILE = "prompt.csv"

MEASURED = "measured"
INTERPOLATED = "interpolated"
SKIPPED = "skipped"


@dataclass
class PromptRow:
    chunk: int
    start: int
    context: int
    queries: int
    variant: str
    ms: float | None = None
    source: str = SKIPPED
    ms_q1: float | None = None
    ms_q3: float | None = None
    samples: int | None = None
    stop_reason: str | None = None
    throttled: int | None = None
    reason: str | None = None


COLUMNS = tuple(f.name for f in fields(PromptRow))
_INTS = {"chunk", "start", "context", "queries", "samples", "throttled"}
_FLOATS = {"ms", "ms_q1", "ms_q3"}


def write_prompt_csv(run_path: str | Path, rows: list[PromptRow]) -> Path:
    """Write ``<run>/prompt.csv`` (floats as ``repr``: exact round trip) and return its path."""
    path = Path(run_path) / PROMPT_FILE
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: "" if v is None else (repr(v) if isinstance(v, float) else v)
                         for k, v in asdict(row).items()})
    _atomic_write_text(path, buf.getvalue())
    return path


def read_prompt_csv(run_path: str | Path) -> list[PromptRow]:
    """The rows of ``<run>/prompt.csv``; [] when the run has none (not a prompt run)."""
    path = Path(run_path) / PROMPT_FILE
    if not path.is_file():
        return []
    out = []
    with open(path, newline="", encoding="utf-8") as fh:
        for n, raw in enumerate(csv.DictReader(fh), start=2):
            try:
                values = {}
                for k in COLUMNS:
                    text = raw.get(k)
                    if text is None or text == "":
                        values[k] = None
                    elif k in _INTS:
                        values[k] = int(text)
                    elif k in _FLOATS:
                        values[k] = float(text)
                    else:
                        values[k] = text
                out.append(PromptRow(**{k: v for k, v in values.items() if v is not None}))
            except (TypeError, ValueError) as exc:
                raise RunError(f"{path}: line {n}: {exc}") from None
    return out


__all__ = ["PromptRow", "PROMPT_FILE", "COLUMNS", "MEASURED", "INTERPOLATED", "SKIPPED",
           "write_prompt_csv", "read_prompt_csv"]
