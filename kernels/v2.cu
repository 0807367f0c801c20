// v2 — int8-KV prompt attention with a warp-private, double-buffered cp.async pipeline.
//
// Tiling: a warp owns 16 query rows of one query head and works through the keys those rows see
//   on its own, 16 keys (one slice) at a time: its Q fragments and fp32 output stay in
//   registers. A CTA of 4 warps holds up to 4 query heads of one KV group (GQA) at the same 16
//   rows — they stream the same slices at the same time, so the later warps' copies hit in L1 —
//   or, without GQA, 4 consecutive 16-row blocks of one head. CTAs run longest-first.
// Pipeline: each warp owns two shared-memory stages (a slice each: int8 K rows, int8 V rows,
//   K scales, V scales). While it computes slice i from one stage it has cp.async copies of
//   slice i+1 (K, V and the next slice's scales) in flight into the other. Every lane copies
//   the same chunks to the same places as v2t and v1 (pa_common.cuh's copy plan); keys past
//   the end of the cache are zero-filled by the copy itself.
// Barriers: a warp reads and writes only its own stages, so __syncwarp() is the only barrier:
//   one after cp.async.wait_group (the lanes' copies of slice i are visible to the whole warp)
//   and one after the slice's math (nobody still reads the stage the next copy will refill).
//   A warp whose rows are all past the chunk's end returns at once; nothing waits for it.
// Shared memory: 4 warps x 2 stages x (32*D + 128) bytes = 33.8 KB at D=128.
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
__device__ __forceinline__ void issue(const pa::Args& a, int hkv, int j0, int lane, unsigned char* stage) {
    using namespace pa;
    const SliceSrc s = slice_src(a, hkv, j0, lane);
#pragma unroll
    for (int i = 0; i < CHUNKS_PER_LANE; ++i) {
        cp_async_ca16(stage + slice_dst_k(lane, i), s.k[i], s.kv_ok[i] ? 16 : 0);
        cp_async_ca16(stage + slice_dst_v(lane, i), s.v[i], s.kv_ok[i] ? 16 : 0);
    }
    if (lane < 8) cp_async_ca16(stage + slice_dst_sc(lane), s.sc, 4 * s.sc_valid);
    __pipeline_commit();
}
}  // namespace

extern "C" __global__ void __launch_bounds__(pa::THREADS) pa_v2(PA_KERNEL_PARAMS) {
    using namespace pa;
    PA_MAKE_ARGS(a);
    __shared__ __align__(16) unsigned char stages[WARPS][2][SLICE_BYTES];

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int hq, row0;
    warp_rows(a, warp, hq, row0);
    const int hkv = hq / (a.heads_q / a.heads_kv);
    if (row0 >= a.n_q) return;

    WarpState st;
    warp_init(a, hq, row0, lane, st);
    const int n_slices = (keys_needed(a, row0, ROWS_PER_WARP) + SLICE_KEYS - 1) / SLICE_KEYS;

    issue(a, hkv, 0, lane, stages[warp][0]);
    for (int i = 0; i < n_slices; ++i) {
        if (i + 1 < n_slices) issue(a, hkv, (i + 1) * SLICE_KEYS, lane, stages[warp][(i + 1) & 1]);
        else __pipeline_commit();                       // an empty group keeps the count uniform
        __pipeline_wait_prior(1);                       // slice i has landed (this lane's copies)
        __syncwarp();                                   // ... and every lane's
        warp_step<1>(a, stages[warp][i & 1], i * SLICE_KEYS, lane, st);
        __syncwarp();                                   // stage i&1 may be refilled
    }
    warp_finish(a, hq, lane, st);
}
