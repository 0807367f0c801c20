// v2 — int8-KV prompt attention with a warp-private, double-buffered cp.async pipeline.
//
// Tiling: a warp owns TILES (2, or 1 with PA_TILES=1) m16 tiles of query rows that see the same
//   keys — two query heads of one KV group at the same 16 rows, or 32 consecutive rows of one
//   head where the heads do not pair — and works through those keys on its own, 16 keys (one
//   slice) at a time. Each K/V fragment it converts from int8 feeds one MMA per tile. Its fp32
//   outputs stay in registers; its Q fragments in registers (one tile) or in its own corner of
//   shared memory (two tiles). A CTA is 2 warps: with paired heads, the 4 query heads of a KV
//   group, whose copies of a slice meet in L1. Row blocks run longest-first.
//   Split keys (short chunks on long contexts, pa_bench.model.split_keys): both warps of a CTA
//   own the same tiles; warp 0 takes the keys before split_keys, warp 1 the rest, and at the end
//   warp 0 merges warp 1's softmax state (pa_common.cuh, merge_split).
//   Segments (contexts above 64K keys, pa_bench.numerics.model.segment_keys; never together with
//   split keys): grid.z = n_seg, and a warp of grid.z = z takes only the slices of keys
//   [z*S, (z+1)*S), from a fresh softmax state, storing its unnormalised (O, m, l) in the
//   workspace; a second launch, pa_combine (pa_common.cuh), merges each row's segments in order
//   and stores the output. A warp whose rows see no key of its segment returns at once.
// Pipeline: each warp owns two shared-memory stages (a slice each: int8 K rows, int8 V rows,
//   K scales, V scales). While it computes slice i from one stage it has cp.async copies of
//   slice i+1 (K, V and the next slice's scales) in flight into the other; it waits for them
//   after slice i's math, and right after the barrier that publishes slice i+1 each lane reads
//   its K words of it (load_k_words), so the next step's S = Q.K^T does not start by waiting for
//   shared memory. Every lane copies the same chunks to the same places as v2t and v1
//   (pa_common.cuh's copy plan); keys past the end of the cache are zero-filled by the copy
//   itself. The page-table entry of a slice is read one slice before its copy is issued; in the
//   loop over all but the last unmasked slices the next slice is known to be whole, so its copy
//   carries no end-of-cache test.
// Barriers: a warp reads and writes only its own stages and Q fragments, so __syncwarp() is the
//   only barrier inside the loop, one per slice: after slice i's math and cp.async.wait_group,
//   it both makes every lane's copies of slice i+1 visible to the whole warp and guarantees that
//   nobody still reads stage i&1, which the next copy refills. A warp with no tiles returns at
//   once; nothing waits for it. With split keys, two __syncthreads() after the loop hand warp 1's
//   state to warp 0 through the (then unused) shared memory. Segments add no barrier: the
//   combine is a separate launch, ordered after this one by the stream.
// Shared memory: 2 warps x (2 stages x (32*D + 128) B + TILES x 16 x D x 2 B of Q) = 33 KB at
//   D=128 with two tiles.
// Needs cp.async: sm_80 or newer, m16n8k16 MMAs. There is no Turing path (that is v2t).
#include "pa_common.cuh"
#include <cuda_pipeline_primitives.h>

#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ < 800)
#error "v2 needs cp.async (sm_80 or newer); use v2t below sm_80"
#endif
#if PA_FORCE_TURING
#error "v2 has no Turing path; the forced Turing path runs v2t"
#endif

namespace {
// 16-byte cp.async that allocates in L1 (.ca), zero-filling past `src_bytes`. CUDA C++'s
// __pipeline_memcpy_async issues 16-byte copies as cp.async.cg, which bypasses L1; the warps
// of a CTA copy the same K/V slices, so v2 wants the later copies served from L1.
__device__ __forceinline__ void cp_async_ca16(void* dst, const void* src, int src_bytes) {
    const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.ca.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(src_bytes) : "memory");
}

// Start the copies of one slice into `stage` (this lane's share of the copy plan).
// WHOLE: the caller knows the slice is whole.
template <bool WHOLE>
__device__ __forceinline__ void issue(const pa::Args& a, int hkv, int j0, int page, int lane, unsigned char* stage) {
    using namespace pa;
    const SliceSrc s = slice_src(a, hkv, j0, page, lane);
    if (WHOLE || s.keys_left >= SLICE_KEYS) {           // a whole slice (all but the last)
#pragma unroll
        for (int i = 0; i < CHUNKS_PER_LANE; ++i) {
            cp_async_ca16(stage + slice_dst_k(lane, i), chunk_src(s.k, lane, i, true), 16);
            cp_async_ca16(stage + slice_dst_v(lane, i), chunk_src(s.v, lane, i, true), 16);
        }
        if (lane < 8) cp_async_ca16(stage + slice_dst_sc(lane), s.sc, 16);
    } else {
#pragma unroll
        for (int i = 0; i < CHUNKS_PER_LANE; ++i) {
            const bool ok = chunk_ok(s, lane, i);
            cp_async_ca16(stage + slice_dst_k(lane, i), chunk_src(s.k, lane, i, ok), ok ? 16 : 0);
            cp_async_ca16(stage + slice_dst_v(lane, i), chunk_src(s.v, lane, i, ok), ok ? 16 : 0);
        }
        if (lane < 8) cp_async_ca16(stage + slice_dst_sc(lane), s.sc, 4 * scale_keys(s, lane));
    }
    __pipeline_commit();
}

// One iteration of the pipeline: start slice i+1's copies, compute slice i, wait for slice i+1.
// NEXT_WHOLE: slice i+1 exists and is whole (the loop over all but the last unmasked slices).
template <bool MASKED, bool NEXT_WHOLE>
__device__ __forceinline__ void pipeline_step(const pa::Args& a, int hkv, int i, int end, int lane,
                                              int& page_next, unsigned char (*stages)[pa::SLICE_BYTES],
                                              pa::WarpState<pa::TILES>& st, pa::KWords& kw) {
    using namespace pa;
    if (NEXT_WHOLE || i + 1 < end) issue<NEXT_WHOLE>(a, hkv, (i + 1) * SLICE_KEYS, page_next, lane, stages[(i + 1) & 1]);
    else __pipeline_commit();                       // an empty group keeps the count uniform
    page_next = page_of(a, (i + 2) * SLICE_KEYS);   // for the next iteration's copy
    warp_step<1, MASKED>(a, stages[i & 1], i * SLICE_KEYS, lane, st, &kw);
    __pipeline_wait_prior(0);                       // slice i+1 has landed (this lane's copies)
    __syncwarp();                                   // ... and every lane's; stage i&1 may be refilled
    if (NEXT_WHOLE || i + 1 < end) load_k_words(stages[(i + 1) & 1], lane, kw);
}
}  // namespace

extern "C" __global__ void __launch_bounds__(32 * pa::V2_WARPS) pa_v2(PA_KERNEL_PARAMS) {
    using namespace pa;
    PA_MAKE_ARGS(a);
    __shared__ PipelinedSmem sm;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    WarpState<TILES> st;
    WarpKeys keys;
    if (!pipelined_warp_begin(a, warp, lane, sm, st, keys)) return;

    const int j_first = keys.begin * SLICE_KEYS;
    issue<false>(a, keys.hkv, j_first, page_of(a, j_first), lane, sm.stages[warp][keys.begin & 1]);
    int page_next = page_of(a, j_first + SLICE_KEYS);
    __pipeline_wait_prior(0);                       // the first slice has landed ...
    __syncwarp();                                   // ... for every lane
    KWords kw;
    load_k_words(sm.stages[warp][keys.begin & 1], lane, kw);
    for_each_slice(keys, [&](int i, auto masked, auto next_whole) {
        pipeline_step<decltype(masked)::value, decltype(next_whole)::value>(a, keys.hkv, i, keys.end, lane, page_next,
                                                                            sm.stages[warp], st, kw);
    });
    pipelined_warp_end(a, warp, lane, sm, st);
}
