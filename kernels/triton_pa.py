"""int8-KV prompt attention in Triton: the `triton` variant (SPEC section 1's problem).

Tiling: a program owns BLOCK_M query rows x heads of one KV group: ``HP`` query heads that share a
KV head (the largest divisor of the group that leaves at least 16 rows per head) at ``BLOCK_M // HP``
rows each, packed into the M dimension as ``m = r * HP + g`` (row r, head g). So one K/V tile,
loaded and converted once, serves every head of the program. Grid: (Hq / HP head blocks, row
blocks), row blocks longest first (the last rows see the most keys).

Per tile of BLOCK_N keys (the numerics model's ``tile_keys``: 64 unless a configuration says 128)
the program
  * loads int8 K and converts it to fp16 exactly,
  * S = Q.K^T with fp32 accumulation (tl.dot), times (k_scale * qk_scale_log2) in fp32,
  * masks keys past the row's causal limit (bottom-right: row i sees keys j <= ctx + i) to -inf;
    only tiles that cross the diagonal of the program's first row are masked,
  * runs the online softmax with exp2: m_new, alpha = exp2(m - m_new), p = exp2(s - m_new),
    l = l * alpha + sum(p) from the unrounded p,
  * P = fp16(p * (v_scale * p_scale)): p_scale, a power of two with max(v_scale) * p_scale in
    (0.5, 1], keeps P in fp16's normal range,
  * acc = acc * alpha + P.V (fp16 inputs, fp32 accumulation).
At the end out = acc * (1 / l) * (1 / p_scale), stored as fp32 or fp16 (the output's dtype).

Structure switches (compile-time constants; ``Config`` on the host side). None of them changes a
row's arithmetic: the same fp16 operands reach the same dots and the same fp32 steps in the same
order. They change how the operands get there:
  * CONVERT, int8 -> fp16 (exact in every mode): 0 ``cast`` is Triton's conversion, one I2F
    instruction per element, which issues at a fraction of the rate of integer and fp16 arithmetic
    (CUDA's throughput table); 1 ``bits`` builds fp16 1024 + (x + 128) from the bits and subtracts
    1152 (integer and fp16 adds in Triton operations, which ptxas packs in pairs); 2 ``asm`` does
    the same in PTX four elements at a time (one xor, two byte permutes, two fp16x2 subtractions
    per four elements; GPU only: Triton's interpreter runs no PTX).
  * TILE_PAGE (paged layouts, ``tile`` and ``tma`` loads; 0: a page-table entry per key): the
    page-table entries of a tile instead of one per key. 1: the page holds whole tiles, one entry,
    the tile's rows contiguous and their addresses affine. n > 1 (``tile`` only, pages of
    page = BLOCK_N // n >= MIN_TILE_PAGE keys): the tile spans n whole pages; their n entries come
    in one small vector load (masked past the last key: a page there has no entry) and key j of the
    tile has row (entries[j // page] * Hkv + kvh) * page + j % page, affine within each page. Every
    key reads the row, scale and mask it reads with an entry per key: the bits of ``gather``.
  * DESC: K/V tiles through tensor descriptors (TMA on sm_90): the pool (or contiguous K/V) seen
    as rows of D bytes, one tile = BLOCK_N rows from the tile's first row. Rows past the last key
    are read (pool filler or the next head's keys: finite int8) and count for nothing: their
    scales are loaded masked to 0, S is masked to -inf there, so P is 0. Paged, only pages that
    hold whole tiles (TILE_PAGE 1): a tile over several pages would be one box per page (each
    from its own entry), joined into one tile in registers for K and for V on every tile (an
    order-keeping concatenation in Triton is a join, a permute and a reshape of register tensors,
    tl.cat included where it keeps the order); so 128-key tiles on 64-key pages take ``tile``.
  * K_T: K gathered already transposed ([D, BLOCK_N]), or with DESC transposed before the
    conversion.
  * DH (pointer loads, K not transposed): each K and V tile loaded as [BLOCK_N, 2, D/2], each key
    row's two 64-dim halves apart, and reshaped to [BLOCK_N, D] (the same elements in the same
    order). Loaded as [BLOCK_N, D] with D = 128, Triton 3.6 gives a thread 16 dims of one key and
    eight threads one key row; converted to fp16, a 16-byte store of eight lanes (one phase of a
    shared-memory store) then puts the row's two 64-dim blocks of the 128-byte-swizzled operand on
    the same four bank groups: every operand store is a 2-way bank conflict (ncu: 8 wavefronts a
    store against 4 ideal, 21 % of the kernel's shared-memory wavefronts). Split in halves, four
    threads span a half and a phase covers two key rows, whose swizzles differ: 8 bank groups.
    The cp.async copies then read two half rows of global memory per phase (2 wavefronts where 1
    would do); 8-dim runs (8-byte copies, 16 threads a row) avoid that but measured slower.
  * LOOP_STAGES: when set, the key loops are ``tl.range(num_stages=LOOP_STAGES)`` (Triton then
    pipelines every load of the loop, not only those that feed a dot; Triton 3.6 already pipelines
    all of this loop's loads, the scales and page-table entries too, at the kernel's num_stages);
    WS asks for Triton's automatic warp specialisation of the loops (Triton 3.6 on sm_90a builds
    the same code with and without it: its Hopper pass does not take these loops).

Key segments (pa_bench.numerics.model.segment_keys): with ``seg_keys`` > 0 the keys of a row run
the steps above in segments [z*S, (z+1)*S) from a fresh state, merged in order z = 0, 1, ... in
fp32 (m = max(M, m_z); a = exp2(M - m), b = exp2(m_z - m); L = L*a + l_z*b; ACC = ACC*a + acc_z*b),
so no accumulator chain is longer than a segment. A segment that a row cannot see merges as
exactly nothing. Without segments (SEGMENTED false) the merge code is not compiled at all.

Launch parameters (``Config`` too): rows per program (BLOCK_M), warps, pipeline stages (paged
K/V need 5 for two buffers: ``deep_stages``) and an optional register cap (``maxnreg``).

The key loop in Gluon (``Config.gluon``, the ``gl`` flag; kernels/gluon_pa.py): the same problem,
packing and arithmetic at 64-key tiles, with the waits, buffers and barrier placed by hand, so that
each program's conversions and softmax run under its own wgmma. One launch: 128 rows and 8 warps,
two buffers of everything, the ``asm`` conversion, a page-table entry per tile
(``m128-w8-s2-asm-tile-gl``); paged K/V whose pages hold whole tiles, D = 128, no key segments, an
sm_90 GPU, and Triton 3.6+ with Gluon.

No atomics and a fixed reduction order: two launches give the same bits. There is no barrier
in the source; Triton pipelines the K/V loads (num_stages) and, on Hopper, issues wgmma.
Needs Triton >= 3.0; the descriptor switch needs ``triton.tools.tensor_descriptor`` (3.3+). Every
switch compiles for sm_90a with Triton 3.6, but TILE_PAGE > 1 (a tile over several pages), which
has compiled for sm_90a only with Triton 3.9 (on a host without a GPU); the CPU tests run them
(but the PTX conversion) in Triton's interpreter.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

import triton
import triton.language as tl

#: Keys per online-softmax tile of the default configuration: the numerics model's ``tile_keys``
#: for this variant. A configuration with another ``block_n`` changes the arithmetic (a run's
#: model then follows that ``block_n``: the cuda backend's ``tile_keys``).
BLOCK_N = 64
#: Rows of one query head a program holds at least (when it packs several heads).
MIN_ROWS_PER_HEAD = 16
#: Keys a page holds at least for the ``tile`` loads of a tile that spans several pages: at most
#: block_n // 16 page-table entries per tile (eight at 128 keys), and each page at least one
#: 16-key reduction step of the fp16 MMA of P.V. Smaller pages take a table entry per key.
MIN_TILE_PAGE = 16

# The `asm` conversion of four int8 (one 32-bit register, element 0 in the low byte) into four
# fp16 (two registers, elements 0 and 1 in the first): u = x ^ 0x80 is x + 128 as an unsigned
# byte; a byte permute puts 0x64 above each u, giving the fp16 bits of 1024 + u; subtracting
# 1152 (1024 + 128) leaves x, exactly. tests/test_triton_interp.py replays these constants.
ASM_SIGN = 0x80808080          # xor: signed byte x -> unsigned x + 128
ASM_HIGH = 0x64646464          # the high byte of fp16 1024.0 (0x6400), for every half
ASM_SELECT = (0x5140, 0x7362)  # prmt selectors: (u0, u1) and (u2, u3), each under 0x64
ASM_BIAS = 0x64806480          # fp16x2 (1152.0, 1152.0)
I8_TO_F16_ASM: tl.constexpr = tl.constexpr(
    "{ .reg .b32 t, c; "
    f"xor.b32 t, $2, {ASM_SIGN:#x}; mov.b32 c, {ASM_BIAS:#x}; "
    f"prmt.b32 $0, t, {ASM_HIGH:#x}, {ASM_SELECT[0]:#x}; prmt.b32 $1, t, {ASM_HIGH:#x}, {ASM_SELECT[1]:#x}; "
    "sub.rn.f16x2 $0, $0, c; sub.rn.f16x2 $1, $1, c; }")


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
def _to_f16(x, CONVERT: tl.constexpr):
    """int8 -> fp16, exact in every mode (see CONVERT in the module docstring)."""
    if CONVERT == 2:
        y = tl.inline_asm_elementwise(I8_TO_F16_ASM, "=r,=r,r", [x], dtype=tl.float16, is_pure=True, pack=4)
    elif CONVERT == 1:
        y = (x.to(tl.int16) + 0x6480).to(tl.float16, bitcast=True) - 1152.0
    else:
        y = x.to(tl.float16)
    return y


@triton.jit
def _rows_f16(P, row, in_kv, D: tl.constexpr, BLOCK_N: tl.constexpr, MASKED: tl.constexpr, DH: tl.constexpr,
              CONVERT: tl.constexpr):
    """Rows ``row`` of K or V ([BLOCK_N, D] int8, zero where masked past the last key) in fp16; with DH
    loaded as [BLOCK_N, 2, D/2] and reshaped (the module docstring)."""
    if DH:
        HALF: tl.constexpr = D // 2
        off = row[:, None, None] * D + (tl.arange(0, 2) * HALF)[None, :, None] + tl.arange(0, HALF)[None, None, :]
        if MASKED:
            x = tl.load(P + off, mask=in_kv[:, None, None], other=0)
        else:
            x = tl.load(P + off)
        y = tl.reshape(_to_f16(x, CONVERT), [BLOCK_N, D])
    else:
        off = row[:, None] * D + tl.arange(0, D)[None, :]
        if MASKED:
            x = tl.load(P + off, mask=in_kv[:, None], other=0)
        else:
            x = tl.load(P + off)
        y = _to_f16(x, CONVERT)
    return y


@triton.jit
def _tiles(acc, l_i, m_i, q, K, V, KS, VS, TABLE, kvh, heads_kv, page_shift, kv_stride, scale_stride,
           nk, limit, lo, hi, qk_scale_log2, p_scale,
           D: tl.constexpr, BLOCK_N: tl.constexpr, PAGED: tl.constexpr, MASKED: tl.constexpr,
           TILE_PAGE: tl.constexpr, DESC: tl.constexpr, K_T: tl.constexpr, CONVERT: tl.constexpr,
           LOOP_STAGES: tl.constexpr, WS: tl.constexpr, DH: tl.constexpr):
    """The online softmax over keys [lo, hi) (lo a multiple of BLOCK_N) from state (acc, l_i, m_i)."""
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D)
    page_keys = 1 << page_shift
    for start in tl.range(lo, hi, BLOCK_N, num_stages=LOOP_STAGES, warp_specialize=WS):
        j = start + offs_n
        in_kv = j < nk        # only a masked tile can reach past the last key (loads masked there only)
        # the tile's K/V rows (of D bytes) and scale entries; `first`: the row of key `start`
        if PAGED:
            if TILE_PAGE == 1:    # the tile lies in one page: one table entry (start < nk always)
                page = tl.load(TABLE + (start >> page_shift)).to(tl.int64)
                first = (page * heads_kv + kvh) * page_keys + (start & (page_keys - 1))
                row = first + offs_n
            elif TILE_PAGE > 1:   # the tile spans TILE_PAGE whole pages: their entries, rows affine in each
                PAGE_KEYS: tl.constexpr = BLOCK_N // TILE_PAGE
                offs_p = tl.arange(0, TILE_PAGE)
                slot = (start >> page_shift) + offs_p            # start is a multiple of BLOCK_N
                if MASKED:    # a page past the last key has no table entry
                    pages = tl.load(TABLE + slot, mask=start + offs_p * PAGE_KEYS < nk, other=0)
                else:
                    pages = tl.load(TABLE + slot)
                base = (pages.to(tl.int64) * heads_kv + kvh) * PAGE_KEYS
                # key j of the tile: row base[j // PAGE_KEYS] + j % PAGE_KEYS (row-major, order kept)
                row = tl.reshape(base[:, None] + tl.arange(0, PAGE_KEYS)[None, :], [BLOCK_N])
                first = row
            else:
                if MASKED:
                    page = tl.load(TABLE + (j >> page_shift), mask=in_kv, other=0)
                else:
                    page = tl.load(TABLE + (j >> page_shift))
                row = (page.to(tl.int64) * heads_kv + kvh) * page_keys + (j & (page_keys - 1))
                first = row
            srow = row
        else:
            first = kvh.to(tl.int64) * kv_stride + start
            row = first + offs_n
            srow = kvh.to(tl.int64) * scale_stride + j
        if DESC:
            k8 = K.load([first.to(tl.int32), 0])
            if K_T:
                kt = _to_f16(tl.trans(k8), CONVERT)
            else:
                kt = tl.trans(_to_f16(k8, CONVERT))
        elif K_T:
            kt_off = row[None, :] * D + offs_d[:, None]
            if MASKED:
                kt = _to_f16(tl.load(K + kt_off, mask=in_kv[None, :], other=0), CONVERT)
            else:
                kt = _to_f16(tl.load(K + kt_off), CONVERT)
        else:
            kt = tl.trans(_rows_f16(K, row, in_kv, D, BLOCK_N, MASKED, DH, CONVERT))
        if MASKED:
            ks = tl.load(KS + srow, mask=in_kv, other=0.0)
        else:
            ks = tl.load(KS + srow)
        s = tl.dot(q, kt)
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
        else:
            vs = tl.load(VS + srow)
        if DESC:
            v = _to_f16(V.load([first.to(tl.int32), 0]), CONVERT)
        else:
            v = _rows_f16(V, row, in_kv, D, BLOCK_N, MASKED, DH, CONVERT)
        p16 = (p * (vs * p_scale)[None, :]).to(tl.float16)
        acc = acc * alpha[:, None] + tl.dot(p16, v)
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def _segment(q, K, V, KS, VS, TABLE, kvh, heads_kv, page_shift, kv_stride, scale_stride, nk, limit,
             lo, hi, full_end, qk_scale_log2, p_scale,
             D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, PAGED: tl.constexpr,
             TILE_PAGE: tl.constexpr, DESC: tl.constexpr, K_T: tl.constexpr, CONVERT: tl.constexpr,
             LOOP_STAGES: tl.constexpr, WS: tl.constexpr, DH: tl.constexpr):
    """Keys [lo, hi) from a fresh state: tiles every row sees whole first, then masked ones."""
    acc = tl.full([BLOCK_M, D], 0.0, tl.float32)
    l_i = tl.full([BLOCK_M], 0.0, tl.float32)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    mid = tl.minimum(tl.maximum(full_end, lo), hi)
    acc, l_i, m_i = _tiles(acc, l_i, m_i, q, K, V, KS, VS, TABLE, kvh, heads_kv, page_shift, kv_stride,
                           scale_stride, nk, limit, lo, mid, qk_scale_log2, p_scale,
                           D, BLOCK_N, PAGED, False, TILE_PAGE, DESC, K_T, CONVERT, LOOP_STAGES, WS, DH)
    acc, l_i, m_i = _tiles(acc, l_i, m_i, q, K, V, KS, VS, TABLE, kvh, heads_kv, page_shift, kv_stride,
                           scale_stride, nk, limit, mid, hi, qk_scale_log2, p_scale,
                           D, BLOCK_N, PAGED, True, TILE_PAGE, DESC, K_T, CONVERT, LOOP_STAGES, WS, DH)
    return acc, l_i, m_i


# Shape sizes are not specialised on (Triton would compile one flavour per divisibility class of
# each integer): one compile per (head size, layout, packing, block, output dtype, switches).
@triton.jit(do_not_specialize=["nq", "ctx", "kv_stride", "scale_stride", "seg_keys", "n_row_blocks"])
def pa_triton(Q, K, V, KS, VS, TABLE, OUT,
              nq, ctx, heads_kv, page_shift, kv_stride, scale_stride, seg_keys, n_row_blocks,
              qk_scale_log2, p_scale, inv_p_scale,
              D: tl.constexpr, GROUP: tl.constexpr, HP: tl.constexpr, BLOCK_M: tl.constexpr,
              BLOCK_N: tl.constexpr, PAGED: tl.constexpr, SEGMENTED: tl.constexpr,
              TILE_PAGE: tl.constexpr, DESC: tl.constexpr, K_T: tl.constexpr, CONVERT: tl.constexpr,
              LOOP_STAGES: tl.constexpr, WS: tl.constexpr, DH: tl.constexpr):
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
                                       D, BLOCK_M, BLOCK_N, PAGED, TILE_PAGE, DESC, K_T, CONVERT,
                                       LOOP_STAGES, WS, DH)
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
                                 D, BLOCK_M, BLOCK_N, PAGED, TILE_PAGE, DESC, K_T, CONVERT, LOOP_STAGES, WS,
                                 DH)

    inv_l = 1.0 / l_i
    o = acc * inv_l[:, None] * inv_p_scale
    tl.store(OUT + q_off[:, None] + offs_d[None, :], o.to(OUT.dtype.element_ty), mask=m_ok[:, None])


# --------------------------------------------------------------------------- host side

#: int8 -> fp16 conversions (CONVERT 0, 1, 2) and K/V load paths of ``Config``.
CONVERTS = ("cast", "bits", "asm")
LOADS = ("gather", "tile", "tma")
#: The conversions Triton's interpreter can run (it runs no PTX).
INTERPRETER_CONVERTS = ("cast", "bits")


def has_tensor_descriptors() -> bool:
    """Whether this Triton has host-side tensor descriptors (the ``tma`` load path)."""
    try:
        from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: F401
    except Exception:
        return False
    return True


def has_gluon() -> bool:
    """Whether this Triton has the Gluon pieces kernels/gluon_pa.py uses (Triton 3.6+)."""
    try:
        from triton.experimental.gluon.language.nvidia.ampere import async_copy  # noqa: F401
        from triton.experimental.gluon.language.nvidia.hopper import warpgroup_mma  # noqa: F401
    except Exception:
        return False
    return True


_gluon_module = None


def gluon_module():
    """kernels/gluon_pa.py as a module (loaded on first use: only ``gl`` launches need it)."""
    global _gluon_module
    if _gluon_module is None:
        import importlib.util
        import sys
        from pathlib import Path

        name = f"{__name__}_gluon"
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("gluon_pa.py"))
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod          # Triton reads the kernel's source through its module
        spec.loader.exec_module(mod)
        _gluon_module = mod
    return _gluon_module


@dataclass(frozen=True)
class Config:
    """A launch configuration: launch parameters and the kernel's structure switches (the module
    docstring). Only ``block_n`` changes a row's arithmetic (it is the numerics model's tile_keys);
    every other field changes how the same operands reach the same steps."""

    block_m: int = 128
    num_warps: int = 8
    num_stages: int = 3
    convert: str = "cast"        # CONVERTS
    loads: str = "gather"        # LOADS: a page-table entry per key, one per tile, or descriptors
    k_trans: bool = False        # K loaded (or, with tma, turned) transposed before the conversion
    loop_stages: int = 0         # 0: plain key loops; n: tl.range(num_stages=n)
    warp_specialize: bool = False
    block_n: int = BLOCK_N
    maxnreg: int = 0             # registers per thread at most (0: the compiler's choice)
    d_halves: bool = False       # K/V pointer loads as [block_n, 2, D/2] (bank-conflict-free stores)
    gluon: bool = False          # the key loop in Gluon (kernels/gluon_pa.py): GLUON's launch only

    def __post_init__(self) -> None:
        if self.convert not in CONVERTS:
            raise ValueError(f"convert must be one of {CONVERTS}, not {self.convert!r}")
        if self.loads not in LOADS:
            raise ValueError(f"loads must be one of {LOADS}, not {self.loads!r}")
        for name in ("block_m", "block_n"):
            value = getattr(self, name)
            if value < 16 or value & (value - 1):
                raise ValueError(f"{name} must be a power of two >= 16, not {value}")
        if self.d_halves and (self.loads == "tma" or self.k_trans):
            raise ValueError("d_halves splits the pointer loads of K and V as stored: not with loads 'tma' or k_trans")
        if self.gluon and replace(self, gluon=False) != GLUON_BASE:
            raise ValueError("the Gluon loop has one launch: m128-w8-s2-asm-tile-gl")
        if self.num_warps not in (1, 2, 4, 8, 16) or self.num_stages < 1 or self.loop_stages < 0 \
                or not (self.maxnreg == 0 or 24 <= self.maxnreg <= 255):
            raise ValueError(f"bad launch parameters: {self.num_warps} warps, {self.num_stages} stages, "
                             f"{self.loop_stages} loop stages, maxnreg {self.maxnreg}")

    @property
    def name(self) -> str:
        """A short unique name, e.g. ``m128-w8-s3-asm-tma-kt`` (parse() reads it back)."""
        parts = [f"m{self.block_m}", f"w{self.num_warps}", f"s{self.num_stages}", self.convert, self.loads]
        if self.k_trans:
            parts.append("kt")
        if self.loop_stages:
            parts.append(f"ls{self.loop_stages}")
        if self.warp_specialize:
            parts.append("ws")
        if self.block_n != BLOCK_N:
            parts.append(f"n{self.block_n}")
        if self.maxnreg:
            parts.append(f"r{self.maxnreg}")
        if self.d_halves:
            parts.append("dh")
        if self.gluon:
            parts.append("gl")
        return "-".join(parts)

    @classmethod
    def parse(cls, name: str) -> "Config":
        """The configuration a ``name`` names (ValueError for anything else)."""
        parts = name.strip().split("-")
        try:
            m, w, s, convert, loads = parts[:5]
            if m[0] != "m" or w[0] != "w" or s[0] != "s":
                raise ValueError
            kw = dict(block_m=int(m[1:]), num_warps=int(w[1:]), num_stages=int(s[1:]), convert=convert, loads=loads)
            for flag in parts[5:]:
                if flag == "kt":
                    kw["k_trans"] = True
                elif flag == "ws":
                    kw["warp_specialize"] = True
                elif flag == "dh":
                    kw["d_halves"] = True
                elif flag == "gl":
                    kw["gluon"] = True
                elif flag.startswith("ls"):
                    kw["loop_stages"] = int(flag[2:])
                elif flag.startswith("n"):
                    kw["block_n"] = int(flag[1:])
                elif flag.startswith("r"):
                    kw["maxnreg"] = int(flag[1:])
                else:
                    raise ValueError
            cfg = cls(**kw)
        except (ValueError, IndexError):
            raise ValueError(f"not a triton configuration name: {name!r}") from None
        if cfg.name != name.strip():
            raise ValueError(f"not a triton configuration name: {name!r} (reads as {cfg.name!r})")
        return cfg

    @property
    def same_arithmetic(self) -> bool:
        """Whether a row's arithmetic is the default's (the numerics model's tile_keys holds)."""
        return self.block_n == BLOCK_N

    def unsupported(self, *, paged: bool, page: int) -> str | None:
        """Why this configuration cannot run a problem of this layout, or None. ``tile`` takes pages
        that hold whole tiles or that tiles span whole (a divisor of block_n of at least
        MIN_TILE_PAGE keys); ``tma`` only the former (the module docstring, DESC)."""
        if paged and self.loads == "tma" and page % self.block_n:
            return f"loads 'tma' needs pages of a multiple of {self.block_n} keys, not {page}"
        if paged and self.loads == "tile" and page % self.block_n and (self.block_n % page or page < MIN_TILE_PAGE):
            return (f"loads 'tile' needs pages of a multiple of {self.block_n} keys or a divisor of it "
                    f"of at least {MIN_TILE_PAGE} keys, not {page}")
        if self.loads == "tma" and not has_tensor_descriptors():
            return "loads 'tma' needs triton.tools.tensor_descriptor (Triton 3.3+)"
        if self.gluon:
            import os

            if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
                return "the Gluon loop does not run in Triton's interpreter"
            if not paged or page % self.block_n:
                return f"the Gluon loop needs paged K/V with pages of a multiple of {self.block_n} keys"
            if not has_gluon():
                return "the Gluon loop needs Triton 3.6+ (triton.experimental.gluon)"
        return None

    def tile_pages(self, *, paged: bool, page: int) -> int:
        """The kernel's TILE_PAGE: 0 for a page-table entry per key, else the entries per tile
        (1 where a page holds whole tiles, block_n // page where a tile spans several pages)."""
        if not paged or self.loads == "gather":
            return 0
        return max(1, self.block_n // page)

    def as_dict(self) -> dict:
        return {"config": self.name, **asdict(self)}


#: The Gluon loop's one launch (``Config.gluon``), and that launch without the flag.
GLUON_BASE = Config(128, 8, 2, "asm", "tile")
GLUON = replace(GLUON_BASE, gluon=True)

#: The launch parameters scripts/triton_tune.py tries with the default structure.
CANDIDATES = (
    Config(128, 8, 3), Config(128, 8, 2), Config(128, 4, 3), Config(64, 4, 3), Config(64, 4, 2),
    Config(64, 8, 3),
)


def default_config(head_dim: int, group: int, queries: int, heads_q: int, sm_count: int | None = None) -> Config:
    """The configuration where no table, cache or tuning says otherwise: the plain structure (Triton's
    conversion, a page-table entry per key) at 128 rows per program unless that leaves SMs idle
    (fewer programs than SMs: then 64 rows, so a short chunk still fills the GPU)."""
    warps = 8 if head_dim == 128 else 4
    if sm_count:
        hp = heads_packed(group, 128)
        programs = (heads_q // hp) * -(-queries // (128 // hp))
        if programs < sm_count:
            return Config(64, 4, 3)
    return Config(128, warps, 3)


def deep_stages(paged: bool) -> tuple[int, int]:
    """Pipeline depths that give Triton's pipeliner two and three K/V buffers. Paged K/V addresses
    wait on a page-table load, which takes pipeline stages of its own: in Triton 3.6's sm_90a
    output, 3 or 4 stages give such loads a single buffer (a tile's copies are issued only after
    the previous tile was consumed), 5 two, 7 three. Contiguous K/V: two at 3 stages, three at 4."""
    return (5, 7) if paged else (3, 4)


def candidates(*, head_dim: int, paged: bool, page: int, queries: int, heads_q: int, heads_kv: int,
               sm_count: int | None = None, full: bool = False) -> list[Config]:
    """Configurations worth timing on a problem class, the default first.

    The small set (a run's tune on first use; all with the default's arithmetic): the fast
    conversion with the pointer loads that suit the layout (a table entry per tile where pages
    hold whole tiles, else one per key) and tensor descriptors, double-buffered
    (``deep_stages``), at 128 rows and 8 warps (one converted tile serves 128 rows) and at 64
    rows and 4 warps (two programs per SM, whose phases overlap; three at D=128 with at most 168
    registers per thread), plus triple buffering at the default's rows, and at D=128 the 64-row
    pointer loads with ``d_halves`` (operand stores without bank conflicts).
    ``full`` (scripts/triton_tune.py) adds each structure switch alone at the default's launch
    parameters (so each one's effect is seen by itself), the deeper pipeline alone, the other
    load paths at every launch, and 128-key tiles (which change the arithmetic: they are judged
    against the numerics model of 128-key tiles) at 64 rows and 4 warps (``deep_stages`` and 3
    stages, which lets two programs share an SM) and at 128 rows and 8 warps, the latter at both
    ``deep_stages`` depths with each load the layout allows: ``tile`` on pages of at least 64 keys (one entry per 128-key tile on pages of 128 keys or more, two on
    64-key pages, so they compare like for like with the 64-key tiles' ``tile``), ``tma`` on pages
    of a multiple of 128 keys; on smaller pages a table entry per key at either tile size (tiles
    over four or eight pages of 32 or 16 keys stay a switch, no candidate); at D=128 also
    ``d_halves`` at the default's launch, at three 64-row programs an SM and at the 128-key
    launches' pointer loads."""
    group = heads_q // heads_kv
    base = default_config(head_dim, group, queries, heads_q, sm_count)
    tile_ok = not paged or page % BLOCK_N == 0
    fast = "tile" if paged and tile_ok else "gather"
    loads = [fast] + (["tma"] if tile_ok and has_tensor_descriptors() else [])
    two, three = deep_stages(paged)
    launches = [(128, 8), (64, 4)] + ([(128, 4)] if head_dim == 64 else [])
    out = [base]
    out += [Config(bm, w, two, "asm", ld) for bm, w in launches for ld in loads]
    if head_dim == 128:   # 64 rows, 4 warps at 168 registers: three programs per SM instead of two
        out += [Config(64, 4, two, "asm", loads[-1], maxnreg=168)]
    out += [replace(base, num_stages=three, convert="asm", loads=fast)]
    if head_dim == 128:   # a key row's halves loaded apart: operand stores without bank conflicts
        out += [Config(64, 4, two, "asm", fast, d_halves=True)]
    if head_dim == 128 and paged:   # the key loop in Gluon (unsupported() drops it where it cannot run)
        out += [GLUON]
    if full:
        out += [replace(base, convert="bits"), replace(base, convert="asm"), replace(base, convert="asm", k_trans=True)]
        out += [replace(base, convert="asm", loads=ld, k_trans=kt) for ld in loads for kt in (False, True)]
        # warp specialisation (`ws`) stays a switch but is no candidate: Triton 3.6 fails to
        # compile it for this kernel on sm_90 (an assertion in its NVGPUWarpSpecialization pass)
        out += [replace(base, convert="asm", loads=fast, loop_stages=two),
                replace(base, num_stages=two)]
        if fast != "gather":
            out += [Config(bm, w, two, "asm", "gather") for bm, w in launches]
        out += [Config(bm, w, three, "asm", ld) for bm, w in launches for ld in loads]
        if head_dim == 128:
            out += [Config(64, 4, two, "asm", ld, maxnreg=168) for ld in loads]
        # 128-key tiles: half the tiles, so half the per-tile fixed work (page-table entries, scale
        # loads, row max and sum, rescaling of the accumulator), with the loads the layout allows;
        # `tile` where the 64-key tiles take it (pages of 64 keys or more: one or two per tile)
        wide = "tile" if paged and tile_ok else "gather"
        desc_ok = not paged or page % 128 == 0
        wide_loads = [wide] + (["tma"] if desc_ok and has_tensor_descriptors() else [])
        out += [Config(64, 4, two, "asm", wide, block_n=128)]
        # ... and at 3 stages (84 KB at D=128, where `two` takes 117 KB): two programs an SM fit in
        # shared memory, so one's conversion and softmax run under the other's MMAs
        out += [Config(64, 4, 3, "asm", wide, block_n=128)]
        out += [Config(128, 8, st, "asm", ld, block_n=128) for st in (two, three) for ld in wide_loads]
        if head_dim == 128:   # the pointer loads of the 64- and 128-key launches with d_halves, and
            # three 64-row programs an SM (168 registers, a single buffer: 50 KB of shared memory)
            out += [replace(base, convert="asm", loads=fast, d_halves=True),
                    Config(64, 4, 3, "asm", fast, maxnreg=168, d_halves=True),
                    Config(64, 4, 3, "asm", wide, block_n=128, d_halves=True),
                    Config(128, 8, two, "asm", wide, block_n=128, d_halves=True)]
    unique = []
    for cfg in out:
        if cfg not in unique and cfg.unsupported(paged=paged, page=page) is None:
            unique.append(cfg)
    return unique


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
                "segmented": bool(self.constants.get("SEGMENTED", False))}


def plan_launch(*, queries: int, context: int, heads_q: int, heads_kv: int, head_dim: int, paged: bool,
                page: int, kv_stride: int, scale_stride: int, seg_keys: int, qk_scale_log2: float,
                p_scale: float, config: Config) -> Launch:
    """The launch of ``pa_triton`` for one problem. ``seg_keys``: keys per segment (0: none);
    ``kv_stride``/``scale_stride``: keys per KV head row of contiguous K/V and scales."""
    if head_dim not in (64, 128):
        raise ValueError(f"head_dim must be 64 or 128, not {head_dim}")
    if heads_q % heads_kv:
        raise ValueError(f"heads_kv {heads_kv} must divide heads_q {heads_q}")
    block_n = config.block_n
    if seg_keys % block_n or seg_keys < 0:
        raise ValueError(f"seg_keys must be a non-negative multiple of {block_n}, not {seg_keys}")
    if paged and (page < 1 or page & (page - 1)):
        raise ValueError(f"page must be a power of two, not {page}")
    reason = config.unsupported(paged=paged, page=page)
    if reason:
        raise ValueError(f"configuration {config.name}: {reason}")
    group = heads_q // heads_kv
    hp = heads_packed(group, config.block_m)
    rows = config.block_m // hp
    n_row_blocks = -(-queries // rows)
    segmented = bool(seg_keys) and context + queries > seg_keys
    if config.gluon:
        if head_dim != 128 or segmented:
            raise ValueError(f"configuration {config.name}: the Gluon loop needs D 128 and no key segments")
        scalars = (queries, context, heads_kv, n_row_blocks, float(qk_scale_log2), float(p_scale),
                   1.0 / float(p_scale))
        constants = dict(D=head_dim, GROUP=group, HP=hp, PAGE_SHIFT=page.bit_length() - 1)
        return Launch((heads_q // hp, n_row_blocks), scalars, constants, config)
    scalars = (queries, context, heads_kv, page.bit_length() - 1 if paged else 0, kv_stride, scale_stride,
               seg_keys if segmented else block_n, n_row_blocks, float(qk_scale_log2), float(p_scale),
               1.0 / float(p_scale))
    constants = dict(D=head_dim, GROUP=group, HP=hp, BLOCK_M=config.block_m, BLOCK_N=block_n,
                     PAGED=bool(paged), SEGMENTED=segmented,
                     TILE_PAGE=config.tile_pages(paged=bool(paged), page=page), DESC=config.loads == "tma",
                     K_T=config.k_trans, CONVERT=CONVERTS.index(config.convert),
                     LOOP_STAGES=config.loop_stages or None, WS=config.warp_specialize,
                     DH=config.d_halves)
    return Launch((heads_q // hp, n_row_blocks), scalars, constants, config)


def descriptors(launch: Launch, k, v):
    """K and V as the kernel takes them: the tensors, or with ``tma`` loads tensor descriptors of
    their rows of D bytes (one box = one tile of BLOCK_N rows)."""
    if not launch.constants["DESC"]:
        return k, v
    from triton.tools.tensor_descriptor import TensorDescriptor

    d, bn = launch.constants["D"], launch.constants["BLOCK_N"]

    def rows(x):
        flat = x.reshape(-1, d)
        return TensorDescriptor(flat, list(flat.shape), [d, 1], [bn, d])

    return rows(k), rows(v)


def launcher(launch: Launch, q, k, v, k_scale, v_scale, table, out):
    """A no-argument callable that launches the kernel once on the current stream. Tensors (torch,
    on the device): q fp16 [Hq, Nq, D]; k, v int8 (pool [pages, Hkv, page, D] or [Hkv, stride, D]);
    scales fp32 (pool [pages, Hkv, page] or [Hkv, scale_stride]); table int32; out [Hq, Nq, D]."""
    grid, consts = launch.grid, launch.constants
    if launch.grid[1] == 0:          # no query rows: nothing to launch
        return lambda: None
    if launch.config.gluon:
        return _gluon_launcher(launch, q, k, v, k_scale, v_scale, table, out)
    kd, vd = descriptors(launch, k, v)
    args = (q, kd, vd, k_scale, v_scale, table, out) + launch.scalars
    options = dict(num_warps=launch.config.num_warps, num_stages=launch.config.num_stages)
    if launch.config.maxnreg:
        options["maxnreg"] = launch.config.maxnreg

    def run():
        return pa_triton[grid](*args, **consts, **options)   # the compiled kernel

    return run


def _gluon_launcher(launch: Launch, q, k, v, k_scale, v_scale, table, out):
    """``launcher`` for the Gluon loop (kernels/gluon_pa.py's pa_gluon): its wgmma and cp.async code
    is sm_90's, so another GPU is an error here rather than at the first launch."""
    if q.is_cuda:
        import torch

        cc = torch.cuda.get_device_capability(q.device)
        if cc != (9, 0):
            raise RuntimeError(f"configuration {launch.config.name}: the Gluon loop needs sm_90, not sm_{cc[0]}{cc[1]}")
    kernel = gluon_module().pa_gluon
    grid, consts = launch.grid, launch.constants
    args = (q, k, v, k_scale, v_scale, table, out) + launch.scalars
    num_warps = gluon_module().NUM_WARPS

    def run():
        return kernel[grid](*args, **consts, num_warps=num_warps)   # the compiled kernel

    return run
