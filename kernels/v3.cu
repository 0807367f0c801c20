// v3: int8-KV prompt attention for Hopper (sm_90a only). A chunk of Nq query rows per query
// head attends causally to Nk = ctx + Nq int8 keys of its KV head (one fp32 scale per token and
// head), with the arithmetic of pa_bench.numerics.model at 64-key tiles, as v1 computes it (or at
// 128-key tiles with 128-key steps, below).
// Tiling: grid (Hkv, ceil(Nq / PPC), n_seg), one CTA per SM; a CTA owns one KV head and M_CTA =
//   PA_CTA_ROWS rows (192: 512 threads, or 128: 384 threads, whichever launch
//   pa_bench.numerics.fill estimates faster for the chunk) into which the G = Hq/Hkv query heads of its
//   group are packed (row R is position p0 + R / G of query head hkv*G + R % G; PPC = M_CTA / G
//   positions), so K and V are gathered and converted once for all G heads. Row blocks run
//   longest-first; grid.z is the key segment of the CTA (pa_combine merges the segments).
// Roles. Warpgroup 0, the producer: the TMA unit's bulk copies bring each 64-key tile's int8 K,
//   V and scales into a staging ring (3 deep at 128 rows, 2 at 192), and the warpgroup converts
//   them to fp16 into a 4-deep ring of swizzled stages. Warpgroups 1.. NCWG, the consumers, 64
//   rows each: S = Q.K^T and O += P.V by wgmma with B from shared memory (and, at 192 rows, Q as
//   S's shared-memory operand: 152 registers a thread cannot also hold Q's 32), tile n's online
//   softmax under tile n-1's P.V, and turns (pingpong, a ring over the consumers) so that one
//   warpgroup's softmax runs under the others' wgmma, as in FlashAttention-3. The softmax keeps a
//   lazy running maximum, and on a tile with no masked key runs speculatively: exponentials first,
//   the warpgroup's test after; where it fails, S is issued again (softmax_tile_kept). A tile is
//   converted once for M_CTA rows, where v2 converts every fragment once per warp
//   (docs/PERF_NOTES.md).
// Pipeline and barriers: each fp16 stage has an mbarrier pair, full (the producer's stores, or an
//   image's bulk copy, have landed: wgmma may read it) and empty (every consumer thread is done
//   with it); each int8 staging slot has landed (its bulk copies' bytes have arrived). The
//   producer converts up to two tiles ahead of the consumers. A consumer step issues S of tile n
//   and P.V of tile n-1 in its warpgroup's turn (named barriers PP_BAR + wg), waits for S, runs
//   tile n's softmax under that P.V, then waits for it and releases tile n-1's stage. Counts and
//   parities are given at the shared-memory layout; the layouts, descriptors and fragments where
//   they are set up; the PTX wrappers are in v3_ptx.cuh.
// Shared tiles (-DPA_V3_SHARE=1, which the launch takes where a KV head and segment has many
//   long row blocks: pa_bench.numerics.fill.shares_tiles): the CTAs of one KV head and segment
//   read the same tiles, so each tile is converted once, by whichever of them takes its ticket,
//   into its stage image in global memory, and every CTA brings each image into its stage with one
//   bulk copy. The consumers are the same code on the same bytes: the same bits (the producer is
//   described where it is defined).
// 128-key steps (-DPA_V3_STEP_KEYS=128, at 128 rows on shared tiles; the launch takes them over
//   long CTAs: pa_bench.numerics.fill.pair_steps): a consumer step takes two 64-key tiles,
//   FlashAttention-3's tile shape, with K and V staged apart in rings of their own
//   (kernels/v3_pairs.cuh; its issuer, issue_pairs, is here). The online softmax runs every 128
//   keys, so the numerics model follows at 128-key tiles.
// Other builds of this file: the comparison builds (v3_controls.cuh: the fp16 control and the dq
//   images, each with a producer of its own) and the tools' stamps and knock-outs (v3_hooks.cuh:
//   named hooks that default to nothing).
#include "pa_common.cuh"
#include "v3_hooks.cuh"
#include "v3_ptx.cuh"

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "v3 needs sm_90a (wgmma, setmaxnreg): build with -arch=sm_90a / -gencode=arch=compute_90a,code=sm_90a"
#endif
#if PA_FORCE_TURING
#error "v3 has no Turing path"
#endif
#ifndef PA_V3_SHARE
#define PA_V3_SHARE 0 // 1: each tile converted once per KV range by whichever CTA claims it, shared as an image
#endif
#define PA_V3_IMAGES (PA_V3_DQ || PA_V3_SHARE)   // the stages arrive as images, one bulk copy each
#ifndef PA_V3_STEP_KEYS
#define PA_V3_STEP_KEYS 64 // keys of a consumer step: one 64-key tile, or two (128) with shared tiles at 128 rows
#endif
static_assert(PA_KV_F16 + PA_V3_DQ + PA_V3_SHARE <= 1, "PA_KV_F16, PA_V3_DQ and PA_V3_SHARE are three producers: build one");

namespace v3 {
using pa::u32;
using pa::u64;
using pa::D;

#ifndef PA_CTA_ROWS
#define PA_CTA_ROWS 192   // rows of a CTA, 64 per consumer warpgroup: the launch picks 128 or 192
#endif
constexpr int NCWG = PA_CTA_ROWS / 64;          // consumer warpgroups
static_assert(PA_CTA_ROWS == 128 || PA_CTA_ROWS == 192, "two or three consumer warpgroups");
static_assert(PA_V3_STEP_KEYS == 64 || (PA_V3_STEP_KEYS == 128 && (PA_V3_IMAGES || PA_KV_F16) && NCWG == 2),
              "PA_V3_STEP_KEYS is 64, or 128 with PA_CTA_ROWS=128 on images (PA_V3_SHARE=1, PA_V3_DQ=1) or in the fp16 control");
// Q as S's shared-memory operand (SS) where the consumers cannot hold its 32 registers: three
// consumer warpgroups get 152 registers a thread, two get 216 (at 128-key steps, S, P and O take
// 160 of those).
constexpr bool STEP2 = PA_V3_STEP_KEYS == 128;  // a consumer step is two tiles (see the layout below)
constexpr bool Q_SS = NCWG == 3 || STEP2;
constexpr int THREADS = 128 * (1 + NCWG);       // producer warpgroup + consumers
constexpr int M_CTA = 64 * NCWG;                // rows of a CTA
constexpr int BN = 64;                          // keys per tile
constexpr int BN_LOG2 = 6;
static_assert(BN == 1 << BN_LOG2, "BN_LOG2");
constexpr int NG = D / 64;                      // 64-dim (128-byte) column blocks
constexpr int KSTEPS = D / 16;                  // k16 steps of S = Q.K^T
constexpr int PV_STEPS = BN / 16;               // k16 steps of O = P.V
constexpr int S_REGS = BN / 2;                  // fp32 accumulator registers per thread: S (64 x 64)
constexpr int O_REGS = D / 2;                   // ... and O (64 x D)
constexpr int PRODUCER_REGS = NCWG == 3 ? 56 : 72;
// The producer thread that starts every tile's bulk copies: lane 0 of producer warp 3, as warp 0
// also stores each tile's scales (with thread 0 issuing, the long shapes took about 1 % longer:
// docs/PERF_NOTES.md).
[[maybe_unused]] constexpr int ISSUER = 96;   // (the fp16 control issues from every thread)
constexpr int CONSUMER_REGS = NCWG == 3 ? 152 : 216;
// setmaxnreg moves registers within what the CTA was launched with: (65536 / THREADS) per thread,
// rounded down to a multiple of 8 (168 at 384 threads, 128 at 512). Asking the consumers' increase for more
// than the producer's decrease frees makes setmaxnreg.inc wait forever: the kernel hangs.
constexpr int LAUNCH_REGS = 65536 / THREADS / 8 * 8;
static_assert(PRODUCER_REGS % 8 == 0 && CONSUMER_REGS % 8 == 0, "setmaxnreg takes multiples of 8");
static_assert(128 * PRODUCER_REGS + 128 * NCWG * CONSUMER_REGS <= LAUNCH_REGS * THREADS,
              "the consumers' setmaxnreg.inc must fit in what the producer's setmaxnreg.dec frees");

// Shared memory: Q, then F16_STAGES fp16 stages, I8_SLOTS int8 staging slots, the mbarriers.
// Pipeline. A consumer holds two fp16 stages at a time (S of tile n, P.V of tile n-1), so with
// four the producer converts up to two tiles ahead (three time the same: docs/PERF_NOTES.md).
// Each stage s has an mbarrier pair: full[s] (128 arrivals: every producer thread, after its
// stores and fence.proxy.async.shared::cta, since wgmma reads shared memory through the async
// proxy) and empty[s] (256 arrivals: every consumer thread after wgmma.wait_group 0 of the tile's
// P.V, once the tensor cores have read the stage). Each int8 slot i has landed[i]: the issuer's
// arrive.expect_tx with the bytes of the tile's copies, so the phase completes when they have all
// landed; tile n is in slot n % 3 with parity (n / 3) & 1. Tile n uses stage n % 4 with full phase
// n / 4 (parity (n / 4) & 1); the producer waits for empty with parity ((n / 4) & 1) ^ 1 before
// refilling a stage (not for n < 4). Both consumer warpgroups wait for and release every tile and
// take every turn, also past their rows' diagonal (they skip the math), so that the phase counts
// and the turns stay in lockstep. The fp16 control (PA_KV_F16) has no int8 slots and no landed
// barriers; full and empty are the same, with the same counts and parities (its producer below).
constexpr int Q_BLOCK = M_CTA * 128;            // bytes of one 64-dim block of Q
constexpr int KV_BLOCK = BN * 128;              // bytes of one 64-dim block of a K or V tile
// fp16 stage: K tile, V tile, kq[64], vs[64]
[[maybe_unused]] constexpr int F16_K = 0;
constexpr int F16_V = NG * KV_BLOCK;
constexpr int F16_KQ = 2 * NG * KV_BLOCK;
constexpr int F16_VS = F16_KQ + BN * 4;
constexpr int F16_STAGE = (F16_VS + BN * 4 + 1023) / 1024 * 1024;
// A tile's stage image (PA_V3_DQ): the stage's bytes up to the end of vs, as pa_v3_images writes
// them to global memory and one bulk copy brings them.
constexpr int IMG_BYTES = F16_VS + BN * 4;
static_assert(IMG_BYTES % 16 == 0, "bulk copies move multiples of 16 bytes");
constexpr int F16_STAGES = 4;               // a consumer holds two (S of tile n, P.V of tile n-1)
// int8 staging: K rows, V rows, K scales, V scales (each thread's own chunks)
[[maybe_unused]] constexpr int I8_K = 0;   // (unused by the fp16 control)
[[maybe_unused]] constexpr int I8_V = BN * D;
constexpr int I8_SC = 2 * BN * D;               // K scales [64], then V scales [64]
constexpr int I8_STAGE = I8_SC + 2 * BN * 4;
// int8 staging slots the producer rings through: three (two at three consumer warpgroups, whose Q
// takes 48 KB); the sharing producer's converters take one tile at a time. The comparison builds
// stage nothing in int8 (their tiles land in the fp16 stages): no slots in their layout.
constexpr int I8_STAGES = PA_V3_SHARE ? 1 : NCWG == 3 ? 2 : 3;
constexpr int I8_SLOTS = PA_V3_CONTROL ? 0 : I8_STAGES;
// 128-key steps (STEP2): a consumer step takes two tiles, a pair. K and V of a pair are staged
// apart, in a ring of K_PAIRS K slots and one of V_PAIRS V slots, each with its own full and empty
// barriers, so that K is released once the step's softmax has read its scales and V once its P.V
// is done. A K slot holds the pair's 128 key rows per 64-dim block (block b at b * 2 * KV_BLOCK:
// S of 128 keys is one m64n128k16 per k-step), then each tile's kq[64] and vs[64] (PAIR_SC + 512 *
// tile); a V slot holds the two tiles' V one after the other (tile h at h * NG * KV_BLOCK).
[[maybe_unused]] constexpr int K_PAIRS = 3, V_PAIRS = 2;   // (64-key builds leave these unused)
[[maybe_unused]] constexpr int PAIR_SC = 2 * NG * KV_BLOCK;      // a K slot's scales: [kq, vs] of its first tile, then its second
[[maybe_unused]] constexpr int K_SLOT = (PAIR_SC + 4 * BN * 4 + 1023) / 1024 * 1024;
[[maybe_unused]] constexpr int V_SLOT = 2 * NG * KV_BLOCK;
// the whole CTA (offsets from a 1024-aligned base)
constexpr int SM_Q = 0;
constexpr int SM_F16 = NG * Q_BLOCK;
#if PA_V3_STEP_KEYS == 128
constexpr int SM_K = SM_F16, SM_V = SM_K + K_PAIRS * K_SLOT;
constexpr int SM_I8 = SM_V + V_PAIRS * V_SLOT;
constexpr int SM_BAR = SM_I8 + I8_SLOTS * I8_STAGE;   // full_k, empty_k [K_PAIRS], full_v, empty_v [V_PAIRS], landed[1]
constexpr int BAR_FULL_K = SM_BAR, BAR_EMPTY_K = BAR_FULL_K + 8 * K_PAIRS;
constexpr int BAR_FULL_V = BAR_EMPTY_K + 8 * K_PAIRS, BAR_EMPTY_V = BAR_FULL_V + 8 * V_PAIRS;
constexpr int BAR_LANDED = BAR_EMPTY_V + 8 * V_PAIRS;
static_assert(SM_V % 1024 == 0 && K_SLOT % 1024 == 0 && V_SLOT % 1024 == 0, "swizzle atoms");
#else
constexpr int SM_I8 = SM_F16 + F16_STAGES * F16_STAGE;
constexpr int SM_BAR = SM_I8 + I8_SLOTS * I8_STAGE;   // full[F16_STAGES], empty[F16_STAGES], landed[I8_SLOTS]: 8 bytes each
constexpr int BAR_LANDED = SM_BAR + 16 * F16_STAGES;
#endif
constexpr int SM_CLAIM = BAR_LANDED + 8 * I8_SLOTS;   // PA_V3_SHARE: the issuer's claim, for its warpgroup
constexpr int SM_BYTES = SM_CLAIM + 8 * PA_V3_SHARE;   // (two words)
// Named barriers: 0 is __syncthreads, 1 + wg a consumer warpgroup's own (Q stored), PP_BAR + wg the
// pingpong turn of consumer warpgroup wg, PROD_BAR the producer warpgroup's (staging slot read).
constexpr int PP_BAR = 1 + NCWG;
[[maybe_unused]] constexpr int PROD_BAR = PP_BAR + NCWG;   // (unused by the fp16 control)
constexpr int SMEM_ALLOC = SM_BYTES + 1024;             // + slack to align the base to 1024
static_assert(SM_F16 % 1024 == 0 && F16_STAGE % 1024 == 0 && F16_V % 1024 == 0, "swizzle atoms");
static_assert(SM_I8 % 16 == 0 && I8_STAGE % 16 == 0 && SM_BAR % 8 == 0, "alignment");
static_assert(SMEM_ALLOC <= 227 * 1024, "sm_90's shared memory per CTA (227 KB with the opt-in)");

// Every fp16 operand in shared memory is in the canonical 128-byte-swizzle layout: a "row" of 128
// bytes = 64 fp16 along the contiguous dimension; 8 rows form a 1024-byte atom in which 16-byte
// chunk c of row r sits at chunk c ^ (r & 7) (the hardware applies this XOR to address bits [4:6]
// with bits [7:9], so every region starts 1024-byte aligned and the descriptors' base offset is 0).
// Rows are dense (row r at r*128), and a D = 128 operand is two 64-column blocks one after the
// other: Q [128 rows][D] with block b at b*Q_BLOCK; a K or V tile [64 keys][D] with block b at
// b*KV_BLOCK.
// Byte offset of 8-half chunk `ch` (dims 8ch..8ch+7) of row r in a 128B-swizzled operand whose
// 64-dim blocks are `block` bytes apart.
__host__ __device__ constexpr int sw128(int r, int ch, int block) {
    return (ch >> 3) * block + r * 128 + (((ch & 7) ^ (r & 7)) << 4);
}

// The producer's ownership of a tile. The bulk copies land each tile's int8 K and V rows densely
// in staging (row r at r*D). Lane (cc = lane%4, r_off = (lane/4)%2, q = lane/8) of producer warp pw
// owns int8 chunk prod_chunk(lane) (dims 16c..16c+15) of key rows prod_row(pw, lane, i), i < NI:
// each quarter warp takes two rows r, r+1 (r even) and at D = 128 the low four chunks of one and
// the high four of the other, so its 16-byte staging loads are 128 contiguous-or-complementary
// bytes (8 distinct bank groups), and its fp16 stores (chunks 2c+h, positions (2c+h) ^ (row&7))
// hit 8 distinct bank groups as well (static_asserts below check both). A warp instruction reads
// RW whole rows.
constexpr int CPR = D / 16;                     // int8 chunks of a key row
constexpr int RW = 32 / CPR;                    // key rows a producer warp reads per round
constexpr int NI = BN / (4 * RW);               // rounds per tile (chunks of K per thread)
__host__ __device__ constexpr int prod_row(int pw, int lane, int i) {
    return pw * RW + 2 * ((lane >> 3) / NG) + ((lane >> 2) & 1) + 4 * RW * i;
}
__host__ __device__ constexpr int prod_chunk(int lane) { return (lane & 3) + 4 * ((((lane >> 2) ^ (lane >> 3)) & 1) & (NG - 1)); }
__host__ __device__ constexpr int stage_off(int r, int c) { return r * D + 16 * c; }
__host__ __device__ constexpr bool producer_plan_ok() {
    bool seen[BN * CPR] = {};
    for (int pw = 0; pw < 4; ++pw)
        for (int lane = 0; lane < 32; ++lane)
            for (int i = 0; i < NI; ++i) {
                const int r = prod_row(pw, lane, i), c = prod_chunk(lane);
                if (r < 0 || r >= BN || c < 0 || c >= CPR || seen[r * CPR + c]) return false;
                seen[r * CPR + c] = true;
            }
    return true;
}
static_assert(producer_plan_ok(), "the producer must own every 16-byte chunk of a tile exactly once");
// The fp16 stores of one quarter warp (8 lanes, one 16-byte store each, h = 0 or 1) hit 8
// distinct bank groups.
__host__ __device__ constexpr bool producer_stores_conflict_free() {
    for (int pw = 0; pw < 4; ++pw)
        for (int qw = 0; qw < 4; ++qw)
            for (int i = 0; i < NI; ++i)
                for (int h = 0; h < 2; ++h) {
                    bool bank[8] = {};
                    for (int l = 8 * qw; l < 8 * qw + 8; ++l) {
                        const int b = (sw128(prod_row(pw, l, i), 2 * prod_chunk(l) + h, KV_BLOCK) >> 4) & 7;
                        if (bank[b]) return false;
                        bank[b] = true;
                    }
                }
    return true;
}
static_assert(producer_stores_conflict_free(), "producer fp16 stores must be bank-conflict free");
__host__ __device__ constexpr bool producer_staging_conflict_free() {
    for (int pw = 0; pw < 4; ++pw)
        for (int qw = 0; qw < 4; ++qw)
            for (int i = 0; i < NI; ++i) {
                bool bank[8] = {};
                for (int l = 8 * qw; l < 8 * qw + 8; ++l) {
                    const int b = (stage_off(prod_row(pw, l, i), prod_chunk(l)) >> 4) & 7;
                    if (bank[b]) return false;
                    bank[b] = true;
                }
            }
    return true;
}
static_assert(producer_staging_conflict_free(), "producer staging reads must be bank-conflict free");

__device__ __forceinline__ void i8x16_to_f16(uint4 x, uint4& lo, uint4& hi) {
    pa::i8x4_to_f16x2x2(x.x, lo.x, lo.y);   // dims 0-3
    pa::i8x4_to_f16x2x2(x.y, lo.z, lo.w);   // dims 4-7
    pa::i8x4_to_f16x2x2(x.z, hi.x, hi.y);   // dims 8-11
    pa::i8x4_to_f16x2x2(x.w, hi.z, hi.w);   // dims 12-15
}

// What a CTA covers: KV head, query positions [p0, p_end), key tiles [t_begin, t_end). With key
// segments (Args::seg_keys) the CTAs of blockIdx.z = z see only keys [z*S, (z+1)*S) and write
// their unnormalised (O, m, l) for pa_combine. Besides long contexts, v3 gets segments where they
// fill the GPU better (2.1Kx256 with 32/8 heads: 64 CTAs, two segments; 32Kx1024: 176 CTAs of
// 192 rows, three segments, four full waves): pa_bench.numerics.fill, model.segment_keys.
struct Cta {
    int group, ppc, hkv, p0, p_end, t_begin, t_end;
};
__device__ __forceinline__ Cta cta_of(const pa::Args& a) {
    Cta c;
    c.group = a.heads_q / a.heads_kv;
    c.ppc = M_CTA / c.group;
    c.hkv = blockIdx.x;
    c.p0 = (gridDim.y - 1 - blockIdx.y) * c.ppc;           // longest first
    c.p_end = min(c.p0 + c.ppc, a.n_q);
    c.t_begin = 0;
    c.t_end = (a.ctx + c.p_end + BN - 1) / BN;            // keys the CTA's last position sees
    if (a.seg_keys) {
        c.t_begin = blockIdx.z * (a.seg_keys / BN);
        c.t_end = min(c.t_end, c.t_begin + a.seg_keys / BN);
    }
    return c;
}

#if PA_V3_SHARE
// The same image from tile `tile`'s int8 staging slot `st` (its copies landed; rows past the cache
// stale, converted all the same: their scales are zeroed), by NT threads: 16-byte loads from the
// slot, 16-byte global stores.
template <int NT>
__device__ __forceinline__ void slot_image(const pa::Args& a, const unsigned char* st, int tile, unsigned char* img, int tid) {
    static_assert(BN * CPR % NT == 0 && (2 * BN) % NT == 0, "slot_image: whole chunks and scales per thread");
    const int nk = a.ctx + a.n_q, j0 = tile * BN;
#pragma unroll 2
    for (int q = tid; q < BN * CPR; q += NT) {
        const int r = q / CPR, ch = q % CPR;
        const uint4 kx = *reinterpret_cast<const uint4*>((st + I8_K) + stage_off(r, ch));
        const uint4 vx = *reinterpret_cast<const uint4*>((st + I8_V) + stage_off(r, ch));
        uint4 lo, hi;
        i8x16_to_f16(kx, lo, hi);
        *reinterpret_cast<uint4*>(img + F16_K + sw128(r, ch * 2, KV_BLOCK)) = lo;
        *reinterpret_cast<uint4*>(img + F16_K + sw128(r, ch * 2 + 1, KV_BLOCK)) = hi;
        i8x16_to_f16(vx, lo, hi);
        *reinterpret_cast<uint4*>(img + F16_V + sw128(r, ch * 2, KV_BLOCK)) = lo;
        *reinterpret_cast<uint4*>(img + F16_V + sw128(r, ch * 2 + 1, KV_BLOCK)) = hi;
    }
#pragma unroll
    for (int sc = tid; sc < 2 * BN; sc += NT) {   // K scales [0, BN), V scales [BN, 2BN): the stage's kq, vs
        const float raw = reinterpret_cast<const float*>(st + I8_SC)[sc];
        const float x = j0 + sc % BN < nk ? __fmul_rn(raw, sc < BN ? a.qk_scale_log2 : a.p_scale) : 0.f;
        reinterpret_cast<float*>(img + F16_KQ)[sc] = x;
    }
}
#endif

// ---------------------------------------------------------------- the producer warpgroup
// The issuer starts tile n's bulk copies into staging slot n % I8_STAGES: K and V rows and their
// scales, one copy of each per run of keys that is contiguous in memory (a page, or the whole tile
// where a page holds it or the cache is contiguous), only keys below nk (what lies past them in
// the slot is stale and finite: the converted tile's scales are zeroed there).
__device__ __forceinline__ void issue_tile(const pa::Args& a, const Cta& c, int n, u32 base) {
    const int nk = a.ctx + a.n_q;
    const int j0 = (c.t_begin + n) * BN, j1 = min(j0 + BN, nk);
    const int slot = n % I8_STAGES;
    const u32 st = base + SM_I8 + slot * I8_STAGE, bar = base + BAR_LANDED + 8 * slot;
#if PA_PAGED
    const int span_log2 = min(BN_LOG2, a.page_shift);   // keys contiguous in memory: a page, at most a tile
#else
    const int span_log2 = BN_LOG2;
#endif
    const int span = 1 << span_log2;
    const int runs = (j1 - j0 + span - 1) >> span_log2;
    const int sc_last = ((j1 - j0 - (runs - 1) * span) + 3) / 4 * 4;    // scales of the last run, 16-byte whole
    if constexpr (PA_V3_KNOCKED(COPY)) {       // knock-out: no copies, the slot's stale bytes converted
        mbar_arrive(bar);
        return;
    }
    mbar_arrive_expect_tx(bar, (u32)(2 * (j1 - j0) * D + 8 * ((runs - 1) * span + sc_last)));
    for (int j = j0; j < j1; j += span) {
        const int keys = min(span, j1 - j), sc = j + span < j1 ? span : sc_last;
        const u32 row = pa::kv_row(a, c.hkv, j, pa::page_of(a, j));
        const u32 sci = pa::scale_index(a, c.hkv, j, row);
        const u32 r = (u32)(j - j0);
        bulk_g2s(st + I8_K + r * D, a.k + (u64)row * D, (u32)keys * D, bar);
        bulk_g2s(st + I8_V + r * D, a.v + (u64)row * D, (u32)keys * D, bar);
        bulk_g2s(st + I8_SC + 4 * r, a.k_scale + sci, 4u * sc, bar);
        bulk_g2s(st + I8_SC + BN * 4 + 4 * r, a.v_scale + sci, 4u * sc, bar);
    }
}

// An image issuer's arm of `bar` for `bytes` of bulk copies, and one of those copies (the
// image-copy knock-out: a plain arrive, and no copy).
__device__ __forceinline__ void arm_copies(u32 bar, u32 bytes) {
    if constexpr (PA_V3_KNOCKED(IMAGE_COPY)) mbar_arrive(bar);
    else mbar_arrive_expect_tx(bar, bytes);
}
__device__ __forceinline__ void image_copy(u32 dst, const void* src, u32 bytes, u32 bar) {
    if constexpr (!PA_V3_KNOCKED(IMAGE_COPY)) bulk_g2s(dst, src, bytes, bar);
}

#if PA_V3_STEP_KEYS == 128
// The issuer of 128-key steps on images (PA_V3_DQ, PA_V3_SHARE; kernels/v3_pairs.cuh has the
// consumers' side). Pair p (tiles 2p, 2p+1): its K rows and scales into K slot p % K_PAIRS, its V
// rows into V slot p % V_PAIRS, each slot's barrier armed with both tiles' bytes. K runs a pair
// ahead of V (K of pair p, then V of pair p-1), so that waiting for a V slot, which the consumers
// release only once a P.V is done, never holds up the K that the next S needs. A pair whose second
// tile lies past the CTA's keys (an odd count) gets the first tile's image twice: finite values,
// whose keys the consumers mask (S) and whose P is then 0. ``ready(t0, t1)`` returns once the
// images of tiles t0 and t1 may be copied (V of a pair is copied after its K: no second call);
// ``pace(n)`` is told that n tiles' copies have started.
template <class Ready, class Pace>
__device__ __forceinline__ void issue_pairs(const unsigned char* imgs, int n_tiles, u32 base, Ready ready, Pace pace) {
    const int n_pairs = (n_tiles + 1) >> 1;
    auto image = [&](int n) { return imgs + (u64)min(n, n_tiles - 1) * IMG_BYTES; };
    for (int p = 0; p <= n_pairs; ++p) {
        if (p < n_pairs) {
            ready(min(2 * p, n_tiles - 1), min(2 * p + 1, n_tiles - 1));
            const u32 ks = base + SM_K + (p % K_PAIRS) * K_SLOT, fk = base + BAR_FULL_K + 8 * (p % K_PAIRS);
            if (p >= K_PAIRS) mbar_wait(base + BAR_EMPTY_K + 8 * (p % K_PAIRS), ((p / K_PAIRS) & 1) ^ 1);
            arm_copies(fk, 2 * (NG * KV_BLOCK + 2 * BN * 4));
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const unsigned char* img = image(2 * p + h);
#pragma unroll
                for (int b = 0; b < NG; ++b)
                    image_copy(ks + b * 2 * KV_BLOCK + h * KV_BLOCK, img + F16_K + b * KV_BLOCK, KV_BLOCK, fk);
                image_copy(ks + PAIR_SC + h * 2 * BN * 4, img + F16_KQ, 2 * BN * 4, fk);   // kq, vs (F16_VS = F16_KQ + BN*4)
            }
        }
        if (p >= 1) {
            const int q = p - 1;
            const u32 vs = base + SM_V + (q % V_PAIRS) * V_SLOT, fv = base + BAR_FULL_V + 8 * (q % V_PAIRS);
            if (q >= V_PAIRS) mbar_wait(base + BAR_EMPTY_V + 8 * (q % V_PAIRS), ((q / V_PAIRS) & 1) ^ 1);
            arm_copies(fv, 2 * NG * KV_BLOCK);
#pragma unroll
            for (int h = 0; h < 2; ++h) image_copy(vs + h * NG * KV_BLOCK, image(2 * q + h) + F16_V, NG * KV_BLOCK, fv);
        }
        pace(2 * p + 2);
    }
}
#endif

#if PA_V3_SHARE
// The sharing producer. The CTAs of one KV head and key segment (its row blocks, blockIdx.y: a
// group) read the same tiles; each tile is converted once, by one of them, into its stage image in
// global memory (slot_image), and every CTA brings each tile's image into its stage with one bulk
// copy, as PA_V3_DQ does. The images, a flag a tile and a ticket counter a group live in
// Args::part after the segment workspace (share_base); Args::pair_heads is the launch's epoch
// e >= 1. Roles in the producer warpgroup:
// - the converters, warps 0-1: thread 0 takes the group's next tile by an atomicAdd on its counter
//   (the counter holds e << 20 plus the tiles taken, raised to e << 20 by each CTA's atomicMax
//   first: never reset), but only while it is below this CTA's own tiles and less than
//   SHARE_LEAD tiles ahead of what this CTA has brought in (word[1], which the issuer sets and
//   thread 0 reads by shared-memory atomics: a pace, not an ordering), so that the images are made just
//   before they are needed and stay in the L2. Thread 0 brings the tile's int8 rows into the
//   CTA's one staging slot (issue_tile, landed[0]); the 64 threads convert them from there
//   (slot_image) and publish the image: their stores, fence.proxy.async.global, their barrier,
//   then thread 0's __threadfence (cumulative: the stores its barrier saw) and a store of e into the
//   tile's flag;
// - the issuer (lane 0 of warp 3): for each tile, polls its flag (acquire loads) until it reads e,
//   fences to the async proxy, waits for the stage to be free and starts the bulk copy of the
//   image (full's count is 1), as PA_V3_DQ.
// No deadlock: a tile is converted without waiting on anything; when the issuer waits for tile n,
// the counter has passed n (another CTA took it) or this CTA's converters may still take it (n is
// below its tiles and its fed count + SHARE_LEAD).
constexpr int SHARE_LEAD = 12;    // tiles a CTA's converters may run ahead of its issuer
constexpr int SHARE_TICKET_SHIFT = 20;          // tiles of a group: below 2^20 (2^26 keys)
__device__ __forceinline__ u64 ld_relaxed_gpu(const u64* p) {
    u64 v;
    asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];\n" : "=l"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ u32 ld_acquire_gpu(const u32* p) {
    u32 v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
}
// Until the image behind `flag` is published in this launch (the share-convert knock-out: no wait).
__device__ __forceinline__ void wait_published(const u32* flag, u32 epoch) {
    if constexpr (!PA_V3_KNOCKED(SHARE_CONVERT))
        while (ld_acquire_gpu(flag) != epoch) {
        }
}
__device__ __forceinline__ void st_relaxed_gpu(u32* p, u32 v) {
    asm volatile("st.relaxed.gpu.global.u32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}
// Generic-proxy global writes (the images) ordered with async-proxy (bulk copy) accesses.
__device__ __forceinline__ void fence_proxy_async_global() { asm volatile("fence.proxy.async.global;\n" ::: "memory"); }
// The workspace: after the segment floats (1024-aligned) images [Hkv][tiles], flags [Hkv][tiles]
// (u32), counters [Hkv][n_seg] (u64, 8-aligned).
__device__ __forceinline__ unsigned char* share_base(const pa::Args& a) {
    const u64 seg = a.seg_keys ? (u64)gridDim.z * a.heads_q * a.n_q * (D + 2) : 0;   // the segment workspace's floats
    return reinterpret_cast<unsigned char*>((reinterpret_cast<u64>(a.part + seg) + 1023) & ~1023ull);
}

__device__ __forceinline__ void producer(const pa::Args& a, const Cta& c, unsigned char* sm, u32 base) {
    const int tid = threadIdx.x;
    const int n_tiles = c.t_end - c.t_begin, tiles_all = (a.ctx + a.n_q + BN - 1) / BN;
    // the group's tiles: those of its longest row block (blockIdx.y = 0), from t_begin
    const int group_tiles = (a.seg_keys ? min(tiles_all, c.t_begin + a.seg_keys / BN) : tiles_all) - c.t_begin;
    unsigned char* const ws = share_base(a);
    unsigned char* const imgs = ws + ((u64)c.hkv * tiles_all + c.t_begin) * IMG_BYTES;
    u32* const flag_all = reinterpret_cast<u32*>(ws + (u64)a.heads_kv * tiles_all * IMG_BYTES);
    u32* const flags = flag_all + (u64)c.hkv * tiles_all + c.t_begin;
    u64* const ctr = reinterpret_cast<u64*>(reinterpret_cast<u64>(flag_all + (u64)a.heads_kv * tiles_all + 1) & ~7ull) +
                     (u64)c.hkv * gridDim.z + blockIdx.z;
    const u32 epoch = (u32)a.pair_heads;
    volatile int* const word = reinterpret_cast<volatile int*>(sm + SM_CLAIM);   // [0] the tile taken, [1] tiles brought in
    if (tid == ISSUER) {
#if PA_V3_STEP_KEYS == 128
        issue_pairs(imgs, n_tiles, base,
                    [&](int t0, int t1) {
                        wait_published(flags + t0, epoch);
                        wait_published(flags + t1, epoch);
                        fence_proxy_async_global();
                    },
                    [&](int brought) {   // the converters' pace: a shared atomic, read by one
                        atomicExch(const_cast<int*>(word) + 1, brought);
                    });
#else
        const u32 bar_full = base + SM_BAR, bar_empty = base + SM_BAR + 8 * F16_STAGES;
        for (int n = 0; n < n_tiles; ++n) {
            const int s = n % F16_STAGES;
            wait_published(flags + n, epoch);
            fence_proxy_async_global();
            if (n >= F16_STAGES) mbar_wait(bar_empty + 8 * s, ((n / F16_STAGES) & 1) ^ 1);   // tile n-4 released stage s
            arm_copies(bar_full + 8 * s, IMG_BYTES);
            image_copy(base + SM_F16 + s * F16_STAGE, imgs + (u64)n * IMG_BYTES, IMG_BYTES, bar_full + 8 * s);
            atomicExch(const_cast<int*>(word) + 1, n + 1);   // the converters' pace: a shared atomic, read by one
        }
#endif
        return;
    }
    if (tid >= 64 || PA_V3_KNOCKED(SHARE_CONVERT)) return;   // (the knock-out: no conversions)
    const u64 e0 = (u64)epoch << SHARE_TICKET_SHIFT;
    if (tid == 0) atomicMax(reinterpret_cast<unsigned long long*>(ctr), (unsigned long long)e0);
    u32 k = 0;                               // conversions so far (landed's phase)
    for (;;) {
        if (tid == 0) {
            int t = -1;
            for (;;) {
                const int next = (int)(ld_relaxed_gpu(ctr) - e0);
                if (next >= n_tiles) break;                  // the rest is for longer row blocks
                if (next < atomicAdd(const_cast<int*>(word) + 1, 0) + SHARE_LEAD) {
                    t = (int)(atomicAdd(reinterpret_cast<unsigned long long*>(ctr), 1ull) - e0);
                    if (t >= group_tiles) t = -1;
                    break;
                }
                __nanosleep(200);
            }
            word[0] = t;
        }
        named_barrier_sync(PROD_BAR, 64);
        const int t = word[0];
        if (t < 0) break;
        if (tid == 0) {
            fence_proxy_async();             // the slot's generic reads of the last tile, before the async proxy writes it
            issue_tile(a, c, t, base);       // (slot 0: t % I8_STAGES)
        }
        mbar_wait(base + BAR_LANDED, k & 1);   // landed[0], this CTA's k-th conversion
        ++k;
        slot_image<64>(a, sm + SM_I8, c.t_begin + t, imgs + (u64)t * IMG_BYTES, tid);
        fence_proxy_async_global();
        named_barrier_sync(PROD_BAR, 64);    // every store of the image (and word[0] read)
        if (tid == 0) {
            __threadfence();                 // the CTA's image stores (seen by thread 0 at the barrier), cumulatively
            st_relaxed_gpu(flags + t, epoch);
        }
    }
}
#else
// Every producer thread owns fixed 16-byte chunks of every tile (prod_row, prod_chunk): it waits
// for the tile's `landed`, loads all its chunks into registers, waits for the fp16 stage to be
// free, and converts them exactly to fp16 (0x6400|x+128 is the f16 1024+x+128, minus 1152:
// pa_common.cuh) into the swizzled stage. Warp 0 stores the scales premultiplied (k_scale *
// qk_scale_log2, v_scale * p_scale: the fp32 products the other kernels form), zero for keys past
// the cache (the copies stop there; the slot's bytes past them are stale). After its arrive on
// `full` the warpgroup meets on PROD_BAR (every thread has read the slot), and the issuer refills
// the slot with the tile I8_STAGES ahead.
__device__ __forceinline__ void producer(const pa::Args& a, const Cta& c, unsigned char* sm, u32 base) {
    const int pw = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int ch = prod_chunk(lane);
    const int nk = a.ctx + a.n_q;
    const int n_tiles = c.t_end - c.t_begin;
    const u32 bar_full = base + SM_BAR, bar_empty = base + SM_BAR + 8 * F16_STAGES;
    const u32 bar_landed = base + SM_BAR + 16 * F16_STAGES;
    PA_V3_STAMP(producer_start, 0);

    if (threadIdx.x == ISSUER)
        for (int n = 0; n < I8_STAGES && n < n_tiles; ++n) issue_tile(a, c, n, base);
    for (int n = 0; n < n_tiles; ++n) {
        const int s = n % F16_STAGES;
        PA_V3_STAMP(top, n);
        mbar_wait(bar_landed + 8 * (n % I8_STAGES), (n / I8_STAGES) & 1);   // tile n's copies have landed
        PA_V3_STAMP(landed, n);
        const unsigned char* st = sm + SM_I8 + (n % I8_STAGES) * I8_STAGE;
        unsigned char* f = sm + SM_F16 + s * F16_STAGE;
        // All of this thread's int8 chunks of the tile into registers first, then the wait for the
        // fp16 stage, then convert and store: the loads' latency passes during the wait, and no
        // conversion waits on its own load (interleaved with the stores, the compiler cannot move
        // the loads above them). (The knock-outs here: see v3_hooks.cuh.)
        constexpr int ROUNDS = PA_V3_KNOCKED(HALF_CONVERT) ? NI / 2 : NI;
        uint4 kx[NI], vx[NI];
        [[maybe_unused]] u32 fold = 0;       // (no-store: what would have been stored, kept alive)
#pragma unroll
        for (int i = 0; i < ROUNDS; ++i) {
            const int r = prod_row(pw, lane, i);
            if constexpr (PA_V3_KNOCKED(LOAD)) {
                kx[i] = make_uint4(r, ch, n, i);
                vx[i] = make_uint4(r, ch, n, i);
            } else {
                kx[i] = *reinterpret_cast<const uint4*>(st + I8_K + stage_off(r, ch));
                vx[i] = *reinterpret_cast<const uint4*>(st + I8_V + stage_off(r, ch));
            }
        }
        if (n >= F16_STAGES) mbar_wait(bar_empty + 8 * s, ((n / F16_STAGES) & 1) ^ 1);   // tile n-F16_STAGES released stage s
        PA_V3_STAMP(empty, n);
        auto store = [&](uint4 x, unsigned char* at) {   // (x first: evaluated as an assignment's right side is)
            if constexpr (PA_V3_KNOCKED(STORE)) fold ^= x.x ^ x.y ^ x.z ^ x.w;
            else *reinterpret_cast<uint4*>(at) = x;
        };
#pragma unroll
        for (int i = 0; i < (PA_V3_KNOCKED(CONVERT) ? 0 : ROUNDS); ++i) {
            const int r = prod_row(pw, lane, i);
            uint4 lo, hi;
            if constexpr (PA_V3_KNOCKED(ALU_K)) {
                lo = kx[i];
                hi = kx[i];
            } else {
                i8x16_to_f16(kx[i], lo, hi);
            }
            store(lo, f + F16_K + sw128(r, 2 * ch, KV_BLOCK));
            store(hi, f + F16_K + sw128(r, 2 * ch + 1, KV_BLOCK));
            if constexpr (PA_V3_KNOCKED(ALU_V)) {
                lo = vx[i];
                hi = vx[i];
            } else {
                i8x16_to_f16(vx[i], lo, hi);
            }
            store(lo, f + F16_V + sw128(r, 2 * ch, KV_BLOCK));
            store(hi, f + F16_V + sw128(r, 2 * ch + 1, KV_BLOCK));
        }
        if (PA_V3_KNOCKED(STORE) && fold == 0x9e3779b9u) *reinterpret_cast<u32*>(f) = fold;
        if (pw == 0) {   // lanes 0-15: K scales of keys 4*lane.., lanes 16-31: V scales; zero past nk
            // (loaded here, not with the chunks: at three consumer warpgroups the producer's 56
            // registers hold the chunks and their conversion, not four more)
            float4 scx = *reinterpret_cast<const float4*>(st + I8_SC + (lane >> 4) * BN * 4 + 16 * (lane & 15));
            const int key0 = (c.t_begin + n) * BN + 4 * (lane & 15);
            const float mul = lane < 16 ? a.qk_scale_log2 : a.p_scale;
            scx.x = key0 + 0 < nk ? __fmul_rn(scx.x, mul) : 0.f;
            scx.y = key0 + 1 < nk ? __fmul_rn(scx.y, mul) : 0.f;
            scx.z = key0 + 2 < nk ? __fmul_rn(scx.z, mul) : 0.f;
            scx.w = key0 + 3 < nk ? __fmul_rn(scx.w, mul) : 0.f;
            *reinterpret_cast<float4*>(f + F16_KQ + (lane >> 4) * BN * 4 + 16 * (lane & 15)) = scx;   // F16_VS = F16_KQ + BN*4
        }
        PA_V3_STAMP(stored, n);
        fence_proxy_async();                 // the stores above, before wgmma reads them
        mbar_arrive(bar_full + 8 * s);
        PA_V3_STAMP(arrived, n);
        // Every producer thread has read tile n's staging slot: the issuer refills it with tile n + I8_STAGES.
        if (n + I8_STAGES < n_tiles) {
            named_barrier_sync(PROD_BAR, 128);
            if (threadIdx.x == ISSUER) {
                fence_proxy_async();         // the slot's generic reads above, before the async proxy writes it
                issue_tile(a, c, n + I8_STAGES, base);
            }
        }
        PA_V3_STAMP(barrier, n);
    }
}
#endif

// ---------------------------------------------------------------- the consumer warpgroups
// S[64 x 64] = Q . K^T of one tile (raw integer-valued K, fp32): KSTEPS wgmma.m64n64k16, A = Q
// from this thread's registers (qf, loaded once), not waited for. K-step kk starts at
// (kk/4)*KV_BLOCK + (kk%4)*32 bytes: the 32-byte step inside a 128-byte row is how K advances
// inside a swizzle atom (the hardware swizzles the final address).
__device__ __forceinline__ void issue_s(float (&s)[S_REGS], const u32 (&qf)[KSTEPS][4], u64 dk) {
#pragma unroll
    for (int kk = 0; kk < KSTEPS; ++kk) {
        const u32 koff = (kk >> 2) * KV_BLOCK + (kk & 3) * 32;
        wgmma_rs_n64<0>(s, qf[kk], dk + (koff >> 4), kk > 0);
    }
}
// The same with Q as a shared-memory operand: dq is the descriptor of this warpgroup's 64 rows
// of Q, whose k-steps advance as K's do (Q_BLOCK apart for the second 64-dim block).
__device__ __forceinline__ void issue_s(float (&s)[S_REGS], u64 dq, u64 dk) {
#pragma unroll
    for (int kk = 0; kk < KSTEPS; ++kk) {
        const u32 koff = (kk >> 2) * KV_BLOCK + (kk & 3) * 32, qoff = (kk >> 2) * Q_BLOCK + (kk & 3) * 32;
        wgmma_ss_n64(s, dq + (qoff >> 4), dk + (koff >> 4), kk > 0);
    }
}

// O[64 x D] += P . V of one tile (O already rescaled by the tile's alpha): PV_STEPS wgmma.m64nDk16,
// B = V transposed, not waited for. K-step kk (keys 16kk..16kk+15) starts at kk*16*128 bytes, a
// 1024-byte boundary.
__device__ __forceinline__ void issue_pv(float (&o)[O_REGS], const u32 (&pf)[PV_STEPS][4], u64 dv) {
#pragma unroll
    for (int kk = 0; kk < PV_STEPS; ++kk) {
#if PA_HEAD_DIM == 128
        wgmma_rs_n128_tb(o, pf[kk], dv + ((kk * 16 * 128) >> 4), 1);
#else
        wgmma_rs_n64<1>(o, pf[kk], dv + ((kk * 16 * 128) >> 4), 1);
#endif
    }
}

// The online softmax of one tile's S, in place, with a lazy running maximum: a row keeps its
// reference m while the tile's scores stay within 2^MAX_SLACK of it. t = fma(S_raw, kq, -m) (kq =
// k_scale*qk_scale_log2 per key; one rounding; m taken as 0 while the row has seen no key), masked
// keys -inf. Where every row of the warp has a reference and t <= MAX_SLACK (most tiles), p =
// exp2(t): no shuffles, alpha = 1. Otherwise each row's maximum d = max_j t is formed across its 4
// lanes, and a row with no reference yet (d > -inf) or with d > MAX_SLACK takes m = m + d, t = t - d,
// alpha = exp2(-d) (0 for a row with no reference); the others keep theirs. So p <= 2^MAX_SLACK and
// P = fp16(p * v_scale*p_scale) <= 2^MAX_SLACK (every v_scale*p_scale <= 1). p = exp2(t) into s
// (ex2.approx.ftz), l = l*alpha + sum p (per-lane partial sums, added across the 4 lanes of a row
// at the end). With P rounded to fp16 and O = O*alpha before each tile's k16 steps of P.V, O is
// one tensor-core chain over the CTA's keys, as in v1/v2 (the model's pv_chain_keys 0); the key
// segments bound that chain on long contexts (docs/NUMERICS.md). The numerics model follows the
// same rule (model.max_slack). Other fp32 arithmetic uses the _rn intrinsics (no contraction).
// Register fragments (PTX ISA, wgmma m64nNk16): warp w of a warpgroup holds rows 16w..16w+15;
// element 4j+e of s (lane g = lane/4, t = lane%4): row g + 8*(e>>1), key j0 + 8j + 2t + (e&1).
// A step of NJ n8 blocks: one tile (NJ = 8) or, at 128-key steps, two (16). `sc` points at the
// scales of the step's first tile: per tile kq[BN] then vs[BN], the next tile's 2*BN floats on
// (sc_index).
constexpr float MAX_SLACK = 8.f;
// t of one score: S_raw * kq - m in one rounding (the key-scale knock-out: S - m).
__device__ __forceinline__ float scaled_t(float s, float kq, float nref) {
    if constexpr (PA_V3_KNOCKED(K_SCALES)) return __fadd_rn(s, nref);
    else return __fmaf_rn(s, kq, nref);
}
__host__ __device__ constexpr int sc_index(int j) { return (j >> 3) * 2 * BN + (j & 7) * 8; }
// What softmax_tile and softmax_tile_kept share. A row's reference, negated (m taken as 0 while
// the row has seen no key), and the largest t it keeps its reference at (MAX_SLACK; -inf while it
// has none: its first key moves it).
__device__ __forceinline__ void negated_refs(const float (&m)[2], float (&nref)[2]) {
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) nref[rr] = m[rr] == PA_NEG_INF ? -0.f : -m[rr];
}
__device__ __forceinline__ void slack_tops(const float (&m)[2], float (&top)[2]) {
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) top[rr] = m[rr] == PA_NEG_INF ? PA_NEG_INF : MAX_SLACK;
}
// The V scales of n8 block j's keys 2t, 2t+1 (WITH_VS; else 1), and p times its key's.
template <bool WITH_VS>
__device__ __forceinline__ float2 v_scales(const float* kq, int j, int t) {
    float2 v2 = {1.f, 1.f};
    if (WITH_VS && !PA_V3_KNOCKED(V_SCALES)) v2 = *reinterpret_cast<const float2*>(kq + BN + sc_index(j) + 2 * t);
    return v2;
}
template <bool WITH_VS>
__device__ __forceinline__ float with_v_scale(float p, float2 v2, int e) {
    return WITH_VS && !PA_V3_KNOCKED(V_SCALES) ? __fmul_rn(p, (e & 1) ? v2.y : v2.x) : p;
}
// WITH_VS: each p multiplied by its key's V scale right after its exponential and its sum (the
// same bits as scale_by_vs after the softmax; the 128-key step: its multiplies then fill the
// exponentials' issue gaps rather than follow the masked and unmasked paths' join).
template <bool MASKED, int NJ = BN / 8, bool WITH_VS = false>
__device__ __forceinline__ void softmax_tile(const float* kq, int j0, const int (&lim)[2],
                                             float (&s)[4 * NJ], float (&m)[2], float (&l)[2], float (&alpha)[2]) {
    const int t = threadIdx.x & 3;
    float mx[2] = {PA_NEG_INF, PA_NEG_INF}, nref[2];
    negated_refs(m, nref);
#pragma unroll
    for (int j = 0; j < NJ; ++j) {
        const float2 k2 = *reinterpret_cast<const float2*>(kq + sc_index(j) + 2 * t);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            float v = scaled_t(s[4 * j + e], (e & 1) ? k2.y : k2.x, nref[e >> 1]);
            if (MASKED) v = (j0 + 8 * j + 2 * t + (e & 1) <= lim[e >> 1]) ? v : PA_NEG_INF;
            s[4 * j + e] = v;
            mx[e >> 1] = fmaxf(mx[e >> 1], v);
        }
    }
    alpha[0] = alpha[1] = 1.f;
    // a row keeps its reference while its t <= MAX_SLACK; a row with none yet while it has no key
    float top[2];
    slack_tops(m, top);
    if (!__all_sync(0xffffffffu, (mx[0] <= top[0]) & (mx[1] <= top[1]))) {
#pragma unroll
        for (int sh = 1; sh <= 2; sh *= 2)
#pragma unroll
            for (int rr = 0; rr < 2; ++rr) mx[rr] = fmaxf(mx[rr], __shfl_xor_sync(0xffffffffu, mx[rr], sh));
        float d[2];
#pragma unroll
        for (int rr = 0; rr < 2; ++rr) {
            const bool move = mx[rr] > top[rr];
            d[rr] = move ? mx[rr] : 0.f;
            if (move) {
                alpha[rr] = m[rr] == PA_NEG_INF ? 0.f : pa::exp2_ftz(-d[rr]);
                m[rr] = __fsub_rn(d[rr], nref[rr]);
                l[rr] = __fmul_rn(l[rr], alpha[rr]);
            }
        }
#pragma unroll
        for (int i = 0; i < 4 * NJ; ++i) s[i] = __fsub_rn(s[i], d[(i >> 1) & 1]);
    }
#pragma unroll
    for (int j = 0; j < NJ; ++j) {
        const float2 v2 = v_scales<WITH_VS>(kq, j, t);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const float p = pa::exp2_ftz(s[4 * j + e]);
            l[e >> 1] = __fadd_rn(l[e >> 1], p);
            s[4 * j + e] = with_v_scale<WITH_VS>(p, v2, e);
        }
    }
}

// Whether x holds for every thread of the warpgroup (bar.red.and over its 128 threads, named
// barrier `id`): a decision every warp of the warpgroup takes alike, as a wgmma it guards needs.
__device__ __forceinline__ bool warpgroup_all(bool x, int id) {
    u32 r;
    asm volatile("{\n.reg .pred p, q;\nsetp.ne.u32 p, %1, 0;\nbar.red.and.pred q, %2, 128, p;\nselp.u32 %0, 1, 0, q;\n}\n"
                 : "=r"(r) : "r"(static_cast<u32>(x)), "r"(id) : "memory");
    return r != 0;
}

// The same rule for a step with no masked key, taken speculatively: t, p, p's sum and P are
// formed as if every row of the warpgroup kept its reference, and the rows' maxima only
// afterwards, beside the exponentials rather than before them. Returns whether that held (then l
// and s are as softmax_tile<false> leaves them and alpha = 1); where it did not (a row's first
// keys, or its scores above 2^MAX_SLACK), m, l and alpha are untouched, s holds no S any more, and
// the caller forms S again (a wgmma: so the test is the warpgroup's, on named barrier `bar`) and
// runs softmax_tile: the same bits either way.
template <int NJ, bool WITH_VS>
__device__ __forceinline__ bool softmax_tile_kept(const float* kq, float (&s)[4 * NJ], const float (&m)[2],
                                                  float (&l)[2], float (&alpha)[2], int bar) {
    const int t = threadIdx.x & 3;
    float mx[2] = {PA_NEG_INF, PA_NEG_INF}, nref[2], sum[2] = {l[0], l[1]};
    negated_refs(m, nref);
#pragma unroll
    for (int j = 0; j < NJ; ++j) {
        const float2 k2 = *reinterpret_cast<const float2*>(kq + sc_index(j) + 2 * t);
        const float2 v2 = v_scales<WITH_VS>(kq, j, t);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const float v = scaled_t(s[4 * j + e], (e & 1) ? k2.y : k2.x, nref[e >> 1]);
            mx[e >> 1] = fmaxf(mx[e >> 1], v);
            const float p = pa::exp2_ftz(v);
            sum[e >> 1] = __fadd_rn(sum[e >> 1], p);
            s[4 * j + e] = with_v_scale<WITH_VS>(p, v2, e);
        }
    }
    float top[2];
    slack_tops(m, top);
    if (!warpgroup_all((mx[0] <= top[0]) & (mx[1] <= top[1]), bar)) return false;
    l[0] = sum[0];
    l[1] = sum[1];
    alpha[0] = alpha[1] = 1.f;
    return true;
}

// P = fp16(p * v_scale*p_scale) at 64-key steps (the 128-key step multiplies in softmax_tile,
// WITH_VS), in two parts: the multiplies are written before the wait for the previous tile's P.V,
// the packing into the A fragments of P.V's k-steps after it, as the P.V in
// flight reads the fragments being replaced. What that buys is the V scales' loads issued before
// the wait: ptxas schedules the multiplies after it all the same (in the SASS: docs/PERF_NOTES.md).
// The A fragment of k-step kk is {(g, 2t..2t+1), (g+8, 2t..), (g, 2t+8..), (g+8, 2t+8..)} of
// columns 16kk.., so the S accumulators of n8 blocks 2kk and 2kk+1 become P's A fragment of k-step
// kk in place (as in FlashAttention-2).
template <int NJ = BN / 8>
__device__ __forceinline__ void scale_by_vs(const float* kq, float (&s)[4 * NJ]) {
    const int t = threadIdx.x & 3;
    const float* vs = kq + BN;               // (F16_VS = F16_KQ + BN*4)
#pragma unroll
    for (int j = 0; j < (PA_V3_KNOCKED(V_SCALES) ? 0 : NJ); ++j) {
        const float2 v2 = *reinterpret_cast<const float2*>(vs + sc_index(j) + 2 * t);
        s[4 * j] = __fmul_rn(s[4 * j], v2.x);
        s[4 * j + 1] = __fmul_rn(s[4 * j + 1], v2.y);
        s[4 * j + 2] = __fmul_rn(s[4 * j + 2], v2.x);
        s[4 * j + 3] = __fmul_rn(s[4 * j + 3], v2.y);
    }
}
// The same on a 64-key stage (its kq and vs at F16_KQ, F16_VS).
template <bool MASKED>
__device__ __forceinline__ void softmax_tile(const unsigned char* f_ptr, int j0, const int (&lim)[2],
                                             float (&s)[S_REGS], float (&m)[2], float (&l)[2], float (&alpha)[2]) {
    softmax_tile<MASKED>(reinterpret_cast<const float*>(f_ptr + F16_KQ), j0, lim, s, m, l, alpha);
}
__device__ __forceinline__ void scale_by_vs(const unsigned char* f_ptr, float (&s)[S_REGS]) {
    scale_by_vs(reinterpret_cast<const float*>(f_ptr + F16_KQ), s);
}
template <int NJ = BN / 8>
__device__ __forceinline__ void p_fragments(const float (&s)[4 * NJ], u32 (&pf)[NJ / 2][4]) {
#pragma unroll
    for (int j = 0; j < NJ; ++j) {
        pf[j >> 1][2 * (j & 1) + 0] = pa::half2_as_u32(__floats2half2_rn(s[4 * j], s[4 * j + 1]));
        pf[j >> 1][2 * (j & 1) + 1] = pa::half2_as_u32(__floats2half2_rn(s[4 * j + 2], s[4 * j + 3]));
    }
}

// O *= alpha, skipped where every alpha of the warp is 1 (O*1 == O: the same bits), as it is on
// most steps of a long context, where a row's running maximum rarely moves.
__device__ __forceinline__ void rescale_o(float (&o)[O_REGS], const float (&alpha)[2]) {
    if (__all_sync(0xffffffffu, alpha[0] == 1.f && alpha[1] == 1.f)) return;
#pragma unroll
    for (int i = 0; i < O_REGS; ++i) o[i] = __fmul_rn(o[i], alpha[(i >> 1) & 1]);
}

#if PA_V3_STEP_KEYS == 128
#include "v3_pairs.cuh"
#endif

// A consumer warpgroup runs steps n = 0 .. n_tiles (the loop below): step n issues S of tile n
// and, behind it, O += P.V of tile n-1 (O first rescaled by tile n-1's alpha), waits for S only
// (wgmma.wait_group 1), runs tile n's softmax while P.V still runs (and loads the V scales), waits
// for P.V, then multiplies p by the V scales and packs tile n's P into the A fragments. Step 0 has
// no P.V and step n_tiles no S. No register that feeds a wgmma is written while one is in flight
// (ptxas would serialise the wgmma: C7513), and the descriptors are formed before wgmma.fence.
__device__ __forceinline__ void consumer(const pa::Args& a, const Cta& c, unsigned char* sm, u32 base) {
    // The warpgroup index, made warp-uniform for ptxas (a shuffle from lane 0, as CUTLASS's
    // canonical_warp_group_idx does): then the wgmma descriptors are provably uniform and live in
    // uniform registers (else an R2UR per descriptor half and wgmma: 70 more instructions a step).
    const int wg = __shfl_sync(0xffffffffu, (int)(threadIdx.x >> 7) - 1, 0), tid = threadIdx.x & 127;
    const int warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    PA_V3_STAMP_WG(consumer_start, wg, tid, 0);
    const int rows_used = c.ppc * c.group;   // rows of the CTA that hold a query (at most M_CTA)
    const int r0 = 64 * wg;                  // this warpgroup's first row
    [[maybe_unused]] const u32 bar_full = base + SM_BAR, bar_empty = base + SM_BAR + 8 * F16_STAGES;

    // ---- Q rows r0 .. r0+63 into shared memory (128B-swizzled, K-major) once, then (two consumer
    // warpgroups) into each thread's A fragments of all KSTEPS k-steps for the whole loop: S's
    // wgmma reads only K from shared memory, 16 KB per warpgroup and tile less than with Q as a
    // shared-memory operand (docs/PERF_NOTES.md); three read Q from shared memory (Q_SS). Zero for rows without a query. All of a thread's Q_CHUNKS loads are
    // issued before its first store, so the CTA's start waits for one global-memory latency, not
    // Q_CHUNKS of them in series (about 4.5 us of every CTA's 7 us of fixed cost: docs/PERF_NOTES.md).
    constexpr int Q_CHUNKS = 64 * (D / 8) / 128;   // 16-byte chunks of Q per consumer thread
    uint4 qv[Q_CHUNKS];
#pragma unroll
    for (int i = 0; i < Q_CHUNKS; ++i) {
        const int idx = tid + 128 * i, R = r0 + idx / (D / 8), ch = idx % (D / 8);
        const int pos = c.p0 + R / c.group;
        qv[i] = make_uint4(0, 0, 0, 0);
        if (R < rows_used && pos < a.n_q) {
            const int hq = c.hkv * c.group + R % c.group;
            qv[i] = __ldg(reinterpret_cast<const uint4*>(a.q + ((u64)hq * a.n_q + pos) * D + 8 * ch));
        }
    }
    if constexpr (PA_V3_KNOCKED(KSCALE_IN_Q)) pa_v3_ko_kscale_in_q(qv, a, PA_KV_F16);
#pragma unroll
    for (int i = 0; i < Q_CHUNKS; ++i) {
        const int idx = tid + 128 * i;
        *reinterpret_cast<uint4*>(sm + SM_Q + sw128(r0 + idx / (D / 8), idx % (D / 8), Q_BLOCK)) = qv[i];
    }
    if constexpr (Q_SS) fence_proxy_async();   // S's wgmma reads Q through the async proxy
    named_barrier_sync(1 + wg, 128);         // (RS: read back below with ordinary loads, no fence)
    PA_V3_STAMP_WG(q_ready, wg, tid, 0);

    // ---- this warpgroup's rows: the keys they see
    const bool wg_rows = r0 < rows_used && c.p0 + r0 / c.group < a.n_q;
    const int first_pos = c.p0 + r0 / c.group;
    const int last_pos = min(c.p0 + min(r0 + 63, rows_used - 1) / c.group, a.n_q - 1);
    int lim[2];                              // last key each of the thread's two rows sees
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
        const int R = r0 + 16 * warp + g + 8 * rr, pos = c.p0 + R / c.group;
        lim[rr] = a.ctx + ((R < rows_used && pos < a.n_q) ? pos : last_pos);
    }
    // tiles [t_begin, wg_end) hold keys of these rows; those below first_masked need no mask
    const int wg_end = wg_rows ? min(c.t_end, (a.ctx + last_pos + BN) / BN) : c.t_begin;
    const int first_masked = (a.ctx + first_pos + 1) / BN;
    // Q's A fragments for all KSTEPS k-steps, from the swizzled rows just stored: lane (g, t) of warp
    // w holds rows 16w+g and 16w+g+8 of this warpgroup, dims 16kk+2t.., 16kk+2t+8.. (PTX ISA, wgmma
    // register fragment of A). 32 registers that stay for the whole loop.
    [[maybe_unused]] u32 qf[KSTEPS][4];
    if constexpr (!Q_SS) {
#pragma unroll
        for (int kk = 0; kk < KSTEPS; ++kk)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int R = r0 + 16 * warp + g + 8 * (e & 1), dim = 16 * kk + 2 * t + 8 * (e >> 1);
                qf[kk][e] = *reinterpret_cast<const u32*>(sm + SM_Q + sw128(R, dim >> 3, Q_BLOCK) + 2 * (dim & 7));
            }
    }
    // with Q_SS: the descriptor of this warpgroup's 64 rows of Q (K-major, as K's)
    const u64 dq = desc_sw128(base + SM_Q + r0 * 128, 16, 1024);

#if PA_V3_STEP_KEYS == 64
    float o[O_REGS], s[S_REGS], m[2] = {PA_NEG_INF, PA_NEG_INF}, l[2] = {0.f, 0.f};
    float alpha[2] = {1.f, 1.f};             // the rescale of O that the pending P.V's tile asks for
    u32 pf[PV_STEPS][4];                     // the pending P.V's A fragments
    auto issue_s_tile = [&](u64 dk) {
        if constexpr (Q_SS) issue_s(s, dq, dk);
        else issue_s(s, qf, dk);
    };
#pragma unroll
    for (int i = 0; i < O_REGS; ++i) o[i] = 0.f;
    const int n_tiles = c.t_end - c.t_begin;
    const int n_math = wg_end - c.t_begin;   // this warpgroup computes tiles [0, n_math) of the CTA

    // Step n (0 <= n <= n_tiles): O = O*alpha of tile n-1; issue S of tile n and P.V of tile n-1
    // (into O) back to back; run tile n's softmax while that P.V runs; release tile n-1 once it is
    // done. Each step's issue phase is a turn: named barriers PP_BAR + w give the two warpgroups
    // turns 0, 1, 0, 1, ... (warpgroup w syncs on its own, then arrives on the other's), so that
    // one's softmax overlaps the other's wgmma. Every warpgroup takes n_tiles + 1 turns (issuing
    // nothing past its rows' diagonal), so the barriers stay matched: warpgroup 1's first arrival
    // opens warpgroup 0's first turn, and it skips its last one.
    auto turn_begin = [&](int n) {
        PA_V3_STAMP_WG(turn_top, wg, tid, n);
        if (n < n_tiles) mbar_wait(bar_full + 8 * (n % F16_STAGES), (n / F16_STAGES) & 1);
        PA_V3_STAMP_WG(turn_full, wg, tid, n);
        if (!PA_V3_KNOCKED(PINGPONG)) named_barrier_sync(PP_BAR + wg, 256);
        PA_V3_STAMP_WG(turn_open, wg, tid, n);
    };
    auto turn_end = [&](int n) {
        if (!PA_V3_KNOCKED(PINGPONG) && (wg != NCWG - 1 || n < n_tiles)) named_barrier_arrive(PP_BAR + (wg + 1) % NCWG, 256);
    };
    auto release = [&](int n) { mbar_arrive(bar_empty + 8 * ((n - 1) % F16_STAGES)); };   // tile n-1
    // descriptors of tile n's K (S's B) and V (P.V's B), formed (and pinned) before a wgmma.fence
    auto desc_k = [&](int n) { return desc_sw128(base + SM_F16 + (n % F16_STAGES) * F16_STAGE + F16_K, 16, 1024); };
    auto desc_v = [&](int n) { return desc_sw128(base + SM_F16 + (n % F16_STAGES) * F16_STAGE + F16_V, KV_BLOCK, 1024); };
    auto f16_stage = [&](int n) { return sm + SM_F16 + (n % F16_STAGES) * F16_STAGE; };
    auto kq_of = [&](int n) { return reinterpret_cast<const float*>(f16_stage(n) + F16_KQ); };
    auto softmax = [&](int n, float (&al)[2]) {
        const int tile = c.t_begin + n;
        if (PA_V3_KNOCKED(SOFTMAX)) al[0] = al[1] = 1.f;
        else if (tile < first_masked) softmax_tile<false>(f16_stage(n), tile * BN, lim, s, m, l, al);
        else softmax_tile<true>(f16_stage(n), tile * BN, lim, s, m, l, al);
    };
    auto rescale = [&]() { rescale_o(o, alpha); };

    if (wg == NCWG - 1 && !PA_V3_KNOCKED(PINGPONG)) named_barrier_arrive(PP_BAR, 256);
    int n = 0;
    if (n_math > 0) {
        // the first step: S of tile 0
        turn_begin(0);
        u64 dk0 = desc_k(0);
        pin(dk0);
        pin(s);
        wgmma_fence();
        issue_s_tile(dk0);
        wgmma_commit();
        turn_end(0);
        wgmma_wait<0>();
        pin(s);
        softmax(0, alpha);
        PA_V3_STAMP_WG(first_softmax, wg, tid, 0);
        scale_by_vs(f16_stage(0), s);
        p_fragments(s, pf);
        // steps 1 .. n_math-1: S of tile n and P.V of tile n-1
        for (n = 1; n < n_math; ++n) {
            turn_begin(n);
            u64 dk = desc_k(n), dv = desc_v(n - 1);
            pin(dk);
            pin(dv);
            rescale();
            pin(s);
            pin(pf);
            pin(o);
            wgmma_fence();
            PA_V3_STAMP_WG(fenced, wg, tid, n);
            issue_s_tile(dk);
            wgmma_commit();
            PA_V3_STAMP_WG(s_issued, wg, tid, n);
            issue_pv(o, pf, dv);
            wgmma_commit();
            turn_end(n);
            PA_V3_STAMP_WG(issued, wg, tid, n);
            wgmma_wait<1>();                 // S of tile n (P.V of tile n-1 may still run)
            pin(s);
            PA_V3_STAMP_WG(s_done, wg, tid, n);
            float alpha_next[2];
            // a tile with no masked key: the softmax speculative (softmax_tile_kept), with V's
            // scales; where a row of the warpgroup moves its reference, S again and the full rule
            const bool unmasked = !PA_V3_KNOCKED(SOFTMAX) && c.t_begin + n < first_masked;
            if (!(unmasked && softmax_tile_kept<BN / 8, true>(kq_of(n), s, m, l, alpha_next, 1 + wg))) {
                if (unmasked) {
                    pin(s);
                    wgmma_fence();
                    issue_s_tile(dk);
                    wgmma_commit();
                    wgmma_wait<0>();
                    pin(s);
                }
                softmax(n, alpha_next);
                scale_by_vs(f16_stage(n), s);
            }
            PA_V3_STAMP_WG(softmax, wg, tid, n);
            wgmma_wait<0>();
            pin(o);
            pin(pf);
            PA_V3_STAMP_WG(pv_done, wg, tid, n);
            release(n);
            p_fragments(s, pf);              // (after the wait: the P.V just done read pf)
            alpha[0] = alpha_next[0];
            alpha[1] = alpha_next[1];
        }
        // step n_math: P.V of the last tile
        turn_begin(n);
        PA_V3_STAMP_WG(last_turn, wg, tid, n);
        u64 dv = desc_v(n - 1);
        pin(dv);
        rescale();
        pin(pf);
        pin(o);
        wgmma_fence();
        issue_pv(o, pf, dv);
        wgmma_commit();
        turn_end(n);
        wgmma_wait<0>();
        pin(o);
        release(n);
        ++n;
        PA_V3_STAMP_WG(last_pv, wg, tid, n);
    }
    for (; n <= n_tiles; ++n) {              // tiles past these rows' diagonal: turns and releases only
        turn_begin(n);
        turn_end(n);
        if (n >= 1) release(n);
    }
#else
    float o[O_REGS], m[2], l[2];
    consume_pairs(c, sm, base, wg, dq, lim, wg_end, first_masked, o, m, l);
#endif
    if (wg_end <= c.t_begin) return;         // no row of this warpgroup sees a key of this segment

    // ---- row sums across the 4 lanes of a row, normalise, store (or the segment's state)
    // The CTA's rows are formed again here (cta_of's arithmetic), not kept across the loop: at 152
    // registers (three consumer warpgroups) ptxas otherwise spills one of them in some flavours.
    // The empty asm makes heads_q opaque, so the divisions are not merged with cta_of's.
    int heads_q = a.heads_q;
    asm volatile("" : "+r"(heads_q));
    const int group = heads_q / a.heads_kv, ppc = M_CTA / group, rows = ppc * group;
    const int p0 = (gridDim.y - 1 - blockIdx.y) * ppc, hkv = blockIdx.x;
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
        float lt = l[rr];
        lt = __fadd_rn(lt, __shfl_xor_sync(0xffffffffu, lt, 1));
        lt = __fadd_rn(lt, __shfl_xor_sync(0xffffffffu, lt, 2));
        const int R = r0 + 16 * warp + g + 8 * rr, pos = p0 + R / group;
        if (R >= rows || pos >= a.n_q) continue;
        const int hq = hkv * group + R % group;
        const u64 row = (u64)hq * a.n_q + pos;
        if (a.seg_keys) {                    // unnormalised O, and (m, l), for pa_combine
            const u64 prow = (u64)blockIdx.z * a.heads_q * a.n_q + row;
            float* dst = a.part + prow * D + 2 * t;
#pragma unroll
            for (int j = 0; j < D / 8; ++j)
                *reinterpret_cast<float2*>(dst + 8 * j) = make_float2(o[4 * j + 2 * rr], o[4 * j + 2 * rr + 1]);
            if (t == 0)
                reinterpret_cast<float2*>(a.part + (u64)gridDim.z * a.heads_q * a.n_q * D)[prow] = make_float2(m[rr], lt);
            continue;
        }
        const float inv = 1.f / lt;
#pragma unroll
        for (int j = 0; j < D / 8; ++j) {
            const float x0 = __fmul_rn(__fmul_rn(o[4 * j + 2 * rr], inv), a.inv_p_scale);
            const float x1 = __fmul_rn(__fmul_rn(o[4 * j + 2 * rr + 1], inv), a.inv_p_scale);
#if PA_OUT_F16
            *reinterpret_cast<__half2*>(reinterpret_cast<__half*>(a.out) + row * D + 8 * j + 2 * t) = __floats2half2_rn(x0, x1);
#else
            *reinterpret_cast<float2*>(reinterpret_cast<float*>(a.out) + row * D + 8 * j + 2 * t) = make_float2(x0, x1);
#endif
        }
    }
}
// The producer of a comparison build (v3_controls.cuh, included at the end).
__device__ __forceinline__ void control_producer(const pa::Args& a, const Cta& c, unsigned char* sm, u32 base);
}  // namespace v3

// Dynamic shared memory: v3::SMEM_ALLOC bytes (the backend raises the limit; pa_v3_smem_bytes says how many).
extern "C" __global__ void __launch_bounds__(v3::THREADS, 1) pa_v3(PA_KERNEL_PARAMS) {
    using namespace v3;
    PA_MAKE_ARGS(a);
    extern __shared__ __align__(16) unsigned char smem_raw[];   // aligned below, not assumed
    const u32 raw = smem_u32(smem_raw);
    const u32 base = (raw + 1023u) & ~1023u;                 // 128B-swizzle atoms need 1024-byte alignment
    unsigned char* sm = smem_raw + (base - raw);
    const Cta c = cta_of(a);
    if (c.t_begin >= c.t_end) return;                        // no key of this segment for these rows
    PA_V3_STAMP(cta_start, c.t_end - c.t_begin);
    if (threadIdx.x == 0) {
#if PA_V3_STEP_KEYS == 128
#pragma unroll
        for (int s = 0; s < K_PAIRS; ++s) {
            mbar_init(base + BAR_FULL_K + 8 * s, PA_KV_F16 ? 128 : 1);   // the issuer (and the bytes), or the control's copiers
            mbar_init(base + BAR_EMPTY_K + 8 * s, 128 * NCWG);    // the consumers' threads
        }
#pragma unroll
        for (int s = 0; s < V_PAIRS; ++s) {
            mbar_init(base + BAR_FULL_V + 8 * s, PA_KV_F16 ? 128 : 1);
            mbar_init(base + BAR_EMPTY_V + 8 * s, 128 * NCWG);
        }
#else
#pragma unroll
        for (int s = 0; s < F16_STAGES; ++s) {
            mbar_init(base + SM_BAR + 8 * s, PA_V3_IMAGES ? 1 : 128);     // full: the producer's threads (the issuer's copy)
            mbar_init(base + SM_BAR + 8 * (F16_STAGES + s), 128 * NCWG);   // empty: the consumers' threads
        }
#endif
#pragma unroll
        for (int s = 0; s < I8_SLOTS; ++s) mbar_init(base + BAR_LANDED + 8 * s, 1);   // landed: the issuer + bytes
#if PA_V3_SHARE
        reinterpret_cast<volatile int*>(sm + SM_CLAIM)[1] = 0;   // tiles brought in (the converters' pace)
#endif
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    if (threadIdx.x < 128) {
        set_max_regs_dec<PRODUCER_REGS>();
        if constexpr (PA_V3_CONTROL) control_producer(a, c, sm, base);   // a comparison build's (v3_controls.cuh)
        else producer(a, c, sm, base);
        PA_V3_STAMP(producer_end, 0);
    } else {
        set_max_regs_inc<CONSUMER_REGS>();
        consumer(a, c, sm, base);
        PA_V3_STAMP(consumer_end, 0);
    }
}

// The dynamic shared memory pa_v3 needs (a kernel the backend may query; launched with one thread).
extern "C" __global__ void pa_v3_smem_bytes(int* out) { *out = v3::SMEM_ALLOC; }

#if PA_V3_IMAGES
extern "C" __global__ void pa_v3_image_bytes(int* out) { *out = v3::IMG_BYTES; }   // the bytes of one tile's image
#endif

// the comparison builds' producers (fp16 control, dq images)
#include "v3_controls.cuh"
