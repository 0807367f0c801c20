"""int8-KV prompt attention in Gluon (Triton's explicit-layout language): the `triton` variant's key
loop with its waits, buffers and barriers placed by hand. Configurations with the ``gl`` flag
(kernels/triton_pa.py's ``Config.gluon``) launch ``pa_gluon`` instead of ``pa_triton``.

Why: Triton 3.6 waits for each wgmma right after issuing it, and gives a program's K/V operands one
buffer, so a program's int8 -> fp16 conversions and softmax never run under its own MMAs
(docs/PERF_NOTES.md, the triton section). Gluon says where each wait goes.

The problem, the packing and the arithmetic are pa_triton's: a program owns BLOCK_M = 128 rows =
HP query heads x 128 / HP rows of one KV group (m = r * HP + g), two warpgroups (8 warps, 64 rows
each) that share every converted K/V tile; D = 128; paged K/V whose pages hold whole 64-key tiles;
no key segments. BLOCK_N = 64 keys a tile (the numerics model's tile_keys); S = Q.K^T in fp32 times
(k_scale * qk_scale_log2), the causal mask on tiles that cross the program's diagonal, exp2 online
softmax, P = fp16(p * v_scale * p_scale), O = O * alpha + P.V: the same operands and fp32 steps in
the same order per row, so the output is pa_triton's at 64-key tiles up to the order of a dot's
fp32 sums and the compiler's fusing of a multiply and an add into one FMA (the step without the mask
fuses S's scaling with the max's subtraction).

Buffers (shared memory, 132 KB: one program an SM), every one in two by tile parity: int8 K(t) in
k8[t % 2], int8 V(t) and tile t's K and V scales in v8/sc[t % 2] (cp.async copies, 16 bytes a
thread), the fp16 wgmma operands K16(t) and V16(t) (128-byte swizzle), and Q (fp16, loaded once).
The loop runs two steps a turn so that each step names its buffers statically: a buffer read and
written in one step would make the compiler add a barrier.

Step n. Entering it: P(n) in registers, O rescaled for it, K16(n + 1) and V16(n) converted, the
copies of K(n + 2), V(n + 1) and scales(n + 1) in flight, the page-table entries of K(n + 3) and
V(n + 2) loaded.
  1. wait for those copies; barrier: every thread's copies and conversions of step n - 1 visible,
     and every wgmma of step n - 1 done in both warpgroups (so their buffers are free);
  2. issue S(n + 1) = Q.K16(n + 1)^T and O += P(n).V16(n) (async); issue the copies of K(n + 3),
     V(n + 2), scales(n + 2) into the slots step n - 1 read; load the next page-table entry;
  3. load int8 K(n + 2) and V(n + 1), convert them into K16(n + 2) and V16(n + 1) (the buffers
     S(n) and P.V(n - 1) read) -- under both MMAs; fence (generic -> async proxy);
  4. load tile n + 1's scales; wait for S(n + 1) (one wgmma group left: P.V(n)); softmax of
     tile n + 1;
  5. wait for P.V(n); O *= alpha.
The one barrier a step is step 1's. The step past the last tile computes an S that the mask
discards (alpha 1, P 0), and converts tiles past the last, which nothing reads. Each step is built
twice, with the causal mask and without it (``_step`` picks one by whether tile n + 1 crosses the
diagonal or the last key), so that no branch lies between its two waits.

Three things ptxas does that the code is shaped against (checked in the SASS; measured on the
H200 in docs/PERF_NOTES.md):
  * P(n+1) is computed through an opaque move (``_pin``): left free, the compiler sinks P's
    packing below the next step's wgmma fence, and ptxas then serialises every wgmma (C7513);
  * the wait for P.V keeps P(n) among its dependencies, so that P(n)'s registers stay P.V's
    operand until it is done;
  * a branch between the wait for S and the wait for P.V (the mask's, were it inside the
    softmax) makes Triton 3.6's ptxas wait for P.V at the first block after it, and splits the
    step into blocks that ptxas schedules apart. Where the wait for P.V lands within a step without a
    branch is ptxas's choice: source order does not move it. It ends after the row maximum in
    the turn's first step and after the softmax in its second, and that was the fastest of the
    placements measured.

Written against Triton 3.6's Gluon (the H200's); the names Triton 3.9 renamed (the async copy, the
barrier) go through the aliases below, so the kernel builds with either (tests/test_triton_build.py).
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, warpgroup_mma, warpgroup_mma_wait

BLOCK_M = gl.constexpr(128)      # rows a program (two warpgroups of 64)
BLOCK_N = gl.constexpr(64)       # keys a tile: the numerics model's tile_keys
NUM_WARPS = 8
HEAD_DIM = 128

# Triton 3.9 renamed async_copy_global_to_shared (async_load) and thread_barrier (barrier)
_copy_async = async_copy.async_load if hasattr(async_copy, "async_load") else async_copy.async_copy_global_to_shared
_barrier = gl.thread_barrier if hasattr(gl, "thread_barrier") else gl.barrier

# int8 -> fp16 exactly, four at a time (kernels/triton_pa.py's `asm` conversion).
I8_TO_F16_ASM: gl.constexpr = gl.constexpr(
    "{ .reg .b32 t, c; xor.b32 t, $2, 0x80808080; mov.b32 c, 0x64806480; "
    "prmt.b32 $0, t, 0x64646464, 0x5140; prmt.b32 $1, t, 0x64646464, 0x7362; "
    "sub.rn.f16x2 $0, $0, c; sub.rn.f16x2 $1, $1, c; }")


@gluon.jit
def _to_f16(x):
    return gl.inline_asm_elementwise(I8_TO_F16_ASM, "=r,=r,r", [x], dtype=gl.float16, is_pure=True, pack=4)


@gluon.jit
def _pin(x):
    """x through an opaque move, so that its computation stays above the next wgmma's fence."""
    return gl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r", [x], dtype=x.dtype, is_pure=False, pack=2)


@gluon.jit
def _entry(TABLE, t, n_tiles, PAGE_SHIFT: gl.constexpr):
    """Tile t's page-table entry (a page holds whole tiles; past the last tile, the last one's)."""
    return gl.load(TABLE + ((gl.minimum(t, n_tiles - 1) * BLOCK_N) >> PAGE_SHIFT)).to(gl.int64)


@gluon.jit
def _rows(entry, t, n_tiles, kvh, heads_kv, offs, PAGE_SHIFT: gl.constexpr):
    """The pool rows of tile t's keys ``offs`` (the tile's rows are contiguous within its page)."""
    start = gl.minimum(t, n_tiles - 1) * BLOCK_N
    return (entry * heads_kv + kvh) * (1 << PAGE_SHIFT) + (start & ((1 << PAGE_SHIFT) - 1)) + offs


@gluon.jit
def _copy_tile(X, slot, entry, t, n_tiles, kvh, heads_kv, offs_n, offs_d, D: gl.constexpr,
               PAGE_SHIFT: gl.constexpr):
    """Tile t of X (int8 K or V) into ``slot``; past the last tile, zeros."""
    row = _rows(entry, t, n_tiles, kvh, heads_kv, offs_n.to(gl.int64), PAGE_SHIFT)
    off = row[:, None] * D + offs_d[None, :]
    _copy_async(slot, X + off, mask=(off >= 0) & (t < n_tiles))


@gluon.jit
def _copy_scales(KS, VS, slot, entry, t, n_tiles, kvh, heads_kv, sc_n, sc_kv, PAGE_SHIFT: gl.constexpr):
    """Tile t's K scales into row 0 of ``slot``, its V scales into row 1."""
    key = gl.where(sc_kv == 0, KS, VS) + _rows(entry, t, n_tiles, kvh, heads_kv, sc_n.to(gl.int64), PAGE_SHIFT)
    _copy_async(slot, key, mask=(sc_n >= 0) & (t < n_tiles))


@gluon.jit
def _scales(slot, COL_S: gl.constexpr):
    """A tile's K and V scales from its slot, in the layout of S's columns."""
    scales = slot.reshape([2 * BLOCK_N])
    return scales.slice(0, BLOCK_N).load(COL_S), scales.slice(BLOCK_N, BLOCK_N).load(COL_S)


@gluon.jit
def _softmax(s, m_i, l_i, ks, vs, start, nk, limit, qk_scale_log2, p_scale, offs_ns, P_L: gl.constexpr,
             MASK: gl.constexpr):
    """The online softmax of the tile at key ``start``: (P in P.V's register layout, new max, new sum,
    alpha). MASK: the tile crosses the diagonal or the last key (a tile past the last key is all
    masked: alpha 1, P 0)."""
    if MASK:
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
    p16 = _pin(gl.convert_layout((p * (vs * p_scale)[None, :]).to(gl.float16), P_L))
    return p16, m_new, l_new, alpha


@gluon.jit
def _step_as(n, p16, m_i, l_i, acc, ek, ev, q_smem, k16_next, v16_cur, k16_conv, v16_conv, k8_conv, v8_conv, sc_next,
             k8_w, v8_w, sc_w, K, V, KS, VS, TABLE, n_tiles, nk, kvh, heads_kv, offs_nkv, offs_dkv, sc_n, sc_kv,
             limit, qk_scale_log2, p_scale, offs_ns, s0, KV_L: gl.constexpr, COL_S: gl.constexpr,
             P_L: gl.constexpr, ROW_O: gl.constexpr, D: gl.constexpr, PAGE_SHIFT: gl.constexpr,
             MASK: gl.constexpr):
    """Step n (the module docstring), its softmax masked or not. ``ek``, ``ev``: the page-table entries of
    K(n + 3), V(n + 2)."""
    async_copy.wait_group(0)
    _barrier()
    s = warpgroup_mma(q_smem, k16_next.permute((1, 0)), s0, use_acc=False, is_async=True)
    acc = warpgroup_mma(p16, v16_cur, acc, is_async=True)
    _copy_tile(K, k8_w, ek, n + 3, n_tiles, kvh, heads_kv, offs_nkv, offs_dkv, D, PAGE_SHIFT)
    _copy_tile(V, v8_w, ev, n + 2, n_tiles, kvh, heads_kv, offs_nkv, offs_dkv, D, PAGE_SHIFT)
    _copy_scales(KS, VS, sc_w, ev, n + 2, n_tiles, kvh, heads_kv, sc_n, sc_kv, PAGE_SHIFT)
    async_copy.commit_group()
    ev = ek
    ek = _entry(TABLE, n + 4, n_tiles, PAGE_SHIFT)
    k8 = k8_conv.load(KV_L)
    v8 = v8_conv.load(KV_L)
    k16_conv.store(_to_f16(k8))
    v16_conv.store(_to_f16(v8))
    fence_async_shared()
    ks, vs = _scales(sc_next, COL_S)
    s = warpgroup_mma_wait(num_outstanding=1, deps=(s, ))
    p_next, m_i, l_i, alpha = _softmax(s, m_i, l_i, ks, vs, (n + 1) * BLOCK_N, nk, limit, qk_scale_log2, p_scale,
                                       offs_ns, P_L, MASK)
    acc, p16 = warpgroup_mma_wait(num_outstanding=0, deps=(acc, p16))
    acc = acc * gl.convert_layout(alpha, ROW_O)[:, None]
    return p_next, m_i, l_i, acc, ek, ev


@gluon.jit
def _step(n, p16, m_i, l_i, acc, ek, ev, q_smem, k16_next, v16_cur, k16_conv, v16_conv, k8_conv, v8_conv, sc_next,
          k8_w, v8_w, sc_w, K, V, KS, VS, TABLE, n_tiles, nk, kvh, heads_kv, offs_nkv, offs_dkv, sc_n, sc_kv,
          full_end, limit, qk_scale_log2, p_scale, offs_ns, s0, KV_L: gl.constexpr, COL_S: gl.constexpr,
          P_L: gl.constexpr, ROW_O: gl.constexpr, D: gl.constexpr, PAGE_SHIFT: gl.constexpr):
    """Step n, as a step with the mask where tile n + 1 crosses the diagonal (or the last key), and as one
    without it elsewhere: either way no branch lies between the step's two waits."""
    if (n + 1) * BLOCK_N >= full_end:
        out = _step_as(n, p16, m_i, l_i, acc, ek, ev, q_smem, k16_next, v16_cur, k16_conv, v16_conv, k8_conv, v8_conv,
                       sc_next, k8_w, v8_w, sc_w, K, V, KS, VS, TABLE, n_tiles, nk, kvh, heads_kv, offs_nkv, offs_dkv,
                       sc_n, sc_kv, limit, qk_scale_log2, p_scale, offs_ns, s0, KV_L, COL_S, P_L, ROW_O, D,
                       PAGE_SHIFT, True)
    else:
        out = _step_as(n, p16, m_i, l_i, acc, ek, ev, q_smem, k16_next, v16_cur, k16_conv, v16_conv, k8_conv, v8_conv,
                       sc_next, k8_w, v8_w, sc_w, K, V, KS, VS, TABLE, n_tiles, nk, kvh, heads_kv, offs_nkv, offs_dkv,
                       sc_n, sc_kv, limit, qk_scale_log2, p_scale, offs_ns, s0, KV_L, COL_S, P_L, ROW_O, D,
                       PAGE_SHIFT, False)
    return out


@gluon.jit(do_not_specialize=["nq", "ctx", "n_row_blocks"])
def pa_gluon(Q, K, V, KS, VS, TABLE, OUT, nq, ctx, heads_kv, n_row_blocks, qk_scale_log2, p_scale, inv_p_scale,
             D: gl.constexpr, GROUP: gl.constexpr, HP: gl.constexpr, PAGE_SHIFT: gl.constexpr):
    """Grid (Hq / HP, row blocks of 128 / HP rows), row blocks longest first. Q fp16 [Hq, Nq, D]; K, V
    int8 pools [pages, Hkv, page, D]; KS, VS fp32 [pages, Hkv, page]; TABLE int32; OUT [Hq, Nq, D]."""
    ROWS: gl.constexpr = BLOCK_M // HP
    S_L: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[8, 1], instr_shape=[16, BLOCK_N, 16])
    O_L: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[8, 1], instr_shape=[16, D, 16])
    P_L: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=O_L, k_width=2)
    ROW_S: gl.constexpr = gl.SliceLayout(1, S_L)
    COL_S: gl.constexpr = gl.SliceLayout(0, S_L)
    ROW_O: gl.constexpr = gl.SliceLayout(1, O_L)
    COL_O: gl.constexpr = gl.SliceLayout(0, O_L)
    # int8 tiles [BLOCK_N, D]: 16 bytes a thread, four threads a half row, eight rows a warp
    KV_L: gl.constexpr = gl.BlockedLayout([1, 16], [8, 4], [8, 1], [1, 0])
    Q_L: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [8, 1], [1, 0])
    SC_L: gl.constexpr = gl.BlockedLayout([1, 1], [2, 16], [1, 8], [1, 0])      # [2, BLOCK_N] scales
    OPND: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2)
    # the int8 slots: a row's two 64-byte halves swap on odd rows, so a phase of eight lanes (two rows
    # x 64 bytes) writes and reads all 32 banks once; the fp16 stores from KV_L are conflict-free
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

    offs_nkv = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, KV_L))
    offs_dkv = gl.arange(0, D, layout=gl.SliceLayout(0, KV_L))
    sc_kv = gl.arange(0, 2, layout=gl.SliceLayout(1, SC_L))[:, None] + gl.zeros([2, BLOCK_N], gl.int32, SC_L)
    sc_n = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, SC_L))[None, :] + gl.zeros([2, BLOCK_N], gl.int32, SC_L)

    hi_key = gl.minimum(ctx + row0 + ROWS, nk)
    n_tiles = (hi_key + BLOCK_N - 1) // BLOCK_N
    full_end = (ctx + row0 + 1) // BLOCK_N * BLOCK_N     # tiles below it: every row sees every key

    # K(0), K(1), V(0), scales(0), converted; then K(2) (over K(0)), V(1), scales(1)
    e0 = _entry(TABLE, 0, n_tiles, PAGE_SHIFT)
    e1 = _entry(TABLE, 1, n_tiles, PAGE_SHIFT)
    e2 = _entry(TABLE, 2, n_tiles, PAGE_SHIFT)
    ek = _entry(TABLE, 3, n_tiles, PAGE_SHIFT)                       # K(3): step 0's copies
    _copy_tile(K, k8a, e0, 0, n_tiles, kvh, heads_kv, offs_nkv, offs_dkv, D, PAGE_SHIFT)
    _copy_tile(K, k8b, e1, 1, n_tiles, kvh, heads_kv, offs_nkv, offs_dkv, D, PAGE_SHIFT)
    _copy_tile(V, v8a, e0, 0, n_tiles, kvh, heads_kv, offs_nkv, offs_dkv, D, PAGE_SHIFT)
    _copy_scales(KS, VS, sca, e0, 0, n_tiles, kvh, heads_kv, sc_n, sc_kv, PAGE_SHIFT)
    async_copy.commit_group()
    async_copy.wait_group(0)
    _barrier()
    k16a.store(_to_f16(k8a.load(KV_L)))
    k16b.store(_to_f16(k8b.load(KV_L)))
    v16a.store(_to_f16(v8a.load(KV_L)))
    fence_async_shared()
    _barrier()

    rows_s = row0 + gl.arange(0, BLOCK_M, layout=ROW_S) // HP
    limit = ctx + rows_s                                 # each row's last visible key
    offs_ns = gl.arange(0, BLOCK_N, layout=COL_S)
    s0 = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, S_L)
    s = warpgroup_mma(q_smem, k16a.permute((1, 0)), s0, use_acc=False, is_async=True)
    _copy_tile(K, k8a, e2, 2, n_tiles, kvh, heads_kv, offs_nkv, offs_dkv, D, PAGE_SHIFT)
    _copy_tile(V, v8b, e1, 1, n_tiles, kvh, heads_kv, offs_nkv, offs_dkv, D, PAGE_SHIFT)
    _copy_scales(KS, VS, scb, e1, 1, n_tiles, kvh, heads_kv, sc_n, sc_kv, PAGE_SHIFT)
    async_copy.commit_group()
    s = warpgroup_mma_wait(num_outstanding=0, deps=(s, ))
    ks, vs = _scales(sca, COL_S)
    l_i = gl.zeros([BLOCK_M], gl.float32, ROW_S)
    m_i = gl.full([BLOCK_M], float("-inf"), gl.float32, ROW_S)
    p16, m_i, l_i, alpha = _softmax(s, m_i, l_i, ks, vs, 0, nk, limit, qk_scale_log2, p_scale, offs_ns, P_L, True)
    acc = gl.zeros([BLOCK_M, D], gl.float32, O_L)
    ev = e2                                                           # V(2): step 0's copies

    for n in range(0, n_tiles, 2):
        p16, m_i, l_i, acc, ek, ev = _step(
            n, p16, m_i, l_i, acc, ek, ev, q_smem, k16b, v16a, k16a, v16b, k8a, v8b, scb, k8b, v8a, sca,
            K, V, KS, VS, TABLE, n_tiles, nk, kvh, heads_kv, offs_nkv, offs_dkv, sc_n, sc_kv, full_end, limit,
            qk_scale_log2, p_scale, offs_ns, s0, KV_L, COL_S, P_L, ROW_O, D, PAGE_SHIFT)
        if n + 1 < n_tiles:
            p16, m_i, l_i, acc, ek, ev = _step(
                n + 1, p16, m_i, l_i, acc, ek, ev, q_smem, k16a, v16b, k16b, v16a, k8b, v8a, sca, k8a, v8b, scb,
                K, V, KS, VS, TABLE, n_tiles, nk, kvh, heads_kv, offs_nkv, offs_dkv, sc_n, sc_kv, full_end, limit,
                qk_scale_log2, p_scale, offs_ns, s0, KV_L, COL_S, P_L, ROW_O, D, PAGE_SHIFT)

    async_copy.wait_group(0)
    inv_l = gl.convert_layout(1.0 / l_i, ROW_O)
    o = acc * inv_l[:, None] * inv_p_scale
    offs_mo = gl.arange(0, BLOCK_M, layout=ROW_O)
    offs_do = gl.arange(0, D, layout=COL_O)
    ro = row0 + offs_mo // HP
    o_off = ((h0 + offs_mo % HP).to(gl.int64) * nq + ro) * D
    gl.store(OUT + o_off[:, None] + offs_do[None, :], o.to(OUT.dtype.element_ty), mask=(ro < nq)[:, None])
