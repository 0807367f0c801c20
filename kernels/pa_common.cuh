// pa_common.cuh: what every CUDA variant (v1, v2, v2t, v3) includes. v3 takes the arguments, the
// global addresses, the int8 -> f16 conversion, exp2 and pa_combine from here; the 16-key slice,
// its swizzle and the per-warp mma.sync math are v1's, v2's and v2t's.
//
// The problem (SPEC section 1): one chunk of Nq fp16 queries per query head, at absolute
// positions ctx .. ctx+Nq-1, attends causally to Nk = ctx+Nq int8 keys/values of its KV head
// (GQA: query head h reads KV head h / (Hq/Hkv)). K and V carry one fp32 scale per token and
// head. K/V live either in a paged pool [pages][Hkv][page][D] gathered through a page table,
// or contiguously as [Hkv][Nk][D]. The output is fp32 (or fp16) [Hq][Nq][D].
//
// Shared here:
//   * compile-time parameters (PA_HEAD_DIM, PA_PAGED, PA_OUT_F16, PA_FORCE_TURING, and for v2/v2t
//     PA_TILES: the m16 query tiles one warp owns);
//   * the 16-key "slice": the unit every kernel stages in shared memory (int8 K rows, int8 V
//     rows, K scales, V scales), its bank-conflict-free swizzle and its global addresses;
//   * int8 -> f16 conversion (exact: 0x6400|byte is 1024+byte in f16, minus 1152);
//   * the MMA wrapper: one m16n8k16, or on Turing (and with PA_FORCE_TURING) a pair of m16n8k8;
//   * the per-warp math: Q fragments, S = Q.K^T, online softmax in fp32 (exp2, scales folded),
//     P.V with the V scales folded into P, and the final normalisation and store;
//   * for v2/v2t: the warp prologue/epilogue, and split keys (both warps of a CTA on one task,
//     each on half of its keys, their softmax states merged at the end: merge_split);
//   * key segments (every variant, contexts above pa_bench.numerics.model.SEGMENT_KEYS): the
//     CTAs of grid.z = z run the online softmax over keys [z*S, (z+1)*S) only, from a fresh state,
//     and write their unnormalised (O, m, l) to a workspace; pa_combine (below) merges the
//     segments of every row in order. mma.sync's fp32 accumulation is not round-to-nearest (it
//     drifts toward zero by ~1e-7 of the value per MMA), so no accumulator may live for a whole
//     1M-key context; a segment bounds every P.V chain to S/16 slices, and gives chunks with few
//     query rows n_seg times more CTAs.
//
// Tiles per warp. A warp owns TILES m16 query tiles (16 rows of one query head each) that see the
// same keys; every K/V fragment it converts from int8 feeds TILES MMAs. The conversion costs as
// many instructions as the MMA it feeds, so TILES = 2 halves the kernel's instructions per MMA.
// With one tile the Q fragments stay in registers; with two, the second tile's accumulators need
// those registers and each lane keeps its Q fragments in shared memory (it reads back only what
// it wrote). A row's arithmetic does not depend on the tile or warp that computes it.
//
// Fragment layout. A warp owns 16 query rows. Lane = 4*g + t (g = lane/4, t = lane%4).
//   * The head dimension is permuted consistently in Q and K so that each lane reads 16
//     contiguous bytes of a K row per 64 dims: k16 step s of 64-dim group G gives lane t the
//     dims 64G + 16t + 4s + {0,1} (MMA k = 2t, 2t+1) and + {2,3} (MMA k = 2t+8, 2t+9).
//   * Within a slice, S column c of n8 tile h is key 4*(c/2) + 2h + (c%2); lane t therefore holds
//     keys 4t..4t+3 of every row it owns, which is also the k order of P.V: lane t reads V rows
//     4t..4t+3.
//   * In P.V, n8 tile j column c is head dim NT*c + j (NT = D/8): lane g reads NT contiguous
//     bytes of each V row, and lane t ends up holding 2*NT contiguous output dims per row.
// No dimension permutation changes what is computed: each is a relabelling of a sum's terms.
#pragma once
#include <cuda_fp16.h>

#ifndef PA_HEAD_DIM
#define PA_HEAD_DIM 128
#endif
#ifndef PA_PAGED
#define PA_PAGED 1
#endif
#ifndef PA_OUT_F16
#define PA_OUT_F16 0
#endif
#ifndef PA_FORCE_TURING
#define PA_FORCE_TURING 0
#endif

#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ < 800 || PA_FORCE_TURING)
#define PA_MMA_K8 1   // Turing path: m16n8k8 pairs
#else
#define PA_MMA_K8 0   // m16n8k16
#endif

#if PA_HEAD_DIM != 64 && PA_HEAD_DIM != 128
#error "PA_HEAD_DIM must be 64 or 128"
#endif

#ifndef PA_TILES
#define PA_TILES 2
#endif
#if PA_TILES != 1 && PA_TILES != 2
#error "PA_TILES must be 1 or 2"
#endif

#define PA_NEG_INF __int_as_float(0xff800000)

namespace pa {

typedef unsigned int u32;
typedef unsigned long long u64;

constexpr int D = PA_HEAD_DIM;
constexpr int V1_WARPS = 4;              // v1: 4 warps per CTA, one m16 tile each
constexpr int V2_WARPS = 2;              // v2/v2t: 2 warps per CTA, TILES m16 tiles each
constexpr int TILES = PA_TILES;          // v2/v2t: m16 query tiles per warp
constexpr int ROWS_PER_TILE = 16;        // one m16 MMA tile of query rows
constexpr int SLICE_KEYS = 16;           // keys per staged slice
constexpr int CPR = D / 16;              // 16-byte chunks per K/V row
constexpr int NT = D / 8;                // n8 tiles of the output (P.V)
constexpr int KSTEPS = D / 16;           // k16 steps of Q.K^T
constexpr int GROUPS64 = D / 64;         // 64-dim groups (one uint4 of K per lane each)
constexpr int SLICE_KV_BYTES = SLICE_KEYS * D;                       // one of K or V
constexpr int SLICE_BYTES = 2 * SLICE_KV_BYTES + 2 * SLICE_KEYS * 4;  // K, V, K scales, V scales
constexpr int SLICE_CHUNKS = SLICE_KV_BYTES / 16;                    // 16-byte chunks of K (or V)
constexpr int CHUNKS_PER_LANE = SLICE_CHUNKS / 32;                   // D/32: 4 at D=128
constexpr int Q_TILE_FRAGS = KSTEPS * 32;                            // uint4 per tile in shared memory

// ---------------------------------------------------------------- kernel arguments
struct Args {
    const __half* q;              // [Hq][Nq][D]
    const signed char* k;         // paged: [pages][Hkv][page][D]; contiguous: [Hkv][Nk][D]
    const signed char* v;
    const float* k_scale;         // paged: [pages][Hkv][page];    contiguous: [Hkv][Nk]
    const float* v_scale;
    const int* page_table;        // [ceil(Nk/page)] (paged only)
    void* out;                    // [Hq][Nq][D], float or __half
    int n_q, ctx, heads_q, heads_kv, page_shift;
    float qk_scale_log2;          // softmax_scale * log2(e)
    float p_scale;                // power of two: max(v_scale) * p_scale in (0.5, 1]
    float inv_p_scale;
    int scale_stride;             // contiguous: keys between two KV heads' scale rows (a multiple
                                  // of 4, so every 4-key scale chunk is 16-byte aligned)
    int pair_heads;               // v2/v2t with TILES == 2: 1 = a warp's tiles are two query heads
                                  // of one KV group at the same rows; 0 = two 16-row blocks of one head
    int split_keys;               // v2/v2t: 0, or the key (a multiple of 16, at most ctx) at which the
                                  // keys of a CTA's one warp task are split between its two warps
    float* part;                  // with segments: the workspace, [n_seg][Hq][Nq][D] unnormalised O,
                                  // then [n_seg][Hq][Nq] float2 (m, l); n_seg = gridDim.z (v3: its items')
    int seg_keys;                 // 0 (no segments: gridDim.z == 1), or the keys per segment (a multiple
                                  // of 64); the CTAs of blockIdx.z = z see keys [z*S, (z+1)*S) only.
                                  // Never together with split_keys.
    const int* sched;             // v3: its work items' schedule: CTA b runs items sched[P+1+k], k in
                                  // [sched[b], sched[b+1]), in that order (P = gridDim.x); built by
                                  // pa_bench.backends.kernels.persistent_schedule. Others: null.
};

// v2/v2t: the query head and first row of each tile warp `warp` of this CTA owns; false if the
// warp has none (the last CTA of a row block may be half empty). Warp task w = 2*blockIdx.y + warp,
// or with split keys w = blockIdx.y for both warps (each takes half of the task's keys):
//   TILES == 1: head w, rows 16*rb ..;   TILES == 2, pair_heads: heads 2w, 2w+1, rows 16*rb ..;
//   TILES == 2, otherwise: head w, rows 32*rb .. and 32*rb+16 ..
// The tiles of a warp see the same keys (up to the diagonal), and with pair_heads the two warps of
// a CTA are the four query heads of one KV group, so their copies of a slice meet in L1.
// Row blocks run longest-first (the last rows see the most keys).
__device__ __forceinline__ bool warp_tiles(const Args& a, int warp, int hq[TILES], int row0[TILES]) {
    const int w = a.split_keys ? blockIdx.y : blockIdx.y * V2_WARPS + warp;
    const int rb = gridDim.x - 1 - blockIdx.x;
#pragma unroll
    for (int tl = 0; tl < TILES; ++tl) {
        if (TILES == 1 || a.pair_heads) {
            hq[tl] = TILES * w + tl;
            row0[tl] = rb * ROWS_PER_TILE;
        } else {
            hq[tl] = w;
            row0[tl] = (rb * TILES + tl) * ROWS_PER_TILE;
        }
    }
    return hq[TILES - 1] < a.heads_q;
}

// ---------------------------------------------------------------- shared-memory slice layout
// A slice is [K rows 16 x D][V rows 16 x D][K scales 16][V scales 16]. 16-byte chunk `col` of
// row `row` is stored at a swizzled chunk position so that both read patterns (K: two rows x
// four chunks per quarter warp; V: four rows x two chunks) hit 8 distinct bank groups.
__host__ __device__ constexpr int swz_chunk(int row, int col) {
    const int lin = row * CPR + col;
    const int f = (((row >> 2) & 3) << 1) ^ (CPR >= 8 ? ((row & 1) << 2) : 0);
    return (lin & ~7) | ((lin & 7) ^ f);
}
__host__ __device__ constexpr int slice_k_off(int row, int col) { return swz_chunk(row, col) * 16; }
__host__ __device__ constexpr int slice_v_off(int row, int col) { return SLICE_KV_BYTES + swz_chunk(row, col) * 16; }
constexpr int SLICE_KS_OFF = 2 * SLICE_KV_BYTES;
constexpr int SLICE_VS_OFF = SLICE_KS_OFF + SLICE_KEYS * 4;

// The reads of the math (fragment layout above), written so that every offset is one swizzled
// base per lane plus a xor or an add: the swizzle term depends only on the lane, not on h, G or
// the row pair (it equals swz_chunk for every lane, h, G and row pair).
// K: lane (g, t) reads row 4*(g/2) + 2h + g%2, chunk 4G + t.
__device__ __forceinline__ int k_rd_off(int lane, int h, int G) {
    const int g = lane >> 2, t = lane & 3;
    return (slice_k_off(4 * (g >> 1) + (g & 1), t) ^ (64 * G)) + 2 * D * h;
}
// V: lane (g, t) reads row 4t + r, NT bytes at dim NT*g (a 16-byte chunk at D=128, half of one at 64).
__device__ __forceinline__ int v_rd_off(int lane, int r) {
    const int g = lane >> 2, t = lane & 3;
#if PA_HEAD_DIM == 128
    return slice_v_off(4 * t + (r & 1), g) + 2 * D * (r >> 1);
#else
    return slice_v_off(4 * t + (r & 1), g >> 1) + 8 * (g & 1) + 2 * D * (r >> 1);
#endif
}

// ---------------------------------------------------------------- global addresses
// The pool page that holds key j0 (paged layout; 0 for keys past the cache, where nothing is
// read). The pipelined kernels look it up one slice ahead of its use, so the table's latency
// never sits in front of a copy.
__device__ __forceinline__ int page_of(const Args& a, int j0) {
#if PA_PAGED
    return j0 < a.ctx + a.n_q ? __ldg(a.page_table + (j0 >> a.page_shift)) : 0;
#else
    return 0;
#endif
}
// Row index (in rows of D bytes, also the scale index in the paged layout) of key j0 (a multiple
// of 16) of KV head hkv, which lies in pool page `page`. A 16-key group never straddles a page
// (pages are powers of two >= 16). Row indices fit in 32 bits (the backend checks the pool size),
// so only the final byte offset needs 64-bit arithmetic.
__device__ __forceinline__ u32 kv_row(const Args& a, int hkv, int j0, int page) {
#if PA_PAGED
    return (((u32)page * (u32)a.heads_kv + (u32)hkv) << a.page_shift) | ((u32)j0 & ((1u << a.page_shift) - 1u));
#else
    return (u32)hkv * (u32)(a.ctx + a.n_q) + (u32)j0;
#endif
}
// Index of key j0's scale: the same place as its row in the paged pool; in the contiguous
// layout the scale rows are padded to scale_stride keys.
__device__ __forceinline__ u32 scale_index(const Args& a, int hkv, int j0, u32 row) {
#if PA_PAGED
    return row;
#else
    return (u32)hkv * (u32)a.scale_stride + (u32)j0;
#endif
}

// The copy plan of one slice, shared by every staging method so that all of them put the same
// bytes in the same places. Lane `lane` moves the 16-byte chunks (row, col) of K and of V with
// col = lane % CPR and, for i < CHUNKS_PER_LANE, row = chunk_row(lane, i):
//   D=128: 4*(lane/8) + i        (instruction i of the warp reads rows i, 4+i, 8+i, 12+i whole)
//   D=64:  (lane/4)%2 + 4*(lane/8) + 2*i   (rows 2i, 2i+1, 4+2i, ... whole)
// so every copy instruction reads four whole 128-byte lines, a chunk's source is the lane's first
// chunk plus D*(i%NB) + 2*D*(i/NB) bytes, and its destination is one of NB per-lane offsets plus
// 2*D*(i/NB) bytes: rows r and r+2 have the same swizzle (it uses row bits 0, 2 and 3), so the
// copy needs no per-chunk address arithmetic. Lanes 0-3 move the K-scale chunks, lanes 4-7 the
// V-scale chunks (4 keys each). The plan is checked at compile time (copy_plan_ok below).
constexpr int COPY_NB = CPR >= 8 ? 2 : 1;   // distinct destination offsets per lane
__host__ __device__ constexpr int chunk_row(int lane, int i) {
    return CPR >= 8 ? 4 * (lane >> 3) + i : ((lane >> 2) & 1) + 4 * (lane >> 3) + 2 * i;
}
__host__ __device__ constexpr int chunk_src_off(int i) { return D * (i % COPY_NB) + 2 * D * (i / COPY_NB); }
__host__ __device__ constexpr int lane_src_off(int lane) { return D * chunk_row(lane, 0) + 16 * (lane % CPR); }
__host__ __device__ constexpr int slice_dst_k(int lane, int i) {
    return slice_k_off(chunk_row(lane, i % COPY_NB), lane % CPR) + 2 * D * (i / COPY_NB);
}
__host__ __device__ constexpr int slice_dst_v(int lane, int i) { return SLICE_KV_BYTES + slice_dst_k(lane, i); }
__host__ __device__ constexpr int slice_dst_sc(int lane) { return (lane < 4 ? SLICE_KS_OFF : SLICE_VS_OFF) + (lane & 3) * 16; }
// Every chunk of the slice is moved exactly once, from row*D + 16*col to slice_k_off(row, col).
__host__ __device__ constexpr bool copy_plan_ok() {
    bool seen[SLICE_CHUNKS] = {};
    for (int lane = 0; lane < 32; ++lane)
        for (int i = 0; i < CHUNKS_PER_LANE; ++i) {
            const int row = chunk_row(lane, i), col = lane % CPR;
            if (row < 0 || row >= SLICE_KEYS || seen[row * CPR + col]) return false;
            seen[row * CPR + col] = true;
            if (lane_src_off(lane) + chunk_src_off(i) != row * D + 16 * col) return false;
            if (slice_dst_k(lane, i) != slice_k_off(row, col)) return false;
        }
    return true;
}
static_assert(copy_plan_ok(), "the copy plan must move every chunk once, to its swizzled place");

struct SliceSrc {
    const signed char* k;   // this lane's chunk 0 of K: the slice's first row + lane_src_off(lane)
    const signed char* v;   // the same for V
    int keys_left;          // keys of this slice that are in the cache (>= SLICE_KEYS: all of them)
    const float* sc;        // scale chunk of this lane (lanes 0..7): 4 keys from key j0 + 4*(lane%4)
};
// Whether chunk i of the lane holds a key of the cache, and where it comes from (a chunk past
// the cache points at the slice's first chunk: a valid address that is not read).
__device__ __forceinline__ bool chunk_ok(const SliceSrc& s, int lane, int i) {
    return chunk_row(lane, i) < s.keys_left;
}
__device__ __forceinline__ const uint4* chunk_src(const signed char* p, int lane, int i, bool ok) {
    return reinterpret_cast<const uint4*>(ok ? p + chunk_src_off(i) : p - lane_src_off(lane));
}
// Keys of the lane's scale chunk that are in the cache (0..4; 4 in every whole slice).
__device__ __forceinline__ int scale_keys(const SliceSrc& s, int lane) {
    const int left = s.keys_left - 4 * (lane & 3);
    return lane < 8 ? (left < 0 ? 0 : (left > 4 ? 4 : left)) : 0;
}

// Sources of the slice at key j0 (in pool page `page`, see page_of).
__device__ __forceinline__ SliceSrc slice_src(const Args& a, int hkv, int j0, int page, int lane) {
    SliceSrc s;
    s.keys_left = a.ctx + a.n_q - j0;
    const u32 row = s.keys_left > 0 ? kv_row(a, hkv, j0, page) : 0u;
    const u64 off = (u64)row * D + lane_src_off(lane);
    s.k = a.k + off;
    s.v = a.v + off;
    const float* scale = lane < 4 ? a.k_scale : a.v_scale;
    s.sc = scale + (s.keys_left > 0 ? scale_index(a, hkv, j0, row) + 4 * (lane & 3) : 0u);
    return s;
}

// Register staging (v1's gather and v2t): load the slice's pieces into registers ...
struct SliceRegs {
    uint4 k[CHUNKS_PER_LANE];
    uint4 v[CHUNKS_PER_LANE];
    float4 sc;
};
// WHOLE: the caller knows the slice is whole (no test in the loop that runs most slices).
template <bool WHOLE = false>
__device__ __forceinline__ void slice_load_regs(const SliceSrc& s, int lane, SliceRegs& r) {
    if (WHOLE || s.keys_left >= SLICE_KEYS) {           // a whole slice (all but the last)
#pragma unroll
        for (int i = 0; i < CHUNKS_PER_LANE; ++i) {
            r.k[i] = __ldg(chunk_src(s.k, lane, i, true));
            r.v[i] = __ldg(chunk_src(s.v, lane, i, true));
        }
    } else {
        const uint4 zero = make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int i = 0; i < CHUNKS_PER_LANE; ++i) {
            const bool ok = chunk_ok(s, lane, i);
            r.k[i] = ok ? __ldg(chunk_src(s.k, lane, i, ok)) : zero;
            r.v[i] = ok ? __ldg(chunk_src(s.v, lane, i, ok)) : zero;
        }
    }
    const int sc_keys = WHOLE ? (lane < 8 ? 4 : 0) : scale_keys(s, lane);
    if (sc_keys == 4) {
        r.sc = __ldg(reinterpret_cast<const float4*>(s.sc));     // 16-byte aligned (see Args)
    } else {
        float sc[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int e = 0; e < 4; ++e) if (e < sc_keys) sc[e] = __ldg(s.sc + e);
        r.sc = make_float4(sc[0], sc[1], sc[2], sc[3]);
    }
}
// ... and store them into a slice in shared memory.
__device__ __forceinline__ void slice_store_regs(unsigned char* slice, int lane, const SliceRegs& r) {
#pragma unroll
    for (int i = 0; i < CHUNKS_PER_LANE; ++i) {
        *reinterpret_cast<uint4*>(slice + slice_dst_k(lane, i)) = r.k[i];
        *reinterpret_cast<uint4*>(slice + slice_dst_v(lane, i)) = r.v[i];
    }
    if (lane < 8) *reinterpret_cast<float4*>(slice + slice_dst_sc(lane)) = r.sc;
}

// ---------------------------------------------------------------- int8 -> f16, MMA
__device__ __forceinline__ __half2 u32_as_half2(u32 x) {
    __half2 h;
    *reinterpret_cast<u32*>(&h) = x;
    return h;
}
__device__ __forceinline__ u32 half2_as_u32(__half2 h) { return *reinterpret_cast<u32*>(&h); }

// Four int8 in w (bytes b0..b3) -> f16x2 (b0, b1) and (b2, b3), exactly.
// w ^ 0x80808080 turns each signed byte x into x+128; 0x6400 | (x+128) is the f16 1024+x+128.
__device__ __forceinline__ void i8x4_to_f16x2x2(u32 w, u32& lo, u32& hi) {
    const u32 u = w ^ 0x80808080u;
    const __half2 bias = u32_as_half2(0x64806480u);  // 1152, 1152
    lo = half2_as_u32(__hsub2(u32_as_half2(__byte_perm(u, 0x64646464u, 0x4140)), bias));
    hi = half2_as_u32(__hsub2(u32_as_half2(__byte_perm(u, 0x64646464u, 0x4342)), bias));
}
// V in P.V pairs two rows (keys) per f16x2. Two rows' words x and y (dims c..c+3 of each,
// already xor-ed with 0x80808080) are interleaved once into [x0, y0, x1, y1] and [x2, y2, x3, y3];
// each half of such a word then becomes the f16x2 (x_b, y_b) exactly.
__device__ __forceinline__ void interleave_rows(u32 x_biased, u32 y_biased, u32& lo, u32& hi) {
    lo = __byte_perm(x_biased, y_biased, 0x5140);
    hi = __byte_perm(x_biased, y_biased, 0x7362);
}
__device__ __forceinline__ u32 pair_to_f16x2(u32 interleaved, int half) {
    const u32 h = __byte_perm(interleaved, 0x64646464u, half ? 0x4342 : 0x4140);
    return half2_as_u32(__hsub2(u32_as_half2(h), u32_as_half2(0x64806480u)));
}

// c += A(16x16, f16) * B(16x8, f16); a[0..3] and b0/b1 in the m16n8k16 fragment layout.
// On the Turing path the same registers feed two m16n8k8 MMAs (k 0-7, then k 8-15).
__device__ __forceinline__ void mma16816(float c[4], const u32 a[4], u32 b0, u32 b1) {
#if PA_MMA_K8
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3]) : "r"(a[0]), "r"(a[1]), "r"(b0));
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3]) : "r"(a[2]), "r"(a[3]), "r"(b1));
#else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

// exp2 of an fp32 argument on the MUFU unit, flushing results below 2^-126 to zero. exp2f itself
// compiles to the same MUFU.EX2 plus a rescaling detour for such tiny results; they are rounded to
// fp16 (where they are 0 anyway) or added to a sum of at least 1, so the detour changes nothing.
// CUDA C++ has no intrinsic for the flush-to-zero form, hence the PTX.
__device__ __forceinline__ float exp2_ftz(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// ---------------------------------------------------------------- per-warp attention state
// NTL m16 tiles of one warp (v1: NTL = 1; v2/v2t: NTL = TILES). With one tile the Q fragments
// live in registers (qa); with two they live in shared memory at qs: [tile][k16 step][lane] uint4,
// each lane reading back only the fragments it wrote.
template <int NTL>
struct WarpState {
    u32 qa[NTL == 1 ? KSTEPS : 1][4];
    uint4* qs;
    float o[NTL][NT][4];   // output accumulators
    float m[NTL][2];       // running max (log2 domain) of rows g, g+8
    float l[NTL][2];       // this lane's part of the running sums
    int hq[NTL];           // query head of each tile
    int row0[NTL];         // first query row of each tile (within the chunk)
};

template <int NTL>
__device__ __forceinline__ void q_frag(const WarpState<NTL>& st, int tl, int ks, int lane, u32 f[4]) {
    if constexpr (NTL == 1) {
#pragma unroll
        for (int e = 0; e < 4; ++e) f[e] = st.qa[ks][e];
    } else {
        const uint4 x = st.qs[tl * Q_TILE_FRAGS + ks * 32 + lane];
        f[0] = x.x; f[1] = x.y; f[2] = x.z; f[3] = x.w;
    }
}

// Load the tiles' Q fragments (st.hq and st.row0 set by the caller) and clear the state.
// q_smem: NTL * Q_TILE_FRAGS uint4 of this warp (unused when NTL == 1).
template <int NTL>
__device__ __forceinline__ void warp_init(const Args& a, int lane, WarpState<NTL>& st, uint4* q_smem) {
    const int g = lane >> 2, t = lane & 3;
    st.qs = q_smem;
#pragma unroll
    for (int tl = 0; tl < NTL; ++tl) {
        u32 qa[KSTEPS][4];
#pragma unroll
        for (int rr = 0; rr < 2; ++rr) {
            const int row = st.row0[tl] + g + 8 * rr;
            const bool ok = row < a.n_q;
            const __half* qrow = a.q + ((u64)st.hq[tl] * a.n_q + (ok ? row : 0)) * D;
#pragma unroll
            for (int G = 0; G < GROUPS64; ++G) {
                uint4 w0 = make_uint4(0, 0, 0, 0), w1 = w0;
                if (ok) {
                    const uint4* p = reinterpret_cast<const uint4*>(qrow + 64 * G + 16 * t);
                    w0 = __ldg(p);
                    w1 = __ldg(p + 1);
                }
                const u32 w[8] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
#pragma unroll
                for (int s = 0; s < 4; ++s) {
                    qa[4 * G + s][0 + rr] = w[2 * s];       // k 2t, 2t+1
                    qa[4 * G + s][2 + rr] = w[2 * s + 1];   // k 2t+8, 2t+9
                }
            }
        }
#pragma unroll
        for (int ks = 0; ks < KSTEPS; ++ks) {
            if constexpr (NTL == 1) {
#pragma unroll
                for (int e = 0; e < 4; ++e) st.qa[ks][e] = qa[ks][e];
            } else {
                q_smem[tl * Q_TILE_FRAGS + ks * 32 + lane] = make_uint4(qa[ks][0], qa[ks][1], qa[ks][2], qa[ks][3]);
            }
        }
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) st.o[tl][j][e] = 0.f;
        st.m[tl][0] = st.m[tl][1] = PA_NEG_INF;
        st.l[tl][0] = st.l[tl][1] = 0.f;
    }
}

// The K words of one slice that a lane reads for S = Q.K^T (the fragment layout above): one
// uint4 per row pair h and 64-dim group G. The pipelined kernels read them for the next slice as
// soon as it has landed (kpre of warp_step), so their latency is not the first thing a step waits on.
struct KWords {
    u32 w[GROUPS64][2][4];
};
__device__ __forceinline__ void load_k_words(const unsigned char* slice, int lane, KWords& k) {
#pragma unroll
    for (int G = 0; G < GROUPS64; ++G)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const uint4 x = *reinterpret_cast<const uint4*>(slice + k_rd_off(lane, h, G));
            k.w[G][h][0] = x.x; k.w[G][h][1] = x.y; k.w[G][h][2] = x.z; k.w[G][h][3] = x.w;
        }
}

// One softmax step over NS consecutive slices (16*NS keys starting at key j0) that sit in
// shared memory at slices[0 .. NS-1] (each SLICE_BYTES long), for every tile of the warp. Each
// K and V fragment is converted from int8 once and fed to the MMAs of all tiles.
// MASKED: apply the causal mask and the end of the cache (a step that needs no mask gives the
// same bits with it). kpre: the first slice's K words, already read (else read here). The fp32
// arithmetic uses the _rn intrinsics, which the compiler may not fuse into FMAs: a row's result
// then does not depend on how the code around it was compiled (v2 and v2t, one tile or two,
// masked or not).
template <int NS, bool MASKED, int NTL>
__device__ __forceinline__ void warp_step(const Args& a, const unsigned char* slices, int j0, int lane,
                                          WarpState<NTL>& st, const KWords* kpre = nullptr) {
    const int g = lane >> 2, t = lane & 3;
    const int nk = a.ctx + a.n_q;
    float s[NTL][NS][2][4];
#pragma unroll
    for (int tl = 0; tl < NTL; ++tl)
#pragma unroll
        for (int n = 0; n < NS; ++n)
#pragma unroll
            for (int h = 0; h < 2; ++h)
#pragma unroll
                for (int e = 0; e < 4; ++e) s[tl][n][h][e] = 0.f;
    // ---- S = Q . K^T (raw integer-valued K, fp32 accumulation)
#pragma unroll
    for (int n = 0; n < NS; ++n) {
        const unsigned char* sl = slices + n * SLICE_BYTES;
        KWords kl;
        if (kpre == nullptr) load_k_words(sl, lane, kl);
        const KWords& k = kpre != nullptr ? *kpre : kl;
#pragma unroll
        for (int G = 0; G < GROUPS64; ++G) {
            const u32 (&kw)[2][4] = k.w[G];
#pragma unroll
            for (int ss = 0; ss < 4; ++ss) {
                u32 qf[NTL][4];
#pragma unroll
                for (int tl = 0; tl < NTL; ++tl) q_frag(st, tl, 4 * G + ss, lane, qf[tl]);
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    u32 b0, b1;
                    i8x4_to_f16x2x2(kw[h][ss], b0, b1);
#pragma unroll
                    for (int tl = 0; tl < NTL; ++tl) mma16816(s[tl][n][h], qf[tl], b0, b1);
                }
            }
        }
    }
    // ---- scale, mask, running max. v1 (NS = 4) masks every step, as the PR's kernel does;
    // v2/v2t mask only the steps from the last unmasked slice on (MASKED; see for_each_slice).
    constexpr bool LEAN = NS == 1;
    float mx[NTL][2];
#pragma unroll
    for (int tl = 0; tl < NTL; ++tl) {
        mx[tl][0] = mx[tl][1] = PA_NEG_INF;
#pragma unroll
        for (int n = 0; n < NS; ++n) {
            const float4 ks = *reinterpret_cast<const float4*>(slices + n * SLICE_BYTES + SLICE_KS_OFF + 16 * t);
            const float kq[4] = {__fmul_rn(ks.x, a.qk_scale_log2), __fmul_rn(ks.y, a.qk_scale_log2),
                                 __fmul_rn(ks.z, a.qk_scale_log2), __fmul_rn(ks.w, a.qk_scale_log2)};
#pragma unroll
            for (int h = 0; h < 2; ++h)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int rr = e >> 1;
                    float v = __fmul_rn(s[tl][n][h][e], kq[2 * h + (e & 1)]);
                    if (MASKED) {
                        const int key = j0 + 16 * n + 4 * t + 2 * h + (e & 1);
                        const int pos = a.ctx + st.row0[tl] + g + 8 * rr;      // absolute query position
                        v = (key <= pos && key < nk) ? v : PA_NEG_INF;
                    }
                    s[tl][n][h][e] = v;
                    mx[tl][rr] = fmaxf(mx[tl][rr], v);
                }
        }
    }
    // Row maxima across the four lanes of a row: the shuffles of all tiles and rows are
    // independent, so they are issued together (one shuffle's latency, not four in a row).
#pragma unroll
    for (int sh = 1; sh <= 2; sh *= 2)
#pragma unroll
        for (int tl = 0; tl < NTL; ++tl)
#pragma unroll
            for (int rr = 0; rr < 2; ++rr) mx[tl][rr] = fmaxf(mx[tl][rr], __shfl_xor_sync(0xffffffffu, mx[tl][rr], sh));
    float mnew[NTL][2], alpha[NTL][2];
    bool moved = false;
#pragma unroll
    for (int tl = 0; tl < NTL; ++tl)
#pragma unroll
        for (int rr = 0; rr < 2; ++rr) {
            const float mn = fmaxf(st.m[tl][rr], mx[tl][rr]);
            const float msafe = mn == PA_NEG_INF ? 0.f : mn;
            alpha[tl][rr] = exp2_ftz(__fsub_rn(st.m[tl][rr], msafe));
            st.m[tl][rr] = mn;
            mnew[tl][rr] = msafe;
            st.l[tl][rr] = __fmul_rn(st.l[tl][rr], alpha[tl][rr]);
            moved |= alpha[tl][rr] != 1.f;
        }
    // Rescale O only when some row's max moved in this warp (x 1.0 is exact: skipping it, or
    // doing it for a tile whose rows did not move, changes no bit); v1 rescales every step, as the
    // PR's kernel does.
    if (!LEAN || __any_sync(0xffffffffu, moved)) {
#pragma unroll
        for (int tl = 0; tl < NTL; ++tl)
#pragma unroll
            for (int j = 0; j < NT; ++j) {
                st.o[tl][j][0] = __fmul_rn(st.o[tl][j][0], alpha[tl][0]);
                st.o[tl][j][1] = __fmul_rn(st.o[tl][j][1], alpha[tl][0]);
                st.o[tl][j][2] = __fmul_rn(st.o[tl][j][2], alpha[tl][1]);
                st.o[tl][j][3] = __fmul_rn(st.o[tl][j][3], alpha[tl][1]);
            }
    }
    // ---- P (V scales and p_scale folded in, rounded to f16), then O += P . V
#pragma unroll
    for (int n = 0; n < NS; ++n) {
        const unsigned char* sl = slices + n * SLICE_BYTES;
        const float4 vs = *reinterpret_cast<const float4*>(sl + SLICE_VS_OFF + 16 * t);
        const float vss[4] = {__fmul_rn(vs.x, a.p_scale), __fmul_rn(vs.y, a.p_scale),
                              __fmul_rn(vs.z, a.p_scale), __fmul_rn(vs.w, a.p_scale)};
        u32 pa[NTL][4];
#pragma unroll
        for (int tl = 0; tl < NTL; ++tl) {
            float p[2][4];
#pragma unroll
            for (int h = 0; h < 2; ++h)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    p[h][e] = exp2_ftz(__fsub_rn(s[tl][n][h][e], mnew[tl][e >> 1]));
                    st.l[tl][e >> 1] = __fadd_rn(st.l[tl][e >> 1], p[h][e]);
                }
            // rows g and g+8 of keys 4t, 4t+1 (pa 0, 1) and of keys 4t+2, 4t+3 (pa 2, 3)
            pa[tl][0] = half2_as_u32(__floats2half2_rn(__fmul_rn(p[0][0], vss[0]), __fmul_rn(p[0][1], vss[1])));
            pa[tl][1] = half2_as_u32(__floats2half2_rn(__fmul_rn(p[0][2], vss[0]), __fmul_rn(p[0][3], vss[1])));
            pa[tl][2] = half2_as_u32(__floats2half2_rn(__fmul_rn(p[1][0], vss[2]), __fmul_rn(p[1][1], vss[3])));
            pa[tl][3] = half2_as_u32(__floats2half2_rn(__fmul_rn(p[1][2], vss[2]), __fmul_rn(p[1][3], vss[3])));
        }
        // V rows 4t..4t+3, NT contiguous bytes each (dims NT*g ...), biased for the conversion.
        u32 vw[4][NT / 4];
#pragma unroll
        for (int r = 0; r < 4; ++r) {
#if PA_HEAD_DIM == 128
            const uint4 x = *reinterpret_cast<const uint4*>(sl + v_rd_off(lane, r));
            vw[r][0] = x.x ^ 0x80808080u; vw[r][1] = x.y ^ 0x80808080u;
            vw[r][2] = x.z ^ 0x80808080u; vw[r][3] = x.w ^ 0x80808080u;
#else
            const uint2 x = *reinterpret_cast<const uint2*>(sl + v_rd_off(lane, r));
            vw[r][0] = x.x ^ 0x80808080u; vw[r][1] = x.y ^ 0x80808080u;
#endif
        }
#pragma unroll
        for (int w = 0; w < NT / 4; ++w) {
            u32 k01[2], k23[2];                     // keys 4t, 4t+1 and 4t+2, 4t+3 of dims NT*g + 4w ..
            interleave_rows(vw[0][w], vw[1][w], k01[0], k01[1]);
            interleave_rows(vw[2][w], vw[3][w], k23[0], k23[1]);
#pragma unroll
            for (int jj = 0; jj < 4; ++jj) {
                const u32 b0 = pair_to_f16x2(k01[jj >> 1], jj & 1);
                const u32 b1 = pair_to_f16x2(k23[jj >> 1], jj & 1);
#pragma unroll
                for (int tl = 0; tl < NTL; ++tl) mma16816(st.o[tl][4 * w + jj], pa[tl], b0, b1);
            }
        }
    }
}

// N consecutive output values of one row, from element `off` of the output, as fp32 or fp16.
template <int N>
__device__ __forceinline__ void store_out(void* out, u64 off, const float (&vals)[N]) {
#if PA_OUT_F16
    __half* dst = reinterpret_cast<__half*>(out) + off;
    if constexpr (N % 8 == 0) {
#pragma unroll
        for (int i = 0; i < N; i += 8) {
            uint4 w;
            w.x = half2_as_u32(__floats2half2_rn(vals[i + 0], vals[i + 1]));
            w.y = half2_as_u32(__floats2half2_rn(vals[i + 2], vals[i + 3]));
            w.z = half2_as_u32(__floats2half2_rn(vals[i + 4], vals[i + 5]));
            w.w = half2_as_u32(__floats2half2_rn(vals[i + 6], vals[i + 7]));
            *reinterpret_cast<uint4*>(dst + i) = w;
        }
    } else {
#pragma unroll
        for (int i = 0; i < N; i += 2)
            *reinterpret_cast<__half2*>(dst + i) = __floats2half2_rn(vals[i], vals[i + 1]);
    }
#else
    float* dst = reinterpret_cast<float*>(out) + off;
    if constexpr (N % 4 == 0) {
#pragma unroll
        for (int i = 0; i < N; i += 4)
            *reinterpret_cast<float4*>(dst + i) = make_float4(vals[i], vals[i + 1], vals[i + 2], vals[i + 3]);
    } else {
#pragma unroll
        for (int i = 0; i < N; i += 2) *reinterpret_cast<float2*>(dst + i) = make_float2(vals[i], vals[i + 1]);
    }
#endif
}

// With segments: one row's unnormalised O (the lane's 2*NT dims from 2*NT*t) and, from lane t = 0,
// its (m, l) into the workspace of segment blockIdx.z (see Args::part). The workspace's row index
// is 32-bit (n_seg*Hq*Nq rows of D+2 floats: 2^32 of them would be 2 TB); 32-bit arithmetic here
// keeps v2's register count down.
template <int N>
__device__ __forceinline__ void store_segment(const Args& a, int t, int hq, int row, float m, float l,
                                              const float (&vals)[N]) {
    const u32 prow = (blockIdx.z * (u32)a.heads_q + (u32)hq) * (u32)a.n_q + (u32)row;
    float* dst = a.part + (u64)prow * D + N * t;
#pragma unroll
    for (int i = 0; i < N; i += 4)
        *reinterpret_cast<float4*>(dst + i) = make_float4(vals[i], vals[i + 1], vals[i + 2], vals[i + 3]);
    if (t == 0) reinterpret_cast<float2*>(a.part + (u64)(gridDim.z * (u32)a.heads_q * (u32)a.n_q) * D)[prow] = make_float2(m, l);
}

// Row sums across the four lanes of a row, then (every tile of the warp) normalisation and store;
// with segments, the segment's unnormalised state goes to the workspace instead (pa_combine
// normalises).
template <int NTL>
__device__ __forceinline__ void warp_finish(const Args& a, int lane, WarpState<NTL>& st) {
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int tl = 0; tl < NTL; ++tl)
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
        float l = st.l[tl][rr];
        l = __fadd_rn(l, __shfl_xor_sync(0xffffffffu, l, 1));
        l = __fadd_rn(l, __shfl_xor_sync(0xffffffffu, l, 2));
        const int row = st.row0[tl] + g + 8 * rr;
        if (row >= a.n_q) continue;
        float vals[2 * NT];
#pragma unroll
        for (int j = 0; j < NT; ++j) {
            vals[j] = st.o[tl][j][2 * rr + 0];        // dim NT*2t + j
            vals[NT + j] = st.o[tl][j][2 * rr + 1];   // dim NT*(2t+1) + j
        }
        if (a.seg_keys) {
            store_segment(a, t, st.hq[tl], row, st.m[tl][rr], l, vals);
            continue;
        }
        const float inv = 1.f / l;
#pragma unroll
        for (int i = 0; i < 2 * NT; ++i) vals[i] = __fmul_rn(__fmul_rn(vals[i], inv), a.inv_p_scale);
        store_out(a.out, ((u64)st.hq[tl] * a.n_q + row) * D + 2 * NT * t, vals);
    }
}

// Number of leading 16-key slices that every row from row0 on sees whole (no mask needed).
__device__ __forceinline__ int unmasked_slices(const Args& a, int row0) {
    return (a.ctx + row0 + 1) / SLICE_KEYS;
}

// Number of keys rows row0 .. row0+rows-1 of the chunk can see (causal).
__device__ __forceinline__ int keys_needed(const Args& a, int row0, int rows) {
    const int last = min(row0 + rows, a.n_q) - 1;
    return a.ctx + last + 1;
}

// ---------------------------------------------------------------- v2/v2t: what both pipelines share
// Shared memory of a pipelined CTA: each warp's two stages and its Q fragments (two tiles).
struct PipelinedSmem {
    __align__(16) unsigned char stages[V2_WARPS][2][SLICE_BYTES];
    uint4 q_frags[V2_WARPS][TILES == 1 ? 1 : TILES * Q_TILE_FRAGS];
};
// A warp's KV head and slices: it computes slices [begin, end), of which those below n_open need
// no mask. Without split keys a warp takes all of its task's slices; with them, the CTA's two
// warps share one task, warp 0 taking slices [0, split) and warp 1 [split, n): split_keys is at
// most ctx, so warp 0's slices are never masked. With segments the warp takes the slices of its
// CTA's segment, [z*S/16, min((z+1)*S/16, n)) for z = blockIdx.z.
struct WarpKeys {
    int hkv, begin, n_open, end;
};
// The prologue: the warp's tiles, Q fragments and keys; false if the warp has no tiles, or no key
// in its segment (its rows then see none of the segment's keys: pa_combine skips the segment).
__device__ __forceinline__ bool pipelined_warp_begin(const Args& a, int warp, int lane, PipelinedSmem& sm,
                                                     WarpState<TILES>& st, WarpKeys& keys) {
    if (!warp_tiles(a, warp, st.hq, st.row0)) return false;
    const int n_slices = (keys_needed(a, st.row0[TILES - 1], ROWS_PER_TILE) + SLICE_KEYS - 1) / SLICE_KEYS;
    const int split = a.split_keys / SLICE_KEYS;
    const int seg = a.seg_keys / SLICE_KEYS;            // 0 without segments (and then blockIdx.z == 0)
    keys.begin = split && warp == 1 ? split : blockIdx.z * seg;
    keys.end = split && warp == 0 ? split : (seg ? min(n_slices, keys.begin + seg) : n_slices);
    if (keys.begin >= keys.end) return false;
    keys.hkv = st.hq[0] / (a.heads_q / a.heads_kv);
    warp_init(a, lane, st, sm.q_frags[warp]);
    keys.n_open = min(unmasked_slices(a, st.row0[0]), keys.end);
    return true;
}
// The warp's slices, in the two loops both pipelines run: all but the last unmasked slice, whose
// next slice is known to be whole (no end-of-cache test), then the rest with the mask (a slice
// that needs none gives the same bits with it). step(i, masked, next_whole) runs slice i; the
// flags are Flag<> types, so each loop gets its own compiled step.
template <bool B>
struct Flag {
    static constexpr bool value = B;
};
template <class Step>
__device__ __forceinline__ void for_each_slice(const WarpKeys& keys, Step step) {
    int i = keys.begin;
    for (; i + 1 < keys.n_open; ++i) step(i, Flag<false>(), Flag<true>());
    for (; i < keys.end; ++i) step(i, Flag<true>(), Flag<false>());
}
// With split keys: merge warp 1's softmax state into warp 0's, through shared memory (the stages
// and Q fragments are no longer needed once both warps are past their loops). Per row:
//   m = max(m0, m1);  a_i = exp2(m_i - m);  l = l0*a0 + l1*a1;  O = O0*a0 + O1*a1  (fp32, _rn)
// (a_i = 0 for a half in which the row saw no key: m_i = -inf.) Returns false for warp 1, which
// has nothing left to do.
__device__ __forceinline__ bool merge_split(int warp, int lane, PipelinedSmem& sm, WarpState<TILES>& st) {
    float4* buf = reinterpret_cast<float4*>(&sm);   // [tile][n8 tile][lane] O, then [tile][lane] m, l
    static_assert(sizeof(PipelinedSmem) >= (TILES * NT + TILES) * 32 * sizeof(float4), "merge buffer");
    __syncthreads();                                 // both warps are past their loops
    if (warp == 1) {
#pragma unroll
        for (int tl = 0; tl < TILES; ++tl) {
#pragma unroll
            for (int j = 0; j < NT; ++j)
                buf[(tl * NT + j) * 32 + lane] = make_float4(st.o[tl][j][0], st.o[tl][j][1], st.o[tl][j][2], st.o[tl][j][3]);
            buf[(TILES * NT + tl) * 32 + lane] = make_float4(st.m[tl][0], st.m[tl][1], st.l[tl][0], st.l[tl][1]);
        }
    }
    __syncthreads();                                 // warp 1's state is in shared memory
    if (warp == 1) return false;
#pragma unroll
    for (int tl = 0; tl < TILES; ++tl) {
        const float4 ml = buf[(TILES * NT + tl) * 32 + lane];
        const float m1[2] = {ml.x, ml.y}, l1[2] = {ml.z, ml.w};
        float a0[2], a1[2];
#pragma unroll
        for (int rr = 0; rr < 2; ++rr) {
            const float mn = fmaxf(st.m[tl][rr], m1[rr]);
            const float msafe = mn == PA_NEG_INF ? 0.f : mn;
            a0[rr] = exp2_ftz(__fsub_rn(st.m[tl][rr], msafe));
            a1[rr] = exp2_ftz(__fsub_rn(m1[rr], msafe));
            st.m[tl][rr] = mn;
            st.l[tl][rr] = __fadd_rn(__fmul_rn(st.l[tl][rr], a0[rr]), __fmul_rn(l1[rr], a1[rr]));
        }
#pragma unroll
        for (int j = 0; j < NT; ++j) {
            const float4 o1 = buf[(tl * NT + j) * 32 + lane];
            const float o1e[4] = {o1.x, o1.y, o1.z, o1.w};
#pragma unroll
            for (int e = 0; e < 4; ++e)
                st.o[tl][j][e] = __fadd_rn(__fmul_rn(st.o[tl][j][e], a0[e >> 1]), __fmul_rn(o1e[e], a1[e >> 1]));
            if (j % 4 == 3) __syncwarp();   // keeps the compiler from hoisting every load (register pressure)
        }
    }
    return true;
}
// The epilogue: merge split keys, normalise and store. The tiles are derived again rather than
// kept in registers through the loop, which keeps the register count under 255 without spills.
__device__ __forceinline__ void pipelined_warp_end(const Args& a, int warp, int lane, PipelinedSmem& sm,
                                                   WarpState<TILES>& st) {
    if (a.split_keys && !merge_split(warp, lane, sm, st)) return;
    warp_tiles(a, warp, st.hq, st.row0);
    warp_finish(a, lane, st);
}

}  // namespace pa

// Kernel arguments as CuPy passes them (scalars and pointers, in this order).
#define PA_KERNEL_PARAMS                                                                      \
    const __half *q, const signed char *k, const signed char *v, const float *k_scale,       \
        const float *v_scale, const int *page_table, void *out, int n_q, int ctx, int heads_q, \
        int heads_kv, int page_shift, float qk_scale_log2, float p_scale, float inv_p_scale, \
        int scale_stride, int pair_heads, int split_keys, float *part, int seg_keys, const int *sched
#define PA_MAKE_ARGS(a)                                                                       \
    pa::Args a = {q, k, v, k_scale, v_scale, page_table, out, n_q, ctx, heads_q, heads_kv, \
                  page_shift, qk_scale_log2, p_scale, inv_p_scale, scale_stride, pair_heads, \
                  split_keys, part, seg_keys, sched}

// ---------------------------------------------------------------- the segment combine
// pa_combine merges the key segments of every row (launched after the main kernel when it ran with
// seg_keys != 0). It lives here, not in a module of its own, so that every variant's module
// carries it compiled with the same PA_HEAD_DIM and PA_OUT_F16 as the kernel whose workspace it
// reads, and the backend needs no further build. A warp merges one row of one query head; lane L
// owns dims [CW*L, CW*L + CW). Per row, over the segments z the row sees (z*S <= ctx + row: the
// CTAs of later segments skipped the row, so their workspace is never read), in order:
//   m = max_z m_z;  msafe = (m == -inf ? 0 : m);  a_z = exp2(m_z - msafe)  (0 for m_z = -inf)
//   l = l + l_z*a_z;  O = O + O_z*a_z  (from l = 0, O = 0; fp32, _rn)
//   out = O * (1/l) * inv_p_scale  -> fp32 or fp16, as warp_finish stores it.
// With one segment this is warp_finish's arithmetic exactly (a_0 = 1, 0 + x = x). Deterministic:
// a fixed order, no atomics.
namespace pa {
constexpr int COMBINE_WARPS = 4;   // rows per CTA
constexpr int CW = D / 32;         // dims per lane
}  // namespace pa

extern "C" __global__ void __launch_bounds__(32 * pa::COMBINE_WARPS)
    pa_combine(const float* part, void* out, int n_q, int ctx, int heads_q, int n_seg, int seg_keys,
               float inv_p_scale) {
    using namespace pa;
    const int lane = threadIdx.x & 31;
    const u64 rows = (u64)heads_q * n_q;
    const u64 r = (u64)blockIdx.x * COMBINE_WARPS + (threadIdx.x >> 5);   // row index in [Hq][Nq]
    if (r >= rows) return;
    const int row = (int)(r % (u64)n_q);
    const int segs = min(n_seg, (ctx + row) / seg_keys + 1);
    const float2* ml = reinterpret_cast<const float2*>(part + (u64)n_seg * rows * D);
    float m = PA_NEG_INF;
    for (int z = 0; z < segs; ++z) m = fmaxf(m, ml[z * rows + r].x);
    const float msafe = m == PA_NEG_INF ? 0.f : m;
    float l = 0.f, o[CW];
#pragma unroll
    for (int e = 0; e < CW; ++e) o[e] = 0.f;
    for (int z = 0; z < segs; ++z) {
        const float2 mlz = ml[z * rows + r];
        const float az = exp2_ftz(__fsub_rn(mlz.x, msafe));   // exp2(-inf) = 0
        l = __fadd_rn(l, __fmul_rn(mlz.y, az));
        const float* oz = part + (z * rows + r) * D + CW * lane;
        float x[CW];
#if PA_HEAD_DIM == 128
        const float4 v = *reinterpret_cast<const float4*>(oz);
        x[0] = v.x; x[1] = v.y; x[2] = v.z; x[3] = v.w;
#else
        const float2 v = *reinterpret_cast<const float2*>(oz);
        x[0] = v.x; x[1] = v.y;
#endif
#pragma unroll
        for (int e = 0; e < CW; ++e) o[e] = __fadd_rn(o[e], __fmul_rn(x[e], az));
    }
    const float inv = 1.f / l;
#pragma unroll
    for (int e = 0; e < CW; ++e) o[e] = __fmul_rn(__fmul_rn(o[e], inv), inv_p_scale);
    store_out(out, r * D + CW * lane, o);
}
