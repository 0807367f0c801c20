// v2t — v2 with register staging instead of cp.async (PR 2092's change): runs on sm_75+.
//
// Tiling: as v2. A warp owns 16 query rows of one query head and walks the keys they see 16 at a
//   time (one slice), on its own; a CTA's 4 warps are query heads of one KV group at the same
//   rows where GQA allows it (their global loads of the same slice then hit in L1).
// Pipeline: as v2, but the next slice travels through registers. Before computing slice i the
//   warp issues ordinary 16-byte global loads of slice i+1 into registers (D/32 uint4 of K and
//   D/32 of V per lane — 4 + 4 at D=128 — plus one of scales on lanes 0-7); they are in flight
//   during slice i's S = Q.K^T, softmax and P.V, and after P.V the lanes store them into the
//   warp's other stage. The copy plan is pa_common.cuh's, the one v2's cp.async uses: the same
//   bytes land in the same places, the math is the same code, so on the same MMA path v2t's
//   output is bitwise identical to v2's.
// Barriers: only __syncwarp(): one per slice, after the store into the other stage; it both
//   publishes slice i+1 to the warp and guarantees nobody still reads stage i&1 when slice i+2
//   is stored into it. A warp whose rows are all past the chunk's end returns at once.
// Shared memory: 4 warps x 2 stages x (32*D + 128) bytes = 33.8 KB at D=128.
// MMA: m16n8k16 on sm_80+, m16n8k8 pairs on sm_75 and with PA_FORCE_TURING.
#include "pa_common.cuh"

extern "C" __global__ void __launch_bounds__(pa::THREADS) pa_v2t(PA_KERNEL_PARAMS) {
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

    SliceRegs next;
    slice_load_regs(slice_src(a, hkv, 0, lane), lane, next);
    slice_store_regs(stages[warp][0], lane, next);
    __syncwarp();
    for (int i = 0; i < n_slices; ++i) {
        const bool more = i + 1 < n_slices;
        if (more) slice_load_regs(slice_src(a, hkv, (i + 1) * SLICE_KEYS, lane), lane, next);  // issue()
        warp_step<1>(a, stages[warp][i & 1], i * SLICE_KEYS, lane, st);
        if (more) slice_store_regs(stages[warp][(i + 1) & 1], lane, next);                     // store_stage()
        __syncwarp();
    }
    warp_finish(a, hq, lane, st);
}
