"""Inputs a kernel rounds beyond the cache's format (``Variant.input_rounding``), in one place.

The numerics model and the FP64 reference of the rounding's cost (the runner's
``input_round_err``) both round through :func:`round_q_int8_rows`; docs/NUMERICS.md, "Input
rounding", states the contract the kernels follow. "q-int8-row", per query head and row, in fp32
with IEEE round-to-nearest-even::

    amax    = max_d |q[d]|
    amax 0:   q_scale = 1, q_i8 = 0
    else:     q_scale = amax / 127;  inv = 127 / amax   (one fp32 division each)
              q_i8[d] = clamp(rint(q[d] * inv), -127, 127)   (one fp32 multiply; half to even)

The rounded Q is ``q_i8 * q_scale``: :func:`rounded_q` forms it in float64, where the product of
an int8 and an fp32 is exact. A dot product of it with int8 K is then ``q_scale * S_i32``
exactly (every partial sum is q_scale times an integer below 2^21), so its one rounding to fp32
is the kernels' ``float32(float32(S_i32) * q_scale)``: the model needs no other change.
"""

from __future__ import annotations

import numpy as np

from pa_bench.variants import INPUT_ROUNDINGS

Q_INT8_ROW = "q-int8-row"


def check_rounding(kind: str | None) -> str | None:
    """``kind`` if it is None or a known rounding (INPUT_ROUNDINGS), else ValueError naming it."""
    if kind is not None and kind not in INPUT_ROUNDINGS:
        raise ValueError(f"input_rounding must be one of {INPUT_ROUNDINGS} or None, got {kind!r}")
    return kind


def round_q_int8_rows(q, xp=np):
    """``(q_i8 int8 [..., D], q_scale float32 [...])``: ``q`` (fp16 or fp32 [..., D]) rounded to
    int8 with one fp32 scale per row (the last axis reduced), as "q-int8-row" says."""
    f32 = xp.float32
    qf = xp.asarray(q).astype(f32)                              # fp16 -> fp32: exact
    amax = xp.max(xp.abs(qf), axis=-1)
    zero = amax == 0
    safe = xp.where(zero, f32(1), amax)
    scale = xp.where(zero, f32(1), safe / f32(127)).astype(f32)  # one fp32 division, rn
    inv = (f32(127) / safe).astype(f32)                         # one fp32 division, rn
    scaled = (qf * inv[..., None]).astype(f32)                  # one fp32 multiply, rn
    q_i8 = xp.clip(xp.rint(scaled), -127, 127).astype(xp.int8)  # half to even, then the clamp
    q_i8 = xp.where(zero[..., None], xp.int8(0), q_i8).astype(xp.int8)
    return q_i8, scale


def rounded_q(q, kind: str | None, xp=np):
    """``q`` as a kernel with input rounding ``kind`` sees it, float64 [..., D] (exact), or ``q``
    itself when ``kind`` is None."""
    if check_rounding(kind) is None:
        return q
    q_i8, scale = round_q_int8_rows(q, xp)
    return q_i8.astype(xp.float64) * scale.astype(xp.float64)[..., None]


__all__ = ["Q_INT8_ROW", "check_rounding", "round_q_int8_rows", "rounded_q"]
