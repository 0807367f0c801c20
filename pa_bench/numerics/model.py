"""A model of the kernels' arithmetic, for NumPy or CuPy arrays: the error the *algorithm* has.

It follows DESIGN.md "The arithmetic every kernel does" step by step, in fp32, tile by tile, and
docs/NUMERICS.md section 3 to the last rounding::

    s_raw[j] = sum_d q[i,d] * k_i8[j,d]                 (exact, then one rounding to fp32)
    s[j]     = s_raw[j] * (k_scale[j] * qk_scale_log2)  (fp32; invalid keys: -inf)
    per tile:  m_new = max(m, max_j s[j]);  alpha = exp2(m - m_new)   (0 while m == -inf)
               p[j]  = exp2(s[j] - m_new)               (results below 2^-126 flushed to 0)
    or, with a lazy running maximum (``max_slack``, v3), per tile and row:
               t[j]  = s_raw[j] * (k_scale[j] * qk_scale_log2) - m     (one rounding; m as 0
                                                        while the row has no key: then t = s)
               d     = max_j t[j]; a row with no key yet (d > -inf), or with d > max_slack,
                       moves: m = m + d, t[j] = t[j] - d, alpha = exp2(-d) (0 with no key yet);
                       the others keep m, alpha = 1
               p[j]  = exp2(t[j])                       (so p <= 2^max_slack)
               l     = l*alpha + p[j] ...               (per lane, in the kernels' order)
               P[j]  = fp16_rn(p[j] * (v_scale[j] * p_scale))
               acc   = acc*alpha, then per 16-key slice acc = MMA(acc, P . V)
    out[i,:] = acc * (1/l) * (1/p_scale)  -> out_dtype

A variant that rounds Q further (``input_rounding``, "q-int8-row": int8 with one fp32 scale per
row and head, pa_bench.numerics.rounding) is modelled with that Q: its exact float64 value
``q_i8 * q_scale`` takes q's place, so ``s_raw`` is the exact ``q_scale * S_i32`` rounded once
to fp32, which is the kernels' ``float32(float32(S_i32) * q_scale)`` (S_i32 < 2^21 is exact in
fp32); every later step is unchanged. The model is told the rounding; it chooses none.

The MMA's accumulation is emulated (``mma="emulated"``, pa_bench.numerics.mma: it truncates, and
a long chain drifts toward zero) or ideal (``mma="rn"``). Key parts run the steps separately, each
from a fresh state, and merge per row in fp32 in part order::

    m = max_z m_z;  a_z = exp2(m_z - m);  l = sum_z l_z*a_z;  acc = sum_z acc_z*a_z

The parts are the two halves of v2/v2t's split keys, or the key segments: those of SEGMENT_KEYS
keys that every kernel runs on long contexts, or a launch's own. The model chooses no launch: it
runs the tile, split and segments it is told (a Launch's, pa_bench.launch). Every step is
exact or one IEEE rounding in a fixed order, so NumPy and CuPy give the same bits. It is
vectorised over heads and rows and loops over key tiles; tiles past the last key any selected row
can see are not visited. This is also the output of the ``numpy`` backend. On CuPy arrays,
``engine="kernel"`` computes the key parts in one fused CUDA kernel (kernels/pa_model.cu,
pa_bench.numerics.model_kernel) with the same bits.
"""

from __future__ import annotations

import os

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from pa_bench import variants as registry
from pa_bench.problem.config import DEFAULT_MMA, MMA_MODES
from pa_bench.numerics.rounding import check_rounding, rounded_q
from pa_bench.problem.inputs import Inputs


def tile_keys(variant: str) -> int:
    """Keys per online-softmax tile of ``variant`` (pa_bench.variants)."""
    return registry.get(variant).tile_keys


def max_slack(variant: str | None) -> float | None:
    """``variant``'s lazy running maximum (pa_bench.variants ``max_slack``: a row keeps its
    reference while its scaled scores stay within 2^max_slack of it), or None: the exact one."""
    entry = registry.find(variant) if variant else None
    return None if entry is None or entry.max_slack is None else float(entry.max_slack)


def input_rounding(variant: str | None) -> str | None:
    """The input rounding ``variant`` declares (pa_bench.variants ``input_rounding``), or None."""
    entry = registry.find(variant) if variant else None
    return None if entry is None else entry.input_rounding


def pv_chain_keys(variant: str) -> int:
    """Keys one P.V accumulator of ``variant`` sums before it is added into O (0: one chain over
    the whole key range; v3: a fresh wgmma accumulator per 64-key tile): pa_bench.variants."""
    entry = registry.find(variant)
    return int(entry.pv_chain_keys or 0) if entry is not None else 0


# Key segments (SEGMENT_KEYS, context_segment_keys): pa_bench.variants, the kernels' shared contract;
# a launch (pa_bench.launch) may segment shorter chunks too; the model runs the segments it is told.


# The model's P.V accumulation: "emulated" mirrors mma.sync's truncating block FMA
# (pa_bench.numerics.mma, calibrated on the H200), "rn" is the ideal (each 16-key slice's exact
# sum added with one round-to-nearest). See docs/NUMERICS.md for the evidence behind the default.
# MMA_MODES and DEFAULT_MMA (pa_bench.problem.config): the config's ``parity.mma`` tells the model
# which one (the run's backend section of meta.json records which one judged the run).

_FP16_MIN_NORMAL = 2.0**-14
_BLOCK_BYTES = 32 << 20   # fp32 scores per block of keys (all heads, all rows of a row chunk)
_MAX_BLOCK_KEYS = 2048
_MAX_STACKED_ROWS = 1024  # rows (x query heads of a KV group) per pass: bounds the MMA emulation's
                          # [Hkv, rows, D, 16] float64 products; rows are independent, so the
                          # chunking changes no bit
_SLICE = 16               # keys per MMA (k of m16n8k16), the kernels' slice
_LANES = 4                # lanes sharing a row of an m16 tile: lane t holds keys 4t..4t+3 of a slice
_EXP2_COEF = tuple(1.0 / math.factorial(k) for k in range(14))  # e^y, |y| <= ln2/2: error < 1e-17


def round_fp16(x, xp=np):
    """``x.astype(float16).astype(float32)`` for finite ``0 <= x < 65520``, several times faster.

    Normal range: round-to-nearest-even of the float32 mantissa to 10 bits on the bit pattern.
    Subnormal range (x < 2^-14): ``(x + 0.5) - 0.5`` rounds to a multiple of 2^-24, fp16's
    subnormal step, because float32's step in [0.5, 1) is 2^-24 (round to nearest even too).
    """
    u32 = xp.uint32
    bits = x.view(u32)
    normal = ((bits + u32(0x0FFF) + ((bits >> u32(13)) & u32(1))) & u32(0xFFFFE000)).view(xp.float32)
    small = (x + xp.float32(0.5)) - xp.float32(0.5)
    return xp.where(x < xp.float32(_FP16_MIN_NORMAL), small, normal)


def exp2_ftz(x, xp=np):
    """``2^x`` of float32 ``x <= 14`` (at most max_slack above 0 under a lazy running maximum) as
    float32, results below 2^-126 flushed to zero (as the
    kernels' ``ex2.approx.ftz``; -inf gives 0). Computed with IEEE float64 adds and multiplies
    only (a range reduction and a degree-13 polynomial), so NumPy and CuPy give the same bits;
    the result is float64-accurate before its one rounding to float32."""
    x64 = xp.maximum(x.astype(xp.float64), -200.0)      # -inf -> -200 (flushed below)
    n = xp.floor(x64 + 0.5)
    y = (x64 - n) * math.log(2.0)                       # |y| <= ln2/2
    r = xp.full_like(y, _EXP2_COEF[-1])
    for c in _EXP2_COEF[-2::-1]:
        r = r * y + c
    r = xp.ldexp(r, n.astype(xp.int32)).astype(xp.float32)
    return xp.where(x < xp.float32(-126), xp.float32(0), r)


@dataclass
class ModelArrays:
    """What the model reads, on one array module ``xp`` (numpy or cupy): the logical int8 K/V,
    Q, and the per-key multipliers the kernels form in fp32."""

    xp: Any
    q: Any          # float16 [Hq, Nq, D]
    k_i8: Any       # int8 [Hkv, Nk, D]
    v_i8: Any
    k_mult: Any     # float32 [Hkv, Nk]: k_scale * float32(qk_scale_log2)
    v_mult: Any     # float32 [Hkv, Nk]: v_scale * float32(p_scale)
    p_scale: float
    out_dtype: str
    q_round: Any = None  # float64 [Hq, Nq, D]: Q as a kernel with input rounding sees it (exact,
                         # pa_bench.numerics.rounding.rounded_q); None: q itself

    @property
    def context(self) -> int:
        return int(self.k_i8.shape[1] - self.q.shape[1])


def model_arrays(inputs: Inputs, xp=np, input_rounding: str | None = None) -> ModelArrays:
    """``inputs``' arrays for the model on ``xp`` (the multipliers are formed on the host, so
    every array module starts from the same bits), with Q rounded as ``input_rounding`` says."""
    f32 = np.float32
    k_mult = (inputs.k_scale * f32(inputs.qk_scale_log2)).astype(f32)
    v_mult = (inputs.v_scale * f32(inputs.p_scale)).astype(f32)
    up = xp.asarray
    a = ModelArrays(xp, up(inputs.q), up(inputs.k_i8), up(inputs.v_i8), up(k_mult), up(v_mult),
                    float(inputs.p_scale), inputs.problem.out_dtype)
    return with_input_rounding(a, input_rounding)


def with_input_rounding(a: ModelArrays, input_rounding: str | None) -> ModelArrays:
    """``a`` with Q as a kernel with ``input_rounding`` sees it (None: ``a`` unchanged). The
    rounding is done on the host, as the multipliers are, so every array module starts from the
    same bits."""
    if check_rounding(input_rounding) is None:
        return a
    from dataclasses import replace

    q = a.q.get() if hasattr(a.q, "get") and not isinstance(a.q, np.ndarray) else np.asarray(a.q)
    return replace(a, q_round=a.xp.asarray(rounded_q(q, input_rounding)))


def key_parts(n_visit: int, split: int = 0, segment: int = 0) -> list[tuple[int, int]]:
    """The key ranges that run the online softmax separately, in merge order: segments
    ``[z*S, min((z+1)*S, n_visit))``, or the two halves of a split, or one range."""
    if segment:
        return [(k0, min(k0 + segment, n_visit)) for k0 in range(0, n_visit, segment)]
    if split:
        return [(0, split), (split, n_visit)]
    return [(0, n_visit)]


#: Who computes the key parts (model_attention's ``engine``): "xp" the array-module steps below
#: (NumPy or CuPy), "kernel" the fused CUDA kernel kernels/pa_model.cu (CuPy arrays only,
#: pa_bench.numerics.model_kernel): the same bits. A callable with _online_softmax_parts'
#: signature may stand in for either (tests/test_model_kernel_host.py runs the kernel's source on
#: the CPU through one).
ENGINES = ("xp", "kernel")


def model_attention(inputs: Inputs | ModelArrays, tile_keys: int, rows=None, split_keys: int = 0, *,
                    segment_keys: int | None = None, mma: str = DEFAULT_MMA, mma_k: int = _SLICE,
                    pv_chain_keys: int = 0, max_slack: float | None = None, engine: str | Callable = "xp",
                    input_rounding: str | None = None):
    """The kernels' arithmetic with ``tile_keys`` keys per tile: float32 [Hq, R, D] on the
    inputs' array module (numpy for :class:`Inputs`; give :func:`model_arrays` for cupy).

    ``rows``: sorted query-row indices (None: all rows). ``split_keys``: 0, or the key (a multiple
    of ``tile_keys``, at most the context) at which the keys are split in two halves merged at the
    end. ``segment_keys``: keys per segment (None: :func:`pa_bench.variants.context_segment_keys`, the rule every
    variant follows on long contexts; a launch's own: Launch.segment_keys; 0: none).
    ``mma``: how P.V accumulates (MMA_MODES); ``mma_k``: products per MMA (16; 8 for the Turing
    path's m16n8k8 pairs). ``pv_chain_keys``: 0 (P.V accumulates straight into acc), or a
    multiple of 16 dividing ``tile_keys``: per tile, each group of that many keys runs its slices'
    MMA chain from a fresh fp32 accumulator, added to acc with one fp32 add. ``max_slack``: None
    (the exact running maximum) or a variant's lazy one (:func:`max_slack`). ``engine``: who
    computes the key parts (ENGINES). ``input_rounding``: None, or the variant's rounding of Q
    (:func:`input_rounding`; pa_bench.numerics.rounding). With ``out_dtype: float16`` the result is
    rounded through fp16.
    """
    a = inputs if isinstance(inputs, ModelArrays) else model_arrays(inputs)
    a = with_input_rounding(a, input_rounding)
    xp = a.xp
    tile = int(tile_keys)
    if tile < _SLICE or tile % _SLICE:
        raise ValueError(f"tile_keys must be a positive multiple of {_SLICE}, got {tile_keys}")
    if mma not in MMA_MODES:
        raise ValueError(f"mma must be one of {MMA_MODES}, got {mma!r}")
    if mma_k not in (8, 16):
        raise ValueError(f"mma_k must be 8 or 16, got {mma_k}")
    chain = int(pv_chain_keys)
    if chain < 0 or chain % _SLICE or (chain and tile % chain):
        raise ValueError(f"pv_chain_keys must be 0 or a multiple of {_SLICE} dividing {tile}, "
                         f"got {pv_chain_keys}")
    slack = None if max_slack is None else float(max_slack)
    if slack is not None and not 0 <= slack <= 14:
        raise ValueError(f"max_slack must be None or in [0, 14], got {max_slack}")
    parts_fn = _engine(engine, xp)
    hq, nq, d = a.q.shape
    hkv = a.k_i8.shape[0]
    ctx = a.context
    split = int(split_keys)
    if split < 0 or split > ctx or split % tile:
        raise ValueError(f"split_keys must be a multiple of {tile} in [0, {ctx}], got {split_keys}")
    seg = registry.context_segment_keys(ctx) if segment_keys is None else int(segment_keys)
    if seg < 0 or seg % 64:
        raise ValueError(f"segment_keys must be a non-negative multiple of 64, got {segment_keys}")
    if seg and split:
        raise ValueError("split_keys and segment_keys exclude each other (split_keys is 0 with segments)")
    group = hq // hkv
    rows = np.arange(nq, dtype=np.int64) if rows is None else np.asarray(rows, dtype=np.int64)
    out = xp.zeros((hq, len(rows), d), dtype=xp.float32)
    step = max(1, _MAX_STACKED_ROWS // group)
    heads = _kv_head_ranges(hkv, xp)

    def run(g0: int, g1: int) -> None:
        sub = a if (g0, g1) == (0, hkv) else _kv_heads(a, g0, g1)
        for r0 in range(0, len(rows), step):
            part = rows[r0:r0 + step]
            out[g0 * group:g1 * group, r0:r0 + len(part)] = _model_rows(
                sub, tile, part, split, seg, mma, mma_k, chain, slack, parts_fn)

    _on_threads(run, heads)  # KV heads are independent: one thread per share, the same bits
    if a.out_dtype == "float16":
        out = out.astype(xp.float16).astype(xp.float32)
    return out


def _threads() -> int:
    """CPU cores this process may use (the model's threads on NumPy arrays)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _kv_head_ranges(hkv: int, xp) -> list[tuple[int, int]]:
    """KV heads [g0, g1) per thread: NumPy releases the GIL inside its array operations, so on
    NumPy arrays the model runs one thread per core, each on its share of the KV heads; on
    CuPy one range (the GPU runs the work in parallel already)."""
    n = min(hkv, _threads()) if xp is np else 1
    bounds = [hkv * i // n for i in range(n + 1)]
    return [(g0, g1) for g0, g1 in zip(bounds, bounds[1:]) if g1 > g0]


def _on_threads(fn: Callable[[int, int], None], ranges: list[tuple[int, int]]) -> None:
    """``fn(g0, g1)`` for every range: the first on this thread, the others on daemon threads,
    so that Ctrl-C stops the command at once (a share left running ends with the process)."""
    import threading

    failures: list[BaseException] = []

    def guarded(g0: int, g1: int) -> None:
        try:
            fn(g0, g1)
        except BaseException as exc:  # re-raised on the calling thread below
            failures.append(exc)

    threads = [threading.Thread(target=guarded, args=r, daemon=True) for r in ranges[1:]]
    for t in threads:
        t.start()
    fn(*ranges[0])
    for t in threads:
        t.join()
    if failures:
        raise failures[0]


def _kv_heads(a: ModelArrays, g0: int, g1: int) -> ModelArrays:
    """``a`` for KV heads [g0, g1) and their query heads (views, no copy)."""
    group = a.q.shape[0] // a.k_i8.shape[0]
    return ModelArrays(a.xp, a.q[g0 * group:g1 * group], a.k_i8[g0:g1], a.v_i8[g0:g1], a.k_mult[g0:g1],
                       a.v_mult[g0:g1], a.p_scale, a.out_dtype,
                       None if a.q_round is None else a.q_round[g0 * group:g1 * group])


def _engine(engine, xp) -> Callable:
    """The function that computes the key parts for ``engine`` (ENGINES or a callable)."""
    if callable(engine):
        return engine
    if engine == "xp":
        return _online_softmax_parts
    if engine == "kernel":
        if getattr(xp, "__name__", "") != "cupy":
            raise ValueError("engine 'kernel' runs on CuPy arrays: give model_arrays(inputs, cupy)")
        from pa_bench.numerics import model_kernel

        return model_kernel.online_softmax_parts
    raise ValueError(f"engine must be one of {ENGINES} or a callable, got {engine!r}")


def _online_softmax_parts(a: ModelArrays, qf, limit, tile: int, ranges, mma: str, mma_k: int,
                          pv_chain: int, slack: float | None = None):
    """The state (m, l per lane, acc) of each key range [k0, k1) of ``ranges``, in order (engine
    "xp": the array module's steps, one range after the other)."""
    return [_online_softmax(a, qf, limit, tile, k0, k1, mma, mma_k, pv_chain, slack) for k0, k1 in ranges]


def _model_rows(a: ModelArrays, tile: int, rows: np.ndarray, split: int, seg: int, mma: str, mma_k: int,
                pv_chain: int = 0, slack: float | None = None, parts_fn: Callable | None = None):
    """model_attention for one chunk of rows: float32 [Hq, R, D] (before the output dtype)."""
    xp, f32 = a.xp, a.xp.float32
    hq, _, d = a.q.shape
    hkv = a.k_i8.shape[0]
    group, n_rows, ctx = hq // hkv, len(rows), a.context
    # Rows of one KV head's query heads stacked: index gi*R + r for query head g*group + gi.
    q = a.q if a.q_round is None else a.q_round   # the rounded Q: q_i8 * q_scale, exact in float64
    qf = q[:, xp.asarray(rows), :].astype(xp.float64).reshape(hkv, group * n_rows, d)
    limit = xp.asarray(np.tile(ctx + rows, group))  # last visible key of each stacked row
    n_visit = int(ctx + rows.max() + 1)
    parts = (parts_fn or _online_softmax_parts)(a, qf, limit, tile, key_parts(n_visit, split, seg),
                                                mma, mma_k, pv_chain, slack)
    if len(parts) == 1:
        _, l, acc = parts[0]
        l = _lane_sum(l)
    else:
        # Per row, in part order from zero: l += l_z*a_z, acc += acc_z*a_z (fp32, each product
        # rounded, then the sum). Split halves merge per lane (one CTA, before the lanes' sums),
        # segments after them (the combine kernel reads each segment's row sum).
        per_lane = not seg
        m = parts[0][0]
        for mz, _, _ in parts[1:]:
            m = xp.maximum(m, mz)
        msafe = xp.where(m == -xp.inf, f32(0), m)
        l = xp.zeros_like(parts[0][1] if per_lane else m)
        acc = xp.zeros_like(parts[0][2])
        for mz, lz, accz in parts:
            az = exp2_ftz(mz - msafe, xp)
            l = l + (lz * az[:, :, None] if per_lane else _lane_sum(lz) * az)
            acc = acc + accz * az[:, :, None]
        if per_lane:
            l = _lane_sum(l)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = acc * (f32(1) / l)[:, :, None] * f32(1.0 / a.p_scale)
    return out.reshape(hq, n_rows, d)


def _lane_sum(l):
    """A row's sum from its four lanes' parts, in the shuffles' order: (l0 + l1) + (l2 + l3)."""
    return (l[..., 0] + l[..., 1]) + (l[..., 2] + l[..., 3])


def _online_softmax(a: ModelArrays, qf, limit, tile: int, k0: int, k1: int, mma: str, mma_k: int,
                    pv_chain: int = 0, slack: float | None = None):
    """Online softmax of the stacked rows ``qf`` [Hkv, G*R, D] (float64) over keys [k0, k1) in
    tiles of ``tile`` keys from k0: the state (m, l per lane [.., 4], acc) in fp32.
    ``limit``: each row's last visible key. ``pv_chain``: see model_attention's pv_chain_keys.
    ``slack``: None, the exact running maximum, or the lazy one's max_slack."""
    from pa_bench.numerics import mma as M

    xp = a.xp
    f32, f64 = xp.float32, xp.float64
    hkv, gr, d = qf.shape
    m = xp.full((hkv, gr), -xp.inf, dtype=f32)
    l = xp.zeros((hkv, gr, _LANES), dtype=f32)
    acc = xp.zeros((hkv, gr, d), dtype=f32)

    block = max(tile, min(_MAX_BLOCK_KEYS, _BLOCK_BYTES // (4 * hkv * gr)) // tile * tile)
    if slack is not None:   # the exact products are float64
        block = max(tile, block // 2 // tile * tile)
    min_limit = int(limit.min())
    for b0 in range(k0, k1, block):
        b1 = min(b0 + block, k1)
        nb = b1 - b0
        nt = -(-nb // tile)
        # S = Q.K^T: exact in float64 (|q| < 2^15 on a 2^-24 grid times int8, D <= 256; a rounded
        # Q's: q_scale times an integer below 2^21), so its one rounding to fp32 does not depend
        # on the summation order.
        kb = a.k_i8[:, b0:b1, :].astype(f64)
        s = xp.matmul(qf, kb.transpose(0, 2, 1)).astype(f32)
        if slack is None:
            s = s * a.k_mult[:, None, b0:b1]
        else:   # the exact products s_raw * kq; each tile's t = product - m is rounded once, below
            s = s.astype(f64) * a.k_mult[:, None, b0:b1].astype(f64)
        if b1 - 1 > min_limit:  # the causal edge crosses this block
            s = xp.where(xp.arange(b0, b1)[None, None, :] > limit[None, :, None], s.dtype.type(-xp.inf), s)
        if nt * tile != nb:  # a last partial tile (the end of a part): pad with invalid keys
            s = xp.concatenate([s, xp.full((hkv, gr, nt * tile - nb), -xp.inf, dtype=s.dtype)], axis=2)
        s = s.reshape(hkv, gr, nt, tile)
        if slack is None:
            # running max after each tile, the rescale factors and p, for the whole block at once
            run = xp.concatenate([m[:, :, None], s.max(axis=3)], axis=2)
            for t in range(1, nt + 1):
                run[:, :, t] = xp.maximum(run[:, :, t - 1], run[:, :, t])
            m_new = run[:, :, 1:]
            msafe = xp.where(m_new == -xp.inf, f32(0), m_new)
            alpha = exp2_ftz(run[:, :, :-1] - msafe, xp)                  # [hkv, gr, nt]
            p = exp2_ftz(s - msafe[:, :, :, None], xp)                    # [hkv, gr, nt, tile]
            m = run[:, :, -1]
        vm = a.v_mult[:, b0:b1]
        if nt * tile != nb:
            vm = xp.concatenate([vm, xp.zeros((hkv, nt * tile - nb), dtype=f32)], axis=1)
        vm = vm.reshape(hkv, 1, nt, tile)
        vb = a.v_i8[:, b0:b1, :]
        if nt * tile != nb:
            vb = xp.concatenate([vb, xp.zeros((hkv, nt * tile - nb, d), dtype=vb.dtype)], axis=1)
        for t in range(nt):
            if slack is None:
                alpha_t, p_t = alpha[:, :, t], p[:, :, t]
            else:
                m, alpha_t, p_t = _lazy_tile(s[:, :, t], m, slack, xp)
            big_p = round_fp16(p_t * vm[:, :, t], xp)
            # per lane: l = l*alpha, then + p of keys 4t..4t+3 of each slice in order
            pl = p_t.reshape(hkv, gr, tile // _SLICE, _LANES, _SLICE // _LANES)
            l = l * alpha_t[:, :, None]
            for n in range(tile // _SLICE):
                for j in range(_SLICE // _LANES):
                    l = l + pl[:, :, n, :, j]
            acc = acc * alpha_t[:, :, None]
            chain = pv_chain or tile
            for g0 in range(0, tile, chain):
                # pv_chain 0: the slices add straight into acc; else into a fresh c, then acc + c
                c = xp.zeros_like(acc) if pv_chain else acc
                for n in range(g0 // _SLICE, (g0 + chain) // _SLICE):
                    c0 = t * tile + n * _SLICE
                    ps, vs = big_p[:, :, n * _SLICE:(n + 1) * _SLICE], vb[:, c0:c0 + _SLICE, :]
                    if mma == "emulated":
                        c = M.mma_accumulate(c, ps, vs, xp, k_group=mma_k)
                    else:
                        c = M.rn_accumulate(c, ps, vs, xp)
                acc = acc + c if pv_chain else c
    return m, l, acc


def _lazy_tile(prod, m, slack: float, xp):
    """One tile of the lazy running maximum: ``prod`` [.., tile] the exact float64 products
    s_raw * kq (-inf where masked), ``m`` [..] each row's reference. Returns (m, alpha, p)."""
    f32, f64 = xp.float32, xp.float64
    fresh = m == -xp.inf
    mref = xp.where(fresh, f32(0), m)
    t = (prod - mref.astype(f64)[..., None]).astype(f32)        # fma(s_raw, kq, -m): one rounding
    top = xp.where(fresh, f32(-xp.inf), f32(slack))
    mx = t.max(axis=-1)
    move = mx > top
    dd = xp.where(move, mx, f32(0))
    alpha = xp.where(move, xp.where(fresh, f32(0), exp2_ftz(-xp.where(fresh, f32(0), dd), xp)), f32(1))
    m = xp.where(move, dd + mref, m)
    t = xp.where(move[..., None], t - dd[..., None], t)
    return m, alpha, exp2_ftz(t, xp)


__all__ = ["model_attention", "model_arrays", "ModelArrays", "key_parts", "tile_keys", "pv_chain_keys", "max_slack",
           "input_rounding", "with_input_rounding",
           "MMA_MODES", "DEFAULT_MMA", "round_fp16", "exp2_ftz", "ENGINES"]
