"""int8-KV prompt attention in Gluon (Triton's explicit-layout language): a prototype of the
`triton` variant's loop with the waits placed by hand.

Triton 3.6 waits for every wgmma right after issuing it, so one program's int8 -> fp16
conversions never run under its own MMAs (docs/PERF_NOTES.md). Gluon lets the kernel say where
each wait goes. The problem, the packing and the arithmetic are kernels/triton_pa.py's: a program
owns BLOCK_M = 64 rows = HP query heads x 64/HP rows of one KV group (m = r * HP + g), one
warpgroup (4 warps), D = 128, paged K/V with 64-key pages (a tile holds one page or spans two),
no key segments (contexts up to SEGMENT_KEYS). BLOCK_N is the numerics model's tile_keys.

Per tile n (stage n % STAGES of a ring of int8 K, int8 V and their fp32 scales, filled by cp.async):
  1. wait for tile n's copies; barrier (every thread's copies visible, every thread done with the
     stage it refills next);
  2. convert K(n) to the fp16 operand K16 -- under P.V of tile n - 1; fence (generic -> async
     proxy); wait for P.V of tile n - 1 (V16 and O free); barrier;
  3. issue S = Q.K16^T (wgmma, async);
  4. STAGES > 1: issue tile n + STAGES - 1's copies into tile n - 1's stage;
  5. convert V(n) to V16 -- under S; fence; load the tile's scales; STAGES == 1: barrier, then
     tile n + 1's copies into the one stage, still under S;
  6. wait for S; softmax (scales, the causal mask on tiles that cross the diagonal, max, exp2, sum);
     O *= alpha;
  7. barrier; issue O += P.V16 (wgmma, async, P from registers); on to tile n + 1.
Only waits for zero outstanding wgmma groups: a wait for one group (P.V) while S is in flight makes
ptxas serialise every wgmma of the kernel (C7514). Page-table entries are loaded a tile ahead.
The arithmetic is triton_pa's (the same fp16 operands, fp32 S, exp2 softmax, P = fp16(p * v_scale
* p_scale), O = O * alpha + P.V); only the order of instructions differs.

Written against Triton 3.6's Gluon (triton.experimental.gluon); Triton 3.9 renames its async
copies (async_load), so it does not build there. Measured on the H200
(results/reference/h200/20261202-025339-gluon-launches): BLOCK_N 128 with one stage (115,712
bytes, two programs an SM) is level with the Triton table's launch at 32Kx1024 and 64Kx512;
BLOCK_N 64, one stage, 168 registers (three programs an SM) leads it at the first chunk.
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, warpgroup_mma, warpgroup_mma_init,
                                                            warpgroup_mma_wait)

BLOCK_M = 64
BLOCK_N = 64
STAGES = 3
NUM_WARPS = 4

# int8 -> fp16 exactly, four at a time (kernels/triton_pa.py's `asm` conversion).
I8_TO_F16_ASM: gl.constexpr = gl.constexpr(
    "{ .reg .b32 t, c; xor.b32 t, $2, 0x80808080; mov.b32 c, 0x64806480; "
    "prmt.b32 $0, t, 0x64646464, 0x5140; prmt.b32 $1, t, 0x64646464, 0x7362; "
    "sub.rn.f16x2 $0, $0, c; sub.rn.f16x2 $1, $1, c; }")


@gluon.jit
def _to_f16(x):
    return gl.inline_asm_elementwise(I8_TO_F16_ASM, "=r,=r,r", [x], dtype=gl.float16, is_pure=True, pack=4)


@gluon.jit
def _pages(TABLE, t, n_tiles, nk, BLOCK_N: gl.constexpr, PAGE_SHIFT: gl.constexpr):
    """Tile t's page-table entries, a tile holding one page's keys or spanning two pages (the last
    tile's past the end; a page past the last key has no entry: 0)."""
    slot = (gl.minimum(t, n_tiles - 1) * BLOCK_N) >> PAGE_SHIFT
    p0 = gl.load(TABLE + slot).to(gl.int64)
    if BLOCK_N > (1 << PAGE_SHIFT):
        p1 = gl.load(TABLE + slot + 1, mask=((slot + 1) << PAGE_SHIFT) < nk, other=0).to(gl.int64)
    else:
        p1 = p0
    return p0, p1


@gluon.jit
def _rows(p0, p1, start, kvh, heads_kv, offs, PAGE_SHIFT: gl.constexpr, BLOCK_N: gl.constexpr):
    """The pool rows of keys start + offs of one tile (affine within each page)."""
    PK: gl.constexpr = 1 << PAGE_SHIFT
    base0 = (p0 * heads_kv + kvh) * PK
    if BLOCK_N > PK:
        base1 = (p1 * heads_kv + kvh) * PK
        row = gl.where(offs < PK, base0 + offs, base1 + (offs - PK))
    else:
        row = base0 + (start & (PK - 1)) + offs
    return row


@gluon.jit
def _issue(K, V, KS, VS, p0, p1, k8, v8, sc, t, n_tiles, kvh, heads_kv, offs_nkv, offs_dkv, sc_n, sc_kv,
           BLOCK_N: gl.constexpr, D: gl.constexpr, PAGE_SHIFT: gl.constexpr, STAGES: gl.constexpr):
    """The copies of tile t, whose page-table entries are ``p0``, ``p1`` (none past the last tile: an
    empty group keeps the count), into its stage."""
    stage = t % STAGES
    live = t < n_tiles
    start = gl.minimum(t, n_tiles - 1) * BLOCK_N
    row = _rows(p0, p1, start, kvh, heads_kv, offs_nkv.to(gl.int64), PAGE_SHIFT, BLOCK_N)
    off = row[:, None] * D + offs_dkv[None, :]
    async_copy.async_copy_global_to_shared(k8.index(stage), K + off, mask=(off >= 0) & live)
    async_copy.async_copy_global_to_shared(v8.index(stage), V + off, mask=(off >= 0) & live)
    # K's scales in the stage's first row of BLOCK_N, V's in its second
    key = gl.where(sc_kv == 0, KS, VS) + _rows(p0, p1, start, kvh, heads_kv, sc_n.to(gl.int64), PAGE_SHIFT, BLOCK_N)
    async_copy.async_copy_global_to_shared(sc.index(stage), key, mask=(sc_n >= 0) & live)
    async_copy.commit_group()


@gluon.jit(do_not_specialize=["nq", "ctx", "n_row_blocks"])
def pa_gluon(Q, K, V, KS, VS, TABLE, OUT, nq, ctx, heads_kv, n_row_blocks, qk_scale_log2, p_scale, inv_p_scale,
             D: gl.constexpr, GROUP: gl.constexpr, HP: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
             PAGE_SHIFT: gl.constexpr, STAGES: gl.constexpr):
    ROWS: gl.constexpr = BLOCK_M // HP
    S_L: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_N, 16])
    O_L: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, D, 16])
    P_L: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=O_L, k_width=2)
    ROW_S: gl.constexpr = gl.SliceLayout(1, S_L)
    COL_S: gl.constexpr = gl.SliceLayout(0, S_L)
    ROW_O: gl.constexpr = gl.SliceLayout(1, O_L)
    COL_O: gl.constexpr = gl.SliceLayout(0, O_L)
    # int8 tiles [BLOCK_N, D]: 16 bytes a thread, four threads a half row, eight rows a warp
    KV_L: gl.constexpr = gl.BlockedLayout([1, 16], [8, 4], [4, 1], [1, 0])
    Q_L: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])
    SC_L: gl.constexpr = gl.BlockedLayout([1, 1], [2, 16], [1, 4], [1, 0])      # [2, BLOCK_N] scales
    OPND: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2)
    # the int8 ring: a row's two 64-byte halves swap on odd rows, so a phase of eight lanes (two rows
    # x 64 bytes, KV_L) writes (cp.async) and reads all 32 banks once (gl.bank_conflicts: 0, against
    # 1 unswizzled); the fp16 operand stores from KV_L are conflict-free in the 128-byte swizzle
    RING8: gl.constexpr = gl.SwizzledSharedLayout(vec=64, per_phase=1, max_phase=2, order=[1, 0])
    RINGS: gl.constexpr = gl.SwizzledSharedLayout(vec=1, per_phase=1, max_phase=1, order=[1, 0])

    h0 = gl.program_id(0) * HP
    kvh = h0 // GROUP
    rb = n_row_blocks - 1 - gl.program_id(1)            # longest rows first
    row0 = rb * ROWS
    nk = ctx + nq

    # Q: [BLOCK_M, D] fp16, rows packed m = r * HP + g
    offs_mq = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, Q_L))
    offs_dq = gl.arange(0, D, layout=gl.SliceLayout(0, Q_L))
    rq = row0 + offs_mq // HP
    q_off = ((h0 + offs_mq % HP).to(gl.int64) * nq + rq) * D
    q = gl.load(Q + q_off[:, None] + offs_dq[None, :], mask=(rq < nq)[:, None], other=0.0)
    q_smem = gl.allocate_shared_memory(gl.float16, [BLOCK_M, D], OPND, q)

    k8 = gl.allocate_shared_memory(gl.int8, [STAGES, BLOCK_N, D], RING8)
    v8 = gl.allocate_shared_memory(gl.int8, [STAGES, BLOCK_N, D], RING8)
    sc = gl.allocate_shared_memory(gl.float32, [STAGES, 2, BLOCK_N], RINGS)    # K's, V's scales a stage
    k16 = gl.allocate_shared_memory(gl.float16, [BLOCK_N, D], OPND)
    v16 = gl.allocate_shared_memory(gl.float16, [BLOCK_N, D], OPND)

    offs_nkv = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, KV_L))
    offs_dkv = gl.arange(0, D, layout=gl.SliceLayout(0, KV_L))
    sc_kv = gl.arange(0, 2, layout=gl.SliceLayout(1, SC_L))[:, None] + gl.zeros([2, BLOCK_N], gl.int32, SC_L)
    sc_n = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, SC_L))[None, :] + gl.zeros([2, BLOCK_N], gl.int32, SC_L)

    hi_key = gl.minimum(ctx + row0 + ROWS, nk)
    n_tiles = (hi_key + BLOCK_N - 1) // BLOCK_N
    full_end = (ctx + row0 + 1) // BLOCK_N * BLOCK_N     # tiles below it: every row sees every key

    AHEAD: gl.constexpr = max(STAGES - 1, 1)           # tiles in flight before tile 0's step
    for t in gl.static_range(AHEAD):
        p0, p1 = _pages(TABLE, t, n_tiles, nk, BLOCK_N, PAGE_SHIFT)
        _issue(K, V, KS, VS, p0, p1, k8, v8, sc, t, n_tiles, kvh, heads_kv, offs_nkv, offs_dkv, sc_n, sc_kv,
               BLOCK_N, D, PAGE_SHIFT, STAGES)
    p0, p1 = _pages(TABLE, AHEAD, n_tiles, nk, BLOCK_N, PAGE_SHIFT)   # the next tile to copy: a tile ahead

    rows_s = row0 + gl.arange(0, BLOCK_M, layout=ROW_S) // HP
    limit = ctx + rows_s                                 # each row's last visible key
    offs_ns = gl.arange(0, BLOCK_N, layout=COL_S)
    acc = warpgroup_mma_init(gl.zeros([BLOCK_M, D], gl.float32, O_L))
    l_i = gl.zeros([BLOCK_M], gl.float32, ROW_S)
    m_i = gl.full([BLOCK_M], float("-inf"), gl.float32, ROW_S)
    s0 = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, S_L)

    for n in range(0, n_tiles):
        stage = n % STAGES
        start = n * BLOCK_N
        async_copy.wait_group(max(STAGES - 2, 0))
        gl.thread_barrier()
        k16.store(_to_f16(k8.index(stage).load(KV_L)))        # under P.V of tile n - 1
        fence_async_shared()
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))   # P.V of tile n - 1 done: V16 free
        gl.thread_barrier()
        s = warpgroup_mma(q_smem, k16.permute((1, 0)), s0, use_acc=False, is_async=True)
        if STAGES > 1:   # tile n - 1's stage is free: refill it now
            _issue(K, V, KS, VS, p0, p1, k8, v8, sc, n + STAGES - 1, n_tiles, kvh, heads_kv, offs_nkv, offs_dkv,
                   sc_n, sc_kv, BLOCK_N, D, PAGE_SHIFT, STAGES)
            p0, p1 = _pages(TABLE, n + STAGES, n_tiles, nk, BLOCK_N, PAGE_SHIFT)
        v16.store(_to_f16(v8.index(stage).load(KV_L)))        # under S of tile n
        fence_async_shared()
        scales = sc.index(stage).reshape([2 * BLOCK_N])
        ks = scales.slice(0, BLOCK_N).load(COL_S)
        vs = scales.slice(BLOCK_N, BLOCK_N).load(COL_S)
        if STAGES == 1:  # one stage: refilled once every thread has read it, under S still
            gl.thread_barrier()
            _issue(K, V, KS, VS, p0, p1, k8, v8, sc, n + 1, n_tiles, kvh, heads_kv, offs_nkv, offs_dkv,
                   sc_n, sc_kv, BLOCK_N, D, PAGE_SHIFT, STAGES)
            p0, p1 = _pages(TABLE, n + 2, n_tiles, nk, BLOCK_N, PAGE_SHIFT)
        s = warpgroup_mma_wait(num_outstanding=0, deps=(s, ))
        if start >= full_end:       # the tile crosses the diagonal (or the last key): mask
            j = start + offs_ns
            ks = gl.where(j < nk, ks, 0.0)
            vs = gl.where(j < nk, vs, 0.0)
            s = s * (ks * qk_scale_log2)[None, :]
            s = gl.where(j[None, :] <= limit[:, None], s, float("-inf"))
        else:
            s = s * (ks * qk_scale_log2)[None, :]
        m_new = gl.maximum(m_i, gl.max(s, 1))
        m_use = gl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = gl.exp2(m_i - m_use)
        p = gl.exp2(s - m_use[:, None])
        l_i = l_i * alpha + gl.sum(p, 1)
        acc = acc * gl.convert_layout(alpha, ROW_O)[:, None]
        p16 = gl.convert_layout((p * (vs * p_scale)[None, :]).to(gl.float16), P_L)
        gl.thread_barrier()
        acc = warpgroup_mma(p16, v16, acc, is_async=True)
        m_i = m_new

    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
    async_copy.wait_group(0)
    inv_l = gl.convert_layout(1.0 / l_i, ROW_O)
    o = acc * inv_l[:, None] * inv_p_scale
    offs_mo = gl.arange(0, BLOCK_M, layout=ROW_O)
    offs_do = gl.arange(0, D, layout=COL_O)
    ro = row0 + offs_mo // HP
    o_off = ((h0 + offs_mo % HP).to(gl.int64) * nq + ro) * D
    gl.store(OUT + o_off[:, None] + offs_do[None, :], o.to(OUT.dtype.element_ty), mask=(ro < nq)[:, None])


# --- 128 rows a program: two warpgroups share each converted tile; FlashAttention-3's
# intra-warpgroup overlap (S of the next tile and P.V of this one in flight together) ---------------

WIDE_M = 128
WIDE_WARPS = 8


@gluon.jit
def _copy_tile(X, ring, e0, e1, t, n_tiles, kvh, heads_kv, offs_nkv, offs_dkv, BLOCK_N: gl.constexpr,
               D: gl.constexpr, PAGE_SHIFT: gl.constexpr):
    """Tile t of X (K or V, int8), whose page-table entries are e0, e1, into ``ring`` (a slot); past
    the last tile: nothing (zeros)."""
    start = gl.minimum(t, n_tiles - 1) * BLOCK_N
    row = _rows(e0, e1, start, kvh, heads_kv, offs_nkv.to(gl.int64), PAGE_SHIFT, BLOCK_N)
    off = row[:, None] * D + offs_dkv[None, :]
    async_copy.async_copy_global_to_shared(ring, X + off, mask=(off >= 0) & (t < n_tiles))


@gluon.jit
def _copy_scales(KS, VS, ring, e0, e1, t, n_tiles, kvh, heads_kv, sc_n, sc_kv, BLOCK_N: gl.constexpr,
                 PAGE_SHIFT: gl.constexpr):
    """Tile t's K scales into row 0 of ``ring`` (a slot), its V scales into row 1."""
    start = gl.minimum(t, n_tiles - 1) * BLOCK_N
    key = gl.where(sc_kv == 0, KS, VS) + _rows(e0, e1, start, kvh, heads_kv, sc_n.to(gl.int64), PAGE_SHIFT, BLOCK_N)
    async_copy.async_copy_global_to_shared(ring, key, mask=(sc_n >= 0) & (t < n_tiles))


@gluon.jit
def _pin(x):
    """x through an opaque move: its computation stays before the next wgmma's fence (ptxas serialises
    every wgmma, C7513, when an operand register is defined between a fence and its wgmma)."""
    return gl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r", [x], dtype=x.dtype, is_pure=False, pack=2)


@gluon.jit
def _scales(sc_slot, COL_S: gl.constexpr, BLOCK_N: gl.constexpr):
    """A tile's K and V scales from its slot, in the columns' layout of S."""
    scales = sc_slot.reshape([2 * BLOCK_N])
    return scales.slice(0, BLOCK_N).load(COL_S), scales.slice(BLOCK_N, BLOCK_N).load(COL_S)


@gluon.jit
def _softmax(s, m_i, l_i, ks, vs, start, full_end, nk, limit, qk_scale_log2, p_scale, offs_ns,
             P_L: gl.constexpr, P_SMEM: gl.constexpr):
    """Tile ``start``'s step of the online softmax: P = fp16(p * v_scale * p_scale), the new max,
    the rescale alpha and the new sum (triton_pa's arithmetic). A tile past the last key is all masked:
    alpha 1, P 0."""
    if start >= full_end:
        jk = start + offs_ns
        ks = gl.where(jk < nk, ks, 0.0)
        vs = gl.where(jk < nk, vs, 0.0)
        s = s * (ks * qk_scale_log2)[None, :]
        s = gl.where(jk[None, :] <= limit[:, None], s, float("-inf"))
    else:
        s = s * (ks * qk_scale_log2)[None, :]
    m_new = gl.maximum(m_i, gl.max(s, 1))
    m_use = gl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = gl.exp2(m_i - m_use)
    p = gl.exp2(s - m_use[:, None])
    l_new = l_i * alpha + gl.sum(p, 1)
    p16 = (p * (vs * p_scale)[None, :]).to(gl.float16)
    if not P_SMEM:
        p16 = _pin(gl.convert_layout(p16, P_L))
    return p16, m_new, l_new, alpha


@gluon.jit
def _wide_step(n, p16, p_cur, p_nxt, m_i, l_i, acc, ek0, ek1, ev0, ev1, q_smem, k16_next, v16_cur, k16_conv,
               v16_conv, k8_conv, v8_conv, sc_next, k8_w, v8_w, sc_w, K, V, KS, VS, TABLE, n_tiles, nk, kvh,
               heads_kv, offs_nkv, offs_dkv, sc_n, sc_kv, full_end, limit, qk_scale_log2, p_scale, offs_ns, s0,
               KV_L: gl.constexpr, COL_S: gl.constexpr, P_L: gl.constexpr, ROW_O: gl.constexpr,
               BLOCK_N: gl.constexpr, D: gl.constexpr, PAGE_SHIFT: gl.constexpr, P_SMEM: gl.constexpr,
               EARLY_PV: gl.constexpr):
    """Step n of pa_gluon_wide; the caller passes each buffer by tile parity (static, so that no
    buffer is read and written in one step and the compiler adds no barrier). ek, ev: the page-table
    entries of K(n + 3) and V(n + 2), loaded a step ahead."""
    async_copy.wait_group(0)
    gl.thread_barrier()
    s = warpgroup_mma(q_smem, k16_next.permute((1, 0)), s0, use_acc=False, is_async=True)
    if EARLY_PV:
        if P_SMEM:
            acc = warpgroup_mma(p_cur, v16_cur, acc, is_async=True)
        else:
            acc = warpgroup_mma(p16, v16_cur, acc, is_async=True)
    _copy_tile(K, k8_w, ek0, ek1, n + 3, n_tiles, kvh, heads_kv, offs_nkv, offs_dkv, BLOCK_N, D, PAGE_SHIFT)
    _copy_tile(V, v8_w, ev0, ev1, n + 2, n_tiles, kvh, heads_kv, offs_nkv, offs_dkv, BLOCK_N, D, PAGE_SHIFT)
    _copy_scales(KS, VS, sc_w, ev0, ev1, n + 2, n_tiles, kvh, heads_kv, sc_n, sc_kv, BLOCK_N, PAGE_SHIFT)
    async_copy.commit_group()
    ev0, ev1 = ek0, ek1
    ek0, ek1 = _pages(TABLE, n + 4, n_tiles, nk, BLOCK_N, PAGE_SHIFT)
    if n + 2 < n_tiles:
        k16_conv.store(_to_f16(k8_conv.load(KV_L)))
    if n + 1 < n_tiles:
        v16_conv.store(_to_f16(v8_conv.load(KV_L)))
    fence_async_shared()
    ks, vs = _scales(sc_next, COL_S, BLOCK_N)
    if EARLY_PV:
        s = warpgroup_mma_wait(num_outstanding=1, deps=(s, ))
    else:
        s = warpgroup_mma_wait(num_outstanding=0, deps=(s, ))
        if P_SMEM:
            acc = warpgroup_mma(p_cur, v16_cur, acc, is_async=True)
        else:
            acc = warpgroup_mma(p16, v16_cur, acc, is_async=True)
    p_next, m_i, l_i, alpha = _softmax(s, m_i, l_i, ks, vs, (n + 1) * BLOCK_N, full_end, nk, limit, qk_scale_log2,
                                       p_scale, offs_ns, P_L, P_SMEM)
    if P_SMEM:     # P(n) in p_cur (stored and fenced in step n - 1); P(n + 1) into p_nxt
        p_nxt.store(p_next)
        fence_async_shared()
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
    else:
        acc, p16 = warpgroup_mma_wait(num_outstanding=0, deps=(acc, p16))
        p16 = p_next
    acc = acc * gl.convert_layout(alpha, ROW_O)[:, None]
    return p16, m_i, l_i, acc, ek0, ek1, ev0, ev1


@gluon.jit(do_not_specialize=["nq", "ctx", "n_row_blocks"])
def pa_gluon_wide(Q, K, V, KS, VS, TABLE, OUT, nq, ctx, heads_kv, n_row_blocks, qk_scale_log2, p_scale, inv_p_scale,
                  D: gl.constexpr, GROUP: gl.constexpr, HP: gl.constexpr, BLOCK_M: gl.constexpr,
                  BLOCK_N: gl.constexpr, PAGE_SHIFT: gl.constexpr, P_SMEM: gl.constexpr = False,
                  EARLY_PV: gl.constexpr = True):
    """128 rows a program over two warpgroups, which share each fp16 K/V tile (half pa_gluon's
    conversion per FLOP); S of tile n + 1 and P.V of tile n in flight together (FA3's intra-warpgroup
    overlap), so that tile n + 1's softmax runs under P.V and the conversions under both.

    Every buffer comes in two, by tile parity (a/b): the int8 rings (K(t) in k8[t % 2], V(t) and
    tile t's scales in v8/sc[t % 2]) and the fp16 operands K16, V16. The loop runs two steps a turn so
    that each step names its buffers statically. Entering step n: P(n) in registers, O rescaled for
    it, K16(n + 1) and V16(n) converted, the copies of K(n + 2), V(n + 1), scales(n + 1) issued.
      1. wait for those copies; barrier (every thread's conversions of step n - 1 visible, every
         wgmma of step n - 1 done in both warpgroups);
      2. issue S(n + 1) = Q.K16(n + 1)^T, then O += P(n).V16(n); copy K(n + 3), V(n + 2),
         scales(n + 2) into the slots step n - 1 read;
      3. convert K(n + 2) and V(n + 1) into the buffers S(n) and P.V(n - 1) read; fence;
      4. wait for S(n + 1) (one group outstanding: P.V); softmax of tile n + 1 -- under P.V(n);
      5. wait for P.V(n); O *= alpha.
    The step past the last tile computes an S that the mask discards (alpha 1, P 0).
    """
    ROWS: gl.constexpr = BLOCK_M // HP
    S_L: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[8, 1], instr_shape=[16, BLOCK_N, 16])
    O_L: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[8, 1], instr_shape=[16, D, 16])
    P_L: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=O_L, k_width=2)
    ROW_S: gl.constexpr = gl.SliceLayout(1, S_L)
    COL_S: gl.constexpr = gl.SliceLayout(0, S_L)
    ROW_O: gl.constexpr = gl.SliceLayout(1, O_L)
    COL_O: gl.constexpr = gl.SliceLayout(0, O_L)
    KV_L: gl.constexpr = gl.BlockedLayout([1, 16], [8, 4], [8, 1], [1, 0])
    Q_L: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [8, 1], [1, 0])
    SC_L: gl.constexpr = gl.BlockedLayout([1, 1], [2, 16], [1, 8], [1, 0])      # [2, BLOCK_N] scales
    OPND: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2)
    RING8: gl.constexpr = gl.SwizzledSharedLayout(vec=64, per_phase=1, max_phase=2, order=[1, 0])
    RINGS: gl.constexpr = gl.SwizzledSharedLayout(vec=1, per_phase=1, max_phase=1, order=[1, 0])

    h0 = gl.program_id(0) * HP
    kvh = h0 // GROUP
    rb = n_row_blocks - 1 - gl.program_id(1)            # longest rows first
    row0 = rb * ROWS
    nk = ctx + nq

    offs_mq = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, Q_L))
    offs_dq = gl.arange(0, D, layout=gl.SliceLayout(0, Q_L))
    rq = row0 + offs_mq // HP
    q_off = ((h0 + offs_mq % HP).to(gl.int64) * nq + rq) * D
    q = gl.load(Q + q_off[:, None] + offs_dq[None, :], mask=(rq < nq)[:, None], other=0.0)
    q_smem = gl.allocate_shared_memory(gl.float16, [BLOCK_M, D], OPND, q)

    k8a = gl.allocate_shared_memory(gl.int8, [BLOCK_N, D], RING8)
    k8b = gl.allocate_shared_memory(gl.int8, [BLOCK_N, D], RING8)
    v8a = gl.allocate_shared_memory(gl.int8, [BLOCK_N, D], RING8)
    v8b = gl.allocate_shared_memory(gl.int8, [BLOCK_N, D], RING8)
    sca = gl.allocate_shared_memory(gl.float32, [2, BLOCK_N], RINGS)
    scb = gl.allocate_shared_memory(gl.float32, [2, BLOCK_N], RINGS)
    k16a = gl.allocate_shared_memory(gl.float16, [BLOCK_N, D], OPND)
    k16b = gl.allocate_shared_memory(gl.float16, [BLOCK_N, D], OPND)
    v16a = gl.allocate_shared_memory(gl.float16, [BLOCK_N, D], OPND)
    v16b = gl.allocate_shared_memory(gl.float16, [BLOCK_N, D], OPND)
    PN: gl.constexpr = BLOCK_N if P_SMEM else 8      # P by tile parity, when P.V reads it from shared memory
    pa = gl.allocate_shared_memory(gl.float16, [BLOCK_M, PN], OPND)
    pb = gl.allocate_shared_memory(gl.float16, [BLOCK_M, PN], OPND)

    offs_nkv = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, KV_L))
    offs_dkv = gl.arange(0, D, layout=gl.SliceLayout(0, KV_L))
    sc_kv = gl.arange(0, 2, layout=gl.SliceLayout(1, SC_L))[:, None] + gl.zeros([2, BLOCK_N], gl.int32, SC_L)
    sc_n = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, SC_L))[None, :] + gl.zeros([2, BLOCK_N], gl.int32, SC_L)

    hi_key = gl.minimum(ctx + row0 + ROWS, nk)
    n_tiles = (hi_key + BLOCK_N - 1) // BLOCK_N
    full_end = (ctx + row0 + 1) // BLOCK_N * BLOCK_N

    # K(0), K(1), V(0), scales(0); converted; then K(2), V(1), scales(1) (K(2) over K(0))
    e00, e01 = _pages(TABLE, 0, n_tiles, nk, BLOCK_N, PAGE_SHIFT)
    e10, e11 = _pages(TABLE, 1, n_tiles, nk, BLOCK_N, PAGE_SHIFT)
    e20, e21 = _pages(TABLE, 2, n_tiles, nk, BLOCK_N, PAGE_SHIFT)
    ek0, ek1 = _pages(TABLE, 3, n_tiles, nk, BLOCK_N, PAGE_SHIFT)     # K(3): step 0's copies
    _copy_tile(K, k8a, e00, e01, 0, n_tiles, kvh, heads_kv, offs_nkv, offs_dkv, BLOCK_N, D, PAGE_SHIFT)
    _copy_tile(K, k8b, e10, e11, 1, n_tiles, kvh, heads_kv, offs_nkv, offs_dkv, BLOCK_N, D, PAGE_SHIFT)
    _copy_tile(V, v8a, e00, e01, 0, n_tiles, kvh, heads_kv, offs_nkv, offs_dkv, BLOCK_N, D, PAGE_SHIFT)
    _copy_scales(KS, VS, sca, e00, e01, 0, n_tiles, kvh, heads_kv, sc_n, sc_kv, BLOCK_N, PAGE_SHIFT)
    async_copy.commit_group()
    async_copy.wait_group(0)
    gl.thread_barrier()
    k16a.store(_to_f16(k8a.load(KV_L)))
    k16b.store(_to_f16(k8b.load(KV_L)))
    v16a.store(_to_f16(v8a.load(KV_L)))
    fence_async_shared()
    gl.thread_barrier()

    rows_s = row0 + gl.arange(0, BLOCK_M, layout=ROW_S) // HP
    limit = ctx + rows_s
    offs_ns = gl.arange(0, BLOCK_N, layout=COL_S)
    s0 = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, S_L)
    s = warpgroup_mma(q_smem, k16a.permute((1, 0)), s0, use_acc=False, is_async=True)
    _copy_tile(K, k8a, e20, e21, 2, n_tiles, kvh, heads_kv, offs_nkv, offs_dkv, BLOCK_N, D, PAGE_SHIFT)
    _copy_tile(V, v8b, e10, e11, 1, n_tiles, kvh, heads_kv, offs_nkv, offs_dkv, BLOCK_N, D, PAGE_SHIFT)
    _copy_scales(KS, VS, scb, e10, e11, 1, n_tiles, kvh, heads_kv, sc_n, sc_kv, BLOCK_N, PAGE_SHIFT)
    async_copy.commit_group()
    s = warpgroup_mma_wait(num_outstanding=0, deps=(s, ))
    l_i = gl.zeros([BLOCK_M], gl.float32, ROW_S)
    m_i = gl.full([BLOCK_M], float("-inf"), gl.float32, ROW_S)
    ks, vs = _scales(sca, COL_S, BLOCK_N)
    p16, m_i, l_i, alpha = _softmax(s, m_i, l_i, ks, vs, 0, full_end, nk, limit, qk_scale_log2, p_scale, offs_ns,
                                    P_L, P_SMEM)
    ev0, ev1 = e20, e21                                               # V(2): step 0's copies
    if P_SMEM:
        pa.store(p16)
        fence_async_shared()
    acc = gl.zeros([BLOCK_M, D], gl.float32, O_L)

    for n in range(0, n_tiles, 2):
        p16, m_i, l_i, acc, ek0, ek1, ev0, ev1 = _wide_step(
            n, p16, pa, pb, m_i, l_i, acc, ek0, ek1, ev0, ev1, q_smem, k16b, v16a, k16a, v16b, k8a, v8b, scb, k8b,
            v8a, sca, K, V, KS, VS, TABLE, n_tiles, nk, kvh, heads_kv, offs_nkv, offs_dkv, sc_n, sc_kv, full_end,
            limit, qk_scale_log2, p_scale, offs_ns, s0, KV_L, COL_S, P_L, ROW_O, BLOCK_N, D, PAGE_SHIFT, P_SMEM,
            EARLY_PV)
        if n + 1 < n_tiles:
            p16, m_i, l_i, acc, ek0, ek1, ev0, ev1 = _wide_step(
                n + 1, p16, pb, pa, m_i, l_i, acc, ek0, ek1, ev0, ev1, q_smem, k16a, v16b, k16b, v16a, k8b, v8a,
                sca, k8a, v8b, scb, K, V, KS, VS, TABLE, n_tiles, nk, kvh, heads_kv, offs_nkv, offs_dkv, sc_n,
                sc_kv, full_end, limit, qk_scale_log2, p_scale, offs_ns, s0, KV_L, COL_S, P_L, ROW_O, BLOCK_N, D,
                PAGE_SHIFT, P_SMEM, EARLY_PV)

    async_copy.wait_group(0)
    inv_l = gl.convert_layout(1.0 / l_i, ROW_O)
    o = acc * inv_l[:, None] * inv_p_scale
    offs_mo = gl.arange(0, BLOCK_M, layout=ROW_O)
    offs_do = gl.arange(0, D, layout=COL_O)
    ro = row0 + offs_mo // HP
    o_off = ((h0 + offs_mo % HP).to(gl.int64) * nq + ro) * D
    gl.store(OUT + o_off[:, None] + offs_do[None, :], o.to(OUT.dtype.element_ty), mask=(ro < nq)[:, None])
