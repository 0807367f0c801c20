"""A NumPy model of the kernels' arithmetic: the error the *algorithm* is expected to have.

It follows DESIGN.md "The arithmetic every kernel does" step by step, in fp32, tile by tile::

    s_raw[j] = sum_d q[i,d] * k_i8[j,d]                 (fp32 accumulation of exact products)
    s[j]     = s_raw[j] * (k_scale[j] * qk_scale_log2)  (fp32; invalid keys: -inf)
    per tile:  m_new = max(m, max_j s[j]);  alpha = exp2(m - m_new)   (0 while m == -inf)
               p[j]  = exp2(s[j] - m_new)
               l     = l*alpha + sum_j p[j]                            (from unrounded p)
               P[j]  = fp16_rn(p[j] * (v_scale[j] * p_scale))
               acc   = acc*alpha + sum_j float(P[j]) * v_i8[j,:]
    out[i,:] = acc * (1/l) * (1/p_scale)  -> out_dtype

Only the order of the fp32 sums inside a dot product differs from a kernel's MMAs (rounding
level). It is vectorised over heads and rows and loops over key tiles only, computing the
scores of a block of tiles with one matmul; tiles past the last key any selected row can see
are not visited. This is also the output of the ``numpy`` backend.
"""

from __future__ import annotations

import numpy as np

from .inputs import Inputs

TILE_KEYS = {"v1": 64, "v2": 16, "v2t": 16}

_FP16_MIN_NORMAL = np.float32(2.0**-14)
_BLOCK_BYTES = 32 << 20  # fp32 scores per block of tiles (all heads, all rows)
_MAX_BLOCK_KEYS = 2048


def round_fp16(x: np.ndarray) -> np.ndarray:
    """``x.astype(float16).astype(float32)`` for finite ``0 <= x < 65520``, several times faster.

    Normal range: round-to-nearest-even of the float32 mantissa to 10 bits on the bit pattern.
    Subnormal range (x < 2^-14): ``(x + 0.5) - 0.5`` rounds to a multiple of 2^-24, fp16's
    subnormal step, because float32's step in [0.5, 1) is 2^-24 (round to nearest even too).
    """
    bits = x.view(np.uint32)
    normal = ((bits + np.uint32(0x0FFF) + ((bits >> np.uint32(13)) & np.uint32(1)))
              & np.uint32(0xFFFFE000)).view(np.float32)
    small = (x + np.float32(0.5)) - np.float32(0.5)
    return np.where(x < _FP16_MIN_NORMAL, small, normal)


def model_attention(inputs: Inputs, tile_keys: int, rows: np.ndarray | None = None) -> np.ndarray:
    """The kernels' arithmetic on ``inputs`` with ``tile_keys`` keys per tile: float32 [Hq, R, D].

    ``rows``: sorted query-row indices (None: all rows). With ``out_dtype: float16`` the result
    is rounded through fp16 (and returned as float32).
    """
    tile = int(tile_keys)
    if tile < 1:
        raise ValueError(f"tile_keys must be positive, got {tile_keys}")
    f32 = np.float32
    q16 = inputs.q
    hq, nq, d = q16.shape
    hkv, nk, _ = inputs.k_i8.shape
    ctx = nk - nq
    group = hq // hkv
    rows = np.arange(nq, dtype=np.int64) if rows is None else np.asarray(rows, dtype=np.int64)
    n_rows = len(rows)
    if n_rows == 0:
        return np.zeros((hq, 0, d), dtype=f32)

    # Rows of one KV head's query heads stacked: index gi*R + r for query head g*group + gi.
    qf = q16[:, rows, :].astype(f32).reshape(hkv, group * n_rows, d)
    limit = np.tile(ctx + rows, group)  # last visible key of each stacked row
    n_visit = int(ctx + rows.max() + 1)
    k_mult = (inputs.k_scale[:, :n_visit] * f32(inputs.qk_scale_log2)).astype(f32)
    v_mult = (inputs.v_scale[:, :n_visit] * f32(inputs.p_scale)).astype(f32)

    gr = group * n_rows
    m = np.full((hkv, gr), -np.inf, dtype=f32)
    l = np.zeros((hkv, gr), dtype=f32)
    acc = np.zeros((hkv, gr, d), dtype=f32)

    block = _MAX_BLOCK_KEYS // tile * tile or tile
    block = max(tile, min(block, _BLOCK_BYTES // (4 * hkv * gr) // tile * tile))
    min_limit = int(limit.min())
    with np.errstate(invalid="ignore", over="ignore", under="ignore"):
        for b0 in range(0, n_visit, block):
            b1 = min(b0 + block, n_visit)
            kb = inputs.k_i8[:, b0:b1, :].astype(f32)
            s = np.matmul(qf, kb.transpose(0, 2, 1))  # s_raw [hkv, gr, keys]
            s *= k_mult[:, None, b0:b1]
            if b1 - 1 > min_limit:  # the causal edge crosses this block
                masked = np.arange(b0, b1)[None, :] > limit[:, None]
                s[:, masked] = -np.inf
            vb = inputs.v_i8[:, b0:b1, :].astype(f32)
            for t0 in range(0, b1 - b0, tile):
                st = s[:, :, t0:t0 + tile]
                m_new = np.maximum(m, st.max(axis=2))
                alpha = np.exp2(m - m_new)  # exp2(-inf) = 0 on the first tile
                alpha[m_new == -np.inf] = 1  # (a row with no valid key yet: nothing to rescale)
                p = np.exp2(st - m_new[:, :, None])
                l = l * alpha + p.sum(axis=2, dtype=f32)
                big_p = round_fp16(p * v_mult[:, None, b0 + t0:b0 + t0 + tile])
                if not (alpha == 1).all():  # acc * 1 is exact: skip it when no row rescales
                    acc *= alpha[:, :, None]
                acc += np.matmul(big_p, vb[:, t0:t0 + tile, :])
                m = m_new
    out = acc * (f32(1) / l)[:, :, None] * f32(1.0 / inputs.p_scale)
    out = out.reshape(hq, n_rows, d)
    if inputs.problem.out_dtype == "float16":
        out = out.astype(np.float16)
    return out.astype(f32, copy=False)


__all__ = ["model_attention", "TILE_KEYS"]
