// v3's 128-key consumer steps (-DPA_V3_STEP_KEYS=128; included by v3.cu inside namespace v3, at 128
// rows: on images, shared tiles or v3-dq's pass, or in the fp16 control). What differs from the
// 64-key step:
// Tiling: a consumer step takes a pair of 64-key tiles, 128 keys: S[64 x 128] = Q.K^T is one
//   m64n128k16 wgmma per k-step with Q and K from shared memory (the 64-key step at 128 rows reads
//   Q from registers, which a 64 x 128 S, its P and O leave no room for), and P.V is 8 k-steps of
//   m64nDk16 with P from registers. The online softmax runs once per pair: the row maximum, O's
//   rescale and l's rescale every 128 keys (the numerics model at 128-key tiles); it multiplies each
//   p by its V scale right after the exponential, where the multiplies fill the exponentials'
//   issue gaps (the same bits as after the softmax: docs/PERF_NOTES.md).
// Pipeline: K and V are staged apart, K_PAIRS (3) K slots and V_PAIRS (2) V slots deep. A K slot
//   holds the pair's 128 key rows per 64-dim block, so that one descriptor spans both tiles, and
//   each tile's kq and vs; a V slot holds both tiles' V. K runs a pair ahead of V. The producers are
//   elsewhere: on images the issuer (issue_pairs, v3.cu) brings each tile's image in four bulk
//   copies; the control's threads (v3_controls.cuh) copy each pair's fp16 rows by cp.async. A pair
//   whose second tile lies past the CTA's last (an odd count) gets finite values there (the first
//   tile's image again, or the keys after it), whose keys lie past kmax: masked in S, so their P
//   is 0.
// Barriers: per K slot full_k (count 1: the issuer's arrive.expect_tx with both tiles' bytes; 128
//   in the control: every copying thread once its copies have landed) and empty_k (every consumer
//   thread, once the pair's softmax has read its kq and vs: S is done by then); per V slot full_v
//   and empty_v (every consumer thread, once the pair's P.V is done). Pair n is in K slot
//   n % K_PAIRS with parity (n / K_PAIRS) & 1, V slot n % V_PAIRS likewise. Step n waits for full_k
//   of pair n and full_v of pair n-1 before its turn; the turns (PP_BAR + wg) alternate per step as
//   in the 64-key loop, and every warpgroup takes every turn and releases every slot, past its
//   rows' diagonal too.

// D[64 x 128] (+)= A[64 x 16] . B[16 x 128], A and B from shared memory, both K-major (S of a
// 128-key step: 128 keys of K in one B operand).
__device__ __forceinline__ void wgmma_ss_n128(float (&d)[64], u64 desc_a, u64 desc_b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}

// 128-key steps: S[64 x 128] = Q . K^T of a pair of tiles, KSTEPS wgmma.m64n128k16 with Q and K
// from shared memory (a K slot holds the pair's 128 rows per 64-dim block, 2*KV_BLOCK apart), and
// O += P.V of a pair, 2*PV_STEPS k-steps (tile h's V at h*NG*KV_BLOCK in the V slot). Not waited for.
constexpr int S2_REGS = 2 * S_REGS;
constexpr int PV2_STEPS = 2 * PV_STEPS;
__device__ __forceinline__ void issue_s2(float (&s)[S2_REGS], u64 dq, u64 dk) {
#pragma unroll
    for (int kk = 0; kk < KSTEPS; ++kk) {
        const u32 koff = (kk >> 2) * 2 * KV_BLOCK + (kk & 3) * 32, qoff = (kk >> 2) * Q_BLOCK + (kk & 3) * 32;
        wgmma_ss_n128(s, dq + (qoff >> 4), dk + (koff >> 4), kk > 0);
    }
}
__device__ __forceinline__ void issue_pv2(float (&o)[O_REGS], const u32 (&pf)[PV2_STEPS][4], u64 dv) {
#pragma unroll
    for (int kk = 0; kk < PV2_STEPS; ++kk) {
        const u32 off = (kk / PV_STEPS) * NG * KV_BLOCK + (kk % PV_STEPS) * 16 * 128;
#if PA_HEAD_DIM == 128
        wgmma_rs_n128_tb(o, pf[kk], dv + (off >> 4), 1);
#else
        wgmma_rs_n64<1>(o, pf[kk], dv + (off >> 4), 1);
#endif
    }
}

// One consumer warpgroup's steps over its CTA's key tiles in pairs: step n issues S of pair n and
// P.V of pair n-1 back to back, waits for S, runs pair n's softmax under that P.V, releases K slot n,
// waits for P.V, releases V slot n-1 and packs pair n's P. Leaves the warpgroup's unnormalised O, its
// rows' maxima m and its per-lane sums l for v3's epilogue.
__device__ __forceinline__ void consume_pairs(const Cta& c, unsigned char* sm, u32 base, int wg,
                                              u64 dq, int (&lim)[2], int wg_end, int first_masked,
                                              float (&o)[O_REGS], float (&m)[2], float (&l)[2]) {
    float s[S2_REGS], alpha[2] = {1.f, 1.f};
    m[0] = m[1] = PA_NEG_INF;
    l[0] = l[1] = 0.f;
    u32 pf[PV2_STEPS][4];
#pragma unroll
    for (int i = 0; i < O_REGS; ++i) o[i] = 0.f;
    const int n_tiles = c.t_end - c.t_begin;
    const int n_steps = (n_tiles + 1) >> 1;
    const int n_math = (wg_end - c.t_begin + 1) >> 1;   // steps holding keys of these rows
    const int kmax = c.t_end * BN - 1;       // the CTA's last key: the masked steps' limit too
    lim[0] = min(lim[0], kmax);
    lim[1] = min(lim[1], kmax);
    auto turn_begin = [&](int n) {
        if (n < n_steps) mbar_wait(base + BAR_FULL_K + 8 * (n % K_PAIRS), (n / K_PAIRS) & 1);
        if (n >= 1) mbar_wait(base + BAR_FULL_V + 8 * ((n - 1) % V_PAIRS), ((n - 1) / V_PAIRS) & 1);
        if (!PA_V3_KNOCKED(PINGPONG)) named_barrier_sync(PP_BAR + wg, 256);
    };
    auto turn_end = [&](int n) {
        if (!PA_V3_KNOCKED(PINGPONG) && (wg != NCWG - 1 || n < n_steps)) named_barrier_arrive(PP_BAR + (wg + 1) % NCWG, 256);
    };
    auto release_k = [&](int n) { mbar_arrive(base + BAR_EMPTY_K + 8 * (n % K_PAIRS)); };
    auto release_v = [&](int n) { mbar_arrive(base + BAR_EMPTY_V + 8 * (n % V_PAIRS)); };
    auto desc_k = [&](int n) { return desc_sw128(base + SM_K + (n % K_PAIRS) * K_SLOT, 16, 1024); };
    auto desc_v = [&](int n) { return desc_sw128(base + SM_V + (n % V_PAIRS) * V_SLOT, KV_BLOCK, 1024); };
    auto scales = [&](int n) { return reinterpret_cast<const float*>(sm + SM_K + (n % K_PAIRS) * K_SLOT + PAIR_SC); };
    auto softmax = [&](int n, float (&al)[2]) {
        const int tile = c.t_begin + 2 * n;
        if (PA_V3_KNOCKED(SOFTMAX)) {        // knock-out: the V scales alone
            al[0] = al[1] = 1.f;
            scale_by_vs<2 * BN / 8>(scales(n), s);
        } else if (tile + 1 < first_masked && 2 * n + 1 < n_tiles) softmax_tile<false, 2 * BN / 8, true>(scales(n), tile * BN, lim, s, m, l, al);
        else softmax_tile<true, 2 * BN / 8, true>(scales(n), tile * BN, lim, s, m, l, al);
    };
    auto finish = [&](int n) { release_k(n); };   // (the softmax applied P's V scales): K slot n is read
    auto rescale = [&]() { rescale_o(o, alpha); };

    if (wg == NCWG - 1 && !PA_V3_KNOCKED(PINGPONG)) named_barrier_arrive(PP_BAR, 256);
    int n = 0;
    if (n_math > 0) {
        turn_begin(0);
        u64 dk0 = desc_k(0);
        pin(dk0);
        pin(s);
        wgmma_fence();
        issue_s2(s, dq, dk0);
        wgmma_commit();
        turn_end(0);
        wgmma_wait<0>();
        pin(s);
        softmax(0, alpha);
        finish(0);
        p_fragments<2 * BN / 8>(s, pf);
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
            issue_s2(s, dq, dk);
            wgmma_commit();
            issue_pv2(o, pf, dv);
            wgmma_commit();
            turn_end(n);
            wgmma_wait<1>();                 // S of pair n (P.V of pair n-1 may still run)
            pin(s);
            float alpha_next[2];
            const bool unmasked = !PA_V3_KNOCKED(SOFTMAX) && c.t_begin + 2 * n + 1 < first_masked && 2 * n + 1 < n_tiles;
            if (!(unmasked && softmax_tile_kept<2 * BN / 8, true>(scales(n), s, m, l, alpha_next, 1 + wg))) {
                if (unmasked) {              // a reference moves: S again
                    pin(s);
                    wgmma_fence();
                    issue_s2(s, dq, dk);
                    wgmma_commit();
                    wgmma_wait<0>();
                    pin(s);
                }
                softmax(n, alpha_next);
            }
            finish(n);
            wgmma_wait<0>();
            pin(o);
            pin(pf);
            release_v(n - 1);
            p_fragments<2 * BN / 8>(s, pf);  // (after the wait: the P.V just done read pf)
            alpha[0] = alpha_next[0];
            alpha[1] = alpha_next[1];
        }
        turn_begin(n);                       // step n_math: P.V of the last pair
        u64 dv = desc_v(n - 1);
        pin(dv);
        rescale();
        pin(pf);
        pin(o);
        wgmma_fence();
        issue_pv2(o, pf, dv);
        wgmma_commit();
        turn_end(n);
        wgmma_wait<0>();
        pin(o);
        release_v(n - 1);
        ++n;
    }
    for (; n <= n_steps; ++n) {              // pairs past these rows' diagonal: turns and releases only
        turn_begin(n);
        turn_end(n);
        if (n >= 1) {
            release_k(n - 1);
            release_v(n - 1);
        }
    }
}
