"""The prompt read (``pa-bench prompt``) in a report: its table, the PR's engine figure beside it,
and the cumulative-time plot; all from the run's ``meta.json["prompt"]`` and ``prompt.csv``.

The PR's 1473 -> 1550 tok/s is a whole engine reading a prompt (projections, MLP, norms,
sampling and attention); a prompt run times attention alone. The section says so wherever it
puts the two side by side.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pa_bench import fmt
from pa_bench.fmt import DASH
from pa_bench.store.prompt_rows import MEASURED, PromptRow, read_prompt_csv

PLOT_CUMULATIVE = "prompt_cumulative.png"

HEADER = ["variant", "prompt attention ms", "attention-only tok/s", "speed-up vs v1 [q1–q3]",
          "slowest chunks' share", "interp. check", "status"]
ALIGN = ["l", "r", "r", "r", "r", "r", "l"]
ENGINE_NOTE = ("The PR's figure is a whole engine reading the prompt (QKV and output projections, "
               "MLP, norms, sampling and attention); pa-bench's is attention alone, so the two "
               "tok/s are different quantities and an attention speed-up shows up diluted in the "
               "engine's figure.")


def _f(x: Any) -> float | None:
    try:
        f = float(x)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def totals_rows(prompt: Mapping[str, Any]) -> list[list[str]]:
    """One row per variant (the ``HEADER`` columns) from ``meta["prompt"]``."""
    rows = []
    for t in prompt.get("totals") or []:
        total, tok_s = _f(t.get("total_ms")), _f(t.get("tokens_per_s"))
        sp, lo, hi = _f(t.get("speedup_vs_v1")), _f(t.get("speedup_lo")), _f(t.get("speedup_hi"))
        speed = DASH if sp is None else f"{sp:.3f}x"
        if sp is not None and lo is not None and hi is not None and t.get("variant") != "v1":
            speed += f" [{lo:.3f}{DASH}{hi:.3f}]"
        share = _f(t.get("longest_share"))
        share_text = DASH if share is None else (
            f"{100 * share:.1f}% in {t.get('longest_chunks')} chunks")
        err = _f(t.get("holdout_err"))
        check = DASH if err is None else f"{100 * err:+.2f}% at chunk {t.get('holdout_chunk')}"
        status = "ok" if total is not None else (
            ("failed: " if t.get("failed") else "skipped: ") + str(t.get("reason") or ""))
        rows.append([str(t.get("variant")), DASH if total is None else f"{total:.1f}",
                     DASH if tok_s is None else f"{tok_s:,.0f}", speed, share_text, check, status])
    return rows


def untimed_line(prompt: Mapping[str, Any]) -> str | None:
    """One line for a prompt read of which no variant was timed, and none failed (on a CPU: the
    numpy backend times nothing), in place of an all-skipped table; None when any has a total."""
    totals = prompt.get("totals") or []
    if not totals or any(_f(t.get("total_ms")) is not None or t.get("failed") for t in totals):
        return None
    reasons = {str(t.get("variant")): str(t.get("reason") or "not timed").removeprefix("timing: ")
               for t in totals}
    why = next(iter(reasons.values())) if len(set(reasons.values())) == 1 else \
        "; ".join(f"{v}: {r}" for v, r in reasons.items())
    return (f"prompt read: {prompt.get('tokens')} tokens in {prompt.get('chunks')} chunks of "
            f"{prompt.get('chunk')}, not timed: {why}")


def describe(prompt: Mapping[str, Any]) -> list[str]:
    """Sentences: the chunks, what was timed, how the rest was filled in and checked."""
    n, chunk, tokens = prompt.get("chunks"), prompt.get("chunk"), prompt.get("tokens")
    measured = prompt.get("measured") or []
    last = "a partial last chunk" if prompt.get("partial_last") else "every chunk whole"
    breaks = prompt.get("regime_breaks") or []
    lines = [
        f"{tokens} tokens in {n} chunks of {chunk} (0 x {chunk}, {chunk} x {chunk}, ...; {last}). "
        f"Timed: chunks {', '.join(map(str, measured))} ({len(measured)} of {n}), with the same "
        f"timing as `pa-bench time`; the others interpolated {prompt.get('interpolation', '')}"
        + (f" (breaks at chunks {', '.join(map(str, breaks))})" if breaks else "") + ".",
        "Interp. check: the worst leave-one-out error — a timed chunk predicted from its timed "
        "neighbours alone (twice the usual gap, so pessimistic). Speed-up: total v1 / total "
        "variant; [q1–q3] of the same ratio summed round by round (v1 and the variant timed back "
        f"to back in each round). Slowest chunks' share: the part of the total spent in the "
        f"slowest {100 * float(prompt.get('longest_fraction', 0.25)):.0f}% of the chunks.",
        _timing_line(prompt),
        "Parity checked on the first, middle and last chunks ("
        + ", ".join(f"{j}: {_spec(j, chunk, tokens)}" for j in prompt.get("parity_chunks") or [])
        + "): see the per-shape tables.",
    ]
    return lines


def _spec(j: int, chunk: Any, tokens: Any) -> str:
    """Chunk j's shape as the records name it (context x queries); the last may be partial."""
    start = j * int(chunk)
    return f"{start}x{min(int(chunk), int(tokens) - start)}"


def _timing_line(prompt: Mapping[str, Any]) -> str:
    t = ((prompt.get("config") or {}).get("timing")) or {}
    if not t:
        return "Timing settings: not recorded."
    mode = "hot (back-to-back launches)" if t.get("hot") else f"cold ({fmt.l2_flush_text(t)} before each sample)"
    primed = ", every variant called once untimed before its samples in a round" if (
        t.get("prime") and not t.get("hot")) else ""
    return (f"Timing per timed chunk, all variants interleaved: {mode}, {t.get('warmup')} warm-up "
            f"launches{primed}, until each median's 95 % interval is within "
            f"{100 * float(t.get('max_noise', math.nan)):.2g}% of it with "
            f">= {t.get('min_seconds')} s and >= {t.get('min_samples')} samples, or "
            f"{t.get('max_seconds')} s.")


def beside_pr(prompt: Mapping[str, Any], gpu: str | None) -> list[list[str]]:
    """Rows ``[who, what, v1 tok/s, v2T tok/s, gain]``: the PR's engine and this run's attention."""
    ref = prompt.get("reference") or {}
    tok = ref.get("tok_s") or {}
    rows = []
    pr_v1, pr_v2t = _f(tok.get("v1")), _f(tok.get("v2t"))
    if pr_v1 or pr_v2t:
        gain = f"{100 * (pr_v2t / pr_v1 - 1):+.1f}%" if pr_v1 and pr_v2t else DASH
        rows.append(["PR 2092", "whole engine, RTX 2080 Ti", _tok(pr_v1), _tok(pr_v2t), gain])
    ours = {t.get("variant"): _f(t.get("tokens_per_s")) for t in prompt.get("totals") or []}
    v1, v2t = ours.get("v1"), ours.get("v2t")
    if v1 or v2t:
        gain = f"{100 * (v2t / v1 - 1):+.1f}%" if v1 and v2t else DASH
        rows.append(["pa-bench", f"attention alone, {gpu or 'this GPU'}", _tok(v1), _tok(v2t), gain])
    return rows


def _tok(x: float | None) -> str:
    return DASH if x is None else f"{x:,.0f}"


def _md_table(header: list[str], rows: list[list[str]], align: list[str]) -> list[str]:
    out = ["| " + " | ".join(header) + " |",
           "| " + " | ".join("---:" if a == "r" else "---" for a in align) + " |"]
    out += ["| " + " | ".join(str(c).replace("|", "\\|") for c in r) + " |" for r in rows]
    return out


def draw_cumulative(rows: list[PromptRow], out_path: Path) -> bool:
    """Cumulative attention time against position in the prompt, one line per variant, timed
    chunks marked. Raises ImportError without matplotlib; False when nothing has a time."""
    from matplotlib.figure import Figure  # noqa: PLC0415 - optional dependency

    by_variant: dict[str, list[PromptRow]] = {}
    for r in rows:
        by_variant.setdefault(r.variant, []).append(r)
    lines = {v: sorted(rs, key=lambda r: r.chunk) for v, rs in by_variant.items()
             if rs and all(r.ms is not None for r in rs)}
    if not lines:
        return False
    fig = Figure(figsize=(7.0, 4.5), layout="constrained")
    ax = fig.add_subplot()
    for i, (v, rs) in enumerate(lines.items()):
        ends, cum, total = [0], [0.0], 0.0
        for r in rs:
            total += r.ms
            ends.append(r.start + r.queries)
            cum.append(total)
        ax.plot(ends, cum, color=f"C{i}", label=v)
        marks = [k + 1 for k, r in enumerate(rs) if r.source == MEASURED]
        ax.plot([ends[k] for k in marks], [cum[k] for k in marks], "o", color=f"C{i}", ms=3)
    ax.set_xlabel("position in the prompt (tokens read)")
    ax.set_ylabel("cumulative attention time (ms)")
    ax.set_title("Prompt read: attention time so far (dots: timed chunks)")
    ax.legend(fontsize=8)
    fig.savefig(out_path, dpi=120)
    return True


def prompt_section(run_path: str | Path, prompt: Mapping[str, Any] | None, gpu: str | None,
                   out_dir: str | Path | None = None, prefix: str = "",
                   plots: bool = True) -> list[str]:
    """The report's "Prompt read" section from meta.json's ``prompt``; [] for a run that is not
    a prompt run (``prompt`` None)."""
    if prompt is None:
        return []
    out = ["## Prompt read", ""] + [f"- {line}" for line in describe(prompt)] + [""]
    rows = totals_rows(prompt)
    out += _md_table(HEADER, rows, ALIGN) if rows else ["No totals recorded (interrupted run?)."]
    pr = beside_pr(prompt, gpu)
    if pr:
        src = (prompt.get("reference") or {}).get("source")
        out += ["", "### Beside the PR's prompt read", ""]
        out += _md_table(["who", "what", "v1 tok/s", "v2T tok/s", "v2T gain"], pr,
                         ["l", "l", "r", "r", "r"])
        out += ["", ENGINE_NOTE + (f" The PR's figure: {src.rstrip('.')}." if src else "")]
    if plots:
        out += [""]
        try:
            made = draw_cumulative(read_prompt_csv(run_path),
                                   Path(out_dir or run_path) / (prefix + PLOT_CUMULATIVE))
        except ImportError:
            made = None
            out += ["Cumulative-time plot skipped: matplotlib is not installed."]
        if made:
            out += [f"![Cumulative attention time]({prefix + PLOT_CUMULATIVE})"]
        elif made is False:
            out += ["No timed chunks: nothing to plot."]
    return out + [""]


__all__ = ["prompt_section", "totals_rows", "describe", "untimed_line", "beside_pr", "draw_cumulative", "HEADER",
           "ALIGN", "ENGINE_NOTE", "PLOT_CUMULATIVE"]
