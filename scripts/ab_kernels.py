"""A/B of kernel versions and launch choices on one GPU, in one process: the script behind the
measured steps of docs/PERF_NOTES.md.

    PA_BENCH_KERNELS=/path/to/kernels python scripts/ab_kernels.py --label new --split both 32Kx1024 64Kx512

For each shape (PR defaults: 32/8 heads, D=128, paged 64, normal data) and each launch choice it
checks v2/v2t on a few sampled rows (error against FP64 and against the numerics model of the
same split, v2 == v2t bitwise) and then times v1 (first choice only), v2 and v2t interleaved with
pa-bench's timing, printing one line per variant. Kernel versions are compared by running it once
per kernel directory (PA_BENCH_KERNELS) with different labels; the figures are a quick A/B, not a
committed run.
"""

from __future__ import annotations

import argparse

import numpy as np

from pa_bench.problem.config import TimingSettings
from pa_bench.backends.cuda import CudaBackend
from pa_bench.problem.inputs import make_inputs
from pa_bench.numerics.model import model_attention, tile_keys
from pa_bench.problem.plan import Problem
from pa_bench.numerics.reference import sample_rows
from pa_bench.problem.shapes import parse_shape

SPLITS = {"rule": [None], "on": [True], "off": [False], "both": [False, True]}


def occupancy(backend, variant: str, problem) -> str:
    """Registers per thread and resident CTAs per SM of the build that runs ``problem``."""
    fn = backend.kernel(backend.build(variant, problem))
    ctas = backend.cp.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(
        fn.kernel.ptr, backend.geometry(variant, problem).block, 0)
    return f"{fn.num_regs} regs, {ctas} CTAs/SM"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("shapes", nargs="*", default=["32Kx1024", "64Kx512", "0x1536", "2.1Kx256"])
    ap.add_argument("--label", default="A", help="printed on every line (name the kernel version)")
    ap.add_argument("--split", choices=sorted(SPLITS), default="rule", help="v2/v2t split keys")
    ap.add_argument("--tiles", type=int, choices=(1, 2), default=None, help="v2/v2t tiles per warp")
    ap.add_argument("--carveout", type=int, default=None, help="preferred shared-memory carveout, %%")
    ap.add_argument("--rows", type=int, default=6, help="query rows checked against FP64")
    args = ap.parse_args()

    backend = CudaBackend()
    if args.carveout is not None:
        build_kernel = backend.kernel

        def kernel(build):
            fn = build_kernel(build)
            fn.preferred_shared_memory_carveout = args.carveout
            return fn

        backend.kernel = kernel
    settings = TimingSettings(warmup=3, min_seconds=0.3, max_seconds=2, max_noise=0.01, min_samples=15)
    for shape in args.shapes:
        pb = Problem(parse_shape(shape))
        inputs = make_inputs(pb)
        prep = backend.prepare(inputs)
        rows = sample_rows(pb.queries, args.rows, 1)
        ref = np.asarray(backend.reference(inputs, rows))
        for n, split in enumerate(SPLITS[args.split]):
            backend.split, backend.tiles = split, args.tiles
            split_keys = backend.split_keys("v2", pb)
            tag = f"[{args.label}] {shape} split={split_keys} tiles={backend.tiles_for(pb)}"
            model = model_attention(inputs, tile_keys("v2"), rows, split_keys=split_keys)
            model_err = float(np.abs(model - ref).max())
            hashes = {}
            for v in ("v2", "v2t"):
                out = backend.compute(prep, v, rows)
                err = float(np.abs(out.out - ref).max())
                hashes[v] = out.full_hash
                print(f"{tag} {v}: err {err:.3e}, model {model_err:.3e} (x{err / model_err:.2f}), "
                      f"deterministic {out.deterministic}; {occupancy(backend, v, pb)}", flush=True)
            print(f"{tag} v2 == v2t bitwise: {hashes['v2'] == hashes['v2t']}", flush=True)
            timed = backend.time(prep, (["v1"] if n == 0 else []) + ["v2", "v2t"], settings)
            for v, res in timed.items():
                if isinstance(res, str):
                    print(f"{tag} {v}: {res}")
                    continue
                ms = float(np.median(res.samples_ms))
                print(f"{tag} {v:4s} {ms:.3f} ms  {pb.flops / ms / 1e9:.0f} TFLOP/s  "
                      f"({len(res.samples_ms)} samples)", flush=True)
        backend.split, backend.tiles = None, None
        backend.release(prep)


if __name__ == "__main__":
    main()
