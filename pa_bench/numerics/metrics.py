"""Error metrics of a kernel's output against the FP64 reference, and the parity rule.

Parity (docs/DESIGN.md, "Metrics"): a kernel passes iff its output has no NaN/Inf, its guard regions are
intact, and ``kernel_err <= 2 * model_err + floor``, where ``model_err`` is the numerics
model's max abs error and ``floor = 4 * spacing(float32(max|ref|))`` (a few fp32 ulps of the
output's magnitude) so that a model error of exactly zero cannot fail an exact kernel.

Metrics are computed in float64. A NaN or Inf in the output makes the error unbounded: the
error metrics are then ``inf`` (cosine ``nan``) and ``nan_inf`` counts the bad values.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np


@dataclass(frozen=True)
class ParityMetrics:
    """The parity columns of one shape x variant (names as in records.csv)."""

    max_abs_err: float
    rel_l2_err: float
    nmse: float
    cosine: float
    nan_inf: int
    model_max_abs_err: float | None
    err_ratio: float | None
    floor: float
    parity_pass: bool
    reason: str

    def as_dict(self) -> dict:
        return asdict(self)


def _host(x) -> np.ndarray:
    """A NumPy float64 view of x (CuPy arrays are copied to the host)."""
    if hasattr(x, "get") and not isinstance(x, np.ndarray):
        x = x.get()
    return np.asarray(x, dtype=np.float64)


def error_metrics(out, ref) -> dict:
    """``max_abs_err``, ``rel_l2_err``, ``nmse`` (sum (o-r)^2 / sum r^2), ``cosine``, ``nan_inf``.

    ``out`` and ``ref`` must have the same shape. NaN/Inf values in ``out`` are counted in
    ``nan_inf`` and make the errors ``inf`` (cosine ``nan``), without runtime warnings.
    """
    o, r = _host(out), _host(ref)
    if o.shape != r.shape:
        raise ValueError(f"error_metrics: output shape {o.shape} != reference shape {r.shape}")
    nan_inf = int(o.size - np.count_nonzero(np.isfinite(o)))
    if nan_inf or not np.all(np.isfinite(r)):
        inf = math.inf
        return {"max_abs_err": inf, "rel_l2_err": inf, "nmse": inf, "cosine": math.nan,
                "nan_inf": nan_inf}
    if o.size == 0:
        return {"max_abs_err": 0.0, "rel_l2_err": 0.0, "nmse": 0.0, "cosine": 1.0, "nan_inf": 0}
    diff = o - r
    max_abs = float(np.max(np.abs(diff)))
    err_sq = float(np.dot(diff.ravel(), diff.ravel()))
    ref_sq = float(np.dot(r.ravel(), r.ravel()))
    out_sq = float(np.dot(o.ravel(), o.ravel()))
    if ref_sq > 0:
        nmse = err_sq / ref_sq
    else:
        nmse = 0.0 if err_sq == 0 else math.inf
    if ref_sq > 0 and out_sq > 0:
        cosine = float(np.dot(o.ravel(), r.ravel())) / math.sqrt(ref_sq * out_sq)
        cosine = min(1.0, max(-1.0, cosine))
    else:
        cosine = 1.0 if ref_sq == out_sq else 0.0  # both zero: identical
    return {"max_abs_err": max_abs, "rel_l2_err": math.sqrt(nmse), "nmse": nmse,
            "cosine": cosine, "nan_inf": 0}


def parity_floor(ref) -> float:
    """``4 * spacing(float32(max|ref|))``: a few fp32 ulps of the output's magnitude."""
    r = _host(ref)
    finite = r[np.isfinite(r)]
    biggest = float(np.max(np.abs(finite))) if finite.size else 0.0
    return float(4 * np.spacing(np.float32(biggest)))


def judge_parity(kernel_err: float, model_err: float | None, floor: float, nan_inf: int = 0,
                 canary_ok: bool | None = True) -> tuple[bool, str]:
    """Parity verdict and its reason: no NaN/Inf, guards intact (None: not checked), and
    ``kernel_err <= 2 * model_err + floor``."""
    if nan_inf:
        return False, f"{nan_inf} NaN/Inf value(s) in the output"
    if canary_ok is False:
        return False, "guard region overwritten (out-of-bounds write)"
    if kernel_err is None or not math.isfinite(kernel_err):
        return False, f"kernel error is {kernel_err}"
    if model_err is None or not math.isfinite(model_err):
        return False, f"no finite model error to judge against (model error {model_err})"
    bound = 2 * model_err + floor
    if kernel_err <= bound:
        return True, (f"max err {kernel_err:.3g} <= 2 x model {model_err:.3g} + floor "
                      f"{floor:.3g}")
    return False, (f"max err {kernel_err:.3g} > 2 x model {model_err:.3g} + floor {floor:.3g} "
                   f"(= {bound:.3g})")


def judge_budget(kernel_err: float | None, quant_err: float | None) -> tuple[bool | None, str]:
    """Accuracy-budget verdict of a kernel that rounds an input beyond the cache's format
    (``Variant.input_rounding``) and its reason: its error against FP64 may be at most the KV
    quantisation error of the same rows, ``kernel_err <= quant_err``. None (not judged) where
    no finite quantisation error exists (data without the unquantised K/V)."""
    if quant_err is None or not math.isfinite(quant_err):
        return None, (f"accuracy budget not judged: no KV quantisation error on this data "
                      f"(quant_max_abs_err {quant_err}; it needs the unquantised K/V)")
    if kernel_err is None or not math.isfinite(kernel_err):
        return False, f"kernel error is {kernel_err}, over the KV quantisation error {quant_err:.3g}"
    if kernel_err <= quant_err:
        return True, f"max err {kernel_err:.3g} <= KV quantisation error {quant_err:.3g}"
    over = f"{kernel_err / quant_err:.3g}x" if quant_err > 0 else "inf x"
    return False, (f"max err {kernel_err:.3g} > KV quantisation error {quant_err:.3g} "
                   f"(over by {kernel_err - quant_err:.3g}, {over})")


def err_ratio(kernel_err: float, model_err: float | None) -> float | None:
    """kernel_err / model_err; 1.0 when both are zero, inf when only the model's is zero."""
    if model_err is None or kernel_err is None:
        return None
    if model_err > 0:
        return kernel_err / model_err
    return 1.0 if kernel_err == 0 else math.inf


def evaluate_parity(out, ref, model_out=None, canary_ok: bool | None = True,
                    model_err: float | None = None) -> ParityMetrics:
    """All parity columns for one kernel output: metrics vs ``ref`` and the verdict against the
    model (give ``model_out`` or its max abs error ``model_err``)."""
    m = error_metrics(out, ref)
    if model_err is None and model_out is not None:
        model_err = error_metrics(model_out, ref)["max_abs_err"]
    floor = parity_floor(ref)
    ok, reason = judge_parity(m["max_abs_err"], model_err, floor, m["nan_inf"], canary_ok)
    return ParityMetrics(max_abs_err=m["max_abs_err"], rel_l2_err=m["rel_l2_err"],
                         nmse=m["nmse"], cosine=m["cosine"], nan_inf=m["nan_inf"],
                         model_max_abs_err=model_err, err_ratio=err_ratio(m["max_abs_err"], model_err),
                         floor=floor, parity_pass=ok, reason=reason)


__all__ = ["ParityMetrics", "error_metrics", "parity_floor", "judge_parity", "judge_budget", "err_ratio",
           "evaluate_parity"]
