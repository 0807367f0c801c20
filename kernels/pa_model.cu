// pa_model — the numerics model's online softmax (pa_bench/numerics/model.py, _online_softmax)
// fused into one kernel. It is not an attention kernel to time: it computes, on the GPU, the very
// bits of the NumPy model (every step exact or one IEEE rounding, in the model's order), so that
// a model evaluation on a long context is one launch instead of ~20 tiny CuPy kernels per slice.
//
// Tiling: one CTA per (stacked row r, KV head h, key part z): grid = (G*R, Hkv, parts), part z
//   = keys [k0, k1) of key_parts() (a segment, a split half or the whole range). The CTA walks
//   its part in tiles of `tile` keys from k0 (the last tile padded past k1 with invalid keys:
//   s = -inf, v_mult = 0, v = 0), up to the tile that holds the row's last visible key `limit`:
//   later tiles are all -inf for this row, and in the model they leave m, l and acc as they are
//   (alpha = 1 or 0 on zeros, p = 0, a block FMA of zero products returns c), so skipping them
//   moves no bit (only the sign of a zero). blockDim = 32 * ceil(max(D, tile) / 32):
//   thread j < tile owns key j of the tile (its score s, p and P = fp16(p * v_mult)), thread
//   t < 4 owns lane t's part of the row sum l (keys 4t..4t+3 of each 16-key slice), thread
//   d < D owns acc[d]; every thread keeps its own copy of the running max m and alpha (all the
//   same value). Dynamic shared memory (pam_smem_bytes): q (D doubles), s, p, P (tile floats
//   each), the tile's int8 K rows (row stride D + 4 bytes: no bank conflicts when thread j
//   reads row j).
// Phases per tile (pam_phase_*: each takes the thread index explicitly, so that
//   tests/model_host_driver.cpp runs the same code on the CPU thread by thread, pam_cta being the
//   one program for both, with a barrier policy; see tests/test_model_kernel_host.py):
//   load:       the tile's K rows into shared memory, cooperatively (zeros past k1);
//   scores:     s[j] = f32(q.k exact in f64) * k_mult (f32), -inf past the limit or past k1;
//               with a lazy running maximum (lazy), s[j] = f32(f32(q.k) * k_mult - mref) in f64
//               (the product exact, one rounding to f32: the kernels' fma), mref = m or 0 if -inf;
//   probs:      every thread: m_new = max(m, max_j s), msafe = m_new or 0 if -inf,
//               alpha = exp2_ftz(m - msafe); thread j: p = exp2_ftz(s - msafe),
//               P = round_fp16(p * v_mult); lazy: d = max_j s, the row moves where d > -inf
//               with no key yet or d > slack: m = d + mref, alpha = exp2_ftz(-d) (0 with no key
//               yet), p = exp2_ftz(s - d); else alpha = 1, p = exp2_ftz(s) (model._lazy_tile);
//   accumulate: lane t: l = l*alpha, then + p of keys 4t..4t+3 of each slice in order;
//               thread d: acc = acc*alpha, then per 16-key slice the block FMA (emulated: groups
//               of mma_k products, pa_bench/numerics/mma.py) or the rn add, straight into acc
//               (pv_chain 0) or into a fresh fp32 c per pv_chain keys, then acc = acc + c.
//   After the last tile thread 0 stores m, lanes store l, thread d stores acc[d]; the parts are
//   merged in Python (model._model_rows), as for the array-module model.
// Barriers: __syncthreads() after load (a score reads a whole K row), after scores (the max reads
//   every score) and after probs (accumulate reads every p and P). None after accumulate: the
//   next tile's load and scores write K and s, which accumulate does not read, and its probs
//   phase, which overwrites p and P, comes after two more barriers. (The host driver runs each
//   phase for all threads before the next, a stricter order.) The tile loop is uniform over
//   the CTA.
// Arithmetic: NO fused multiply-add anywhere: every float op goes through pam_fmul/pam_fadd/...,
//   which are __fmul_rn/__dadd_rn/... on the device (never contracted) and plain operators on
//   the host (compile with -ffp-contract=off); the module is built with --fmad=false too.
//   exp2_ftz is the model's float64 range reduction + degree-13 Horner polynomial; round_fp16
//   and round-toward-zero work on the bit pattern, as in the Python. No cuda_fp16 is needed.
// Cost per (row, key) at D = 128: the exact score (D f64 multiplies and adds), the emulated
//   P.V (per d: a product, an abs and max, a scaled product, a trunc and an add, plus per MMA
//   one frexp/ldexp/divide and the round toward zero: ~6 f64 ops), i.e. ~7*D f64 operations.
#if defined(__CUDACC__)
#define PAM_HD __host__ __device__ __forceinline__
#define PAM_PROG __device__ __forceinline__
#else
#define PAM_HD static inline
#define PAM_PROG static inline
#endif
#if !defined(__CUDACC_RTC__)
#include <cmath>
#include <cstring>
#endif

namespace pam {

constexpr int SLICE = 16;      // keys per MMA slice (k of m16n8k16)
constexpr int LANES = 4;       // lanes sharing a row: lane t holds keys 4t..4t+3 of a slice
constexpr int K_PAD = 4;       // bytes of padding per K row in shared memory

// ---- IEEE basic operations, one rounding each, never fused: the _rn intrinsic on the device,
// the plain operator on the host (g++ with -ffp-contract=off: tests/test_model_kernel_host.py)
#ifdef __CUDA_ARCH__
#define PAM_OP(name, T, intrinsic, op) \
    PAM_HD T name(T a, T b) { return intrinsic(a, b); }
#else
#define PAM_OP(name, T, intrinsic, op) \
    PAM_HD T name(T a, T b) { return a op b; }
#endif
PAM_OP(fmul, float, __fmul_rn, *)
PAM_OP(fadd, float, __fadd_rn, +)
PAM_OP(fsub, float, __fsub_rn, -)
PAM_OP(dmul, double, __dmul_rn, *)
PAM_OP(dadd, double, __dadd_rn, +)
PAM_OP(dsub, double, __dsub_rn, -)
PAM_OP(ddiv, double, __ddiv_rn, /)
#undef PAM_OP

PAM_HD float to_f32(double x) {   // round to nearest even
#ifdef __CUDA_ARCH__
    return __double2float_rn(x);
#else
    return static_cast<float>(x);
#endif
}
PAM_HD unsigned f32_bits(float x) {
#ifdef __CUDA_ARCH__
    return __float_as_uint(x);
#else
    unsigned u;
    std::memcpy(&u, &x, sizeof u);
    return u;
#endif
}
PAM_HD float f32_from_bits(unsigned u) {
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float x;
    std::memcpy(&x, &u, sizeof x);
    return x;
#endif
}
PAM_HD float neg_inf() { return f32_from_bits(0xff800000u); }
PAM_HD float fmaxv(float a, float b) { return a > b ? a : b; }   // no NaN reaches here

// ---- the model's functions (pa_bench/numerics/model.py, mma.py), step for step

// exp2_ftz: 2^x of float32 x <= 14 (above 0 only under a lazy maximum), results below 2^-126 flushed to 0 (-inf gives 0): float64
// range reduction, e^y by Horner from 1/13! down to 1/0! (model._EXP2_COEF), ldexp, one rounding.
PAM_HD float exp2_ftz(float x) {
    const double LN2 = 0x1.62e42fefa39efp-1;          // math.log(2.0)
    double x64 = static_cast<double>(x);
    x64 = x64 < -200.0 ? -200.0 : x64;                // -inf -> -200 (flushed below)
    const double n = floor(dadd(x64, 0.5));
    const double y = dmul(dsub(x64, n), LN2);         // |y| <= ln2/2
    double r = 0x1.6124613a86d09p-33;                 // 1/13!, then Horner down to 1/0!
    r = dadd(dmul(r, y), 0x1.1eed8eff8d898p-29);
    r = dadd(dmul(r, y), 0x1.ae64567f544e4p-26);
    r = dadd(dmul(r, y), 0x1.27e4fb7789f5cp-22);
    r = dadd(dmul(r, y), 0x1.71de3a556c734p-19);
    r = dadd(dmul(r, y), 0x1.a01a01a01a01ap-16);
    r = dadd(dmul(r, y), 0x1.a01a01a01a01ap-13);
    r = dadd(dmul(r, y), 0x1.6c16c16c16c17p-10);
    r = dadd(dmul(r, y), 0x1.1111111111111p-7);
    r = dadd(dmul(r, y), 0x1.5555555555555p-5);
    r = dadd(dmul(r, y), 0x1.5555555555555p-3);
    r = dadd(dmul(r, y), 0x1.0000000000000p-1);
    r = dadd(dmul(r, y), 0x1.0000000000000p+0);
    r = dadd(dmul(r, y), 0x1.0000000000000p+0);
    const float out = to_f32(ldexp(r, static_cast<int>(n)));
    return x < -126.0f ? 0.0f : out;
}

// round_fp16: x.astype(float16).astype(float32) for finite 0 <= x < 65520, as model.round_fp16:
// the normal range on the bit pattern (round to nearest even to 10 mantissa bits), below 2^-14
// (x + 0.5) - 0.5, which rounds to fp16's subnormal spacing 2^-24.
PAM_HD float round_fp16(float x) {
    const unsigned b = f32_bits(x);
    const float normal = f32_from_bits((b + 0x0FFFu + ((b >> 13) & 1u)) & 0xFFFFE000u);
    const float small = fsub(fadd(x, 0.5f), 0.5f);
    return x < 0x1p-14f ? small : normal;
}

// round_toward_zero_f32 (mma.py): round to nearest, then one step toward zero if that went up.
PAM_HD float round_toward_zero_f32(double s) {
    const float r = to_f32(s);
    return fabs(static_cast<double>(r)) > fabs(s) ? f32_from_bits(f32_bits(r) - 1u) : r;
}

// block_fma (mma.py): c plus N exact products, every term truncated on the grid 2^-(24+extra-e)
// of the largest exponent, the exact sum, then rounded toward zero to fp32.
template <int N>
PAM_HD float block_fma(float c, const double* prods, int extra_bits) {
    const double c64 = static_cast<double>(c);
    double big = fabs(c64);
    for (int k = 0; k < N; ++k) big = fabs(prods[k]) > big ? fabs(prods[k]) : big;
    int e = 0;
    frexp(big, &e);                                   // big = m * 2^e, m in [0.5, 1); 0 -> e = 0
    const double inv_q = ldexp(1.0, 24 + extra_bits - e);
    double sum = trunc(dmul(prods[0], inv_q));
    for (int k = 1; k < N; ++k) sum = dadd(sum, trunc(dmul(prods[k], inv_q)));
    sum = dadd(sum, trunc(dmul(c64, inv_q)));
    return round_toward_zero_f32(ddiv(sum, inv_q));
}

// ---- the launch's arguments and the CTA's shared memory

struct Args {
    const double* q;          // [Hkv, GR, D] stacked rows (query head g*G + gi: row gi*R + r)
    const signed char* k;     // [Hkv, Nk, D]
    const signed char* v;     // [Hkv, Nk, D]
    const float* k_mult;      // [Hkv, Nk]
    const float* v_mult;      // [Hkv, Nk]
    const long long* limit;   // [GR] last visible key of each stacked row
    const int* parts;         // [P, 2] key ranges [k0, k1)
    float* out_m;             // [P, Hkv, GR]
    float* out_l;             // [P, Hkv, GR, 4]
    float* out_acc;           // [P, Hkv, GR, D]
    int heads_kv, rows, d, tile;
    long long nk;
    int emulated, mma_k, extra_bits, pv_chain;
    int lazy;                 // 1: the lazy running maximum (model.max_slack), 0: the exact one
    float slack;
    int threads;
};

struct Smem {
    double* q;                // [D]
    float* s;                 // [tile] scores
    float* p;                 // [tile] probabilities
    float* bp;                // [tile] P = fp16(p * v_mult)
    signed char* k;           // [tile][D + K_PAD]
};

PAM_HD long long smem_bytes(int d, int tile) {
    return 8LL * d + 12LL * tile + static_cast<long long>(tile) * (d + K_PAD);
}

PAM_HD Smem smem_layout(unsigned char* base, int d, int tile) {
    Smem sm;
    sm.q = reinterpret_cast<double*>(base);
    sm.s = reinterpret_cast<float*>(base + 8 * d);
    sm.p = sm.s + tile;
    sm.bp = sm.p + tile;
    sm.k = reinterpret_cast<signed char*>(sm.bp + tile);
    return sm;
}

// One thread's registers: its copy of the running max and this tile's alpha, its lane's l
// (t < 4) and its column of acc (t < D).
struct Thread {
    float m, alpha, l, acc;
};

struct Cta {   // where this CTA sits: part z = keys [k0, k1), KV head h, stacked row r
    int z, h, r, k0, k1;
    long long limit;
};

// ---- the phases (t: the thread index)

PAM_HD void phase_init(const Args& a, const Smem& sm, const Cta& c, Thread& th, int t) {
    th.m = neg_inf();
    th.alpha = 0.0f;
    th.l = 0.0f;
    th.acc = 0.0f;
    for (int i = t; i < a.d; i += a.threads)
        sm.q[i] = a.q[(static_cast<long long>(c.h) * a.rows + c.r) * a.d + i];
}

PAM_HD void phase_load(const Args& a, const Smem& sm, const Cta& c, int t, int t0) {
    const int n = a.tile * a.d;
    for (int i = t; i < n; i += a.threads) {
        const int j = i / a.d, col = i - j * a.d;
        const long long key = t0 + j;
        sm.k[j * (a.d + K_PAD) + col] =
            key < c.k1 ? a.k[(c.h * a.nk + key) * a.d + col] : static_cast<signed char>(0);
    }
}

PAM_HD void phase_scores(const Args& a, const Smem& sm, const Cta& c, const Thread& th, int t, int t0) {
    if (t >= a.tile) return;
    const long long key = t0 + t;
    float s = neg_inf();
    if (key < c.k1 && key <= c.limit) {
        const signed char* kr = sm.k + t * (a.d + K_PAD);
        double dot = 0.0;                             // exact: the order does not matter
        for (int i = 0; i < a.d; ++i) dot = dadd(dot, dmul(sm.q[i], static_cast<double>(kr[i])));
        const float km = a.k_mult[c.h * a.nk + key];
        if (a.lazy) {
            const double mref = th.m == neg_inf() ? 0.0 : static_cast<double>(th.m);
            s = to_f32(dsub(dmul(static_cast<double>(to_f32(dot)), static_cast<double>(km)), mref));
        } else {
            s = fmul(to_f32(dot), km);
        }
    }
    sm.s[t] = s;
}

PAM_HD void phase_probs(const Args& a, const Smem& sm, const Cta& c, Thread& th, int t, int t0) {
    float tmax = neg_inf();
    for (int j = 0; j < a.tile; ++j) tmax = fmaxv(tmax, sm.s[j]);
    float sub;                                        // what p's exponent subtracts from s
    if (a.lazy) {
        const bool fresh = th.m == neg_inf();
        const bool move = tmax > (fresh ? neg_inf() : a.slack);
        sub = move ? tmax : 0.0f;
        th.alpha = move ? (fresh ? 0.0f : exp2_ftz(-sub)) : 1.0f;
        if (move) th.m = fadd(sub, fresh ? 0.0f : th.m);
    } else {
        const float m_new = fmaxv(th.m, tmax);
        sub = m_new == neg_inf() ? 0.0f : m_new;
        th.alpha = exp2_ftz(fsub(th.m, sub));
        th.m = m_new;
    }
    if (t < a.tile) {
        const long long key = t0 + t;
        const float p = exp2_ftz(fsub(sm.s[t], sub));
        const float vm = key < c.k1 ? a.v_mult[c.h * a.nk + key] : 0.0f;
        sm.p[t] = p;
        sm.bp[t] = round_fp16(fmul(p, vm));
    }
}

// acc_col plus the P.V of slice n of the tile for column col: emulated (block FMAs of mma_k
// products, keys 0-7 then 8-15 for mma_k 8) or rn (the exact sum, one rounding, one add).
PAM_HD float slice_pv(const Args& a, const Smem& sm, const Cta& c, float acc_col, int col, int t0, int n) {
    double prods[SLICE];
    for (int k = 0; k < SLICE; ++k) {
        const long long key = t0 + n * SLICE + k;
        const double v = key < c.k1 ? static_cast<double>(a.v[(c.h * a.nk + key) * a.d + col]) : 0.0;
        prods[k] = dmul(static_cast<double>(sm.bp[n * SLICE + k]), v);   // exact
    }
    if (a.emulated) {
        if (a.mma_k == SLICE) return block_fma<SLICE>(acc_col, prods, a.extra_bits);
        acc_col = block_fma<SLICE / 2>(acc_col, prods, a.extra_bits);          // m16n8k8 pair:
        return block_fma<SLICE / 2>(acc_col, prods + SLICE / 2, a.extra_bits);  // keys 0-7, 8-15
    }
    double exact = prods[0];                          // exact: < 2^27 on a 2^-24 grid
    for (int k = 1; k < SLICE; ++k) exact = dadd(exact, prods[k]);
    return fadd(acc_col, to_f32(exact));
}

PAM_HD void phase_accumulate(const Args& a, const Smem& sm, const Cta& c, Thread& th, int t, int t0) {
    const int slices = a.tile / SLICE;
    if (t < LANES) {
        th.l = fmul(th.l, th.alpha);
        for (int n = 0; n < slices; ++n)
            for (int j = 0; j < SLICE / LANES; ++j) th.l = fadd(th.l, sm.p[n * SLICE + t * LANES + j]);
    }
    if (t < a.d) {
        th.acc = fmul(th.acc, th.alpha);
        if (a.pv_chain == 0) {
            for (int n = 0; n < slices; ++n) th.acc = slice_pv(a, sm, c, th.acc, t, t0, n);
        } else {
            const int per = a.pv_chain / SLICE;
            for (int n0 = 0; n0 < slices; n0 += per) {
                float chain = 0.0f;
                for (int n = n0; n < n0 + per; ++n) chain = slice_pv(a, sm, c, chain, t, t0, n);
                th.acc = fadd(th.acc, chain);
            }
        }
    }
}

PAM_HD void phase_store(const Args& a, const Cta& c, const Thread& th, int t) {
    const long long row = (static_cast<long long>(c.z) * a.heads_kv + c.h) * a.rows + c.r;
    if (t == 0) a.out_m[row] = th.m;
    if (t < LANES) a.out_l[row * LANES + t] = th.l;
    if (t < a.d) a.out_acc[row * a.d + t] = th.acc;
}

// ---- the CTA's program: the same on the device and in the host driver. `X` runs a phase
// (the calling thread on the device, every thread in turn on the host), X.barrier() is
// __syncthreads() on the device and nothing on the host (which ran the phase to the end).
template <class X>
PAM_PROG void cta_program(X& x, const Args& a, const Smem& sm, int z, int h, int r) {
    Cta c;
    c.z = z;
    c.h = h;
    c.r = r;
    c.k0 = a.parts[2 * z];
    c.k1 = a.parts[2 * z + 1];
    c.limit = a.limit[r];
    const long long end = c.limit + 1 < c.k1 ? c.limit + 1 : c.k1;   // tiles past the limit: no-ops
    x.each([&](Thread& th, int t) { phase_init(a, sm, c, th, t); });
    for (int t0 = c.k0; t0 < end; t0 += a.tile) {
        x.each([&](Thread&, int t) { phase_load(a, sm, c, t, t0); });
        x.barrier();
        x.each([&](Thread& th, int t) { phase_scores(a, sm, c, th, t, t0); });
        x.barrier();
        x.each([&](Thread& th, int t) { phase_probs(a, sm, c, th, t, t0); });
        x.barrier();
        x.each([&](Thread& th, int t) { phase_accumulate(a, sm, c, th, t, t0); });
    }
    x.each([&](Thread& th, int t) { phase_store(a, c, th, t); });
}

}  // namespace pam

#if defined(__CUDACC__)
namespace pam {
struct DeviceThreads {   // this thread's registers; a phase runs for the calling thread
    Thread th;
    template <class F>
    __device__ __forceinline__ void each(F&& f) { f(th, static_cast<int>(threadIdx.x)); }
    __device__ __forceinline__ void barrier() { __syncthreads(); }
};
}  // namespace pam

// grid = (stacked rows, KV heads, parts), blockDim = 32 * ceil(max(D, tile) / 32), dynamic
// shared memory pam::smem_bytes(D, tile) (pa_bench/numerics/model_kernel.py launches it).
extern "C" __global__ void pa_model(const double* q, const signed char* k, const signed char* v,
                                    const float* k_mult, const float* v_mult, const long long* limit,
                                    const int* parts, float* out_m, float* out_l, float* out_acc,
                                    int heads_kv, int rows, int d, int tile, long long nk, int emulated,
                                    int mma_k, int extra_bits, int pv_chain, int lazy, float slack) {
    extern __shared__ __align__(16) unsigned char pam_smem[];
    const pam::Args a = {q, k, v, k_mult, v_mult, limit, parts, out_m, out_l, out_acc,
                         heads_kv, rows, d, tile, nk, emulated, mma_k, extra_bits, pv_chain, lazy, slack,
                         static_cast<int>(blockDim.x)};
    const pam::Smem sm = pam::smem_layout(pam_smem, d, tile);
    pam::DeviceThreads x;
    pam::cta_program(x, a, sm, blockIdx.z, blockIdx.y, blockIdx.x);
}
#endif
