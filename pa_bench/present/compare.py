"""A/B comparison of two stored runs: the change per shape x variant with a noise bound.

`compare_runs(a, b)` pairs the rows of two runs by (shape, variant). Each pair's time change
is median(B) / median(A) - 1 with a 95 % interval from a seeded bootstrap of the raw samples
stored in each run (`stats.ratio_interval`); 'faster' / 'slower' (B against A) only when the
whole interval lies beyond +-min_change, else 'same'. Comparing B with A gives the mirror image
of comparing A with B, row for row. Where a run has no raw samples for a row, the interval
comes from the records' quartiles (`stats.verdict`), as symmetric. Parity changes (pass -> fail
and back) are reported beside it. Rows found in only one run are kept and marked; two runs with
no row in common are an error. Where both runs ran ``--processes`` (a row's ``ci_kind`` is
'processes'), the row is judged on the two across-process intervals instead
(`xproc.xproc_verdict`: a change only where they do not overlap, with no `min_change` guard,
since those intervals already hold what moves a median between processes); ``cycles`` keeps
the samples' rule. Differences between the runs' GPUs or parameters are listed in
`df.attrs['warnings']`, since they make a comparison of times meaningless; so are SM clocks that
differ by more than CLOCK_TOLERANCE between the runs on a row both measured (``sm-cycles``).

Two H200s run the same launch in the same number of SM cycles but at clocks up to a few per cent
apart under load (results/reference/h200/20261203-sm-clock), so a time A/B of runs from two
machines measures the machines as much as the change. ``cycles=True`` compares SM cycles
instead: each sample's time x the clock it ran at (``kcyc``: thousands of cycles), which needs
both runs' clocks measured by stamps; a row without them is 'no clock'.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

from pa_bench.errors import PaBenchError
from pa_bench.measure import stats, xproc
from pa_bench import fmt
from pa_bench.store.records import STATUS_OK, Record
from pa_bench.store.results import RunDir, open_run

COMPARE_COLUMNS = (
    "shape", "variant", "presence", "status_a", "status_b", "ms_a", "ms_b", "change",
    "change_lo", "change_hi", "basis", "verdict", "parity_a", "parity_b", "parity_change",
    "err_a", "err_b", "round_err_a", "round_err_b", "mhz_a", "mhz_b", "kcyc_a", "kcyc_b",
)

#: The clock source whose figure is the clock a sample ran at (pa_bench.measure.timing's stamps).
STAMPED = "sm-cycles"
#: Median SM clocks of a row further apart than this between two runs are warned about.
CLOCK_TOLERANCE = 0.01


class NothingToCompare(PaBenchError):
    """Two runs share no (shape, variant) row: there is nothing to judge (bad input, exit 2)."""

#: Parameters that must match for times to be comparable.
_SAME_PARAMS = ("gpu", "arch", "context", "queries", "heads_q", "heads_kv", "head_dim", "layout",
                "page", "data", "out_dtype", "seed", "mma", "force_turing")


def _as_run(run: str | Path | RunDir) -> RunDir:
    run = run if isinstance(run, RunDir) else open_run(run)
    run.meta()  # a run of a newer result schema, or a malformed meta.json, is refused in one line
    return run


def _timed(r: Record | None) -> bool:
    return r is not None and r.status == STATUS_OK and r.ms_median is not None and r.ms_median > 0


def _parity_change(a: bool | None, b: bool | None) -> str:
    if a is True and b is False:
        return "regressed"
    if a is False and b is True:
        return "fixed"
    return ""


def _stamped(r: Record | None) -> bool:
    """The row's clock is the one its samples ran at (stamps), and known."""
    return (r is not None and r.clock_source == STAMPED and r.sm_clock_mhz is not None
            and math.isfinite(r.sm_clock_mhz) and r.sm_clock_mhz > 0)


def _kcycles(samples: list | None, clocks: list | None) -> list[float] | None:
    """Each sample's thousands of SM cycles (ms x MHz); None unless every sample has its clock."""
    if not samples or not clocks or len(samples) != len(clocks):
        return None
    if any(c is None or not math.isfinite(float(c)) or not float(c) > 0 for c in clocks):
        return None
    return [float(ms) * float(c) for ms, c in zip(samples, clocks)]


def _in_cycles(r: Record) -> Record:
    """The record with its time statistics in thousands of cycles (for the quartile verdict)."""
    f = float(r.sm_clock_mhz)
    def scaled(ms: float | None) -> float | None:
        return None if ms is None else ms * f

    return replace(r, ms_median=scaled(r.ms_median), ms_q1=scaled(r.ms_q1), ms_q3=scaled(r.ms_q3))


def _judge(a: Record, b: Record, samples_a: list | None, samples_b: list | None,
           min_change: float) -> dict:
    """change, its interval and the verdict: from the raw samples where both runs kept them."""
    if samples_a and samples_b:
        try:
            iv = stats.ratio_interval(samples_a, samples_b)
        except ValueError:
            iv = None
        if iv is not None:
            return dict(verdict=stats.interval_verdict(iv, min_change), change=iv.change,
                        change_lo=iv.lo - 1.0, change_hi=iv.hi - 1.0, basis="samples")
    kind, change, noise = stats.verdict(a, b, min_change=min_change)
    return dict(verdict=kind, change=change, change_lo=(1 + change) / (1 + noise) - 1,
                change_hi=(1 + change) * (1 + noise) - 1, basis="quartiles")


def _across_processes(r: Record | None) -> bool:
    """The row carries an interval across worker processes (``--processes``, measure.xproc)."""
    return (r is not None and r.ci_kind == xproc.KIND_PROCESSES
            and r.ms_xproc_lo is not None and r.ms_xproc_hi is not None)


def _judge_processes(a: Record, b: Record) -> dict | None:
    """B against A from the two rows' across-process intervals: 'slower' / 'faster' only where
    they do not overlap (measure.xproc.xproc_verdict); no --min-change guard."""
    try:
        c = xproc.xproc_verdict(a.ms_median, a.ms_xproc_lo, a.ms_xproc_hi,
                                b.ms_median, b.ms_xproc_lo, b.ms_xproc_hi)
    except ValueError:
        return None
    return dict(verdict=c.verdict, change=c.change, change_lo=c.lo, change_hi=c.hi,
                basis="processes")


def _row(shape: str, variant: str, a: Record | None, b: Record | None, min_change: float,
         samples_a: dict, samples_b: dict, clocks_a: dict | None = None, clocks_b: dict | None = None,
         cycles: bool = False) -> dict:
    presence = "both" if a is not None and b is not None else ("only_a" if b is None else "only_b")
    row: dict[str, Any] = {
        "shape": shape, "variant": variant, "presence": presence,
        "status_a": a.status if a else None, "status_b": b.status if b else None,
        "ms_a": a.ms_median if a else None, "ms_b": b.ms_median if b else None,
        "change": math.nan, "change_lo": math.nan, "change_hi": math.nan, "basis": None,
        "parity_a": a.parity_pass if a else None, "parity_b": b.parity_pass if b else None,
        "err_a": a.max_abs_err if a else None, "err_b": b.max_abs_err if b else None,
    }
    row.update(_round_errs(a, b))
    for side, r in (("a", a), ("b", b)):
        stamped = _stamped(r) and _timed(r)
        row[f"mhz_{side}"] = r.sm_clock_mhz if stamped else None
        row[f"kcyc_{side}"] = r.ms_median * r.sm_clock_mhz if stamped else None
    key = f"{shape}|{variant}"
    if presence == "only_a":
        row["verdict"] = "only in A"
    elif presence == "only_b":
        row["verdict"] = "only in B"
    elif _timed(a) and _timed(b) and cycles:
        if not (_stamped(a) and _stamped(b)):
            row["verdict"] = "no clock"   # a side's clock is not the one its samples ran at
        else:
            row.update(_judge(_in_cycles(a), _in_cycles(b),
                              _kcycles(samples_a.get(key), (clocks_a or {}).get(key)),
                              _kcycles(samples_b.get(key), (clocks_b or {}).get(key)), min_change))
    elif _timed(a) and _timed(b):
        judged = _judge_processes(a, b) if _across_processes(a) and _across_processes(b) else None
        row.update(judged or _judge(a, b, samples_a.get(key), samples_b.get(key), min_change))
    else:
        row["verdict"] = "n/a"  # not timed (ok) on both sides
    row["parity_change"] = _parity_change(row["parity_a"], row["parity_b"])
    return row


def _round_errs(a: Record | None, b: Record | None) -> dict:
    """``round_err_a``/``round_err_b``: what a kernel's input rounding alone costs against FP64
    on each side (``input_round_err``; empty for a kernel that rounds nothing further)."""
    return {"round_err_a": a.input_round_err if a else None,
            "round_err_b": b.input_round_err if b else None}


def _clock_warning(ra: list[Record], rb: list[Record], cycles: bool) -> str | None:
    """A warning where a row's measured clocks differ by more than CLOCK_TOLERANCE."""
    by_b = {r.key(): r for r in rb}
    worst = None
    for a in ra:
        b = by_b.get(a.key())
        if not (_stamped(a) and _stamped(b) and _timed(a) and _timed(b)):
            continue
        d = b.sm_clock_mhz / a.sm_clock_mhz - 1.0
        if worst is None or abs(d) > abs(worst[0]):
            worst = (d, a, b)
    if worst is None or abs(worst[0]) <= CLOCK_TOLERANCE:
        return None
    d, a, b = worst
    text = (f"SM clocks differ by up to {fmt.pct(d, '+.1f')} ({a.shape} {a.variant}: A "
            f"{a.sm_clock_mhz:.0f} MHz, B {b.sm_clock_mhz:.0f} MHz)")
    return text + ("; compared in cycles" if cycles else
                   ": the times hold the clocks' difference; --cycles compares SM cycles")


def _warnings(ra: list[Record], rb: list[Record]) -> list[str]:
    by_b = {r.key(): r for r in rb}
    out = []
    for name in _SAME_PARAMS:
        diffs = set()
        for a in ra:
            b = by_b.get(a.key())
            if b is None:
                continue
            va, vb = a.value(name), b.value(name)
            if va is not None and vb is not None and va != vb:
                diffs.add((va, vb))
        for va, vb in sorted(diffs, key=str):
            out.append(f"{name} differs: A {va}, B {vb}")
    return out


def compare_runs(run_a: str | Path | RunDir, run_b: str | Path | RunDir, min_change: float = 0.01,
                 cycles: bool = False):
    """One row per (shape, variant) of either run (A's order, then B's new rows).

    Columns: COMPARE_COLUMNS. `change` = median_b / median_a - 1 (negative: B is faster) of the
    time, or with ``cycles`` of the SM cycles (`kcyc`: ms x the stamped MHz; verdict 'no clock'
    where a side has no stamped clock); `mhz_*`, `kcyc_*` where the clock was stamped,
    `change_lo`/`change_hi` its 95 % interval, `basis` 'samples' (bootstrap of the raw samples)
    or 'quartiles' (no raw samples stored) or 'processes' (both rows carry an interval across
    worker processes: the verdict is that the intervals do not overlap, whatever min_change),
    `err_*` the max abs errors against FP64 and `round_err_*` what an input rounding alone costs
    (``input_round_err``; NaN for other kernels), `verdict` in {'faster', 'slower', 'same', 'n/a',
    'only in A', 'only in B', 'no clock'}, `parity_change` in {'', 'regressed', 'fixed'}.
    attrs: run_a, run_b (run ids), warnings (list of str), measure ('time' or 'cycles').
    Raises NothingToCompare when the runs share no (shape, variant) row.
    """
    import pandas as pd  # noqa: PLC0415 - pandas only for the frame

    a, b = _as_run(run_a), _as_run(run_b)
    ra, rb = a.records(), b.records()
    by_a = {r.key(): r for r in ra}
    by_b = {r.key(): r for r in rb}
    if not set(by_a) & set(by_b):
        raise NothingToCompare(
            f"{a.run_id} ({len(by_a)} rows) and {b.run_id} ({len(by_b)} rows) have no shape x "
            "variant in common: nothing to compare")
    samples_a, samples_b = a.samples(), b.samples()
    clocks_a, clocks_b = (a.clocks(), b.clocks()) if cycles else ({}, {})
    keys = list(by_a) + [k for k in by_b if k not in by_a]
    rows = [_row(shape, variant, by_a.get((shape, variant)), by_b.get((shape, variant)),
                 min_change, samples_a, samples_b, clocks_a, clocks_b, cycles)
            for shape, variant in keys]
    df = pd.DataFrame(rows, columns=list(COMPARE_COLUMNS))
    for col in ("ms_a", "ms_b", "change", "change_lo", "change_hi", "err_a", "err_b", "round_err_a", "round_err_b",
                "mhz_a", "mhz_b", "kcyc_a", "kcyc_b"):
        df[col] = pd.to_numeric(df[col], errors="coerce").astype("float64")
    df.attrs["run_a"] = a.run_id
    df.attrs["run_b"] = b.run_id
    clock = _clock_warning(ra, rb, cycles)
    df.attrs["warnings"] = _warnings(ra, rb) + ([clock] if clock else [])
    df.attrs["measure"] = "cycles" if cycles else "time"
    return df


def has_slowdown(df) -> bool:
    """True if any row's verdict is 'slower' (for --fail-on-slowdown)."""
    return bool((df["verdict"] == "slower").any()) if len(df) else False


def has_parity_regression(df) -> bool:
    """True if a row passed parity in A and fails in B."""
    return bool((df["parity_change"] == "regressed").any()) if len(df) else False


def regressions(df) -> list[str]:
    """What ``--fail-on-slowdown`` fails on: rows slower beyond noise, parity gone pass -> fail."""
    out = []
    if has_slowdown(df):
        out.append("B is slower than A beyond noise on " + ", ".join(
            f"{r['shape']} {r['variant']}" for r in df.to_dict(orient="records")
            if r["verdict"] == "slower"))
    if has_parity_regression(df):
        out.append("parity regressed (pass -> fail)")
    return out


def _missing(x: Any) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def _parity(a: Any, b: Any, change: str, presence: str) -> str:
    def one(p: Any) -> str:
        return "-" if _missing(p) else ("pass" if p else "FAIL")

    if presence != "both":
        return one(a if presence == "only_a" else b)
    text = f"{one(a)} -> {one(b)}" if one(a) != one(b) else one(a)
    return f"{text} ({change})" if change else text


def _kcyc(x: Any) -> str:
    return "-" if _missing(x) else f"{float(x):,.1f}"


def figure_columns(df) -> tuple[tuple[str, str], tuple[str, str]]:
    """The cells and headers of the two compared figures: times, or cycles (``measure``)."""
    if df.attrs.get("measure") == "cycles":
        return ("kcyc_a", "kcyc_b"), ("A kcyc", "B kcyc")
    return ("ms_a", "ms_b"), ("A ms", "B ms")


def table_cells(df) -> list[dict[str, str]]:
    """Each row of `compare_runs`' frame as the text of its table cells: shape, variant, ms_a,
    ms_b, change, interval (``q`` after it: from the quartiles), verdict, parity."""
    out = []
    for row in df.to_dict(orient="records"):
        interval = "-" if _missing(row["change_lo"]) else \
            f"[{fmt.pct(row['change_lo'], '+.1f')}, {fmt.pct(row['change_hi'], '+.1f')}]"
        if row["basis"] == "quartiles":
            interval += " q"
        elif row["basis"] == "processes":
            interval += " p"
        out.append({
            "shape": str(row["shape"]), "variant": str(row["variant"]),
            "ms_a": fmt.ms(row["ms_a"], "-"), "ms_b": fmt.ms(row["ms_b"], "-"),
            "kcyc_a": _kcyc(row["kcyc_a"]), "kcyc_b": _kcyc(row["kcyc_b"]),
            "change": fmt.pct(row["change"], "+.1f", "-"), "interval": interval,
            "verdict": str(row["verdict"]),
            "parity": _parity(row["parity_a"], row["parity_b"], row["parity_change"], row["presence"]),
        })
    return out


def summary_lines(df) -> list[str]:
    """The lines under the table: the counts of each verdict, and what ``q`` means if it is used."""
    counts = {k: int((df["verdict"] == k).sum()) for k in ("faster", "slower", "same")} if len(df) else {}
    summary = f"{counts.get('faster', 0)} faster, {counts.get('slower', 0)} slower, {counts.get('same', 0)} same (B against A)"
    regressions = int((df["parity_change"] == "regressed").sum()) if len(df) else 0
    if regressions:
        summary += f"; {regressions} parity regression{'s' if regressions > 1 else ''}"
    lines = ["", summary]
    if len(df) and (df["basis"] == "quartiles").any():
        lines.append("q: no raw samples stored for the row; interval from the quartiles")
    if len(df) and (df["basis"] == "processes").any():
        lines.append("p: both runs ran --processes; the change's interval is every ratio their "
                     "across-process intervals allow, and a change is called only where they do "
                     "not overlap (no --min-change)")
    return lines


def format_compare(df, names: bool = True) -> str:
    """A plain-text table of `compare_runs`' frame, every column at full width, with a summary
    line and any warnings.

    ``names``: start with the two run ids."""
    lines = []
    if names and (df.attrs.get("run_a") or df.attrs.get("run_b")):
        lines += [f"A: {df.attrs.get('run_a', '?')}", f"B: {df.attrs.get('run_b', '?')}"]
    for w in df.attrs.get("warnings", []):
        lines.append(f"warning: {w}")
    (fa, fb), (ha, hb) = figure_columns(df)
    header = ["shape", "variant", ha, hb, "change", "95% interval", "verdict", "parity"]
    body = [[c[k] for k in ("shape", "variant", fa, fb, "change", "interval", "verdict", "parity")]
            for c in table_cells(df)]
    if lines:
        lines.append("")
    lines += fmt.text_table(header, body, right={2, 3, 4, 5}).splitlines()
    return "\n".join(lines + summary_lines(df))
