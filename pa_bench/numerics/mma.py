"""How ``mma.sync`` (f16 inputs, f32 accumulator) adds: an emulation for NumPy or CuPy arrays.

A tensor core does not round every addition to nearest. For one m16n8k16 MMA each output element
is ``c + sum_k a[k]*b[k]`` over 16 exact products, computed as a *block FMA* (Fasi et al. 2021,
"Numerical behavior of NVIDIA tensor cores"; Khattak and Mikaitis 2025, "Accurate models of NVIDIA
tensor cores", whose H100 model for f16 -> f32 has these parameters)::

    E   = the largest exponent among c and the 16 products
    q   = 2^(E - 23 - EXTRA_BITS)              (fp32's last place at E, EXTRA_BITS bits finer)
    t_i = trunc(x_i / q) * q                   (every term truncated toward zero on that grid)
    d   = round_toward_zero_fp32(sum_i t_i)    (the sum itself is exact)

Calibrated on the H200 probe (shared/probes/mma_rounding.py, re-created on the CPU in
docs/NUMERICS.md): EXTRA_BITS = 2 reproduces its relative errors after 1,024 / 65,536 / 262,144
MMAs of positive terms (-8.8e-5 / -5.5e-3 / -2.2e-2) to two digits; 0, 1 or 3 extra bits miss by
a factor of 2 or more. On the Turing path (m16n8k8, ``k_group = 8``) the same rule is applied to
each MMA of 8 products (not calibrated: the probe uses m16n8k16).

Every step is an exact operation on float64 (products of an f16 and an int8-valued f16 have at
most 22 significant bits; the truncated terms are multiples of q whose sum fits in 53 bits) or a
rounding fixed by IEEE 754, so the result does not depend on the order of the sum: NumPy and
CuPy give the same bits.
"""

from __future__ import annotations

import numpy as np

EXTRA_BITS = 2     # alignment bits below fp32's last place (calibrated, see above)
MMA_K = 16         # products per m16n8k16 MMA (per output element)


def round_toward_zero_f32(s, xp=np):
    """float64 ``s`` rounded toward zero to float32 (finite values in float32's range).

    Rounded to nearest, then one step back toward zero where that went past ``s``: a step toward
    zero is the bit pattern minus one (sign and magnitude), for either sign."""
    r = s.astype(xp.float32)
    over = xp.abs(r.astype(xp.float64)) > xp.abs(s)
    return (r.view(xp.int32) - over.astype(xp.int32)).view(xp.float32)


def block_fma(c, prods, xp=np, extra_bits: int = EXTRA_BITS, axis: int = -1):
    """One MMA's accumulation: float32 ``c`` [...] plus the exact float64 products ``prods``
    (``axis``: the products of one output element; the other axes as ``c``'s) -> float32 [...].
    ``prods`` is overwritten."""
    c64 = c.astype(xp.float64)
    big = xp.maximum(xp.max(xp.abs(prods), axis=axis), xp.abs(c64))
    _, e = xp.frexp(big)               # big = m * 2^e, m in [0.5, 1): largest exponent E = e - 1
    # 1/q = 2^(23 + extra_bits - E); all terms zero (big = 0) gives a harmless e = 0
    inv_q = xp.ldexp(xp.ones_like(big), 24 + extra_bits - e)
    xp.multiply(prods, xp.expand_dims(inv_q, axis), out=prods)
    xp.trunc(prods, out=prods)
    n = xp.sum(prods, axis=axis) + xp.trunc(c64 * inv_q)
    return round_toward_zero_f32(n / inv_q, xp)


# Scale of the products' grid in float32: any power of two up to here is finite. Where the
# largest term is the accumulator and the products are all zero, 1/q can pass float32's range;
# those zero products stay zero at any finite scale, and the accumulator's term is scaled in float64.
_MAX_INV_Q32 = 2.0**100


def mma_accumulate(acc, p16, v, xp=np, k_group: int = MMA_K, extra_bits: int = EXTRA_BITS):
    """``acc += p16 @ v`` for one 16-key slice as the MMAs do it: float32 ``acc`` [..., R, D],
    fp16-valued ``p16`` [..., R, 16] and ``v`` [..., 16, D] (int8 values; any float dtype).

    ``k_group`` products per MMA: 16 (m16n8k16, one MMA) or 8 (Turing's m16n8k8, two MMAs
    in a chain, keys 0-7 then 8-15).

    The same bits as :func:`block_fma` on float64 products, at half the memory traffic: an fp16
    value times an int8 value has at most 19 significant bits, so the products, their scaling
    by a power of two onto the grid and their truncation are exact in float32 (a product that
    the scaling takes below float32's normal range is below 1 and truncates to 0 either way);
    the truncated terms are integers below 2^26, whose sum is exact in any order as integers.
    (The one bit that could differ: the sign of a zero result from an accumulator of -0.0, which
    a chain that starts from +0.0 never holds.)"""
    f32, f64 = xp.float32, xp.float64
    keys = p16.shape[-1]
    pt = xp.swapaxes(p16, -1, -2).astype(f32)[..., :, :, None]     # [..., 16, R, 1]
    vt = v.astype(f32)[..., :, None, :]                           # [..., 16, 1, D]
    for k0 in range(0, keys, k_group):
        prods = pt[..., k0:k0 + k_group, :, :] * vt[..., k0:k0 + k_group, :, :]   # [..., k, R, D]
        big = xp.maximum(xp.max(prods, axis=-3), -xp.min(prods, axis=-3))
        big = xp.maximum(big, xp.abs(acc))
        _, e = xp.frexp(big)          # as in block_fma: 1/q = 2^(24 + extra_bits - e)
        inv_q = xp.ldexp(xp.ones(big.shape, f64), 24 + extra_bits - e)
        # scaled onto the grid and cast to int32, which truncates toward zero: |terms| < 2^26
        terms = _scaled_int32(prods, xp.minimum(inv_q, _MAX_INV_Q32).astype(f32)[..., None, :, :], xp)
        # 16 terms sum below 2^30: exact in int32
        n = xp.sum(terms, axis=-3, dtype=xp.int32).astype(f64) + xp.trunc(acc.astype(f64) * inv_q)
        acc = round_toward_zero_f32(n / inv_q, xp)
    return acc


def _scaled_int32(x, scale, xp):
    """``int32(x * scale)`` (float32 product, cast toward zero); on NumPy in one pass."""
    if xp is np:
        return np.multiply(x, scale, out=np.empty(x.shape, np.int32), casting="unsafe")
    return (x * scale).astype(xp.int32)


def rn_accumulate(acc, p16, v, xp=np):
    """``acc += p16 @ v`` with the slice's sum exact and one round-to-nearest addition (what a
    fresh accumulator per MMA added with ``__fadd_rn`` gives): the order-free ideal."""
    exact = xp.matmul(p16.astype(xp.float64), v.astype(xp.float64))   # exact: < 2^27, on 2^-24
    return acc + exact.astype(xp.float32)


__all__ = ["EXTRA_BITS", "MMA_K", "block_fma", "mma_accumulate", "rn_accumulate",
           "round_toward_zero_f32"]
