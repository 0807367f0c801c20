// v4: v3 with S = Q.K^T on the int8 tensor cores (sm_90a only). K in the cache is int8, stored key
// by key with the head dimension contiguous: the K-major layout that wgmma's 8-bit B operand
// takes. Q is rounded to int8 once per query row and head (one fp32 scale a row, the
// "q-int8-row" rounding that pa_bench.variants declares for v4 and the numerics model follows),
// so S runs as wgmma m64n64k32 .s32.s8.s8, exact in int32, at twice the fp16 rate, with no
// conversion of K at all. Everything after S is v3's arithmetic.
//
// This file is v3.cu built with PA_V4 = 1: the same CTA, roles, pipeline, barriers, softmax, P.V,
// epilogue and key segments (read v3.cu's opening comment first); kernels/v4_qk.cuh holds what is
// v4's own. What differs from v3:
// Tiling: grid (Hkv, ceil(Nq / PPC), n_seg), one CTA per SM; 128 or 192 rows (two or three
//   consumer warpgroups, whichever launch pa_bench.launch.fill estimates faster), the query heads
//   of a KV group packed into the rows, as v3. 64-key tiles and 64-key consumer steps only (no
//   shared tiles, no 128-key steps yet: the registry entry has no tile_sharing).
// Q: each consumer warpgroup loads its 64 rows of fp16 Q as v3 does and rounds them in fp32
//   (quantise_q): amax of the row (a shuffle reduction over the lanes holding it), q_scale =
//   amax / 127, inv = 127 / amax (IEEE divisions), q_i8 = clamp(rint(q * inv), -127, 127). The
//   int8 rows go to shared memory in the K-major swizzled layout of wgmma's A operand (a D = 128
//   row is one 128-byte swizzle row; D = 64 rows use the 64-byte swizzle), the row scales to
//   [M_CTA] floats after the barriers, from where each thread reads its two rows' scales when it
//   converts S (two registers fewer across the loop: at 192 rows ptxas otherwise spills). Q is
//   always S's shared-memory operand (no Q fragments in registers).
// K: the producer's bulk copies land K, V and the scales in the int8 staging ring exactly as in
//   v3; the producer threads then store each 16-byte chunk of K unchanged (no conversion) at its
//   swizzled place in the stage, and convert V to fp16 as v3 does. A stage is the int8 K tile
//   (BN * D bytes), the fp16 V tile, kq[64] and vs[64]: 8 KB less than v3's at D = 128.
// S: KSTEPS8 = D/32 wgmma m64n64k32 .s32.s8.s8 (A = Q, B = K, both from shared memory) into 32
//   int32 registers a thread; after the wait, S_i32 -> fp32 by an integer add of 0x4B400000 and
//   an fp32 subtract of 1.5 * 2^23 (exact below 2^22 = more than 127 * 127 * 128: the conversion
//   stays off the I2F pipe), then one fp32 multiply by the row's q_scale. From there on v3: the
//   per-key scale fma t = fma(S_raw, kq, -m), the lazy running maximum (slack 8, speculative on
//   unmasked tiles, S issued again where the speculation fails), P = fp16(p * v_scale*p_scale),
//   O += P.V by fp16 wgmma with V converted by the producer, segments merged by pa_combine.
// Pipeline and barriers: v3's (full/empty per fp16 stage, landed per int8 slot, the consumers'
//   turns on PP_BAR + wg). The producer's K stores are ordinary shared-memory stores that wgmma
//   reads through the async proxy: fence.proxy.async.shared::cta before its arrive on full, as
//   for V; the consumers' int8 Q stores likewise before their warpgroup barrier.
// Shared memory: Q int8 (M_CTA * D), four stages, the int8 staging slots (two at 192 rows, three
//   at 128), the mbarriers, Q's scales: 159 KB at D = 128 and 192 rows, 167 KB at 128 rows (v3:
//   214 KB at either).
#define PA_V4 1
#define pa_v3 pa_v4                         // the entries: pa_v4, and pa_v4_smem_bytes (its dynamic shared memory)
#define pa_v3_smem_bytes pa_v4_smem_bytes
#include "v3.cu"
