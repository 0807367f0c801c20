"""What pa-bench prints on a terminal: a run's progress on stderr, and on stdout the tables of a
run, a prompt read, a comparison and the kernels (rich). It formats the data it is given; the
CLI decides what to show.

A table fits the console's width (a terminal's; off a terminal ``COLUMNS``, else
``DEFAULT_WIDTH``) by wrapping cells at spaces, never inside a word or a number; a table whose
words alone need more is printed at that width. ``wide`` tables hold every column at full width.
"""

from __future__ import annotations

import json
import math
import os
import sys
import threading
import time
from typing import Any, Sequence

from pa_bench import fmt
from pa_bench import notes as N
from pa_bench.measure import xproc

DEFAULT_WIDTH = 100  # columns of a table off a terminal without COLUMNS (a log, a pipe)
GAP = 2              # columns between two table columns: one of padding, one of the box's gap


# --------------------------------------------------------------------------- consoles


def stdout_console():
    from rich.console import Console

    console = Console(highlight=False, soft_wrap=False)
    if not console.is_terminal and not os.environ.get("COLUMNS"):
        console = Console(highlight=False, soft_wrap=False, width=DEFAULT_WIDTH)
    return console


def stderr_console():
    from rich.console import Console

    return Console(stderr=True, highlight=False)


def note(message: str) -> None:
    """One line on stderr (notices, where a run went)."""
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(jsonable(data), indent=2, allow_nan=False) + "\n")


def jsonable(x: Any) -> Any:
    """Plain JSON values: NaN/inf become null, NumPy scalars become Python numbers."""
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if hasattr(x, "item") and not isinstance(x, (str, bytes)):
        try:
            x = x.item()
        except (TypeError, ValueError):
            pass
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, (str, int, float, bool)) or x is None:
        return x
    if type(x).__name__ in ("NAType", "NaTType"):  # pandas' missing values
        return None
    return str(x)


# --------------------------------------------------------------------------- tables


def _longest_word(text: str) -> int:
    from rich.cells import cell_len

    return max((cell_len(w) for w in text.split()), default=0)


def _longest_line(text: str) -> int:
    from rich.cells import cell_len

    return max((cell_len(ln) for ln in text.splitlines()), default=0)


def fit_widths(header: Sequence[str], rows: Sequence[Sequence[str]], width: int) -> list[int]:
    """Column widths whose sum (with the gaps) is at most ``width`` where the longest word of
    every column allows it. Each step takes a column from the column whose narrowing wraps the
    fewest cells (the header counts as one), the widest of those first."""
    cols = [[h, *(r[i] for r in rows)] for i, h in enumerate(header)]
    lines = [[_longest_line(c) for c in col] for col in cols]
    least = [max(_longest_word(c) for c in col) for col in cols]
    widths = [max(max(col), 1) for col in lines]
    room = width - GAP * (len(widths) - 1)
    while sum(widths) > room:
        shrinkable = [i for i, w in enumerate(widths) if w > least[i]]
        if not shrinkable:
            break
        wrapped = {i: sum(n >= widths[i] for n in lines[i]) for i in shrinkable}
        widths[min(shrinkable, key=lambda i: (wrapped[i], -widths[i]))] -= 1
    return widths


def print_table(console, title: str | None, header: Sequence[str], rows: Sequence[Sequence[str]],
                right: Sequence[int] = (), wide: bool = False) -> None:
    """A plain table (a rule under the header, no edges); see the module docstring for widths."""
    from rich import box
    from rich.table import Table

    rows = [[str(c) for c in r] for r in rows]
    widths = fit_widths(header, rows, 1 << 30 if wide else console.width)
    if title:
        print_lines(console, [title])
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0))
    for i, (h, w) in enumerate(zip(header, widths)):
        table.add_column(h, justify="right" if i in right else "left", width=w, no_wrap=wide)
    for r in rows:
        table.add_row(*r)
    width = console.width  # rich prints no wider than its console: widen it for this table
    console.width = max(width, sum(widths) + GAP * (len(widths) - 1))
    try:
        with console.capture() as text:
            console.print(table)
    finally:
        console.width = width
    _write(console, text.get())


def print_lines(console, lines: Sequence[str]) -> None:
    """Text lines, wrapped at spaces to the console's width."""
    with console.capture() as text:
        for line in lines:
            console.print(line, markup=False)
    _write(console, text.get())


def _write(console, text: str) -> None:
    """What rich rendered, without the spaces it pads lines with."""
    console.file.write("".join(ln.rstrip() + "\n" for ln in text.splitlines()))


# --------------------------------------------------------------------------- a run's tables


def _cell(x: Any, kind: str = "g") -> str:
    """A table cell ('-' when missing), formatted by pa_bench.fmt."""
    if isinstance(x, bool):
        return "yes" if x else "NO"
    if kind == "err":
        return fmt.err(x, "-")
    if kind == "ms":
        return fmt.ms(x, "-")
    if kind == "x":
        return fmt.ratio(x, "-", "x")
    if kind == "pct":
        return fmt.pct(x, ".2f", "-")
    if kind in ("0", "1"):
        return fmt.fixed(x, int(kind), "-")
    return "-" if fmt.number(x) is None and not isinstance(x, str) else str(x)


def shape_cell(rec) -> str:
    """``2Kx256 (2048x256)``: the shape as written, with its exact numbers where they differ."""
    exact = f"{rec.context}x{rec.queries}"
    shown = rec.label or rec.shape
    return shown if shown == exact else f"{shown} ({exact})"


def params_line(config, backend_desc: dict, records) -> str:
    """One sentence: what the rows computed and where."""
    rows = {r.sampled_rows for r in records if r.max_abs_err is not None}
    if not rows:
        compared = ""
    elif rows == {None}:
        compared = ", FP64 on every row"
    else:
        compared = ", FP64 on " + "/".join(str(r) for r in sorted(x for x in rows if x)) + \
            " sampled rows per shape"
    scale = config.resolved_softmax_scale
    return (f"{config.name}: heads {config.heads_q}/{config.heads_kv} (q/kv), head_dim "
            f"{config.head_dim}, {config.layout}"
            f"{f' page {config.page}' if config.layout == 'paged' else ''}, data {config.data}, "
            f"seed {config.seed}, out {config.out_dtype}, softmax scale {scale:.6g}{compared}; "
            f"backend {backend_desc.get('backend', '?')} on {backend_desc.get('gpu', '?')} "
            f"({backend_desc.get('arch', '?')})")


def common_notes(records) -> list[N.Note]:
    """The notes every row holds (printed once, not with every row)."""
    if len(records) < 2:
        return []
    notes = [N.parse(r.reason) for r in records]
    shared = set(notes[0]).intersection(*notes[1:])
    return [n for n in notes[0] if n in shared]


def _reason(rec, leave_out: Sequence[N.Note] = (), phases: Sequence[str] | None = None) -> str:
    """The row's notes as text, without ``leave_out`` and, given ``phases``, only theirs."""
    kept = [n for n in N.parse(rec.reason)
            if n not in leave_out and (phases is None or n.phase in phases)]
    return N.SEPARATOR.join(n.render() for n in kept)


def _parity_verdict(r) -> str:
    if r.status != "ok":
        return r.status
    verdict = "-" if r.parity_pass is None else ("pass" if r.parity_pass else "FAIL")
    return verdict + (" nondet." if r.deterministic is False else "")


def _ms_cell(r) -> str:
    """The median, with the 95 % interval of the median where the record has it."""
    ms = _cell(r.ms_median, "ms")
    lo, hi = r.ms_ci_lo, r.ms_ci_hi
    if r.ms_median is not None and lo is not None and hi is not None:
        ms += f" [{_cell(lo, 'ms')}-{_cell(hi, 'ms')}]"
    return ms


def _speed_cell(r) -> str:
    if r.variant == "v1":
        return _cell(r.speedup_vs_v1, "x")
    return fmt.speedup(r.speedup_vs_v1, r.speedup_lo, r.speedup_hi, missing="-", dash="-")


def _stop_cell(r) -> str:
    """Why sampling stopped; short of the noise limit is marked '!'; a row whose hold timed out
    (host time may be in it) says 'host-bound'."""
    if r.stop_reason is None:
        return "-"
    cell = r.stop_reason if r.stop_reason == "noise" else f"{r.stop_reason}!"
    return cell + (" host-bound" if r.host_bound else "")


PARITY_TITLE = "parity against FP64 (max abs error)"
TIME_TITLE = "time per chunk"
PARITY_COLUMNS = ["shape", "variant", "verdict", "max err vs FP64", "model err", "ratio",
                  "quant err"]
PARITY_WIDE = ["shape", "variant", "status", "max err vs FP64", "model err", "ratio", "parity",
               "quant err", "diff v1", "diff v2", "determ.", "rows", "PR err", "reason"]
TIME_WIDE = ["shape", "variant", "impl", "status", "ms median", "ms 95% CI", "ms q1-q3", "spread",
             "samples", "stop", "TFLOP/s", "KV GB/s", "SM MHz", "throttled", "vs v1", "PR ms",
             "reason"]


def _parity_table(records, wide: bool, common) -> tuple[list[str], list[list[str]], list[int]]:
    if not wide:
        short = PARITY_COLUMNS, [[
            shape_cell(r), r.variant, _parity_verdict(r), _cell(r.max_abs_err, "err"),
            _cell(r.model_max_abs_err, "err"), _cell(r.err_ratio, "x"),
            _cell(r.quant_max_abs_err, "err")] for r in records], [3, 4, 5, 6]
        return with_rounding_columns(records, wide, *short)
    rows = [[
        shape_cell(r), r.variant, r.status, _cell(r.max_abs_err, "err"),
        _cell(r.model_max_abs_err, "err"), _cell(r.err_ratio, "x"),
        "-" if r.parity_pass is None else ("pass" if r.parity_pass else "FAIL"),
        _cell(r.quant_max_abs_err, "err"), _cell(r.diff_vs_v1, "err"), _cell(r.diff_vs_v2, "err"),
        _cell(r.deterministic), "all" if r.sampled_rows is None and r.max_abs_err is not None
        else _cell(r.sampled_rows), _cell(r.ref_err, "err"), _reason(r, common),
    ] for r in records]
    return with_rounding_columns(records, wide, PARITY_WIDE, rows, [3, 4, 5, 7, 8, 9, 11, 12])


ROUND_ERR = "input round err"
BUDGET = "budget"


def with_rounding_columns(records, wide: bool, header: list[str], rows: list[list[str]],
                          right: list[int]) -> tuple[list[str], list[list[str]], list[int]]:
    """The parity table with the input-rounding columns after "quant err", where some row has
    them (a kernel that rounds an input beyond the cache's format): what the rounding alone
    costs against FP64 (``input_round_err``), and in the wide table the accuracy budget's verdict
    (``budget_pass``: max err <= quant err). Without such a row the table is unchanged."""
    if not any(r.input_round_err is not None or r.budget_pass is not None for r in records):
        return header, rows, right
    at = header.index("quant err") + 1
    extra = [ROUND_ERR, BUDGET] if wide else [ROUND_ERR]

    def cells(r) -> list[str]:
        out = [_cell(r.input_round_err, "err")]
        if wide:
            out.append("-" if r.budget_pass is None else ("pass" if r.budget_pass else "FAIL"))
        return out

    header = header[:at] + extra + header[at:]
    rows = [row[:at] + cells(r) + row[at:] for r, row in zip(records, rows)]
    right = [i + len(extra) if i >= at else i for i in right] + [at]
    return header, rows, sorted(right)


def _time_verdict(r) -> str:
    """ok; a row that stopped short of the noise limit names why with '!'; a row whose hold
    timed out (host time may be in it) says 'host-bound'."""
    if r.status != "ok":
        return r.status
    cell = "ok" if r.stop_reason in (None, "noise") else f"{r.stop_reason}!"
    return cell + (" host-bound" if r.host_bound else "")


def _time_table(records, wide: bool, common) -> tuple[list[str], list[list[str]], list[int]]:
    if not wide:
        with_ci = any(r.ms_ci_lo is not None for r in records)
        header = ["shape", "variant", "ms median [95% CI]" if with_ci else "ms median", "TFLOP/s",
                  "vs v1", "verdict"]
        return header, [[
            shape_cell(r), r.variant, _ms_cell(r), _cell(r.tflops, "1"),
            _cell(r.speedup_vs_v1, "x"), _time_verdict(r)] for r in records], [2, 3, 4]
    rows = []
    for r in records:
        quart = "-" if r.ms_q1 is None else f"{_cell(r.ms_q1, 'ms')}-{_cell(r.ms_q3, 'ms')}"
        ci = "-" if r.ms_ci_lo is None else \
            f"{_cell(r.ms_ci_lo, 'ms')}-{_cell(r.ms_ci_hi, 'ms')}"
        rows.append([
            shape_cell(r), r.variant, r.impl or "-", r.status,
            _cell(r.ms_median, "ms"), ci, quart, _cell(r.ms_rel_spread, "pct"), _cell(r.samples),
            _stop_cell(r), _cell(r.tflops, "1"), _cell(r.kv_gbps, "0"), _cell(r.sm_clock_mhz, "0"),
            _cell(r.throttled), _speed_cell(r), _cell(r.ref_ms, "ms"),
            _reason(r, common, phases=(N.INPUTS, N.TIMING)),  # a parity note is no timing news
        ])
    return TIME_WIDE, rows, [4, 5, 6, 7, 8, 10, 11, 12, 13, 14, 15]


def impl_lines(records) -> list[str]:
    """``torch-sdpa ran cudnn``: the library kernel each peer ran (per shape where it differs)."""
    ran: dict[str, dict[str, list[str]]] = {}
    for r in records:
        if r.impl:
            ran.setdefault(r.variant, {}).setdefault(r.impl, []).append(r.display_shape)
    out = []
    for variant, impls in ran.items():
        if len(impls) == 1:
            out.append(f"{variant} ran {next(iter(impls))}")
        else:
            out.append(f"{variant} ran " + "; ".join(f"{impl} on {', '.join(shapes)}"
                                                     for impl, shapes in impls.items()))
    return out


def skipped_groups(records, common: Sequence[N.Note] = ()) -> tuple[list[str], list]:
    """Skipped rows that share their reason across variants, said once: one line per reason
    (``skipped at every shape: torch-sdpa, torch-flex (each runs on the cuda backend only)``),
    and the rows those lines stand for. A reason is grouped when rows of two or more variants
    hold it (the variant's own name at its start set aside) and they are every pairing of those
    variants and shapes; any other skipped row keeps its own line."""
    groups: dict[tuple[str, bool], list] = {}
    for r in records:
        text = _reason(r, common)
        if r.status != "skipped" or not text:
            continue
        named = text.startswith(f"{r.variant} ")
        groups.setdefault((text[len(r.variant) + 1:] if named else text, named), []).append(r)
    all_shapes = list(dict.fromkeys(r.display_shape for r in records))
    lines, grouped = [], []
    for (text, named), rows in groups.items():
        variants = list(dict.fromkeys(r.variant for r in rows))
        shapes = list(dict.fromkeys(r.display_shape for r in rows))
        if len(variants) < 2 or len(rows) != len(variants) * len(shapes) \
                or len({(r.variant, r.display_shape) for r in rows}) != len(rows):
            continue
        where = "every shape" if shapes == all_shapes else ", ".join(shapes)
        lines.append(f"skipped at {where}: {', '.join(variants)} ({'each ' if named else ''}{text})")
        grouped += rows
    return lines, grouped


def show_run(records, backend_desc: dict, config, *, parity: bool, timing: bool,
             wide: bool = False) -> None:
    """A run's parameters, the notes every row shares, its parity and/or time table, and (not
    ``wide``) each row's own notes under the tables; there, skipped rows whose reason several
    variants share leave the tables for one line (skipped_groups)."""
    console = stdout_console()
    common = common_notes(records)
    print_lines(console, [params_line(config, backend_desc, records)]
                + [f"all rows: {n.render()}" for n in common])
    grouped_lines, grouped = ([], []) if wide else skipped_groups(records, common)
    shown_rows = [r for r in records if not any(r is g for g in grouped)]
    for shown, title, table in ((parity, PARITY_TITLE, _parity_table), (timing, TIME_TITLE, _time_table)):
        if shown and (shown_rows or not records):
            header, rows, right = table(shown_rows, wide, common)
            print_table(console, title, header, rows, right=right, wide=wide)
    interval = xproc.interval_text(records) if timing else None
    if interval and "across" in interval:   # a --processes run's table says which interval it shows
        print_lines(console, [interval])
    if not wide:
        own = [(r, _reason(r, common)) for r in shown_rows]
        print_lines(console, impl_lines(records) + grouped_lines
                    + [f"{r.display_shape} {r.variant}: {text}" for r, text in own if text])


def failures(records, prompt: dict | None = None) -> list[str]:
    """What makes a command fail (exit 1): rows that failed parity, were not deterministic or
    failed to run, and a prompt's variants whose timing failed on a chunk."""
    named = lambda rows: ", ".join(f"{r.display_shape} {r.variant}" for r in rows)  # noqa: E731
    bad_parity = [r for r in records if r.parity_pass is False]
    nondet = [r for r in records if r.deterministic is False]
    failed = [r for r in records if r.status == "failed"]
    timing = [t["variant"] for t in (prompt or {}).get("totals") or [] if t.get("failed")]
    return ([f"parity failed for {named(bad_parity)}"] if bad_parity else []) + \
        ([f"not deterministic: {named(nondet)}"] if nondet else []) + \
        ([f"{len(failed)} row(s) failed to run: {named(failed)}"] if failed else []) + \
        ([f"timing failed on a chunk for {', '.join(timing)} (see prompt.csv)"] if timing else [])


def show_prompt(summary: dict, gpu: str | None, wide: bool = False) -> None:
    """The prompt read: how it was timed, its totals, and the PR's engine figure beside it; one
    line instead of the first two where no variant was timed."""
    from pa_bench.present import prompt_report as P

    console = stdout_console()
    untimed = P.untimed_line(summary)
    if untimed is not None:  # nothing was timed (a CPU): one line, not an all-skipped table
        print_lines(console, [untimed])
    else:
        print_lines(console, P.describe(summary))
        print_table(console, f"prompt read: {summary.get('tokens')} tokens, attention only",
                    P.HEADER, P.totals_rows(summary), right=[1, 2, 3, 4, 5], wide=wide)
    beside = P.beside_pr(summary, gpu)
    if beside:
        print_table(console, "beside the PR's prompt read",
                    ["who", "what", "v1 tok/s", "v2T tok/s", "v2T gain"], beside,
                    right=[2, 3, 4], wide=wide)
        print_lines(console, [P.ENGINE_NOTE])


# --------------------------------------------------------------------------- compare, kernels


def show_compare(df, wide: bool = False) -> None:
    """``pa-bench compare``'s warnings, table and summary; the change and its interval share a
    column unless ``wide`` (compare.format_compare: every column at full width)."""
    from pa_bench.present import compare as C

    if wide:
        sys.stdout.write(C.format_compare(df, names=False) + "\n")
        return
    console = stdout_console()
    (fa, fb), (ha, hb) = C.figure_columns(df)
    rows = [[c["shape"], c["variant"], c[fa], c[fb],
             c["change"] if c["interval"] == "-" else f"{c['change']} {c['interval']}",
             c["verdict"], c["parity"]] for c in C.table_cells(df)]
    warnings = [f"warning: {w}" for w in df.attrs.get("warnings", [])]
    print_lines(console, warnings + [""] if warnings else [])
    print_table(console, None, ["shape", "variant", ha, hb, "change [95%]", "verdict",
                                "parity"], rows, right=[2, 3])
    print_lines(console, C.summary_lines(df))


def show_kernels(rows: list[dict]) -> None:
    """``pa-bench kernels``: the built rows' resources in a table; under it each variant's CTA,
    the builds that were not made and why, and how key segments launch (kernel_rows.format_table:
    the same in one row a build, every column)."""
    from pa_bench.present.kernel_rows import SEGMENTS_NOTE, copy_kind, smem_cell

    console = stdout_console()
    built = [r for r in rows if r.get("compiled")]
    table = [[r["variant"], r["arch"], str(r["registers"]), str(r["spill_bytes"]),
              smem_cell(r), copy_kind(r), " ".join((r.get("mma") or "-").split(",")),
              "-" if r.get("combine_registers") is None else str(r["combine_registers"])]
             for r in built]
    print_table(console, None, ["variant", "arch", "regs", "spills", "smem B", "async copy", "mma",
                                "combine regs"], table, right=[2, 3, 4, 7])
    lines = []
    for r in built:
        if r.get("wgmma_serialized"):
            lines.append(f"{r['variant']} {r['arch']}: WGMMA SERIALISED by ptxas: {r['wgmma_serialized']}")
    lines += [f"{r['variant']} {r['arch']}: {fmt.one_line(r.get('reason') or 'not built')}"
              for r in rows if not r.get("compiled")]
    ctas = {r["variant"]: r.get("cta") for r in rows if r.get("cta")}
    lines += [f"{v} CTA: {cta}" for v, cta in ctas.items()]
    print_lines(console, lines + [f"With {SEGMENTS_NOTE}."])


# --------------------------------------------------------------------------- progress


def duration(seconds: float | None) -> str:
    """``45s``, ``12m05s``, ``2h03m``; '-' when unknown."""
    if seconds is None or not math.isfinite(seconds):
        return "-"
    s = int(round(max(seconds, 0.0)))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


class RichProgress:
    """The runner's progress sink (pa_bench.runner.Progress) on stderr.

    On a terminal: a rich bar with the shape, the phase and variant now running with the phase's
    seconds, rows done of all, the time so far and an ETA. Off a terminal (a log, CI): once the
    run has gone on for QUIET_S, a line at every finished row; and a line whenever HEARTBEAT_S
    pass without one. Each names the same, so a log never goes silent and its counts never go
    back; a run over within QUIET_S leaves a log as it found it. The ETA weighs the rows left by
    their work (FLOPs) at the rate of the rows done so far; rows that needed no work (kept by
    --resume, skipped) are left out of it.
    """

    HEARTBEAT_S = 30.0
    QUIET_S = 30.0

    def __init__(self) -> None:
        self.console = stderr_console()
        self.bar = None
        self.task = None
        self._base = ""
        self._shape = ""
        self._variant: str | None = None
        self._phase: tuple[str, float] | None = None  # (name, monotonic start)
        self._lock = threading.Lock()
        self._timer = None
        self._rows = [0, 0, 0]            # total, done, done without work
        self._work = [0.0, 0.0]           # total, done (FLOPs)
        self._since = time.monotonic()

    # -- the Progress protocol ----------------------------------------------------------
    def start(self, total: int, description: str, work: float = 0.0) -> None:
        self._base, self._rows, self._work = description, [total, 0, 0], [float(work), 0.0]
        self._since, self._variant = time.monotonic(), None
        if not self.console.is_terminal:
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.bar = Progress(TextColumn("{task.description}"), _LiveColumn(self.phase_text, "cyan"),
                            BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                            _LiveColumn(lambda: f"ETA {duration(self.eta())}"),
                            console=self.console, transient=True)
        self.bar.start()
        self.task = self.bar.add_task(description, total=total)

    def update(self, description: str) -> None:
        self._shape = description
        if self.bar is not None:
            self.bar.update(self.task, description=f"{self._base}: {description}")

    def variant(self, name: str | None) -> None:
        with self._lock:
            self._variant = name

    def phase(self, name: str) -> None:
        with self._lock:
            self._phase = (name, time.monotonic())
        if self.bar is None and not self.console.is_terminal and self._timer is None:
            self._schedule(self.HEARTBEAT_S)

    def advance(self, n: int = 1, work: float = 0.0, ran: bool = True) -> None:
        with self._lock:
            self._rows[1] += n
            if ran:
                self._work[1] += work
            else:
                self._rows[2] += n
                self._work[0] -= work
        if self.bar is not None:
            self.bar.advance(self.task, n)
        elif not self.console.is_terminal and time.monotonic() - self._since >= self.QUIET_S:
            self._line()

    def log(self, message: str) -> None:
        if self.bar is not None:
            self.bar.console.print(message, markup=False)
        else:
            note(message)

    def stop(self) -> None:
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            self._phase = None
        if self.bar is not None:
            self.bar.stop()
            self.bar = None

    # -- what it shows --------------------------------------------------------------------
    def phase_text(self) -> str:
        """``kernels v2t 37s``: the phase now running, its variant, and how long it has run."""
        with self._lock:
            if self._phase is None:
                return ""
            (name, since), variant = self._phase, self._variant
        return f"{name}{f' {variant}' if variant else ''} {time.monotonic() - since:.0f}s"

    def eta(self) -> float | None:
        """Seconds left, from the rate of the work done so far (None before any is done)."""
        with self._lock:
            (total, done, free), (work_total, work_done) = self._rows, self._work
        if work_total > 0:
            left, did = work_total - work_done, work_done
        else:  # no work given (a prompt's chunks, --devices): rows
            left, did = total - done, done - free
        elapsed = time.monotonic() - self._since
        return elapsed * left / did if did > 0 else None

    def status(self) -> str:
        """One line: where the run is, how far, and how long it still needs."""
        text = self.phase_text()
        total, done = self._rows[0], self._rows[1]
        return (f"{self._base}: {self._shape}: {text + '; ' if text else ''}{done}/{total} rows, "
                f"{duration(time.monotonic() - self._since)} so far, ETA {duration(self.eta())}")

    def heartbeat(self) -> None:
        """The line a log gets when HEARTBEAT_S have passed without one (the timer calls it)."""
        if self.phase_text():
            self._line()

    def _line(self) -> None:
        note(self.status())
        self._schedule(self.HEARTBEAT_S)

    def _schedule(self, seconds: float) -> None:
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = threading.Timer(seconds, self.heartbeat)
            self._timer.daemon = True
            self._timer.start()


class _LiveColumn:
    """A rich progress column whose text a function gives at each redraw."""

    def __init__(self, text, style: str = "") -> None:
        self.text, self.style, self.max_refresh = text, style, None

    def __call__(self, task):
        from rich.text import Text

        return Text(self.text(), style=self.style)

    def get_table_column(self):
        from rich.table import Column

        return Column(no_wrap=True)


__all__ = ["RichProgress", "show_run", "show_prompt", "show_compare", "show_kernels", "print_json",
           "jsonable", "note", "print_table", "fit_widths", "stdout_console", "duration"]
