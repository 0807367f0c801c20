// v2t — v2 with register staging instead of cp.async (PR 2092's change): runs on sm_75+.
//
// Tiling: as v2. A warp owns TILES m16 query tiles that see the same keys (two query heads of a
//   KV group at the same 16 rows, or 32 rows of one head) and walks those keys 16 at a time (one
//   slice), on its own; each converted K/V fragment feeds one MMA per tile. A CTA is 2 warps; with
//   split keys both warps own the same tiles and split their keys, as in v2. Segments (contexts
//   above 64K keys) as in v2: grid.z = n_seg, a warp takes only its segment's slices from a fresh
//   state and stores (O, m, l) in the workspace; pa_combine (pa_common.cuh) merges them.
// Pipeline: as v2, but the next slice travels through registers. Before computing slice i the
//   warp issues ordinary 16-byte global loads of slice i+1 into registers (D/32 uint4 of K and
//   D/32 of V per lane — 4 + 4 at D=128 — plus one of scales on lanes 0-7); they are in flight
//   during slice i's S = Q.K^T, softmax and P.V, and after P.V the lanes store them into the
//   warp's other stage. Right after the barrier that publishes slice i+1 each lane reads its K
//   words of it (load_k_words), so the next step's S = Q.K^T does not start by waiting for
//   shared memory (as v2 does). The copy plan is pa_common.cuh's, the one
//   v2's cp.async uses: the same bytes land in the same places, the math is the same code, so on
//   the same MMA path v2t's output is bitwise identical to v2's. Page-table entries are read one
//   slice ahead, as in v2; in the loop over all but the last unmasked slices the next slice is
//   known to be whole, so its loads carry no end-of-cache test.
// Barriers: only __syncwarp() inside the loop: one per slice, after the store into the other
//   stage; it both publishes slice i+1 to the warp and guarantees nobody still reads stage i&1
//   when slice i+2 is stored into it. A warp with no tiles (or no key in its segment) returns at
//   once. Split keys and segments: as v2.
// Shared memory: as v2, 33 KB at D=128 with two tiles (Turing allows 64 KB).
// MMA: m16n8k16 on sm_80+, m16n8k8 pairs on sm_75 and with PA_FORCE_TURING.
#include "pa_common.cuh"

namespace {
// One iteration of the pipeline: load slice i+1 into registers, compute slice i (its K words
// already in registers), store slice i+1 and read its K words.
// NEXT_WHOLE: slice i+1 exists and is whole (the loop over all but the last unmasked slices).
template <bool MASKED, bool NEXT_WHOLE>
__device__ __forceinline__ void pipeline_step(const pa::Args& a, int hkv, int i, int end, int lane,
                                              int& page_next, unsigned char (*stages)[pa::SLICE_BYTES],
                                              pa::WarpState<pa::TILES>& st, pa::KWords& kw) {
    using namespace pa;
    const bool more = NEXT_WHOLE || i + 1 < end;
    SliceRegs next;
    if (more) slice_load_regs<NEXT_WHOLE>(slice_src(a, hkv, (i + 1) * SLICE_KEYS, page_next, lane), lane, next);  // issue()
    page_next = page_of(a, (i + 2) * SLICE_KEYS);   // for the next iteration's loads
    warp_step<1, MASKED>(a, stages[i & 1], i * SLICE_KEYS, lane, st, &kw);
    if (more) slice_store_regs(stages[(i + 1) & 1], lane, next);                     // store_stage()
    __syncwarp();
    if (more) load_k_words(stages[(i + 1) & 1], lane, kw);
}
}  // namespace

extern "C" __global__ void __launch_bounds__(32 * pa::V2_WARPS) pa_v2t(PA_KERNEL_PARAMS) {
    using namespace pa;
    PA_MAKE_ARGS(a);
    __shared__ PipelinedSmem sm;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    WarpState<TILES> st;
    WarpKeys keys;
    if (!pipelined_warp_begin(a, warp, lane, sm, st, keys)) return;

    SliceRegs first;
    const int j_first = keys.begin * SLICE_KEYS;
    slice_load_regs(slice_src(a, keys.hkv, j_first, page_of(a, j_first), lane), lane, first);
    slice_store_regs(sm.stages[warp][keys.begin & 1], lane, first);
    int page_next = page_of(a, j_first + SLICE_KEYS);
    __syncwarp();
    KWords kw;
    load_k_words(sm.stages[warp][keys.begin & 1], lane, kw);
    for_each_slice(keys, [&](int i, auto masked, auto next_whole) {
        pipeline_step<decltype(masked)::value, decltype(next_whole)::value>(a, keys.hkv, i, keys.end, lane, page_next,
                                                                            sm.stages[warp], st, kw);
    });
    pipelined_warp_end(a, warp, lane, sm, st);
}
