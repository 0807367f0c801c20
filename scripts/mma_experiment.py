"""The numerics experiment of docs/NUMERICS.md (issue #12), on the CPU.

1. ``probe``: re-creates shared/probes/mma_rounding.py's data (numpy default_rng(0)) and runs its
   chains of MMAs through pa_bench.numerics.mma's emulation (one accumulator, and a fresh one per
   MMA added with round-to-nearest), beside the H200's published figures.
2. ``attention``: the numerics model's max abs error against FP64 at long contexts, with P.V
   accumulated as the MMAs do ("emulated") or ideally ("rn"), for the old single-chain kernels
   (v1 one chain; v2 one chain or two split halves) and for the segmented ones.

    python scripts/mma_experiment.py probe
    python scripts/mma_experiment.py attention --contexts 64K,256K,1024K --data normal [--gpu]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from pa_bench.numerics import mma as M

PUBLISHED = {1024: -8.8e-5, 65536: -5.5e-3, 262144: -2.2e-2}  # H200, positive terms (SPEC s.1)


def probe(extra_bits_list=(0, 1, 2, 3)) -> None:
    rng = np.random.default_rng(0)
    n_max = 1 << 18
    a = (rng.random(n_max) * 0.25 + 0.01).astype(np.float16)
    b = rng.standard_normal(n_max).astype(np.float16)
    checks = (1024, 4096, 16384, 65536, 262144)
    for signed in (False, True):
        bb = b if signed else np.abs(b)
        prods = a.astype(np.float64) * bb.astype(np.float64)
        exact = 16 * np.cumsum(prods)
        eb = np.array(extra_bits_list)
        c = np.zeros(len(eb), np.float32)          # one accumulator per extra-bits setting
        fresh = np.zeros(1, np.float32)            # fresh accumulator per MMA + fadd_rn (2 bits)
        rows = {}
        for k in range(n_max):
            pk = np.full((len(eb), 16), prods[k])
            c = np.stack([M.block_fma(c[i:i + 1], pk[i:i + 1], extra_bits=int(e))[0]
                          for i, e in enumerate(eb)])
            fresh = fresh + M.block_fma(np.zeros(1, np.float32), np.full((1, 16), prods[k]))
            if k + 1 in checks:
                ex = exact[k]
                rows[k + 1] = ([(float(x) - ex) / abs(ex) for x in c], (float(fresh[0]) - ex) / abs(ex))
        kind = "signed" if signed else "positive"
        print(f"\n{kind} terms: relative error after n MMAs (emulation; H200 figure where published)")
        print("| n | " + " | ".join(f"{e} extra bits" for e in eb) + " | fresh + RN | H200 |")
        print("|---|" + "---|" * (len(eb) + 2))
        for n in checks:
            errs, fr = rows[n]
            pub = PUBLISHED.get(n) if not signed else None
            print(f"| {n} | " + " | ".join(f"{x:+.2e}" for x in errs) + f" | {fr:+.1e} | "
                  + (f"{pub:+.1e}" if pub else "") + " |")


def attention(contexts, data, queries, rows_n, heads, gpu=False) -> None:
    from pa_bench.numerics.model import SEGMENT_KEYS, model_arrays, model_attention, split_point
    from pa_bench.numerics.reference import reference_attention, sample_rows
    from pa_bench.problem.inputs import make_inputs
    from pa_bench.problem.plan import Problem
    from pa_bench.problem.shapes import parse_shape

    hq, hkv = heads
    print(f"\n{data} data, {hq}/{hkv} heads, D=128, {queries} queries, {rows_n} sampled rows; max abs err vs FP64")
    print("| shape | kernel arithmetic | P.V rn | P.V emulated | emulated / rn |")
    print("|---|---|---|---|---|")
    for ctx_label in contexts:
        shape = parse_shape(f"{ctx_label}x{queries}")
        pb = Problem(shape, heads_q=hq, heads_kv=hkv, head_dim=128, layout="contiguous", data=data, seed=0)
        inp = make_inputs(pb)
        rows = sample_rows(queries, rows_n, 0)
        ref = reference_attention(inp.q, inp.k_i8, inp.v_i8, pb.context, pb.softmax_scale, rows=rows,
                                  k_scale=inp.k_scale, v_scale=inp.v_scale)
        arrays = inp
        if gpu:  # the same bits as on the CPU (tests/gpu/test_model_gpu.py), much faster
            import cupy
            arrays = model_arrays(inp, cupy)
        seg = SEGMENT_KEYS if pb.context > SEGMENT_KEYS else 0
        cases = [("v1, one chain", 64, 0, 0), ("v2, one chain", 16, 0, 0),
                 ("v2, split halves", 16, split_point(pb.context), 0)]
        if seg:
            cases += [("v1, segments", 64, 0, seg), ("v2, segments", 16, 0, seg)]
        for name, tile, split, sg in cases:
            errs = []
            for mode in ("rn", "emulated"):
                t0 = time.time()
                out = model_attention(arrays, tile, rows, split_keys=split, segment_keys=sg, mma=mode)
                out = out.get() if gpu else out
                errs.append(float(np.abs(out.astype(np.float64) - ref).max()))
                secs = time.time() - t0
            print(f"| {ctx_label}x{queries} | {name} | {errs[0]:.3g} | {errs[1]:.3g} | "
                  f"{errs[1] / errs[0]:.2f} |  <!-- {secs:.0f} s -->", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=["probe", "attention"])
    ap.add_argument("--contexts", default="64K,256K,1024K")
    ap.add_argument("--data", default="normal")
    ap.add_argument("--queries", type=int, default=64)
    ap.add_argument("--rows", type=int, default=4)
    ap.add_argument("--heads", default="2/1")
    ap.add_argument("--gpu", action="store_true", help="run the model with CuPy")
    args = ap.parse_args()
    if args.what == "probe":
        probe()
    else:
        hq, hkv = (int(x) for x in args.heads.split("/"))
        attention(args.contexts.split(","), args.data, args.queries, args.rows, (hq, hkv), args.gpu)


if __name__ == "__main__":
    main()
