// pa_common.cuh — what the three int8-KV prompt-attention kernels (v1, v2, v2t) share.
//
// The problem (SPEC section 1): one chunk of Nq fp16 queries per query head, at absolute
// positions ctx .. ctx+Nq-1, attends causally to Nk = ctx+Nq int8 keys/values of its KV head
// (GQA: query head h reads KV head h / (Hq/Hkv)). K and V carry one fp32 scale per token and
// head. K/V live either in a paged pool [pages][Hkv][page][D] gathered through a page table,
// or contiguously as [Hkv][Nk][D]. The output is fp32 (or fp16) [Hq][Nq][D].
//
// Shared here:
//   * compile-time parameters (PA_HEAD_DIM, PA_PAGED, PA_OUT_F16, PA_FORCE_TURING);
//   * the 16-key "slice": the unit every kernel stages in shared memory (int8 K rows, int8 V
//     rows, K scales, V scales), its bank-conflict-free swizzle and its global addresses;
//   * int8 -> f16 conversion (exact: 0x6400|byte is 1024+byte in f16, minus 1152);
//   * the MMA wrapper: one m16n8k16, or on Turing (and with PA_FORCE_TURING) a pair of m16n8k8;
//   * the per-warp math: Q fragments, S = Q.K^T, online softmax in fp32 (exp2, scales folded),
//     P.V with the V scales folded into P, and the final normalisation and store.
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

#define PA_NEG_INF __int_as_float(0xff800000)

namespace pa {

typedef unsigned int u32;
typedef unsigned long long u64;

constexpr int D = PA_HEAD_DIM;
constexpr int WARPS = 4;                 // every kernel: 4 warps per CTA
constexpr int THREADS = 32 * WARPS;
constexpr int ROWS_PER_WARP = 16;        // one m16 tile of queries per warp
constexpr int ROWS_PER_CTA = ROWS_PER_WARP * WARPS;
constexpr int SLICE_KEYS = 16;           // keys per staged slice
constexpr int CPR = D / 16;              // 16-byte chunks per K/V row
constexpr int NT = D / 8;                // n8 tiles of the output (P.V)
constexpr int KSTEPS = D / 16;           // k16 steps of Q.K^T
constexpr int GROUPS64 = D / 64;         // 64-dim groups (one uint4 of K per lane each)
constexpr int SLICE_KV_BYTES = SLICE_KEYS * D;                       // one of K or V
constexpr int SLICE_BYTES = 2 * SLICE_KV_BYTES + 2 * SLICE_KEYS * 4;  // K, V, K scales, V scales
constexpr int SLICE_CHUNKS = SLICE_KV_BYTES / 16;                    // 16-byte chunks of K (or V)
constexpr int CHUNKS_PER_LANE = SLICE_CHUNKS / 32;                   // D/32: 4 at D=128

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
    int heads_per_cta;            // v2/v2t: query heads of one KV group sharing a CTA (1, 2 or 4)
};

// v2/v2t: which query head and which 16 rows warp `warp` of this CTA owns. A CTA holds
// heads_per_cta query heads of one KV group (so its warps stream the same K/V slices at the
// same time and the later ones hit in L1) times 4/heads_per_cta consecutive 16-row blocks.
// CTAs run longest-first (the last rows see the most keys).
__device__ __forceinline__ void warp_rows(const Args& a, int warp, int& hq, int& row0) {
    const int hpc = a.heads_per_cta;
    hq = blockIdx.y * hpc + warp % hpc;
    row0 = ((gridDim.x - 1 - blockIdx.x) * (WARPS / hpc) + warp / hpc) * ROWS_PER_WARP;
}

// ---------------------------------------------------------------- shared-memory slice layout
// A slice is [K rows 16 x D][V rows 16 x D][K scales 16][V scales 16]. 16-byte chunk `col` of
// row `row` is stored at a swizzled chunk position so that both read patterns (K: two rows x
// four chunks per quarter warp; V: four rows x two chunks) hit 8 distinct bank groups.
__device__ __forceinline__ int swz_chunk(int row, int col) {
    const int lin = row * CPR + col;
    const int f = (((row >> 2) & 3) << 1) ^ (CPR >= 8 ? ((row & 1) << 2) : 0);
    return (lin & ~7) | ((lin & 7) ^ f);
}
__device__ __forceinline__ int slice_k_off(int row, int col) { return swz_chunk(row, col) * 16; }
__device__ __forceinline__ int slice_v_off(int row, int col) { return SLICE_KV_BYTES + swz_chunk(row, col) * 16; }
constexpr int SLICE_KS_OFF = 2 * SLICE_KV_BYTES;
constexpr int SLICE_VS_OFF = SLICE_KS_OFF + SLICE_KEYS * 4;

// ---------------------------------------------------------------- global addresses
// Element offset (in rows of D bytes, also the scale index) of key j0 (a multiple of 16) of
// KV head hkv. A 16-key group never straddles a page (pages are powers of two >= 16).
__device__ __forceinline__ u64 kv_row_base(const Args& a, int hkv, int j0) {
#if PA_PAGED
    const int page = a.page_table[j0 >> a.page_shift];
    const int in_page = j0 & ((1 << a.page_shift) - 1);
    return ((u64)page * a.heads_kv + hkv) * (u64)(1 << a.page_shift) + in_page;
#else
    const int nk = a.ctx + a.n_q;
    return (u64)hkv * nk + j0;
#endif
}
// Index of key j0's scale: the same place as its row in the paged pool; in the contiguous
// layout the scale rows are padded to scale_stride keys.
__device__ __forceinline__ u64 scale_base(const Args& a, int hkv, int j0, u64 row_base) {
#if PA_PAGED
    return row_base;
#else
    return (u64)hkv * a.scale_stride + j0;
#endif
}

// The copy plan of one slice, shared by every staging method so that all of them put the same
// bytes in the same places: lane `lane` moves K/V chunks lane + 32*i (i < CHUNKS_PER_LANE);
// lanes 0-3 move the K-scale chunks, lanes 4-7 the V-scale chunks (4 keys each).
struct SliceSrc {
    const uint4* k[CHUNKS_PER_LANE];
    const uint4* v[CHUNKS_PER_LANE];
    bool kv_ok[CHUNKS_PER_LANE];       // the chunk's key is < Nk
    const float* sc;                    // scale source of this lane (lanes 0..7), 4 keys
    int sc_valid;                       // keys of that chunk that are < Nk (0..4)
};

__device__ __forceinline__ SliceSrc slice_src(const Args& a, int hkv, int j0, int lane) {
    SliceSrc s;
    const int nk = a.ctx + a.n_q;
    const bool any = j0 < nk;
    const u64 base = any ? kv_row_base(a, hkv, j0) : 0;
#pragma unroll
    for (int i = 0; i < CHUNKS_PER_LANE; ++i) {
        const int c = lane + 32 * i;
        const int row = c / CPR, col = c % CPR;
        s.kv_ok[i] = j0 + row < nk;
        const u64 off = (base + row) * D + col * 16;
        s.k[i] = reinterpret_cast<const uint4*>(a.k + (s.kv_ok[i] ? off : 0));
        s.v[i] = reinterpret_cast<const uint4*>(a.v + (s.kv_ok[i] ? off : 0));
    }
    const int q4 = lane & 3;
    const int keys_left = nk - (j0 + 4 * q4);
    s.sc_valid = lane < 8 ? (keys_left < 0 ? 0 : (keys_left > 4 ? 4 : keys_left)) : 0;
    const float* scale = lane < 4 ? a.k_scale : a.v_scale;
    s.sc = scale + (s.sc_valid > 0 ? scale_base(a, hkv, j0, base) + 4 * q4 : 0);
    return s;
}
// Where lane `lane`'s chunks go inside a slice.
__device__ __forceinline__ int slice_dst_k(int lane, int i) { const int c = lane + 32 * i; return slice_k_off(c / CPR, c % CPR); }
__device__ __forceinline__ int slice_dst_v(int lane, int i) { const int c = lane + 32 * i; return slice_v_off(c / CPR, c % CPR); }
__device__ __forceinline__ int slice_dst_sc(int lane) { return (lane < 4 ? SLICE_KS_OFF : SLICE_VS_OFF) + (lane & 3) * 16; }

// Register staging (v1's gather and v2t): load the slice's pieces into registers ...
struct SliceRegs {
    uint4 k[CHUNKS_PER_LANE];
    uint4 v[CHUNKS_PER_LANE];
    float4 sc;
};
__device__ __forceinline__ void slice_load_regs(const SliceSrc& s, int lane, SliceRegs& r) {
    const uint4 zero = make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int i = 0; i < CHUNKS_PER_LANE; ++i) {
        r.k[i] = s.kv_ok[i] ? __ldg(s.k[i]) : zero;
        r.v[i] = s.kv_ok[i] ? __ldg(s.v[i]) : zero;
    }
    float sc[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int e = 0; e < 4; ++e) if (e < s.sc_valid) sc[e] = __ldg(s.sc + e);
    r.sc = make_float4(sc[0], sc[1], sc[2], sc[3]);
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
// Byte `b` of x and of y -> f16x2 (x_b, y_b), exactly (x, y already xor-ed with 0x80808080).
__device__ __forceinline__ u32 i8_pair_to_f16x2(u32 x_biased, u32 y_biased, int b) {
    const u32 sel = (u32)b | ((u32)(b + 4) << 4);                   // nibble 0: x_b, nibble 1: y_b
    const u32 pair = __byte_perm(x_biased, y_biased, sel);        // [x_b, y_b, ., .]
    const u32 h = __byte_perm(pair, 0x64646464u, 0x4140);          // [x_b, 0x64, y_b, 0x64]
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

// ---------------------------------------------------------------- per-warp attention state
struct WarpState {
    u32 qa[KSTEPS][4];     // Q fragments (rows g, g+8), resident for the whole KV loop
    float o[NT][4];        // output accumulator
    float m[2];            // running max (log2 domain) of rows g, g+8
    float l[2];            // this lane's part of the running sums
    int row0;              // first query row of the warp (within the chunk)
};

__device__ __forceinline__ void warp_init(const Args& a, int hq, int row0, int lane, WarpState& st) {
    const int g = lane >> 2, t = lane & 3;
    st.row0 = row0;
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
        const int row = row0 + g + 8 * rr;
        const bool ok = row < a.n_q;
        const __half* qrow = a.q + ((u64)hq * a.n_q + (ok ? row : 0)) * D;
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
                st.qa[4 * G + s][0 + rr] = w[2 * s];       // k 2t, 2t+1
                st.qa[4 * G + s][2 + rr] = w[2 * s + 1];   // k 2t+8, 2t+9
            }
        }
    }
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) st.o[j][e] = 0.f;
    st.m[0] = st.m[1] = PA_NEG_INF;
    st.l[0] = st.l[1] = 0.f;
}

// One softmax step over NS consecutive slices (16*NS keys starting at key j0) that sit in
// shared memory at slices[0 .. NS-1] (each SLICE_BYTES long).
template <int NS>
__device__ __forceinline__ void warp_step(const Args& a, const unsigned char* slices, int j0, int lane,
                                          WarpState& st) {
    const int g = lane >> 2, t = lane & 3;
    const int nk = a.ctx + a.n_q;
    float s[NS][2][4];
    // ---- S = Q . K^T (raw integer-valued K, fp32 accumulation)
#pragma unroll
    for (int n = 0; n < NS; ++n) {
        const unsigned char* sl = slices + n * SLICE_BYTES;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
#pragma unroll
            for (int e = 0; e < 4; ++e) s[n][h][e] = 0.f;
            const int krow = 4 * (g >> 1) + 2 * h + (g & 1);
#pragma unroll
            for (int G = 0; G < GROUPS64; ++G) {
                const uint4 kw = *reinterpret_cast<const uint4*>(sl + slice_k_off(krow, 4 * G + t));
                const u32 w[4] = {kw.x, kw.y, kw.z, kw.w};
#pragma unroll
                for (int ss = 0; ss < 4; ++ss) {
                    u32 b0, b1;
                    i8x4_to_f16x2x2(w[ss], b0, b1);
                    mma16816(s[n][h], st.qa[4 * G + ss], b0, b1);
                }
            }
        }
    }
    // ---- scale, mask, running max. One-slice steps (v2, v2t) mask only the step that crosses
    // the diagonal or the end; v1's 64-key steps keep the PR's per-element mask (measured: the
    // lean form made v1 8% slower on the H200, and v1 is the baseline).
    constexpr bool LEAN = NS == 1;
    const bool masked = !LEAN || j0 + 16 * NS - 1 > a.ctx + st.row0;     // warp-uniform
    float mx[2] = {PA_NEG_INF, PA_NEG_INF};
#pragma unroll
    for (int n = 0; n < NS; ++n) {
        const float4 ks = *reinterpret_cast<const float4*>(slices + n * SLICE_BYTES + SLICE_KS_OFF + 16 * t);
        const float kss[4] = {ks.x, ks.y, ks.z, ks.w};
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int rr = e >> 1;
                float v = s[n][h][e] * (kss[2 * h + (e & 1)] * a.qk_scale_log2);
                if (masked) {
                    const int key = j0 + 16 * n + 4 * t + 2 * h + (e & 1);
                    const int pos = a.ctx + st.row0 + g + 8 * rr;      // absolute query position
                    v = (key <= pos && key < nk) ? v : PA_NEG_INF;
                }
                s[n][h][e] = v;
                mx[rr] = fmaxf(mx[rr], v);
            }
    }
    float alpha[2], mnew[2];
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
        mx[rr] = fmaxf(mx[rr], __shfl_xor_sync(0xffffffffu, mx[rr], 1));
        mx[rr] = fmaxf(mx[rr], __shfl_xor_sync(0xffffffffu, mx[rr], 2));
        mnew[rr] = fmaxf(st.m[rr], mx[rr]);
        const float msafe = mnew[rr] == PA_NEG_INF ? 0.f : mnew[rr];
        alpha[rr] = exp2f(st.m[rr] - msafe);
        st.m[rr] = mnew[rr];
        mnew[rr] = msafe;
        st.l[rr] *= alpha[rr];
    }
    // Rescale O only when some row's max moved (x 1.0 is exact: skipping it changes no bit);
    // v1 rescales every step, as the PR's kernel does.
    if (!LEAN || __any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f)) {
#pragma unroll
        for (int j = 0; j < NT; ++j) {
            st.o[j][0] *= alpha[0]; st.o[j][1] *= alpha[0];
            st.o[j][2] *= alpha[1]; st.o[j][3] *= alpha[1];
        }
    }
    // ---- P (V scales and p_scale folded in, rounded to f16), then O += P . V
#pragma unroll
    for (int n = 0; n < NS; ++n) {
        const unsigned char* sl = slices + n * SLICE_BYTES;
        const float4 vs = *reinterpret_cast<const float4*>(sl + SLICE_VS_OFF + 16 * t);
        const float vss[4] = {vs.x * a.p_scale, vs.y * a.p_scale, vs.z * a.p_scale, vs.w * a.p_scale};
        float p[2][4];
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                p[h][e] = exp2f(s[n][h][e] - mnew[e >> 1]);
                st.l[e >> 1] += p[h][e];
            }
        u32 pa[4];
        pa[0] = half2_as_u32(__floats2half2_rn(p[0][0] * vss[0], p[0][1] * vss[1]));  // row g,   keys 4t, 4t+1
        pa[1] = half2_as_u32(__floats2half2_rn(p[0][2] * vss[0], p[0][3] * vss[1]));  // row g+8
        pa[2] = half2_as_u32(__floats2half2_rn(p[1][0] * vss[2], p[1][1] * vss[3]));  // row g,   keys 4t+2, 4t+3
        pa[3] = half2_as_u32(__floats2half2_rn(p[1][2] * vss[2], p[1][3] * vss[3]));  // row g+8
        // V rows 4t..4t+3, NT contiguous bytes each (dims NT*g ...), biased for the conversion.
        u32 vw[4][NT / 4];
#pragma unroll
        for (int r = 0; r < 4; ++r) {
#if PA_HEAD_DIM == 128
            const uint4 x = *reinterpret_cast<const uint4*>(sl + slice_v_off(4 * t + r, g));
            vw[r][0] = x.x ^ 0x80808080u; vw[r][1] = x.y ^ 0x80808080u;
            vw[r][2] = x.z ^ 0x80808080u; vw[r][3] = x.w ^ 0x80808080u;
#else
            const uint2 x = *reinterpret_cast<const uint2*>(sl + slice_v_off(4 * t + r, g >> 1) + 8 * (g & 1));
            vw[r][0] = x.x ^ 0x80808080u; vw[r][1] = x.y ^ 0x80808080u;
#endif
        }
#pragma unroll
        for (int j = 0; j < NT; ++j) {
            const u32 b0 = i8_pair_to_f16x2(vw[0][j >> 2], vw[1][j >> 2], j & 3);
            const u32 b1 = i8_pair_to_f16x2(vw[2][j >> 2], vw[3][j >> 2], j & 3);
            mma16816(st.o[j], pa, b0, b1);
        }
    }
}

// Row sums across the four lanes of a row, normalisation, store.
__device__ __forceinline__ void warp_finish(const Args& a, int hq, int lane, WarpState& st) {
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
        float l = st.l[rr];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        const float inv = 1.f / l;
        const int row = st.row0 + g + 8 * rr;
        if (row >= a.n_q) continue;
        float vals[2 * NT];
#pragma unroll
        for (int j = 0; j < NT; ++j) {
            vals[j] = st.o[j][2 * rr + 0] * inv * a.inv_p_scale;        // dim NT*2t + j
            vals[NT + j] = st.o[j][2 * rr + 1] * inv * a.inv_p_scale;   // dim NT*(2t+1) + j
        }
        const u64 off = ((u64)hq * a.n_q + row) * D + 2 * NT * t;
#if PA_OUT_F16
        __half* dst = reinterpret_cast<__half*>(a.out) + off;
#pragma unroll
        for (int i = 0; i < 2 * NT; i += 8) {
            uint4 w;
            w.x = half2_as_u32(__floats2half2_rn(vals[i + 0], vals[i + 1]));
            w.y = half2_as_u32(__floats2half2_rn(vals[i + 2], vals[i + 3]));
            w.z = half2_as_u32(__floats2half2_rn(vals[i + 4], vals[i + 5]));
            w.w = half2_as_u32(__floats2half2_rn(vals[i + 6], vals[i + 7]));
            *reinterpret_cast<uint4*>(dst + i) = w;
        }
#else
        float* dst = reinterpret_cast<float*>(a.out) + off;
#pragma unroll
        for (int i = 0; i < 2 * NT; i += 4)
            *reinterpret_cast<float4*>(dst + i) = make_float4(vals[i], vals[i + 1], vals[i + 2], vals[i + 3]);
#endif
    }
}

// Number of keys rows row0 .. row0+rows-1 of the chunk can see (causal), and of 16-key slices.
__device__ __forceinline__ int keys_needed(const Args& a, int row0, int rows) {
    const int last = min(row0 + rows, a.n_q) - 1;
    return a.ctx + last + 1;
}

}  // namespace pa

// Kernel arguments as CuPy passes them (scalars and pointers, in this order).
#define PA_KERNEL_PARAMS                                                                      \
    const __half *q, const signed char *k, const signed char *v, const float *k_scale,       \
        const float *v_scale, const int *page_table, void *out, int n_q, int ctx, int heads_q, \
        int heads_kv, int page_shift, float qk_scale_log2, float p_scale, float inv_p_scale, \
        int scale_stride, int heads_per_cta
#define PA_MAKE_ARGS(a)                                                                       \
    pa::Args a = {q, k, v, k_scale, v_scale, page_table, out, n_q, ctx, heads_q, heads_kv, \
                  page_shift, qk_scale_log2, p_scale, inv_p_scale, scale_stride, heads_per_cta}
