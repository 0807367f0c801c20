"""The parity verdict of one kernel output, from data alone (no backend, no records).

``judge`` applies docs/DESIGN.md's parity rule through :func:`pa_bench.numerics.metrics.evaluate_parity`:
the error columns cover every compared row; the verdict is taken on the rows the numerics
model ran on (all of them, or a seeded sample of them on very long shapes), and a NaN/Inf
anywhere fails it. ``twin_note`` is the bitwise check of a variant against its twin (v2t vs v2).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from pa_bench.numerics.metrics import ParityMetrics, evaluate_parity


@dataclass(frozen=True)
class Judgement:
    """The parity columns of one row and the notes its reason carries."""

    metrics: ParityMetrics
    notes: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        return self.metrics.parity_pass


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


def twin_note(variant: str, twin: str, same_bits: bool, max_diff: float | None) -> str | None:
    """The parity note of a variant that is not bitwise identical to its twin (None: it is)."""
    if same_bits:
        return None
    diff = "unknown" if max_diff is None else f"{max_diff:.3g}"
    return f"parity: {variant} is not bitwise identical to {twin} on the same MMA path (max difference {diff})"


__all__ = ["Judgement", "judge", "twin_note"]
