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

import pa_bench

SPLITS = {"rule": [None], "on": [True], "off": [False], "both": [False, True]}
TIMING = dict(warmup=3, min_seconds=0.3, max_seconds=2, max_noise=0.01, min_samples=15)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("shapes", nargs="*", default=["32Kx1024", "64Kx512", "0x1536", "2.1Kx256"])
    ap.add_argument("--label", default="A", help="printed on every line (name the kernel version)")
    ap.add_argument("--split", choices=sorted(SPLITS), default="rule", help="v2/v2t split keys")
    ap.add_argument("--tiles", type=int, choices=(1, 2), default=None, help="v2/v2t tiles per warp")
    ap.add_argument("--rows", type=int, default=6, help="query rows checked against FP64")
    return ap.parse_args(argv)


def launches(split: str, tiles: int | None) -> list[pa_bench.Pins]:
    """The launch choices compared: one per split setting, each with the tiles asked for."""
    return [pa_bench.Pins(split=choice, tiles=tiles) for choice in SPLITS[split]]


def error_line(tag: str, variant: str, err: float, model_err: float, deterministic: bool, build: dict) -> str:
    return (f"{tag} {variant}: err {err:.3e}, model {model_err:.3e} (x{err / model_err:.2f}), "
            f"deterministic {deterministic}; {build['num_regs']} regs, {build['ctas_per_sm']} CTAs/SM")


def time_line(tag: str, variant: str, samples_ms, flops: float) -> str:
    ms = float(np.median(samples_ms))
    return f"{tag} {variant:4s} {ms:.3f} ms  {flops / ms / 1e9:.0f} TFLOP/s  ({len(samples_ms)} samples)"


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    last = None   # one backend for every shape: each build compiles once
    for shape in args.shapes:
        pb = pa_bench.make_problem(shape)
        s = pa_bench.session(pb) if last is None else last.another(pb)
        last = s
        with s:
            rows = s.sample_rows(args.rows, seed=1)
            ref = s.reference(rows)
            for n, pins in enumerate(launches(args.split, args.tiles)):
                chosen = s.launch_of("v2", launch=pins)
                tag = f"[{args.label}] {shape} split={chosen.split_keys} tiles={chosen.tiles}"
                model_err = float(np.abs(s.model("v2", rows, launch=pins) - ref).max())
                hashes = {}
                for v in ("v2", "v2t"):
                    out = s.compute(v, rows, launch=pins)
                    err = float(np.abs(out.out - ref).max())
                    hashes[v] = out.full_hash
                    print(error_line(tag, v, err, model_err, out.deterministic,
                                     s.kernel_info(v, launch=pins)), flush=True)
                print(f"{tag} v2 == v2t bitwise: {hashes['v2'] == hashes['v2t']}", flush=True)
                timed = s.time((["v1"] if n == 0 else []) + ["v2", "v2t"], launch=pins, **TIMING)
                for v, res in timed.items():
                    if isinstance(res, str):
                        print(f"{tag} {v}: {res}")
                        continue
                    print(time_line(tag, v, res.samples_ms, pb.flops), flush=True)


if __name__ == "__main__":
    main()
