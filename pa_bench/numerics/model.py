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

With split keys (v2/v2t on long contexts, see :func:`split_keys`) keys ``[0, split)`` and
``[split, end)`` run the steps above separately, from the same start, and are merged per row::

    m = max(m0, m1);  a_i = exp2(m_i - m);  l = l0*a0 + l1*a1;  acc = acc0*a0 + acc1*a1

Only the order of the fp32 sums inside a dot product differs from a kernel's MMAs (rounding
level). It is vectorised over heads and rows and loops over key tiles only, computing the
scores of a block of tiles with one matmul; tiles past the last key any selected row can see
are not visited. This is also the output of the ``numpy`` backend.
"""

from __future__ import annotations

import numpy as np

from pa_bench import variants as registry
from pa_bench.problem.inputs import Inputs


def tile_keys(variant: str) -> int:
    """Keys per online-softmax tile of ``variant`` (pa_bench.variants)."""
    return registry.get(variant).tile_keys


# Variants with splits_keys (v2, v2t: pa_bench.variants) split a warp task's keys between the
# two warps of a CTA when the chunk has few query
# rows (over all heads) and a long context: few warp tasks with many keys each, so both halves
# then run at once. Measured on the H200 (docs/PERF_NOTES.md): 64Kx512 and 2.1Kx256 with 32
# heads (16,384 and 8,192 rows) gain 30-40 %, 32Kx1024 and 64Kx2048 (32,768 and 65,536 rows) lose
# about 1 %. The rule depends on the problem only, so a row's bits never depend on the GPU.
SPLIT_MAX_ROWS = 16384         # query rows x query heads
SPLIT_MIN_CONTEXT = 1024       # keys before the chunk

# Key segments (issue #12): on long contexts every kernel runs the online softmax separately on
# each block of SEGMENT_KEYS keys, from a fresh state, and merges the segments per row in fp32,
# so no MMA accumulator lives for more than SEGMENT_KEYS / 16 slices (mma.sync's fp32
# accumulation drifts with the length of the chain). Segment z covers keys
# [z*S, min((z+1)*S, visible keys)); v2/v2t's two-warp split is off when segments are on.
SEGMENT_KEYS = 65536


def segment_keys(context: int) -> int:
    """The keys per segment for a chunk after ``context`` keys: SEGMENT_KEYS on contexts longer
    than SEGMENT_KEYS, else 0 (one segment: the whole key range)."""
    return SEGMENT_KEYS if int(context) > SEGMENT_KEYS else 0


def split_point(context: int) -> int:
    """The key at which split keys start the second half: half the context, in whole 16-key
    slices (so the first half never reaches the causal diagonal); 0 if that is no key at all."""
    return 16 * (int(context) // 32)


def split_keys(variant: str, queries: int, context: int, heads_q: int) -> int:
    """Where ``variant``'s kernel splits the keys of a chunk of ``queries`` rows of ``heads_q``
    query heads after ``context`` keys (0: it does not). See SPLIT_MAX_ROWS, SPLIT_MIN_CONTEXT."""
    entry = registry.find(variant)
    if entry is None or not entry.splits_keys or segment_keys(context):
        return 0
    if context < SPLIT_MIN_CONTEXT or queries * heads_q > SPLIT_MAX_ROWS:
        return 0
    return split_point(context)


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


def model_attention(inputs: Inputs, tile_keys: int, rows: np.ndarray | None = None,
                    split_keys: int = 0) -> np.ndarray:
    """The kernels' arithmetic on ``inputs`` with ``tile_keys`` keys per tile: float32 [Hq, R, D].

    ``rows``: sorted query-row indices (None: all rows). ``split_keys``: 0, or the key (a multiple
    of ``tile_keys``, at most the context) at which the keys are split in two halves that are
    merged at the end. With ``out_dtype: float16`` the result is rounded through fp16 (and
    returned as float32).
    """
    tile = int(tile_keys)
    if tile < 1:
        raise ValueError(f"tile_keys must be positive, got {tile_keys}")
    f32 = np.float32
    q16 = inputs.q
    hq, nq, d = q16.shape
    hkv, nk, _ = inputs.k_i8.shape
    ctx = nk - nq
    split = int(split_keys)
    if split < 0 or split > ctx or split % tile:
        raise ValueError(f"split_keys must be a multiple of {tile} in [0, {ctx}], got {split_keys}")
    group = hq // hkv
    rows = np.arange(nq, dtype=np.int64) if rows is None else np.asarray(rows, dtype=np.int64)
    n_rows = len(rows)
    if n_rows == 0:
        return np.zeros((hq, 0, d), dtype=f32)

    # Rows of one KV head's query heads stacked: index gi*R + r for query head g*group + gi.
    qf = q16[:, rows, :].astype(f32).reshape(hkv, group * n_rows, d)
    limit = np.tile(ctx + rows, group)  # last visible key of each stacked row
    n_visit = int(ctx + rows.max() + 1)
    with np.errstate(invalid="ignore", over="ignore", under="ignore"):
        if split == 0:
            m, l, acc = _online_softmax(inputs, qf, limit, tile, 0, n_visit)
        else:
            m, l, acc = _online_softmax(inputs, qf, limit, tile, 0, split)
            m1, l1, acc1 = _online_softmax(inputs, qf, limit, tile, split, n_visit)
            mn = np.maximum(m, m1)
            msafe = np.where(mn == -np.inf, f32(0), mn)
            a0, a1 = np.exp2(m - msafe), np.exp2(m1 - msafe)
            l = l * a0 + l1 * a1
            acc = acc * a0[:, :, None] + acc1 * a1[:, :, None]
    out = acc * (f32(1) / l)[:, :, None] * f32(1.0 / inputs.p_scale)
    out = out.reshape(hq, n_rows, d)
    if inputs.problem.out_dtype == "float16":
        out = out.astype(np.float16)
    return out.astype(f32, copy=False)


def _online_softmax(inputs: Inputs, qf: np.ndarray, limit: np.ndarray, tile: int, k0: int, k1: int):
    """Online softmax of the stacked rows ``qf`` [Hkv, G*R, D] over keys [k0, k1) in tiles of
    ``tile`` keys from k0: the state (m, l, acc) in fp32. ``limit``: each row's last visible key."""
    f32 = np.float32
    hkv, gr, d = qf.shape
    k_mult = (inputs.k_scale[:, k0:k1] * f32(inputs.qk_scale_log2)).astype(f32)
    v_mult = (inputs.v_scale[:, k0:k1] * f32(inputs.p_scale)).astype(f32)

    m = np.full((hkv, gr), -np.inf, dtype=f32)
    l = np.zeros((hkv, gr), dtype=f32)
    acc = np.zeros((hkv, gr, d), dtype=f32)

    block = _MAX_BLOCK_KEYS // tile * tile or tile
    block = max(tile, min(block, _BLOCK_BYTES // (4 * hkv * gr) // tile * tile))
    min_limit = int(limit.min())
    for b0 in range(k0, k1, block):
        b1 = min(b0 + block, k1)
        kb = inputs.k_i8[:, b0:b1, :].astype(f32)
        s = np.matmul(qf, kb.transpose(0, 2, 1))  # s_raw [hkv, gr, keys]
        s *= k_mult[:, None, b0 - k0:b1 - k0]
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
            big_p = round_fp16(p * v_mult[:, None, b0 - k0 + t0:b0 - k0 + t0 + tile])
            if not (alpha == 1).all():  # acc * 1 is exact: skip it when no row rescales
                acc *= alpha[:, :, None]
            acc += np.matmul(big_p, vb[:, t0:t0 + tile, :])
            m = m_new
    return m, l, acc


__all__ = ["model_attention", "tile_keys", "split_keys", "split_point", "SEGMENT_KEYS",
           "segment_keys"]
