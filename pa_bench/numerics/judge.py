"""The parity verdict of one kernel output, from data alone (no backend, no records).

``judge`` applies docs/DESIGN.md's parity rule through :func:`pa_bench.numerics.metrics.evaluate_parity`:
the error columns cover every compared row; the verdict is taken on the rows the numerics
model ran on (all of them, or a seeded sample of them on very long shapes), and a NaN/Inf
anywhere fails it. A kernel that rounds an input beyond the cache's format
(``Variant.input_rounding``) is also held to the accuracy budget (:func:`with_budget`,
:func:`pa_bench.numerics.metrics.judge_budget`): the row passes only if both rules hold. ``twin_note`` is the bitwise check of a variant against its twin (v2t vs v2).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from pa_bench.numerics.metrics import ParityMetrics, evaluate_parity, judge_budget


@dataclass(frozen=True)
class Judgement:
    """The parity columns of one row and the notes its reason carries."""

    metrics: ParityMetrics
    notes: tuple[str, ...] = ()
    budget_pass: bool | None = None   # the accuracy budget's verdict (None: not judged)

    @property
    def passed(self) -> bool:
        """The row's verdict: parity holds, and the budget where it was judged."""
        return self.metrics.parity_pass and self.budget_pass is not False


def judge(out: np.ndarray, ref: np.ndarray, model_err: float, canary_ok: bool | None = True,
          model_rows: np.ndarray | None = None) -> Judgement:
    """Judge ``out`` against the FP64 ``ref`` (both [Hq, R, D]) and the model's max abs error.

    ``model_rows``: positions (along R) the model ran on; None: every row."""
    full = evaluate_parity(out, ref, model_err=model_err, canary_ok=canary_ok)
    notes: list[str] = []
    if model_rows is not None:
        part = evaluate_parity(out[:, model_rows], ref[:, model_rows], model_err=model_err,
                               canary_ok=canary_ok)
        passed = part.parity_pass and full.nan_inf == 0
        full = replace(full, err_ratio=part.err_ratio, floor=part.floor, parity_pass=passed,
                       reason=full.reason if full.nan_inf else part.reason)
        notes.append(f"parity judged on the {len(model_rows)} of {out.shape[1]} rows the numerics "
                     f"model ran on")
    if not full.parity_pass:
        notes.append(f"parity: {full.reason}")
    return Judgement(full, tuple(notes))


def with_budget(judgement: Judgement, quant_err: float | None) -> Judgement:
    """``judgement`` also held to the accuracy budget: max_abs_err (every compared row) at most
    the KV quantisation error ``quant_err`` of the same rows. A failed budget, or one that cannot
    be judged (no quantisation error: the parity verdict alone stands), says so in a note."""
    ok, reason = judge_budget(judgement.metrics.max_abs_err, quant_err)
    note = () if ok else (reason if ok is None else f"accuracy budget: {reason}",)
    return replace(judgement, budget_pass=ok, notes=judgement.notes + note)


def twin_note(variant: str, twin: str, same_bits: bool, max_diff: float | None) -> str | None:
    """The parity note of a variant that is not bitwise identical to its twin (None: it is)."""
    if same_bits:
        return None
    diff = "unknown" if max_diff is None else f"{max_diff:.3g}"
    return f"parity: {variant} is not bitwise identical to {twin} on the same MMA path (max difference {diff})"


__all__ = ["Judgement", "judge", "with_budget", "twin_note"]
