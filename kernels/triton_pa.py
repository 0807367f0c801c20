"""int8-KV prompt attention in Triton: the `triton` variant (SPEC section 1's problem).

Tiling: a program owns BLOCK_M query rows x heads of one KV group: ``HP`` query heads that share a
KV head (the largest divisor of the group that leaves at least 16 rows per head) at ``BLOCK_M // HP``
rows each, packed into the M dimension as ``m = r * HP + g`` (row r, head g). So one K/V tile,
gathered and converted once, serves every head of the program. Grid: (Hq / HP head blocks, row
blocks), row blocks longest first (the last rows see the most keys).

Per tile of BLOCK_N keys (BLOCK_N is the numerics model's ``tile_keys``; it never changes with
the config) the program
  * gathers int8 K (through the page table, or directly) and converts it to fp16 exactly,
  * S = Q.K^T with fp32 accumulation (tl.dot), times (k_scale * qk_scale_log2) in fp32,
  * masks keys past the row's causal limit (bottom-right: row i sees keys j <= ctx + i) to -inf;
    only tiles that cross the diagonal of the program's first row are masked,
  * runs the online softmax with exp2: m_new, alpha = exp2(m - m_new), p = exp2(s - m_new),
    l = l * alpha + sum(p) from the unrounded p,
  * P = fp16(p * (v_scale * p_scale)): p_scale, a power of two with max(v_scale) * p_scale in
    (0.5, 1], keeps P in fp16's normal range,
  * acc = acc * alpha + P.V (fp16 inputs, fp32 accumulation).
At the end out = acc * (1 / l) * (1 / p_scale), stored as fp32 or fp16 (the output's dtype).

Key segments (pa_bench.numerics.model.segment_keys): with ``seg_keys`` > 0 the keys of a row run
the steps above in segments [z*S, (z+1)*S) from a fresh state, merged in order z = 0, 1, ... in
fp32 (m = max(M, m_z); a = exp2(M - m), b = exp2(m_z - m); L = L*a + l_z*b; ACC = ACC*a + acc_z*b),
so no accumulator chain is longer than a segment. A segment that a row cannot see merges as
exactly nothing. Without segments (SEGMENTED false) the merge code is not compiled at all.

No atomics and a fixed reduction order: two launches give the same bits. There is no barrier
in the source; Triton pipelines the K/V loads (num_stages) and, on Hopper, issues wgmma.
Needs Triton >= 3.0 (checked with 3.6 on the H200 and the interpreter of 3.9 on the CPU).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import triton
import triton.language as tl

#: Keys per online-softmax tile: the numerics model's ``tile_keys`` for this variant.
BLOCK_N = 64
#: Rows of one query head a program holds at least (when it packs several heads).
MIN_ROWS_PER_HEAD = 16


# Row reductions are tl.reduce with the combine functions tl.max and tl.sum use. Reaching them
# directly, rather than through tl.max/tl.sum, keeps the kernel runnable in Triton's interpreter
# even where Triton itself was imported without TRITON_INTERPRET (its own @jit helpers are then
# compiled-only, this module's are interpreted), and the interpreter reduces them with NumPy.
# Likewise tl.full instead of tl.zeros.
_maximum = getattr(tl.standard, "_elementwise_max", None)
_add = getattr(tl.standard, "_sum_combine", None)
if _maximum is None or _add is None:  # pragma: no cover - a Triton without these names
    @triton.jit
    def _maximum(a, b):
        return tl.maximum(a, b)

    @triton.jit
    def _add(a, b):
        return a + b


@triton.jit
def _tiles(acc, l_i, m_i, q, K, V, KS, VS, TABLE, kvh, heads_kv, page_shift, kv_stride, scale_stride,
           nk, limit, lo, hi, qk_scale_log2, p_scale,
           D: tl.constexpr, BLOCK_N: tl.constexpr, PAGED: tl.constexpr, MASKED: tl.constexpr):
    """The online softmax over keys [lo, hi) (lo a multiple of BLOCK_N) from state (acc, l_i, m_i)."""
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D)
    for start in range(lo, hi, BLOCK_N):
        j = start + offs_n
        in_kv = j < nk        # only a masked tile can reach past the last key (loads masked there only)
        if PAGED:
            if MASKED:
                page = tl.load(TABLE + (j >> page_shift), mask=in_kv, other=0)
            else:
                page = tl.load(TABLE + (j >> page_shift))
            row = (page.to(tl.int64) * heads_kv + kvh) * (1 << page_shift) + (j & ((1 << page_shift) - 1))
            srow = row
        else:
            row = kvh.to(tl.int64) * kv_stride + j
            srow = kvh.to(tl.int64) * scale_stride + j
        kv_off = row[:, None] * D + offs_d[None, :]
        if MASKED:
            k = tl.load(K + kv_off, mask=in_kv[:, None], other=0).to(tl.float16)
            ks = tl.load(KS + srow, mask=in_kv, other=0.0)
        else:
            k = tl.load(K + kv_off).to(tl.float16)
            ks = tl.load(KS + srow)
        s = tl.dot(q, tl.trans(k))
        s = s * (ks * qk_scale_log2)[None, :]
        if MASKED:
            s = tl.where(j[None, :] <= limit[:, None], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.reduce(s, 1, _maximum))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)   # a row with no key yet: p = 0
        alpha = tl.exp2(m_i - m_use)
        p = tl.exp2(s - m_use[:, None])
        l_i = l_i * alpha + tl.reduce(p, 1, _add)
        if MASKED:
            vs = tl.load(VS + srow, mask=in_kv, other=0.0)
            v = tl.load(V + kv_off, mask=in_kv[:, None], other=0).to(tl.float16)
        else:
            vs = tl.load(VS + srow)
            v = tl.load(V + kv_off).to(tl.float16)
        p16 = (p * (vs * p_scale)[None, :]).to(tl.float16)
        acc = acc * alpha[:, None] + tl.dot(p16, v)
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def _segment(q, K, V, KS, VS, TABLE, kvh, heads_kv, page_shift, kv_stride, scale_stride, nk, limit,
             lo, hi, full_end, qk_scale_log2, p_scale,
             D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, PAGED: tl.constexpr):
    """Keys [lo, hi) from a fresh state: tiles every row sees whole first, then masked ones."""
    acc = tl.full([BLOCK_M, D], 0.0, tl.float32)
    l_i = tl.full([BLOCK_M], 0.0, tl.float32)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    mid = tl.minimum(tl.maximum(full_end, lo), hi)
    acc, l_i, m_i = _tiles(acc, l_i, m_i, q, K, V, KS, VS, TABLE, kvh, heads_kv, page_shift, kv_stride,
                           scale_stride, nk, limit, lo, mid, qk_scale_log2, p_scale,
                           D, BLOCK_N, PAGED, False)
    acc, l_i, m_i = _tiles(acc, l_i, m_i, q, K, V, KS, VS, TABLE, kvh, heads_kv, page_shift, kv_stride,
                           scale_stride, nk, limit, mid, hi, qk_scale_log2, p_scale,
                           D, BLOCK_N, PAGED, True)
    return acc, l_i, m_i


# Shape sizes are not specialised on (Triton would compile one flavour per divisibility class of
# each integer): one compile per (head size, layout, packing, block, output dtype).
@triton.jit(do_not_specialize=["nq", "ctx", "kv_stride", "scale_stride", "seg_keys", "n_row_blocks"])
def pa_triton(Q, K, V, KS, VS, TABLE, OUT,
              nq, ctx, heads_kv, page_shift, kv_stride, scale_stride, seg_keys, n_row_blocks,
              qk_scale_log2, p_scale, inv_p_scale,
              D: tl.constexpr, GROUP: tl.constexpr, HP: tl.constexpr, BLOCK_M: tl.constexpr,
              BLOCK_N: tl.constexpr, PAGED: tl.constexpr, SEGMENTED: tl.constexpr):
    ROWS: tl.constexpr = BLOCK_M // HP
    h0 = tl.program_id(0) * HP
    rb = n_row_blocks - 1 - tl.program_id(1)          # longest rows first
    kvh = h0 // GROUP
    row0 = rb * ROWS
    offs_m = tl.arange(0, BLOCK_M)
    r = offs_m // HP
    g = offs_m % HP
    row = row0 + r
    m_ok = (r < ROWS) & (row < nq)
    offs_d = tl.arange(0, D)
    q_off = ((h0 + g).to(tl.int64) * nq + row) * D
    q = tl.load(Q + q_off[:, None] + offs_d[None, :], mask=m_ok[:, None], other=0.0)

    nk = ctx + nq
    limit = ctx + row                                   # each row's last visible key
    hi_key = tl.minimum(ctx + row0 + ROWS, nk)          # keys the program visits: [0, hi_key)
    full_end = (ctx + row0 + 1) // BLOCK_N * BLOCK_N    # tiles below it: every row sees all keys

    if SEGMENTED:
        acc = tl.full([BLOCK_M, D], 0.0, tl.float32)
        l_i = tl.full([BLOCK_M], 0.0, tl.float32)
        m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
        for lo in range(0, hi_key, seg_keys):
            hi = tl.minimum(lo + seg_keys, hi_key)
            acc_z, l_z, m_z = _segment(q, K, V, KS, VS, TABLE, kvh, heads_kv, page_shift, kv_stride,
                                       scale_stride, nk, limit, lo, hi, full_end, qk_scale_log2, p_scale,
                                       D, BLOCK_M, BLOCK_N, PAGED)
            m_new = tl.maximum(m_i, m_z)
            m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
            a = tl.exp2(m_i - m_use)
            b = tl.exp2(m_z - m_use)
            l_i = l_i * a + l_z * b
            acc = acc * a[:, None] + acc_z * b[:, None]
            m_i = m_new
    else:
        acc, l_i, m_i = _segment(q, K, V, KS, VS, TABLE, kvh, heads_kv, page_shift, kv_stride,
                                 scale_stride, nk, limit, 0, hi_key, full_end, qk_scale_log2, p_scale,
                                 D, BLOCK_M, BLOCK_N, PAGED)

    inv_l = 1.0 / l_i
    o = acc * inv_l[:, None] * inv_p_scale
    tl.store(OUT + q_off[:, None] + offs_d[None, :], o.to(OUT.dtype.element_ty), mask=m_ok[:, None])


# --------------------------------------------------------------------------- host side


@dataclass(frozen=True)
class Config:
    """A launch configuration. None of it changes a row's arithmetic (BLOCK_N is fixed)."""

    block_m: int = 128
    num_warps: int = 8
    num_stages: int = 3

    def as_dict(self) -> dict:
        return asdict(self) | {"block_n": BLOCK_N}


#: The configurations scripts/triton_check.py --sweep tries (an offline autotune: the table
#: below is what it chose on the H200, so no timing run ever tunes).
CANDIDATES = (
    Config(128, 8, 3), Config(128, 8, 2), Config(128, 4, 3), Config(64, 4, 3), Config(64, 4, 2),
    Config(64, 8, 3),
)


def default_config(head_dim: int, group: int, queries: int, heads_q: int, sm_count: int | None = None) -> Config:
    """The configuration for a problem: 128 rows per program unless that leaves SMs idle (fewer
    programs than SMs: then 64 rows, so a short chunk still fills the GPU)."""
    warps = 8 if head_dim == 128 else 4
    if sm_count:
        hp = heads_packed(group, 128)
        programs = (heads_q // hp) * -(-queries // (128 // hp))
        if programs < sm_count:
            return Config(64, 4, 3)
    return Config(128, warps, 3)


def heads_packed(group: int, block_m: int) -> int:
    """Query heads of one KV group packed into a program: the largest divisor of ``group`` that
    leaves at least MIN_ROWS_PER_HEAD rows per head."""
    return max(h for h in range(1, group + 1) if group % h == 0 and block_m // h >= MIN_ROWS_PER_HEAD)


@dataclass(frozen=True)
class Launch:
    """Everything but the tensors: grid, scalars and compile-time constants of one launch."""

    grid: tuple[int, int]
    scalars: tuple
    constants: dict
    config: Config

    def describe(self) -> dict:
        return {"grid": list(self.grid), **self.config.as_dict(), "heads_packed": self.constants["HP"],
                "segmented": self.constants["SEGMENTED"]}


def plan_launch(*, queries: int, context: int, heads_q: int, heads_kv: int, head_dim: int, paged: bool,
                page: int, kv_stride: int, scale_stride: int, seg_keys: int, qk_scale_log2: float,
                p_scale: float, config: Config) -> Launch:
    """The launch of ``pa_triton`` for one problem. ``seg_keys``: keys per segment (0: none);
    ``kv_stride``/``scale_stride``: keys per KV head row of contiguous K/V and scales."""
    if head_dim not in (64, 128):
        raise ValueError(f"head_dim must be 64 or 128, not {head_dim}")
    if heads_q % heads_kv:
        raise ValueError(f"heads_kv {heads_kv} must divide heads_q {heads_q}")
    if seg_keys % BLOCK_N or seg_keys < 0:
        raise ValueError(f"seg_keys must be a non-negative multiple of {BLOCK_N}, not {seg_keys}")
    if paged and (page < 1 or page & (page - 1)):
        raise ValueError(f"page must be a power of two, not {page}")
    group = heads_q // heads_kv
    hp = heads_packed(group, config.block_m)
    rows = config.block_m // hp
    n_row_blocks = -(-queries // rows)
    segmented = bool(seg_keys) and context + queries > seg_keys
    scalars = (queries, context, heads_kv, page.bit_length() - 1 if paged else 0, kv_stride, scale_stride,
               seg_keys if segmented else BLOCK_N, n_row_blocks, float(qk_scale_log2), float(p_scale),
               1.0 / float(p_scale))
    constants = dict(D=head_dim, GROUP=group, HP=hp, BLOCK_M=config.block_m, BLOCK_N=BLOCK_N,
                     PAGED=bool(paged), SEGMENTED=segmented)
    return Launch((heads_q // hp, n_row_blocks), scalars, constants, config)


def launcher(launch: Launch, q, k, v, k_scale, v_scale, table, out):
    """A no-argument callable that launches the kernel once on the current stream. Tensors (torch,
    on the device): q fp16 [Hq, Nq, D]; k, v int8 (pool [pages, Hkv, page, D] or [Hkv, stride, D]);
    scales fp32 (pool [pages, Hkv, page] or [Hkv, scale_stride]); table int32; out [Hq, Nq, D]."""
    grid, consts = launch.grid, launch.constants
    args = (q, k, v, k_scale, v_scale, table, out) + launch.scalars
    warps, stages = launch.config.num_warps, launch.config.num_stages
    if launch.grid[1] == 0:          # no query rows: nothing to launch
        return lambda: None

    def run():
        pa_triton[grid](*args, **consts, num_warps=warps, num_stages=stages)

    return run
