"""A quick check of the triton variant and the torch-flex peer on a GPU, before a full run.

    python scripts/triton_check.py                       # the PR's four shapes (configs/pr2092.yaml)
    python scripts/triton_check.py 32Kx1024 --sweep      # also time every candidate configuration

For each shape (the config's heads, head size, layout, page and data) it runs ``triton`` through
the cuda backend as a run does (canaries, two launches bitwise equal), compares sampled rows with
the FP64 reference and with the numerics model of its 64-key tiles (the parity rule), does the same
for ``torch-flex`` (error for information), and times triton, v2t and torch-flex interleaved with
pa-bench's timing (GPU time only, L2 flushed) under short limits. One line per variant; the
figures are a sanity check, not a committed run. ``--sweep`` times kernels/triton_pa.py's
CANDIDATES configurations against each other (the same bits: BLOCK_N is fixed) and names the
fastest, so that default_config can be set from a measurement.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from pa_bench.backends import torch_flex, triton_runner
from pa_bench.backends.cuda import GUARD_ELEMS, CudaBackend
from pa_bench.measure import timing
from pa_bench.numerics.metrics import error_metrics, judge_parity, parity_floor
from pa_bench.numerics.reference import sample_rows
from pa_bench.problem.config import TimingSettings, load_config
from pa_bench.problem.inputs import make_inputs
from pa_bench.problem.plan import make_plan

SETTINGS = TimingSettings(warmup=3, min_seconds=0.2, max_seconds=1.5, max_noise=0.01, min_samples=10)


def check(backend, prep, inputs, rows, ref, variant: str) -> str:
    t0 = time.perf_counter()
    res = backend.compute(prep, variant, rows)
    first = time.perf_counter() - t0
    err = error_metrics(res.out, ref)
    line = f"max_abs_err {err['max_abs_err']:.3e}  nan/inf {err['nan_inf']}  deterministic {res.deterministic}"
    if variant == triton_runner.VARIANT:
        model = backend.model(inputs, triton_runner.tile_keys(), rows)
        m_err = error_metrics(model, ref)["max_abs_err"]
        ok, why = judge_parity(err["max_abs_err"], m_err, parity_floor(ref), err["nan_inf"], res.canary_ok)
        line += f"  model {m_err:.3e}  canaries {res.canary_ok}  parity {'PASS' if ok else 'FAIL'} ({why})"
    return line + f"  [first call {first:.1f} s]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("shapes", nargs="*", help="shapes (default: the config's)")
    ap.add_argument("--config", default="configs/pr2092.yaml")
    ap.add_argument("--rows", type=int, default=48, help="query rows checked against FP64")
    ap.add_argument("--no-flex", action="store_true", help="skip torch-flex (it compiles once per shape)")
    ap.add_argument("--sweep", action="store_true", help="time kernels/triton_pa.py's CANDIDATES too")
    args = ap.parse_args()

    backend = CudaBackend()
    reason = triton_runner.unavailable_reason()
    if reason:
        raise SystemExit(f"triton cannot run here: {reason}")
    print("triton:", triton_runner.meta(), "\ntorch-flex:", torch_flex.meta())
    plan = make_plan(load_config(args.config), shapes=args.shapes or None)
    for pb in plan.problems:
        t0 = time.perf_counter()
        inputs = make_inputs(pb)
        prep = backend.prepare(inputs)
        rows = sample_rows(pb.queries, args.rows, seed=1)
        ref = backend.reference(inputs, rows)
        print(f"\n{pb.shape.label} ({pb.context}x{pb.queries}, {pb.heads_q}/{pb.heads_kv} heads, D={pb.head_dim}, "
              f"{pb.layout}, {pb.data}; inputs and reference {time.perf_counter() - t0:.1f} s)")
        variants = [triton_runner.VARIANT, "v2t"]
        if not args.no_flex:
            variants.append(torch_flex.VARIANT)
        for var in variants:
            why = backend.unsupported_parity(var, pb)
            print(f"  {var:<11}", f"skipped: {why}" if why else check(backend, prep, inputs, rows, ref, var))
        if prep.triton is not None:
            print(f"  triton launch: {prep.triton.describe()}")
        results = backend.time(prep, variants, SETTINGS)
        for var, res in results.items():
            if isinstance(res, str):
                print(f"  {var:<11} not timed: {res}")
                continue
            med = float(np.median(res.samples_ms))
            print(f"  {var:<11} median {med:8.3f} ms  {pb.flops / (med * 1e-3) / 1e12:7.1f} TFLOP/s  "
                  f"({len(res.samples_ms)} samples, {res.stop_reason})")
        if args.sweep:
            sweep(backend, prep, inputs)
        backend.release(prep)


def sweep(backend, prep, inputs) -> None:
    """Every candidate configuration of the triton kernel, timed interleaved."""
    mod = triton_runner.kernel_module()
    arrays = {"q": prep.q, "k": prep.k, "v": prep.v, "ks": prep.ks, "vs": prep.vs, "table": prep.table}
    fns = {}
    for cfg in mod.CANDIDATES:
        name = f"bm{cfg.block_m}/w{cfg.num_warps}/s{cfg.num_stages}"
        try:
            var = triton_runner.TritonVariant(inputs, arrays=arrays, config=cfg)
            fn = var.launcher(prep.out_a[GUARD_ELEMS:])
            fn()
            backend.cp.cuda.runtime.deviceSynchronize()
            fns[name] = fn
        except Exception as exc:   # a configuration that does not compile or fit
            print(f"  sweep {name}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
    results = timing.time_interleaved(fns, SETTINGS, timer=backend.timer())
    meds = {name: float(np.median(r.samples_ms)) for name, r in results.items()}
    for name, med in sorted(meds.items(), key=lambda kv: kv[1]):
        print(f"  sweep {name:<14} median {med:8.3f} ms")
    pb = inputs.problem
    chosen = mod.default_config(pb.head_dim, pb.heads_q // pb.heads_kv, pb.queries, pb.heads_q,
                                int(backend.props["multiProcessorCount"]))
    print(f"  sweep: fastest {min(meds, key=meds.get)}; default_config picks "
          f"bm{chosen.block_m}/w{chosen.num_warps}/s{chosen.num_stages}")


if __name__ == "__main__":
    main()
