// v3's comparison builds: the same kernel with another producer, chosen at build time. Neither is
// production code; pa_bench's peers v3-f16 and v3-dq build them from kernels/v3.cu, which includes
// this file (v3.cu calls control_producer where PA_V3_CONTROL is set: v3_hooks.cuh).
// The fp16 control (-DPA_KV_F16=1, the peer v3-f16: pa_bench's v3_f16 module): the same kernel on
//   fp16 K/V (int8 * scale rounded to fp16, the values the torch peers read), in the pool layout
//   v3 reads (paged or contiguous, PA_PAGED). Only the producer and what it needs change: no int8
//   staging ring and no `landed` barriers; every producer thread copies its own 16-byte chunks of
//   each tile's K and V rows from global memory straight into their 128B-swizzled places in the
//   fp16 stage by cp.async (keys past the cache zero-filled), waits for its copies of the tile
//   (cp.async.wait_group, one tile behind its issue so that two tiles' copies are in flight),
//   fences them to the async proxy and arrives on the stage's `full` barrier, as the converting
//   producer does after its stores; `empty` is waited for as before. The consumers' per-key scale
//   arrays hold the int8 path's premultiplied scales with every K and V scale 1.0, stored once
//   into every stage. The consumers are the same code with the same behaviour, so v3 - v3-f16 is
// The dq images (-DPA_V3_DQ=1, the peer v3-dq): a first kernel, pa_v3_images, writes every tile's
//   fp16 stage image (tile_image) to global memory, and pa_v3's producer brings each image into its
//   stage with one bulk copy (as shared tiles do), so its kernel alone times v3's consumer loop
//   behind a copy-only producer, with v3's bits.

namespace v3 {
#if PA_V3_DQ
// Tile `tile` of KV head hkv as its stage image at `img`, by NT threads (tid): the fp16 stage
// v3's converting producer stores for the tile, K and V rows converted exactly (i8x16_to_f16) into
// their 128B-swizzled places, kq = k_scale * qk_scale_log2 and vs = v_scale * p_scale (fp32 _rn),
// and zeros for keys past the cache (their S is masked, their p is 0). A thread loads BATCH chunks
// before it converts any: a global-memory latency per batch, not per chunk.
template <int NT>
__device__ __forceinline__ void tile_image(const pa::Args& a, int hkv, int tile, unsigned char* img, int tid) {
    static_assert(BN * CPR % NT == 0 && (2 * BN) % NT == 0, "tile_image: whole chunks and scales per thread");
    constexpr int PER = BN * CPR / NT;           // 16-byte int8 chunks of K (and of V) per thread
    const int nk = a.ctx + a.n_q, j0 = tile * BN;
    constexpr int NS = 2 * BN / NT;              // scales per thread: kq of keys j0 + sc % BN (sc < BN), then vs
    float x[NS];
#pragma unroll
    for (int i = 0; i < NS; ++i) {
        const int sc = tid + NT * i, j = j0 + sc % BN;
        x[i] = 0.f;
        if (j < nk) {
            const u32 row = pa::kv_row(a, hkv, j, pa::page_of(a, j));
            const u32 sci = pa::scale_index(a, hkv, j, row);
            x[i] = sc >= BN ? __fmul_rn(__ldg(a.v_scale + sci), a.p_scale) : __fmul_rn(__ldg(a.k_scale + sci), a.qk_scale_log2);
        }
    }
    constexpr int BATCH = PER < 4 ? PER : 4;     // chunks in registers at a time (the producer has 56)
    // batches in turn (not unrolled: ptxas would hoist every batch's loads above the first's stores)
#pragma unroll 1
    for (int step = 0; step < 2 * PER / BATCH; ++step) {   // K's batches, then V's
        const int kv = step / (PER / BATCH), b = step % (PER / BATCH) * BATCH;
        unsigned char* dst = img + (kv ? F16_V : F16_K);
        const signed char* src = kv ? a.v : a.k;
        uint4 x8[BATCH];
#pragma unroll
        for (int i = 0; i < BATCH; ++i) {
            const int q = tid + NT * (b + i), r = q / CPR, ch = q % CPR, j = j0 + r;
            x8[i] = make_uint4(0, 0, 0, 0);
            if (j < nk) x8[i] = __ldg(reinterpret_cast<const uint4*>(src + (u64)pa::kv_row(a, hkv, j, pa::page_of(a, j)) * D + 16 * ch));
        }
#pragma unroll
        for (int i = 0; i < BATCH; ++i) {
            const int q = tid + NT * (b + i), r = q / CPR, ch = q % CPR;
            uint4 lo, hi;
            i8x16_to_f16(x8[i], lo, hi);
            *reinterpret_cast<uint4*>(dst + sw128(r, ch * 2, KV_BLOCK)) = lo;
            *reinterpret_cast<uint4*>(dst + sw128(r, ch * 2 + 1, KV_BLOCK)) = hi;
        }
    }
#pragma unroll
    for (int i = 0; i < NS; ++i) reinterpret_cast<float*>(img + F16_KQ)[tid + NT * i] = x[i];   // F16_VS = F16_KQ + BN*4
}

// The image producer: K/V come converted, as each tile's stage image (pa_v3_images, launched
// before: a.k points at the images of [Hkv][ceil(nk / BN)] tiles). One thread waits for stage s
// to be free, arms full[s] with the image's bytes and starts its bulk copy; full's phase completes
// when they have landed (its count is 1). No staging, no conversion, no proxy fence: the TMA
// writes through the async proxy that wgmma reads.
__device__ __forceinline__ void control_producer(const pa::Args& a, const Cta& c, unsigned char*, u32 base) {
    if (threadIdx.x != ISSUER) return;
    const int n_tiles = c.t_end - c.t_begin, tiles_all = (a.ctx + a.n_q + BN - 1) / BN;
    const unsigned char* img = reinterpret_cast<const unsigned char*>(a.k) +
                               ((u64)c.hkv * tiles_all + c.t_begin) * IMG_BYTES;
#if PA_V3_STEP_KEYS == 128
    issue_pairs(img, n_tiles, base, [](int, int) {}, [](int) {});   // the images are all made
#else
    const u32 bar_full = base + SM_BAR, bar_empty = base + SM_BAR + 8 * F16_STAGES;
    for (int n = 0; n < n_tiles; ++n) {
        const int s = n % F16_STAGES;
        if (n >= F16_STAGES) mbar_wait(bar_empty + 8 * s, ((n / F16_STAGES) & 1) ^ 1);   // tile n-4 released stage s
        arm_copies(bar_full + 8 * s, IMG_BYTES);
        image_copy(base + SM_F16 + s * F16_STAGE, img + (u64)n * IMG_BYTES, IMG_BYTES, bar_full + 8 * s);
    }
#endif
}
#elif PA_KV_F16
// The fp16 control's producer: copies only. Why cp.async and not a TMA tensor map: a tensor map
// with the 128-byte swizzle would land the same bytes with one instruction per 64-dim block, but
// it is made on the host by the driver API (cuTensorMapEncodeTiled), which the CuPy host does not
// reach, it would be a kernel argument the other variants do not have, and a paged pool needs a
// map per layout with one copy per page run; per-thread 16-byte cp.async writes any swizzled
// address, zero-fills what lies past the cache (src-size 0), gathers any page size, and needs a
// few registers per row. Why wait_group and not cp.async.mbarrier.arrive.noinc: cp.async writes
// shared memory through the generic proxy and wgmma reads it through the async proxy, so the
// writes need a fence.proxy.async between them; the writing thread can only fence writes it has
// seen complete (wait_group), and a fence on the consumers' side would change their code.
//
// Ownership: thread tid owns 16-byte chunk (8 dims) tid % F_CPR of key rows
// tid / F_CPR + F_RSTEP*i, i < F_NR, of K and of V (f16_copies_ok checks it at compile time): a warp copies 2 (D = 128) or 4 (D = 64) whole
// adjacent rows, 512 contiguous bytes where the rows share a page, and each quarter warp writes
// the 8 chunks of one 128-byte swizzle row (8 distinct bank groups). The rows of round i of the
// warpgroup start at key j0 + F_RSTEP*i, a multiple of F_RSTEP <= 16 <= the page size, so all
// F_RSTEP of them lie in one page: its page-table entry is the same for every thread.
// Per tile n (stage s = n % 4): the row addresses (page-table loads: their latency passes in the
// wait; where the tile's 64 keys are contiguous in memory and below the cache's end, one entry
// and one address for all rows), the wait for empty[s] (n >= 4), 2*F_NR copies, commit; then the wait for the copies of
// tile n-1 (wait_group 1: tile n's stay in flight), fence.proxy.async and the arrive on full of
// tile n-1. Each thread arrives once per tile, so full keeps its count of 128. The arrival on
// full of tile n-1 after the wait for empty of tile n cannot deadlock: that stage is released by
// the consumers' step n-3, which needs full of tile n-3 only, and full is arrived up to n-2. Keys past the cache (the last tile's
// tail) are zero-filled: their S is 0 and masked (past every row's causal limit: they are above
// the last position), their V is 0 where P is 0 (a stale or NaN V there would make 0 * NaN).
// The scale arrays (kq = k_scale * qk_scale_log2, vs = v_scale * p_scale with every scale 1.0;
// the host passes p_scale 1) are the same for every key and tile: warp w stores stage w's once,
// before any of its arrivals on full (which release them); the copies never write them.
constexpr int F_CPR = D / 8;                    // 16-byte chunks of an fp16 key row
constexpr int F_RSTEP = 128 / F_CPR;            // key rows the producer warpgroup copies per round (8 or 16)
constexpr int F_NR = BN / F_RSTEP;              // rounds per tile: the rows of K (and of V) per thread
static_assert(F_RSTEP <= 16 && BN % F_RSTEP == 0, "a round's rows must lie in one page (pages >= 16 keys)");
static_assert(F16_STAGES == 4 && 2 * BN * 4 == 32 * 16, "one warp stores one stage's scales, a float4 per lane");
__host__ __device__ constexpr bool f16_copies_ok() {
    bool seen[BN * F_CPR] = {};
    for (int tid = 0; tid < 128; ++tid)
        for (int i = 0; i < F_NR; ++i) {
            const int r = tid / F_CPR + F_RSTEP * i, c = tid % F_CPR;
            if (r >= BN || seen[r * F_CPR + c]) return false;
            seen[r * F_CPR + c] = true;
            // the destination of round i is round 0's plus i * F_RSTEP rows (the swizzle uses row % 8)
            if (sw128(r, c, KV_BLOCK) != sw128(tid / F_CPR, c, KV_BLOCK) + F_RSTEP * 128 * i) return false;
        }
    for (int q = 0; q < 128; q += 8) {           // a quarter warp's 8 chunks: 8 distinct bank groups
        bool bank[8] = {};
        for (int tid = q; tid < q + 8; ++tid) {
            const int b = (sw128(tid / F_CPR, tid % F_CPR, KV_BLOCK) >> 4) & 7;
            if (bank[b]) return false;
            bank[b] = true;
        }
    }
    return true;
}
static_assert(f16_copies_ok(), "the fp16 producer must copy every chunk of a tile once, conflict-free");

// 16 bytes global -> shared, of which `src_bytes` (16 or 0) are read and the rest zero-filled; .cg:
// through L2 only (each tile is read once per CTA).
__device__ __forceinline__ void cp_async_16(u32 dst, const void* src, u32 src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }
// This thread's copies of tile n have landed: fence them to the async proxy (wgmma) and arrive.
__device__ __forceinline__ void f16_tile_done(u32 bar_full, int n) {
    fence_proxy_async();
    mbar_arrive(bar_full + 8 * (n % F16_STAGES));
}

#if PA_V3_STEP_KEYS == 128
// At 128-key steps (kernels/v3_pairs.cuh) the same copies go into the pairs' rings: pair p's K rows
// (tiles 2p and 2p+1 as rows r and 64 + r of one operand whose 64-dim blocks lie 2*KV_BLOCK apart)
// into K slot p % K_PAIRS, its V rows into V slot p % V_PAIRS (tile h at h*NG*KV_BLOCK), K a pair
// ahead of V, as the image issuer brings them. A thread's copies of a pair's K form one cp.async
// group and those of its V another, committed K0, K1, V0, K2, V1, ...: at iteration p, once K of
// pair p is committed, wait_group 1 leaves only that group in flight, so K of pair p-1 and V of
// pair p-2 have landed; the thread fences them and arrives on their full barriers (128 arrivals),
// then waits for V slot p-1 and copies V of pair p-1. No deadlock: iteration p waits for K slot p
// (released by the consumers' softmax of pair p-3, whose step needs full_k of p-3: arrived at
// iteration p-2) and V slot p-1 (P.V of pair p-3, in the step that needs full_k of p-2 and
// full_v of p-3: arrived at iteration p-1). A pair whose second tile lies past the CTA's last gets
// the keys after it (zero-filled past the cache): past kmax, masked in S, so their P is 0. Every K
// slot's kq and vs, for both tiles, hold qk_scale_log2 and p_scale (1), stored once before any
// arrival.
__device__ __forceinline__ void control_producer(const pa::Args& a, const Cta& c, unsigned char* sm, u32 base) {
    const int tid = threadIdx.x, r0 = tid / F_CPR, ch = tid % F_CPR;
    const int nk = a.ctx + a.n_q;
    const int n_tiles = c.t_end - c.t_begin, n_pairs = (n_tiles + 1) >> 1;
    const __half* kg = reinterpret_cast<const __half*>(a.k);   // the host passes fp16 K/V here
    const __half* vg = reinterpret_cast<const __half*>(a.v);
#pragma unroll
    for (int i = 4 * tid; i < K_PAIRS * 4 * BN; i += 4 * 128) {   // slot i / 4BN, tile (i / 2BN) % 2: kq then vs
        const float x = i % (2 * BN) < BN ? a.qk_scale_log2 : a.p_scale;
        *reinterpret_cast<float4*>(sm + SM_K + (i / (4 * BN)) * K_SLOT + PAIR_SC + 4 * (i % (4 * BN))) = make_float4(x, x, x, x);
    }
#if PA_PAGED
    const bool one_run = a.page_shift >= BN_LOG2;   // a tile's keys are contiguous in memory (in one page)
#else
    const bool one_run = true;
#endif
    // this thread's chunks of CTA tile t (key rows r0 + F_RSTEP*i) of g into the operand at dst
    auto copy_tile = [&](const __half* g, int t, u32 dst) {
        const int j0 = (c.t_begin + t) * BN;
        if (one_run && j0 + BN <= nk) {
            const u64 off = (u64)pa::kv_row(a, c.hkv, j0 + r0, pa::page_of(a, j0)) * D + 8u * ch;
#pragma unroll
            for (int i = 0; i < F_NR; ++i) cp_async_16(dst + F_RSTEP * 128 * i, g + off + F_RSTEP * D * i, 16u);
        } else {
#pragma unroll
            for (int i = 0; i < F_NR; ++i) {
                const int jr = j0 + F_RSTEP * i, j = jr + r0;
                const u32 row = pa::kv_row(a, c.hkv, j, pa::page_of(a, jr));
                cp_async_16(dst + F_RSTEP * 128 * i, g + (j < nk ? (u64)row * D + 8u * ch : 0ull), j < nk ? 16u : 0u);
            }
        }
    };
    auto landed = [&](u32 bar) {             // this thread's copies of a slot have landed
        fence_proxy_async();
        mbar_arrive(bar);
    };
    for (int p = 0; p <= n_pairs; ++p) {
        if (p < n_pairs) {
            const u32 ks = base + SM_K + (p % K_PAIRS) * K_SLOT;
            if (p >= K_PAIRS) mbar_wait(base + BAR_EMPTY_K + 8 * (p % K_PAIRS), ((p / K_PAIRS) & 1) ^ 1);
#pragma unroll
            for (int h = 0; h < 2; ++h) copy_tile(kg, 2 * p + h, ks + sw128(BN * h + r0, ch, 2 * KV_BLOCK));
        }
        cp_async_commit();                   // (empty past the last pair: the counts stay in step)
        cp_async_wait<1>();
        if (p >= 1) landed(base + BAR_FULL_K + 8 * ((p - 1) % K_PAIRS));
        if (p >= 2) landed(base + BAR_FULL_V + 8 * ((p - 2) % V_PAIRS));
        if (p >= 1) {
            const int q = p - 1;
            const u32 vs = base + SM_V + (q % V_PAIRS) * V_SLOT;
            if (q >= V_PAIRS) mbar_wait(base + BAR_EMPTY_V + 8 * (q % V_PAIRS), ((q / V_PAIRS) & 1) ^ 1);
#pragma unroll
            for (int h = 0; h < 2; ++h) copy_tile(vg, 2 * q + h, vs + h * NG * KV_BLOCK + sw128(r0, ch, KV_BLOCK));
            cp_async_commit();
        }
    }
    cp_async_wait<0>();
    landed(base + BAR_FULL_V + 8 * ((n_pairs - 1) % V_PAIRS));
}
#else
__device__ __forceinline__ void control_producer(const pa::Args& a, const Cta& c, unsigned char* sm, u32 base) {
    const int tid = threadIdx.x, r0 = tid / F_CPR, ch = tid % F_CPR;
    const int nk = a.ctx + a.n_q;
    const int n_tiles = c.t_end - c.t_begin;
    const u32 bar_full = base + SM_BAR, bar_empty = base + SM_BAR + 8 * F16_STAGES;
    const __half* kg = reinterpret_cast<const __half*>(a.k);   // the host passes fp16 K/V here
    const __half* vg = reinterpret_cast<const __half*>(a.v);
    {   // warp w: stage w's scales; lanes 0-15 kq, lanes 16-31 vs (F16_VS = F16_KQ + BN*4)
        const int lane = tid & 31;
        const float x = lane < 16 ? a.qk_scale_log2 : a.p_scale;
        *reinterpret_cast<float4*>(sm + SM_F16 + (tid >> 5) * F16_STAGE + F16_KQ + 16 * lane) = make_float4(x, x, x, x);
    }
    const u32 dst0 = base + SM_F16 + sw128(r0, ch, KV_BLOCK);
#if PA_PAGED
    const bool one_run = a.page_shift >= BN_LOG2;   // a tile's keys are contiguous in memory (in one page)
#else
    const bool one_run = true;
#endif
    for (int n = 0; n < n_tiles; ++n) {
        const int s = n % F16_STAGES, j0 = (c.t_begin + n) * BN;
        const u32 dst = dst0 + s * F16_STAGE;
        // The common tile, its 64 keys contiguous in memory and below nk: one page-table entry, and
        // every source an immediate offset from one address. Otherwise (pages of 16 or 32 keys, the
        // cache's last tile) an entry per round and a size per row.
        const bool whole = one_run && j0 + BN <= nk;
        u64 off[F_NR];                       // element offsets of this thread's chunks (64-bit: row * D may not fit 32)
        u32 bytes[F_NR];                     // 16, or 0 past the cache (zero-filled)
        if (whole) {
            off[0] = (u64)pa::kv_row(a, c.hkv, j0 + r0, pa::page_of(a, j0)) * D + 8u * ch;
        } else {
#pragma unroll
            for (int i = 0; i < F_NR; ++i) {
                const int jr = j0 + F_RSTEP * i, j = jr + r0;
                const u32 row = pa::kv_row(a, c.hkv, j, pa::page_of(a, jr));
                off[i] = j < nk ? (u64)row * D + 8u * ch : 0ull;
                bytes[i] = j < nk ? 16u : 0u;
            }
        }
        if (n >= F16_STAGES) mbar_wait(bar_empty + 8 * s, ((n / F16_STAGES) & 1) ^ 1);   // tile n-4 released stage s
        if (whole) {
#pragma unroll
            for (int i = 0; i < F_NR; ++i) {
                cp_async_16(dst + F16_K + F_RSTEP * 128 * i, kg + off[0] + F_RSTEP * D * i, 16u);
                cp_async_16(dst + F16_V + F_RSTEP * 128 * i, vg + off[0] + F_RSTEP * D * i, 16u);
            }
        } else {
#pragma unroll
            for (int i = 0; i < F_NR; ++i) {
                cp_async_16(dst + F16_K + F_RSTEP * 128 * i, kg + off[i], bytes[i]);
                cp_async_16(dst + F16_V + F_RSTEP * 128 * i, vg + off[i], bytes[i]);
            }
        }
        cp_async_commit();
        if (n > 0) {
            cp_async_wait<1>();              // tile n-1's copies (tile n's may still run)
            f16_tile_done(bar_full, n - 1);
        }
    }
    cp_async_wait<0>();
    f16_tile_done(bar_full, n_tiles - 1);
}
#endif
#else
// A production build runs no comparison producer (v3.cu does not call this one).
__device__ __forceinline__ void control_producer(const pa::Args&, const Cta&, unsigned char*, u32) {}
#endif
}  // namespace v3

#if PA_V3_DQ
// The stage images of every tile of every KV head (tile_image), written to a.out (bytes: Hkv x
// ceil(nk / BN) x pa_v3_image_bytes): grid (tiles, Hkv) x 128 threads. pa_v3 then reads the images
// through a.k. The same bytes reach the same consumers, so the output keeps v3's bits.
extern "C" __global__ void __launch_bounds__(128) pa_v3_images(PA_KERNEL_PARAMS) {
    using namespace v3;
    PA_MAKE_ARGS(a);
    const int hkv = blockIdx.y;
    unsigned char* img = reinterpret_cast<unsigned char*>(a.out) + ((u64)hkv * gridDim.x + blockIdx.x) * IMG_BYTES;
    tile_image<128>(a, hkv, blockIdx.x, img, threadIdx.x);
}
#endif
