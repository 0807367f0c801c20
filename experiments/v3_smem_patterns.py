#!/usr/bin/env python3
"""What each of v3's shared-memory access patterns costs the LSU: cycles per warp instruction.

    python3 experiments/v3_smem_patterns.py [--kernels DIR] [--reps 2000] [--warps 16]

One CTA on one SM; every warp issues one pattern's instructions back to back, `reps` times, with
nothing else to do (the addresses are v3's own: kernels/v3.cu is included for prod_row,
prod_chunk, stage_off and sw128). The LSU's data pipe takes one wavefront a cycle, so with enough
warps issuing, cycles per warp instruction is the wavefronts each instruction costs; the
reference patterns (contiguous 4-, 8- and 16-byte accesses) give the scale. Run under Nsight
Compute (``--metrics l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,...``) the same kernels
give its wavefront counts, to set beside the cycles.

Patterns (a warp instruction each; t = lane % 4):

- ``kq-ld64``: v3's key-scale loads in the softmax: float2 at kq + 8j + 2t, j < 8 (4 distinct
  addresses in 32 bytes, each read by 8 lanes);
- ``kq-ld128``: the same scales as float4 at kq + 4t + 16jj, jj < 4 (4 addresses in 64 bytes);
- ``ld32-seq``, ``ld64-seq``, ``ld128-seq``: lane l reads 4, 8 or 16 bytes at l * size (references);
- ``staging-ld128``: the producer's int8 staging loads (stage_off(prod_row, prod_chunk)), K and V;
- ``f16-st128``: the producer's fp16 stores into the 128B-swizzled stage (sw128), K and V;
- ``st128-seq``: lane l stores 16 bytes at 16 l (reference);
- ``mbar-try``: mbarrier.try_wait.parity on a phase already complete (what a wait costs that
  does not wait);
- ``mbar-arrive32``: mbarrier.arrive by every lane (v3's full and empty arrivals), one barrier a
  warp; ``mbar-arrive1``: the same by lane 0 only, after __syncwarp;
- and ``sp_mix``: S's wgmma chain (SS or RS) in one or two warpgroups beside ld128-seq's loads in
  a third, each alone and together: whether wgmma's operand reads and the LSU share shared
  memory's 128 bytes a cycle.
- ``shfl-idx``: __shfl_sync from lane 4j + t, each depending on the last (a chain: its cycles
  are the shuffle's latency over the warps, or its throughput); ``ld128+shfl``: 4 loads of
  ld128-seq and 8 such shuffles interleaved, 12 instructions a repetition: near ld128-seq's 16
  cycles a repetition if shuffles do not take the LSU's wavefronts, near 24 if they do.

The loads are ``ld.volatile.shared``: ptxas would otherwise keep one of each repeated load.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DEFINES = ("-DPA_HEAD_DIM=128", "-DPA_PAGED=1", "-DPA_OUT_F16=0", "-DPA_CTA_ROWS=192")

# id: (name, its instructions a repetition)
PATTERNS = {
    0: ("kq-ld64", 8),
    1: ("kq-ld128", 4),
    2: ("ld32-seq", 8),
    3: ("ld64-seq", 8),
    4: ("ld128-seq", 8),
    5: ("staging-ld128", 2 * 4),
    6: ("f16-st128", 4 * 4),
    7: ("st128-seq", 8),
    8: ("mbar-try", 8),
    9: ("mbar-arrive32", 8),
    10: ("mbar-arrive1", 8),
    11: ("shfl-idx", 8),
    12: ("ld128+shfl", 12),
}

SRC = r'''
#include "v3.cu"
using namespace v3;

__device__ __forceinline__ void ld64(u32 a, u32& x, u32& y) {
    asm volatile("ld.volatile.shared.v2.u32 {%0, %1}, [%2];" : "=r"(x), "=r"(y) : "r"(a));
}
__device__ __forceinline__ void ld128(u32 a, uint4& v) {
    asm volatile("ld.volatile.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(a));
}
__device__ __forceinline__ void ld32(u32 a, u32& x) { asm volatile("ld.volatile.shared.u32 %0, [%1];" : "=r"(x) : "r"(a)); }
__device__ __forceinline__ void st128(u32 a, uint4 v) {
    asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" :: "r"(a), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
}
__device__ __forceinline__ void arrive(u32 bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(bar) : "memory");
}
__device__ __forceinline__ u32 try_wait(u32 bar, u32 parity) {
    u32 ok;
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(ok) : "r"(bar), "r"(parity) : "memory");
    return ok;
}

template <int P>
__device__ void pattern(int reps, unsigned long long* out, unsigned* sink) {
    extern __shared__ __align__(1024) unsigned char sm[];
    const u32 base = smem_u32(sm);
    const int lane = threadIdx.x & 31, pw = (threadIdx.x >> 5) & 3, t = lane & 3;
    for (int i = threadIdx.x; i < 65536 / 4; i += blockDim.x) reinterpret_cast<u32*>(sm)[i] = i;
    if (threadIdx.x < 33) mbar_init(base + 65536 + 8 * threadIdx.x, threadIdx.x ? (1u << 20) - 1 : 1);
    __syncthreads();
    u32 acc = 0;
    uint4 v = make_uint4(threadIdx.x, 1, 2, 3);
    const long long c0 = clock64();
    for (int r = 0; r < reps; ++r) {
        if (P == 0) {
#pragma unroll
            for (int j = 0; j < 8; ++j) { u32 x, y; ld64(base + 4 * (8 * j + 2 * t), x, y); acc ^= x + y; }
        } else if (P == 1) {
#pragma unroll
            for (int jj = 0; jj < 4; ++jj) { ld128(base + 4 * (4 * t + 16 * jj), v); acc ^= v.x ^ v.y ^ v.z ^ v.w; }
        } else if (P == 2) {
#pragma unroll
            for (int j = 0; j < 8; ++j) { u32 x; ld32(base + 4096 * j + 4 * lane, x); acc ^= x; }
        } else if (P == 3) {
#pragma unroll
            for (int j = 0; j < 8; ++j) { u32 x, y; ld64(base + 4096 * j + 8 * lane, x, y); acc ^= x + y; }
        } else if (P == 4) {
#pragma unroll
            for (int j = 0; j < 8; ++j) { ld128(base + 4096 * j + 16 * lane, v); acc ^= v.x ^ v.y ^ v.z ^ v.w; }
        } else if (P == 5) {
#pragma unroll
            for (int i = 0; i < NI; ++i) {
                const int row = prod_row(pw, lane, i), ch = prod_chunk(lane);
                ld128(base + I8_K + stage_off(row, ch), v); acc ^= v.x ^ v.y ^ v.z ^ v.w;
                ld128(base + I8_V + stage_off(row, ch), v); acc += v.x ^ v.y ^ v.z ^ v.w;
            }
        } else if (P == 6) {
#pragma unroll
            for (int i = 0; i < NI; ++i) {
                const int row = prod_row(pw, lane, i), ch = prod_chunk(lane);
                st128(base + 16384 + F16_K + sw128(row, 2 * ch, KV_BLOCK), v);
                st128(base + 16384 + F16_K + sw128(row, 2 * ch + 1, KV_BLOCK), v);
                st128(base + 16384 + F16_V + sw128(row, 2 * ch, KV_BLOCK), v);
                st128(base + 16384 + F16_V + sw128(row, 2 * ch + 1, KV_BLOCK), v);
            }
        } else if (P == 7) {
#pragma unroll
            for (int j = 0; j < 8; ++j) st128(base + 4096 * j + 16 * lane, v);
        } else if (P == 8) {
#pragma unroll
            for (int j = 0; j < 8; ++j) acc += try_wait(base + 65536, 1);
        } else if (P == 9) {
#pragma unroll
            for (int j = 0; j < 8; ++j) arrive(base + 65536 + 8 + 8 * (threadIdx.x >> 5));
        } else if (P == 10) {
#pragma unroll
            for (int j = 0; j < 8; ++j) { __syncwarp(); if (lane == 0) arrive(base + 65536 + 8 + 8 * (threadIdx.x >> 5)); }
        } else if (P == 11) {
#pragma unroll
            for (int j = 0; j < 8; ++j) acc += __shfl_sync(0xffffffffu, acc + j, 4 * j + t);
        } else {   // 12: the loads of ld128-seq and the shuffles of shfl-idx, interleaved
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                ld128(base + 4096 * j + 16 * lane, v); acc ^= v.x ^ v.y ^ v.z ^ v.w;
                acc += __shfl_sync(0xffffffffu, acc + j, 4 * j + t);
                acc += __shfl_sync(0xffffffffu, acc + 2 * j, 4 * j + t + 1);
            }
        }
    }
    const long long c1 = clock64();
    __syncthreads();
    if (lane == 0) out[threadIdx.x >> 5] = (unsigned long long)(c1 - c0);
    if (acc == 0xdeadbeefu) sink[threadIdx.x] = acc;
}
// Contention: warpgroups 0 and 1 run S's wgmma chain (8 x m64n64k16, SS: Q and K from shared
// memory, or RS: Q from registers) `reps` times, waiting for each chain; warpgroup 2 issues the
// loads of ld128-seq `reps` times (four warps keep the LSU busy: ld128-seq's figure at 4 warps). mode bits: 1 warpgroup 0 runs its chains, 2 warpgroup 1,
// 4 the loads run, 8 the chains are RS (the kernel sp_mix_rs; sp_mix_ss else). out[w] = warp w's cycles.
template <bool RS>
__device__ void mix(int reps, int mode, unsigned long long* out, unsigned* sink) {
    extern __shared__ __align__(1024) unsigned char sm[];
    const u32 base = smem_u32(sm);
    const int wg = __shfl_sync(0xffffffffu, (int)(threadIdx.x >> 7), 0), lane = threadIdx.x & 31;
    for (int i = threadIdx.x; i < 65536 / 4; i += blockDim.x) reinterpret_cast<u32*>(sm)[i] = 0;
    __syncthreads();
    u32 acc = 0;
    const long long c0 = clock64();
    if (wg < 2 && (mode & (1 << wg))) {
        const u64 dk = desc_sw128(base, 16, 1024), dq = desc_sw128(base + 16384, 16, 1024);
        u32 q[8][4];
#pragma unroll
        for (int i = 0; i < 8; ++i)
#pragma unroll
            for (int e = 0; e < 4; ++e) q[i][e] = 0x3c003c00u + i + 8 * e;   // distinct registers (ptxas folds equal constants)
        float d[32];
#pragma unroll
        for (int i = 0; i < 32; ++i) d[i] = 0.f;
        for (int r = 0; r < reps; ++r) {
            pin(d);
            wgmma_fence();
#pragma unroll
            for (int k = 0; k < 8; ++k) {
                const u32 off = (k >> 2) * KV_BLOCK + (k & 3) * 32;
                if (RS) wgmma_rs_n64<0>(d, q[k], dk + (off >> 4), 1);
                else wgmma_ss_n64(d, dq + (off >> 4), dk + (off >> 4), 1);
            }
            wgmma_commit();
            wgmma_wait<0>();
            pin(d);
        }
        float sum = 0.f;
#pragma unroll
        for (int i = 0; i < 32; ++i) sum += d[i];
        acc = __float_as_uint(sum);
    } else if (wg == 2 && (mode & 4)) {
        uint4 v;
        for (int r = 0; r < reps; ++r) {
#pragma unroll
            for (int j = 0; j < 8; ++j) { ld128(base + 32768 + 4096 * j + 16 * lane, v); acc ^= v.x ^ v.y ^ v.z ^ v.w; }
        }
    }
    const long long c1 = clock64();
    if (lane == 0) out[threadIdx.x >> 5] = (unsigned long long)(c1 - c0);
    if (acc == 0xdeadbeefu) sink[threadIdx.x] = acc;
}
extern "C" __global__ void __launch_bounds__(384, 1) sp_mix_ss(int reps, int mode, unsigned long long* out, unsigned* sink) { mix<false>(reps, mode, out, sink); }
extern "C" __global__ void __launch_bounds__(384, 1) sp_mix_rs(int reps, int mode, unsigned long long* out, unsigned* sink) { mix<true>(reps, mode, out, sink); }

#define PA_SP(P) extern "C" __global__ void __launch_bounds__(1024, 1) sp##P(int reps, unsigned long long* out, unsigned* sink) { pattern<P>(reps, out, sink); }
PA_SP(0) PA_SP(1) PA_SP(2) PA_SP(3) PA_SP(4) PA_SP(5) PA_SP(6) PA_SP(7) PA_SP(8) PA_SP(9) PA_SP(10) PA_SP(11) PA_SP(12)
'''

SMEM = 65536 + 1024

MIX_MODES = {
    1: "one SS chain alone", 3: "two SS chains", 4: "loads alone", 5: "one SS chain + loads",
    7: "two SS chains + loads", 9: "one RS chain alone", 13: "one RS chain + loads",
    11: "two RS chains", 15: "two RS chains + loads",
}

# The machine instruction each pattern times (cuobjdump's opcode with its width): ptxas must keep
# the access as written, e.g. not split a 128-bit load whose results are partly unused.
SASS_OP = {
    0: "LDS.64", 1: "LDS.128", 2: "LDS", 3: "LDS.64", 4: "LDS.128", 5: "LDS.128", 6: "STS.128",
    7: "STS.128", 8: "SYNCS.PHASECHK.TRANS64.TRYWAIT", 9: "SYNCS.ARRIVE.TRANS64.A1T0",
    10: "SYNCS.ARRIVE.TRANS64.A1T0", 11: "SHFL.IDX", 12: "LDS.128",
}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernels", type=Path, default=ROOT / "kernels", help="the kernels directory whose v3.cu is included")
    ap.add_argument("--reps", type=int, default=2000)
    ap.add_argument("--warps", type=int, default=16, help="warps of the one CTA (4 a scheduler at 16)")
    args = ap.parse_args(argv)
    import cupy as cp

    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    if (props["major"], props["minor"]) != (9, 0):
        print(f"v3 builds for sm_90a only; this GPU is sm_{props['major']}{props['minor']}")
        return 2
    inc = os.path.join(cp.cuda.get_cuda_path(), "include")
    opts = ("-arch=sm_90a", "-std=c++17", f"-I{args.kernels}", f"-I{inc}") + DEFINES
    mod = cp.RawModule(code=SRC, options=opts)
    out = cp.zeros(32, dtype=cp.uint64)
    sink = cp.zeros(1024, dtype=cp.uint32)
    print(f"{args.warps} warps, {args.reps} repetitions: SM cycles per warp instruction "
          "(the slowest warp's cycles / all warps' instructions of the pattern)")
    for p, (name, per_rep) in PATTERNS.items():
        fn = mod.get_function(f"sp{p}")
        fn.max_dynamic_shared_size_bytes = SMEM
        for _ in range(2):                      # the first launch warms up; the second is printed
            out.fill(0)
            fn((1,), (32 * args.warps,), (np.int32(args.reps), out, sink), shared_mem=SMEM)
            cp.cuda.Device().synchronize()
        cycles = int(out.get()[: args.warps].max())
        per_instr = cycles / (args.reps * per_rep * args.warps)
        print(f"  {name:14s} {per_instr:6.2f}")

    # contention between S's wgmma reads and the LSU's loads (sp_mix)
    mix = {rs: mod.get_function(f"sp_mix_{rs}") for rs in ("ss", "rs")}
    for fn in mix.values():
        fn.max_dynamic_shared_size_bytes = SMEM
    print("wgmma chains (8 x m64n64k16) beside ld128-seq loads: cycles a chain (warpgroups 0, 1) "
          "and a warp load instruction (4 warps)")
    for mode, what in MIX_MODES.items():
        fn = mix["rs" if mode & 8 else "ss"]
        for _ in range(2):
            out.fill(0)
            fn((1,), (384,), (np.int32(args.reps), np.int32(mode), out, sink), shared_mem=SMEM)
            cp.cuda.Device().synchronize()
        cyc = out.get()[:12].astype(np.int64)
        cells = []
        for wg in (0, 1):
            if mode & (1 << wg):
                cells.append(f"wg{wg} chain {cyc[4 * wg:4 * wg + 4].max() / args.reps:7.1f}")
        if mode & 4:
            cells.append(f"load {cyc[8:12].max() / (args.reps * 8 * 4):5.2f}")
        print(f"  {what:34s} " + "   ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
