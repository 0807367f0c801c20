// The host driver of kernels/pa_model.cu: runs the kernel's own CTA program (pam::cta_program)
// on the CPU, every CTA of the grid in turn and, within a CTA, each phase for every thread in
// turn before the next phase (the barriers). Shared memory and each thread's state start as
// NaN garbage in every CTA, so a read before a write shows in the bits. Built by
// tests/test_model_kernel_host.py with g++ -O2 -ffp-contract=off -shared -fPIC -I kernels.
#include <cstring>
#include <vector>

#include "pa_model.cu"

namespace {
struct HostThreads {
    std::vector<pam::Thread> th;
    template <class F>
    void each(F&& f) {
        for (int t = 0; t < static_cast<int>(th.size()); ++t) f(th[t], t);
    }
    void barrier() {}
};
}  // namespace

extern "C" long long pam_host_smem_bytes(int d, int tile) { return pam::smem_bytes(d, tile); }

// pa_model's arguments in the kernel's order, then the launch geometry it would have.
extern "C" void pam_host_run(const double* q, const signed char* k, const signed char* v,
                             const float* k_mult, const float* v_mult, const long long* limit,
                             const int* parts, float* out_m, float* out_l, float* out_acc,
                             int heads_kv, int rows, int d, int tile, long long nk, int emulated,
                             int mma_k, int extra_bits, int pv_chain, int lazy, float slack, int n_parts,
                             int threads) {
    const pam::Args a = {q, k, v, k_mult, v_mult, limit, parts, out_m, out_l, out_acc,
                         heads_kv, rows, d, tile, nk, emulated, mma_k, extra_bits, pv_chain, lazy, slack,
                         threads};
    std::vector<unsigned char> smem(static_cast<size_t>(pam::smem_bytes(d, tile)));
    const pam::Smem sm = pam::smem_layout(smem.data(), d, tile);
    HostThreads x;
    x.th.resize(threads);
    for (int z = 0; z < n_parts; ++z)
        for (int h = 0; h < heads_kv; ++h)
            for (int r = 0; r < rows; ++r) {
                std::memset(smem.data(), 0xff, smem.size());
                std::memset(static_cast<void*>(x.th.data()), 0xff, x.th.size() * sizeof(pam::Thread));
                pam::cta_program(x, a, sm, z, h, r);
            }
}

// The arithmetic helpers one by one, for the element-wise tests against the Python.
extern "C" void pam_host_exp2_ftz(const float* x, float* out, long long n) {
    for (long long i = 0; i < n; ++i) out[i] = pam::exp2_ftz(x[i]);
}
extern "C" void pam_host_round_fp16(const float* x, float* out, long long n) {
    for (long long i = 0; i < n; ++i) out[i] = pam::round_fp16(x[i]);
}
// c [n] plus prods [n, k] (k = 8 or 16) through one block FMA each.
extern "C" void pam_host_block_fma(const float* c, const double* prods, float* out, long long n, int k,
                                   int extra_bits) {
    for (long long i = 0; i < n; ++i)
        out[i] = k == 16 ? pam::block_fma<16>(c[i], prods + 16 * i, extra_bits)
                         : pam::block_fma<8>(c[i], prods + 8 * i, extra_bits);
}
