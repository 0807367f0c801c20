// v1 — int8-KV prompt attention with a CTA-wide single-stage gather (PR 2092's baseline).
//
// Tiling: a CTA of 4 warps owns 64 consecutive query rows of one query head; warp w owns rows
//   16w .. 16w+15 (one m16 MMA tile) and keeps their Q fragments and fp32 output in registers.
//   CTAs are launched longest-first (the last query rows see the most keys).
// Pipeline: none. The KV loop walks 64-key tiles up to the last key any row of the CTA sees.
//   For each tile the whole CTA gathers the tile's int8 K and V rows and their fp32 scales
//   through the page table into ONE shared buffer (warp w copies the tile's 16-key slice w,
//   with the copy plan of pa_common.cuh), waits, then every warp runs one online-softmax step
//   over all 64 keys (S = Q.K^T, scales, exp2, P.V) for its 16 rows.
// Segments (contexts above 64K keys, pa_bench.numerics.model.segment_keys): grid.z = n_seg; the
//   CTAs of grid.z = z walk only the tiles of keys [z*S, (z+1)*S) (S a multiple of 64, so tiles
//   align), from a fresh softmax state, and store their unnormalised (O, m, l) in the workspace;
//   a second launch, pa_combine (pa_common.cuh), merges the segments of each row and stores the
//   output. A CTA none of whose rows sees its segment returns at once.
// Barriers: __syncthreads() before the buffer is overwritten (every warp has finished reading
//   the previous tile) and after it is filled (the tile is complete): the tile is shared by all
//   four warps, so both must be CTA-wide. (The early return above is uniform over the CTA.)
// Shared memory: 4 slices x (32*D + 128) bytes = 16.9 KB at D=128, well inside Turing's limit.
// MMA: m16n8k16, or m16n8k8 pairs on sm_75 / PA_FORCE_TURING.
#include "pa_common.cuh"

extern "C" __global__ void __launch_bounds__(32 * pa::V1_WARPS, 1) pa_v1(PA_KERNEL_PARAMS) {
    using namespace pa;
    PA_MAKE_ARGS(a);
    constexpr int NS = 4;                               // slices per tile: 64 keys
    constexpr int ROWS_PER_CTA = ROWS_PER_TILE * V1_WARPS;
    __shared__ __align__(16) unsigned char tile[NS * SLICE_BYTES];

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int hq = blockIdx.y;
    const int hkv = hq / (a.heads_q / a.heads_kv);
    const int cta_row0 = (gridDim.x - 1 - blockIdx.x) * ROWS_PER_CTA;

    // Keys [j_begin, j_end): all the CTA's rows see, or with segments those of segment blockIdx.z.
    const int j_begin = blockIdx.z * a.seg_keys;
    int j_end = keys_needed(a, cta_row0, ROWS_PER_CTA);
    if (a.seg_keys) j_end = min(j_end, j_begin + a.seg_keys);
    if (j_begin >= j_end) return;                       // no row of the CTA sees this segment

    WarpState<1> st;
    st.hq[0] = hq;
    st.row0[0] = cta_row0 + ROWS_PER_TILE * warp;
    warp_init(a, lane, st, nullptr);

    for (int j0 = j_begin; j0 < j_end; j0 += NS * SLICE_KEYS) {
        const int js = j0 + SLICE_KEYS * warp;          // this warp's slice of the tile
        SliceRegs r;
        slice_load_regs(slice_src(a, hkv, js, page_of(a, js), lane), lane, r);
        __syncthreads();                                // all warps are done with the previous tile
        slice_store_regs(tile + warp * SLICE_BYTES, lane, r);
        __syncthreads();                                // the tile is complete
        warp_step<NS, true>(a, tile, j0, lane, st);
    }
    warp_finish(a, lane, st);
}
