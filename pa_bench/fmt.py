"""One formatter: milliseconds, errors, ratios, percentages, CUDA versions, the one-line error
text, and plain-text (rich) tables. Every printer of pa-bench (the CLI's tables, report.md,
compare, env, kernels) and the backends' one-line reasons use these, so a number reads the same
wherever it is shown.

Missing values (None, NaN, pandas' NA, a non-number) print as ``missing`` (default: an en dash;
the terminal tables pass ``"-"``). This module imports nothing from pa-bench, so any layer may
use it.
"""

from __future__ import annotations

import io
import math
from collections.abc import Iterable, Sequence
from typing import Any

DASH = "–"


# --------------------------------------------------------------------------- numbers


def number(x: Any) -> float | None:
    """`x` as a float; None when it is missing or not a number (NaN counts as missing)."""
    if x is None or isinstance(x, bool):
        return None if x is None else float(x)
    try:
        f = float(x)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) else f


def ms(x: Any, missing: str = DASH) -> str:
    """Milliseconds: 3 decimals (3 significant digits below 0.1 ms)."""
    f = number(x)
    if f is None:
        return missing
    if not math.isfinite(f):
        return str(f)
    return f"{f:.3f}" if abs(f) >= 0.1 else f"{f:.3g}"


def err(x: Any, missing: str = DASH) -> str:
    """Errors: %.2e."""
    f = number(x)
    return missing if f is None else f"{f:.2e}"


def ratio(x: Any, missing: str = DASH, suffix: str = "") -> str:
    """A ratio: 2 decimals (``suffix="x"`` for a speed-up)."""
    f = number(x)
    return missing if f is None else f"{f:.2f}{suffix}"


def speedup(x: Any, lo: Any = None, hi: Any = None, missing: str = DASH, dash: str = DASH) -> str:
    """'1.71x', with its spread '1.71x [1.70–1.72]' when both ends are known."""
    text = ratio(x, missing, "x")
    lo_f, hi_f = number(lo), number(hi)
    if text != missing and lo_f is not None and hi_f is not None:
        text += f" [{lo_f:.2f}{dash}{hi_f:.2f}]"
    return text


def pct(x: Any, spec: str = ".2f", missing: str = DASH) -> str:
    """A fraction as a percentage, e.g. pct(0.1, '+.1f') == '+10.0%'."""
    f = number(x)
    return missing if f is None else f"{format(100 * f, spec)}%"


def fixed(x: Any, decimals: int, missing: str = DASH) -> str:
    """A float with `decimals` decimals (clocks, counts, rates)."""
    f = number(x)
    return missing if f is None else f"{f:.{decimals}f}"


def rate(x: Any, missing: str = DASH) -> str:
    """TFLOP/s or GB/s: 3 significant figures or more (no decimals from 100 up)."""
    f = number(x)
    if f is None:
        return missing
    if abs(f) >= 100:
        return f"{f:.0f}"
    return f"{f:.1f}" if abs(f) >= 10 else f"{f:.2f}"


def cuda_version(v: int | None) -> str | None:
    """CUDA's integer version (12040) as '12.4'; None for 0 or None."""
    if not v:
        return None
    return f"{v // 1000}.{(v % 1000) // 10}"


# --------------------------------------------------------------------------- errors


def first_line(exc: BaseException | str) -> str:
    """The first non-empty line of an exception's (or a text's) message; the exception's type
    name when the message is empty."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    if lines:
        return lines[0]
    return type(exc).__name__ if isinstance(exc, BaseException) else ""


def error_line(exc: BaseException | str) -> str:
    """The first line that names an error (a compiler's log), else :func:`first_line`."""
    for ln in str(exc).splitlines():
        if "error" in ln.lower():
            return ln.strip()
    return first_line(exc)


def one_line(text: Any) -> str:
    """A message for the CLI's ``error:`` line: up to three lines joined, else the first."""
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
    return " ".join(lines) if len(lines) <= 3 else lines[0]


# --------------------------------------------------------------------------- tables


def text_table(header: Sequence[str], rows: Iterable[Sequence[Any]], right: Iterable[int] = (),
               title: str | None = None) -> str:
    """A plain-text table (rich, no colour, no wrapping): the header, a rule, one line per row."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    rows = [[str(c) for c in r] for r in rows]
    right = set(right)
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False,
                  pad_edge=False, padding=(0, 1))
    for i, h in enumerate(header):
        table.add_column(h, justify="right" if i in right else "left", no_wrap=True)
    for r in rows:
        table.add_row(*r)
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(header)]
    buf = io.StringIO()
    Console(file=buf, width=sum(widths) + 3 * len(widths) + 10, color_system=None,
            force_terminal=False, legacy_windows=False).print(table)
    return "\n".join(ln.rstrip() for ln in buf.getvalue().splitlines())


def l2_flush_text(timing: dict) -> str:
    """How a cold sample's L2 flush was done, from a run's timing settings (older runs lack the key)."""
    return {"discard": "L2 read, then its lines discarded",
            "read": "L2 flushed by a read of twice its size"}.get(timing.get("l2_flush"), "L2 flushed")
