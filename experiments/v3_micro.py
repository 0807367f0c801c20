#!/usr/bin/env python3
"""What v3's step costs in isolation: its wgmma chains and its softmax, timed alone on one SM.

    python3 experiments/v3_micro.py [--kernels DIR] [--reps 200]

Two microbenchmarks built from kernels/v3.cu itself (``#include "v3.cu"``: its wgmma wrappers,
descriptors and softmax), one CTA on one SM, SM-clock cycles per repetition:

- **wgmma chains** (``CHAINS``): a warpgroup issues one step's tensor work the way v3 does (RS form,
  A from registers, B from a 128B-swizzled shared-memory tile of zeros) and waits: S of a 64-key
  tile (8 x m64n64k16), P.V (4 x m64n128k16, B transposed), both back to back, and for comparison
  the S chain with A from shared memory (SS), a 128-key S chain (8 x m64n128k16) and a single
  m64n64k16. Printed per warpgroup: cycles until the issue returns, until the first wait
  (S, or all) and until everything is done; once for one warpgroup, once for two issuing together
  (what the tensor pipe of an SM does for two consumers at once).
- **softmax step** (``SOFTMAX``): v3's ``softmax_tile`` (unmasked and masked), the V-scale multiply
  and the packing of P, on register S values, repeated with each tile depending on the last one's
  P; by 1, 4, 8 and 12 warps of one CTA (1-3 warps a scheduler), cycles per tile and warp. One warp
  is the step's dependency-bound latency; more warps show what sharing a scheduler does to it.

Nothing here is a kernel's figure: the numbers say how long the pieces of a step take when
nothing else runs, to compare with the per-step stamps of ``experiments/v3_steps.py``. ptxas must not
serialise the wgmma chains (C7514/C7515): the CPU test builds both sources and checks.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DEFINES = ("-DPA_HEAD_DIM=128", "-DPA_PAGED=1", "-DPA_OUT_F16=0")

# mode -> what the warpgroup issues before its waits
CHAINS = {
    0: "S: 8 x m64n64k16 RS",
    1: "P.V: 4 x m64n128k16 RS (B transposed)",
    2: "S then P.V (v3's issue)",
    3: "S: 8 x m64n64k16 SS",
    4: "S of 128 keys: 8 x m64n128k16 RS",
    5: "one m64n64k16 RS",
}

CHAINS_SRC = r'''
#include "v3.cu"
using namespace v3;
// A from shared memory (SS), and the 128-key S chain's N = 128 with K-major B: not in v3.cu
__device__ __forceinline__ void mm_ss64(float (&d)[32], u64 da, u64 db, int acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(da), "l"(db), "r"(acc));
}
__device__ __forceinline__ void mm_rs128k(float (&d)[64], const u32 (&a)[4], u64 db, int acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(acc));
}
__device__ __forceinline__ u64 mb_clock() { u64 t; asm volatile("mov.u64 %0, %%clock64;" : "=l"(t)::"memory"); return t; }

template <int MODE>
__device__ __forceinline__ void chains(int reps, int nwg, u64* out, float* sink) {
    extern __shared__ __align__(1024) unsigned char mb_sm[];
    const int wg = threadIdx.x >> 7;
    for (int i = threadIdx.x; i < 65536 / 4; i += blockDim.x) reinterpret_cast<u32*>(mb_sm)[i] = 0;
    __syncthreads();
    if (wg >= nwg) return;
    const u32 base = smem_u32(mb_sm);
    const u64 dk = desc_sw128(base, 16, 1024), dv = desc_sw128(base + 32768, KV_BLOCK, 1024),
              dq = desc_sw128(base + 49152, 16, 1024);
    u32 q[8][4], p[4][4];
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) q[i][e] = 0x3c003c00u;
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) p[i][e] = 0x3c003c00u;
    float s[32], o[64];
#pragma unroll
    for (int i = 0; i < 32; ++i) s[i] = 0.f;
#pragma unroll
    for (int i = 0; i < 64; ++i) o[i] = 0.f;
    u64 t_issue = 0, t_first = 0, t_all = 0;
    for (int r = 0; r < reps + 2; ++r) {
        named_barrier_sync(1, nwg * 128);
        const u64 t0 = mb_clock();
        pin(s);
        pin(o);
        wgmma_fence();
#pragma unroll
        for (int k = 0; k < 8; ++k) {
            const u32 off = (k >> 2) * KV_BLOCK + (k & 3) * 32;     // v3's K-step offsets
            if (MODE == 0 || MODE == 2) wgmma_rs_n64<0>(s, q[k], dk + (off >> 4), k > 0);
            if (MODE == 3) mm_ss64(s, dq + (off >> 4), dk + (off >> 4), k > 0);
            if (MODE == 4) mm_rs128k(o, q[k], dk + ((((k >> 2) * 2 * KV_BLOCK + (k & 3) * 32)) >> 4), k > 0);
            if (MODE == 5 && k == 0) wgmma_rs_n64<0>(s, q[0], dk, 0);
        }
        if (MODE != 1) wgmma_commit();
        if (MODE == 1 || MODE == 2) {
            issue_pv(o, p, dv);
            wgmma_commit();
        }
        const u64 t1 = mb_clock();
        if (MODE == 2) wgmma_wait<1>(); else wgmma_wait<0>();
        pin(s);
        pin(o);
        const u64 t2 = mb_clock();
        wgmma_wait<0>();
        pin(s);
        pin(o);
        const u64 t3 = mb_clock();
        if (r >= 2) { t_issue += t1 - t0; t_first += t2 - t0; t_all += t3 - t0; }
    }
    if ((threadIdx.x & 127) == 0) {
        out[wg * 4 + 0] = t_issue / reps;
        out[wg * 4 + 1] = t_first / reps;
        out[wg * 4 + 2] = t_all / reps;
    }
    float acc = 0.f;
#pragma unroll
    for (int i = 0; i < 32; ++i) acc += s[i];
#pragma unroll
    for (int i = 0; i < 64; ++i) acc += o[i];
    if (acc == 12345.f) sink[threadIdx.x] = acc;
}
#define PA_MB_CHAIN(M) extern "C" __global__ void __launch_bounds__(256, 1) mb_chain##M(int reps, int nwg, u64* out, float* sink) { chains<M>(reps, nwg, out, sink); }
PA_MB_CHAIN(0) PA_MB_CHAIN(1) PA_MB_CHAIN(2) PA_MB_CHAIN(3) PA_MB_CHAIN(4) PA_MB_CHAIN(5)
'''

SOFTMAX_SRC = r'''
#include "v3.cu"
using namespace v3;
template <bool MASKED>
__device__ __forceinline__ void softmax_steps(int reps, unsigned long long* out, float* sink) {
    extern __shared__ __align__(1024) unsigned char mb_st[];   // a stage's scale arrays at F16_KQ, F16_VS
    for (int i = threadIdx.x; i < F16_STAGE / 4; i += blockDim.x) reinterpret_cast<float*>(mb_st)[i] = 0.5f + 1e-3f * (i & 63);
    __syncthreads();
    float s[S_REGS], m[2] = {PA_NEG_INF, PA_NEG_INF}, l[2] = {0.f, 0.f}, al[2];
    u32 pf[PV_STEPS][4];
#pragma unroll
    for (int i = 0; i < S_REGS; ++i) s[i] = __int_as_float(0x40000000 + 4096 * ((threadIdx.x + i) & 15));
    const int lim[2] = {1 << 30, 1 << 30};                    // the masked build's compares, no key masked
    unsigned long long t0 = 0;
    for (int r = 0; r < reps + 4; ++r) {
        if (r == 4) t0 = clock64();
        softmax_tile<MASKED>(mb_st, BN * r, lim, s, m, l, al);
        scale_by_vs(mb_st, s);
        p_fragments(s, pf);
        const int dep = (int)(pf[PV_STEPS - 1][3] & 1u);      // the next tile's S depends on this P: one IADD an element
#pragma unroll
        for (int i = 0; i < S_REGS; ++i) s[i] = __int_as_float(0x40000000 + 4096 * ((threadIdx.x + i) & 15) + dep);
    }
    const unsigned long long t1 = clock64();
    if ((threadIdx.x & 31) == 0) out[threadIdx.x >> 5] = (t1 - t0) / reps;
    float acc = l[0] + l[1] + m[0] + m[1];
#pragma unroll
    for (int i = 0; i < PV_STEPS; ++i) acc += __uint_as_float(pf[i][0]);
    if (acc == 1234.5f) sink[threadIdx.x] = acc;
}
extern "C" __global__ void mb_softmax0(int reps, unsigned long long* out, float* sink) { softmax_steps<false>(reps, out, sink); }
extern "C" __global__ void mb_softmax1(int reps, unsigned long long* out, float* sink) { softmax_steps<true>(reps, out, sink); }
'''

SOURCES = {"chains": CHAINS_SRC, "softmax": SOFTMAX_SRC}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernels", type=Path, default=ROOT / "kernels", help="the kernels directory whose v3.cu is included")
    ap.add_argument("--reps", type=int, default=200)
    args = ap.parse_args(argv)
    import cupy as cp

    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    if (props["major"], props["minor"]) != (9, 0):
        print(f"v3 builds for sm_90a only; this GPU is sm_{props['major']}{props['minor']}")
        return 2
    inc = os.path.join(cp.cuda.get_cuda_path(), "include")
    opts = ("-arch=sm_90a", "-std=c++17", f"-I{args.kernels}", f"-I{inc}") + DEFINES
    sink = cp.zeros(1024, dtype=cp.float32)

    mod = cp.RawModule(code=CHAINS_SRC, options=opts)
    out = cp.zeros(8, dtype=cp.uint64)
    print("wgmma chains, cycles from wgmma.fence: issue returned / first wait / all done")
    for nwg in (1, 2):
        for mode, what in CHAINS.items():
            fn = mod.get_function(f"mb_chain{mode}")
            fn.max_dynamic_shared_size_bytes = 65536
            out.fill(0)
            fn((1,), (256,), (np.int32(args.reps), np.int32(nwg), out, sink), shared_mem=65536)
            cp.cuda.Device().synchronize()
            o = out.get()
            cells = " | ".join(f"wg{w}: {o[4 * w]} / {o[4 * w + 1]} / {o[4 * w + 2]}" for w in range(nwg))
            print(f"  {nwg} warpgroup{'s' if nwg > 1 else ' '} {what:40s} {cells}")

    mod = cp.RawModule(code=SOFTMAX_SRC, options=opts)
    out = cp.zeros(32, dtype=cp.uint64)
    print("softmax step (softmax_tile, V-scale multiply, P packing), cycles a tile and warp")
    for masked in (0, 1):
        fn = mod.get_function(f"mb_softmax{masked}")
        fn.max_dynamic_shared_size_bytes = 40960
        for warps in (1, 4, 8, 12):
            out.fill(0)
            fn((1,), (32 * warps,), (np.int32(args.reps), out, sink), shared_mem=40960)
            cp.cuda.Device().synchronize()
            o = out.get()[:warps].astype(np.int64)
            print(f"  {'masked  ' if masked else 'unmasked'} {warps:2d} warps ({(warps + 3) // 4} a scheduler): "
                  f"{int(np.median(o))} (min {o.min()}, max {o.max()})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
