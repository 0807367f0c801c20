// The switches of v3's builds that are not production: the comparison builds' producers, and the
// measuring tools' hooks, named points where a tool records a time (stamps) and named parts of the
// work a tool can remove (knock-outs). Each defaults to nothing, so the production kernel is the
// code without them (tests/test_sass_identity.py keeps its machine code). A build defines the
// macros below, with -D or in lines a copy of this file puts before the defaults; the kernel
// source stays as it is.
//
// Comparison builds (v3_controls.cuh): one producer replaced, the consumers the same.
#ifndef PA_KV_F16
#define PA_KV_F16 0   // 1: the fp16 control (K/V fp16 in global memory, a copy-only producer)
#endif
#ifndef PA_V3_DQ
#define PA_V3_DQ 0    // 1: the tiles arrive as fp16 stage images made by pa_v3_images, one bulk copy each
#endif
#define PA_V3_CONTROL (PA_KV_F16 || PA_V3_DQ)   // the producer is v3_controls.cuh's
//
// Stamps. PA_V3_STAMP(point, n) at a point of the CTA or of the producer warpgroup (every thread
// reaches it; n the tile where there is one, the CTA's tile count at cta_start), and
// PA_V3_STAMP_WG(point, wg, tid, n) at a point of a consumer warpgroup (wg its index, tid the
// thread in it, n its step). Each is a statement. The points, in v3.cu:
//   CTA:       cta_start (tiles), producer_end, consumer_end
//   producer:  producer_start (once, where a tool may declare what its stamps share), then each
//              tile of the int8 producer: top, landed, empty, stored, arrived, barrier
//   consumer:  consumer_start (as producer_start), q_ready, turn_top, turn_full, turn_open (each
//              turn), fenced, s_issued, issued, s_done, softmax, pv_done (each step of the 64-key
//              loop), first_softmax, last_turn, last_pv
// A tool's PA_V3_STAMP names a macro per point (e.g. ``pa_stamp_##point``), so a point it does not
// know is a compile error rather than a silent gap.
#ifndef PA_V3_STAMP
#define PA_V3_STAMP(point, n) ((void)0)
#endif
#ifndef PA_V3_STAMP_WG
#define PA_V3_STAMP_WG(point, wg, tid, n) ((void)0)
#endif

// Knock-outs: PA_V3_KNOCKED(PART) is 1 where a build leaves PART out (-DPA_V3_KO_PART=1). The
// outputs of such a build are wrong by design; only its time means anything.
#define PA_V3_KNOCKED(part) (PA_V3_KO_##part != 0)
#ifndef PA_V3_KO_COPY
#define PA_V3_KO_COPY 0          // the int8 producer's bulk copies (the issuer only arrives on landed)
#endif
#ifndef PA_V3_KO_CONVERT
#define PA_V3_KO_CONVERT 0       // the int8 producer's conversion and fp16 stores
#endif
#ifndef PA_V3_KO_IMAGE_COPY
#define PA_V3_KO_IMAGE_COPY 0    // the image issuers' bulk copies (each slot armed with a plain arrive)
#endif
#ifndef PA_V3_KO_SHARE_CONVERT
#define PA_V3_KO_SHARE_CONVERT 0 // shared tiles: no CTA converts, and no issuer waits for a flag
#endif
#ifndef PA_V3_KO_ALU_K
#define PA_V3_KO_ALU_K 0         // the int8 producer stores K's chunks unconverted
#endif
#ifndef PA_V3_KO_ALU_V
#define PA_V3_KO_ALU_V 0         // ... and V's
#endif
#ifndef PA_V3_KO_LOAD
#define PA_V3_KO_LOAD 0          // the int8 producer converts values made from its indices, not loaded
#endif
#ifndef PA_V3_KO_HALF_CONVERT
#define PA_V3_KO_HALF_CONVERT 0  // the int8 producer converts the first half of its rounds only
#endif
#ifndef PA_V3_KO_STORE
#define PA_V3_KO_STORE 0         // the int8 producer converts but stores no fp16 tile
#endif
#ifndef PA_V3_KO_SOFTMAX
#define PA_V3_KO_SOFTMAX 0       // the consumers' online softmax (P packed from raw S)
#endif
#ifndef PA_V3_KO_PINGPONG
#define PA_V3_KO_PINGPONG 0      // the consumers' turns
#endif
#ifndef PA_V3_KO_K_SCALES
#define PA_V3_KO_K_SCALES 0      // the key scales: neither loaded nor multiplied (t = S - m)
#endif
#ifndef PA_V3_KO_V_SCALES
#define PA_V3_KO_V_SCALES 0      // the V scales: p not multiplied by them
#endif
#ifndef PA_V3_KO_KSCALE_IN_Q
#define PA_V3_KO_KSCALE_IN_Q 0   // a typical key scale folded into Q once (with PA_V3_KO_K_SCALES)
#endif

// PA_V3_KO_KSCALE_IN_Q: Q's chunks scaled by a typical key scale (qk_scale_log2 x 0.021, the K
// scale of normal data; qk_scale_log2 alone for the fp16 control) before they are stored.
template <int N>
__device__ __forceinline__ void pa_v3_ko_kscale_in_q(uint4 (&qv)[N], const pa::Args& a, bool kv_f16) {
    const __half2 c2 = __float2half2_rn(kv_f16 ? a.qk_scale_log2 : a.qk_scale_log2 * 0.021f);
#pragma unroll
    for (int i = 0; i < N; ++i) {
        pa::u32* w = reinterpret_cast<pa::u32*>(&qv[i]);
#pragma unroll
        for (int e = 0; e < 4; ++e) w[e] = pa::half2_as_u32(__hmul2(pa::u32_as_half2(w[e]), c2));
    }
}
