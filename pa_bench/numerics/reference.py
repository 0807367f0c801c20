"""FP64 causal attention (the parity reference) for NumPy or CuPy arrays, and row sampling.

The reference is written once against an array module ``xp`` (``numpy`` or ``cupy``) using only
functions both have. It works head by head and in blocks of query rows, converting one KV head
at a time to float64, so memory stays at about ``block_rows x keys x 8`` bytes (plus one KV
head in float64) however long the context.
"""

from __future__ import annotations

import numpy as np


def dequantize(x_i8, scale, xp=np):
    """``x_i8 * scale`` per token in float64: int8 [..., D] and scales [...] -> float64 [..., D]."""
    # one pass: int8 times float64 is computed in float64 (int8 -> float64 is exact)
    return xp.asarray(x_i8) * xp.asarray(scale, dtype=xp.float64)[..., None]


def sample_rows(nq: int, n: int | None, seed: int = 0) -> np.ndarray:
    """Sorted unique query-row indices: ``n`` rows chosen at random (seeded), always including
    row 0 and row ``nq - 1``; every row when ``n`` is None or ``n >= nq``."""
    if nq < 1:
        raise ValueError(f"sample_rows: nq must be at least 1, got {nq}")
    if n is None or n >= nq:
        return np.arange(nq, dtype=np.int64)
    if n < 1:
        raise ValueError(f"sample_rows: n must be at least 1, got {n}")
    rng = np.random.default_rng([seed, nq, n])
    inner = rng.choice(np.arange(1, nq - 1), size=max(n - 2, 0), replace=False)
    return np.unique(np.concatenate([[0, nq - 1], inner]).astype(np.int64))


def reference_attention(q, k, v, ctx: int, softmax_scale: float, rows=None, xp=np,
                        block_rows: int = 256, *, k_scale=None, v_scale=None):
    """Causal GQA attention in float64: returns ``xp.float64 [Hq, R, D]``.

    ``q`` [Hq, Nq, D] (any float dtype), ``k``/``v`` [Hkv, Nk, D] float (dequantised int8, or
    the unquantised floats for the quantisation error). Alternatively pass int8 ``k``/``v``
    with ``k_scale``/``v_scale`` [Hkv, Nk] and each KV head is dequantised on the fly (saves
    holding a float64 copy of the whole cache). Query row ``i`` (absolute position ``ctx+i``)
    sees keys ``j <= ctx + i``; query head ``h`` uses KV head ``h // (Hq // Hkv)``. ``rows``:
    sorted query indices to compute (None: all).
    """
    hq, nq, d = q.shape
    hkv, nk = k.shape[0], k.shape[1]
    if hq % hkv:
        raise ValueError(f"heads: Hkv={hkv} must divide Hq={hq}")
    if nk != ctx + nq:
        raise ValueError(f"keys: Nk={nk} but ctx + Nq = {ctx} + {nq}")
    if (k_scale is None) != (v_scale is None):
        raise ValueError("give both k_scale and v_scale, or neither")
    group = hq // hkv
    if rows is None:
        rows_h = np.arange(nq, dtype=np.int64)
    else:
        rows_h = np.asarray(rows.get() if hasattr(rows, "get") else rows, dtype=np.int64)
    n_rows = len(rows_h)
    out = xp.empty((hq, n_rows, d), dtype=xp.float64)
    if n_rows == 0:
        return out
    if rows_h.min() < 0 or rows_h.max() >= nq:
        raise ValueError(f"rows must lie in [0, {nq})")
    block_rows = max(1, int(block_rows))
    kv_used = ctx + int(rows_h.max()) + 1  # keys any selected row can see
    neg_inf = float("-inf")

    for g in range(hkv):
        if k_scale is None:
            kg = xp.asarray(k[g, :kv_used], dtype=xp.float64)
            vg = xp.asarray(v[g, :kv_used], dtype=xp.float64)
        else:
            kg = dequantize(k[g, :kv_used], k_scale[g, :kv_used], xp)
            vg = dequantize(v[g, :kv_used], v_scale[g, :kv_used], xp)
        for h in range(g * group, (g + 1) * group):
            qh = xp.asarray(q[h], dtype=xp.float64)  # [Nq, D]: small beside the KV head
            for start in range(0, n_rows, block_rows):
                block = rows_h[start:start + block_rows]
                last = ctx + int(block[-1]) + 1  # keys this block can see
                qb = qh[xp.asarray(block)]
                s = xp.matmul(qb, kg[:last].T) * softmax_scale  # [B, last]
                limit = xp.asarray(ctx + block)[:, None]
                s = xp.where(xp.arange(last)[None, :] > limit, neg_inf, s)
                s = s - xp.max(s, axis=1, keepdims=True)
                p = xp.exp(s)
                denom = xp.sum(p, axis=1, keepdims=True)
                out[h, start:start + len(block)] = _pv(p, vg[:last], xp) / denom
    return out


def _pv(p, v, xp):
    """``p @ v`` ([B, N] x [N, D]). On NumPy as ``(v.T @ p.T).T``: OpenBLAS takes a slow path
    for a few rows against many keys (30x slower for 8 sampled rows x 64K keys); the transposed
    product is the same sum, in float64."""
    if xp is np:
        return xp.matmul(v.T, p.T).T
    return xp.matmul(p, v)


__all__ = ["reference_attention", "sample_rows", "dequantize"]
