"""Check pa-bench's timing against Nsight Compute, shape by shape and variant by variant.

    python scripts/ncu_check.py [--config configs/pr2092.yaml] [--out DIR] [--reps 5]

For every shape of the config and every variant (kernels and peers) it

1. times the variant with pa-bench's own method (``backend.time``: the blocking-kernel,
   L2-flushed, interleaved sampling of pa_bench.measure.timing; a short budget), and
2. runs itself as a child under ``ncu --clock-control none --cache-control all --metrics
   gpu__time_duration.sum``, which calls every variant ``--reps`` times after one warm-up call,
   each call preceded by a marker kernel (``pa_mark_<shape>_<variant>``) so that the kernels of
   one call — one for a kernel variant, several for a peer — can be told apart and summed;

and writes ``ncu_check.csv`` (shape, variant, pa_bench_ms, ncu_ms, ratio, within, ncu_kernels)
with ``within`` = the two medians agree within 3 % or 3 us. Exit code 1 if any row is not within.
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

REL_TOL, ABS_TOL_MS = 0.03, 0.003
METRIC = "gpu__time_duration.sum"
_MS_PER_UNIT = {"nsecond": 1e-6, "ns": 1e-6, "usecond": 1e-3, "us": 1e-3, "msecond": 1.0, "ms": 1.0,
                "second": 1e3, "s": 1e3}


def _setup(config_path: str, shapes: str | None, variants: str | None):
    from pa_bench.backends.cuda import CudaBackend
    from pa_bench.problem.config import load_config
    from pa_bench.problem.plan import make_plan

    config = load_config(config_path)
    plan = make_plan(config, shapes)
    names = variants.split(",") if variants else list(config.variants)
    return config, plan, names, CudaBackend(config)


def _marker_module(n_shapes: int, names: list[str]):
    import cupy as cp

    src = "".join(f'extern "C" __global__ void pa_mark_{s}_{v}() {{}}\n'
                  for s in range(n_shapes) for v in range(len(names)))
    return cp.RawModule(code=src)


def child(args) -> None:
    """Under ncu: warm-up call, then reps calls of every variant, each after its marker."""
    from pa_bench.problem.inputs import make_inputs

    config, plan, names, backend = _setup(args.config, args.shapes, args.variants)
    mod = _marker_module(len(plan.problems), names)
    for si, problem in enumerate(plan.problems):
        prep = backend.prepare(make_inputs(problem))
        fns, _reasons, sessions = backend.callables(prep, names)
        import contextlib

        with contextlib.ExitStack() as stack:
            for ctx in sessions:
                stack.enter_context(ctx)
            for vi, name in enumerate(names):
                if name not in fns:
                    continue
                mark = mod.get_function(f"pa_mark_{si}_{vi}")
                for _ in range(1 + args.reps):        # the first call is the warm-up
                    mark((1,), (1,), ())
                    fns[name]()
                backend.cp.cuda.runtime.deviceSynchronize()
        backend.release(prep)


def parse_ncu_csv(text: str) -> dict[tuple[int, int], list[tuple[float, int]]]:
    """{(shape index, variant index): [(ms of one call, kernels in it), ...]} from ncu's CSV,
    in launch order, warm-up call dropped."""
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    rows = list(csv.DictReader(lines))
    calls: dict[tuple[int, int], list[list[float]]] = {}
    current: list[float] | None = None
    for row in rows:
        if row.get("Metric Name") != METRIC:
            continue
        name = row["Kernel Name"].split("(")[0].strip()
        value = float(row["Metric Value"].replace(",", ""))
        unit = row.get("Metric Unit", "nsecond")
        ms = value * _MS_PER_UNIT[unit.strip()]
        if name.startswith("pa_mark_"):
            _, _, s, v = name.split("_")[:4]
            current = []
            calls.setdefault((int(s), int(v)), []).append(current)
        elif current is not None:
            current.append(ms)
    return {key: [(sum(c), len(c)) for c in lst[1:] if c] for key, lst in calls.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="configs/pr2092.yaml")
    ap.add_argument("--shapes", default=None)
    ap.add_argument("--variants", default=None, help="comma list (default: the config's variants)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=3.0, help="pa-bench's timing budget per shape")
    ap.add_argument("--out", default=".")
    ap.add_argument("--ncu", default=os.environ.get("NCU", "ncu"))
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
        return 0

    from pa_bench.problem.inputs import make_inputs

    config, plan, names, backend = _setup(args.config, args.shapes, args.variants)
    settings = replace(config.timing, max_seconds=args.seconds)
    ours: dict[tuple[int, str], float] = {}
    for si, problem in enumerate(plan.problems):
        prep = backend.prepare(make_inputs(problem))
        res = backend.time(prep, names, settings)
        for name, r in res.items():
            if not isinstance(r, str):
                ours[(si, name)] = statistics.median(r.samples_ms)
            else:
                print(f"{problem.shape.label} {name}: skipped ({r})")
        backend.release(prep)

    cmd = [args.ncu, "--clock-control", "none", "--cache-control", "all", "--metrics", METRIC, "--csv", "--print-units", "base",
           sys.executable, __file__, "--child", "--config", args.config, "--reps", str(args.reps)]
    if args.shapes:
        cmd += ["--shapes", args.shapes]
    cmd += ["--variants", ",".join(names)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "ncu_check.ncu.log").write_text(proc.stdout[-2_000_000:] + "\n--- stderr\n" + proc.stderr[-200_000:])
    if proc.returncode != 0:
        print(f"error: ncu exited {proc.returncode}; see {out_dir / 'ncu_check.ncu.log'}", file=sys.stderr)
        return 2
    theirs = parse_ncu_csv(proc.stdout)

    rows, bad = [], 0
    for si, problem in enumerate(plan.problems):
        for vi, name in enumerate(names):
            if (si, name) not in ours or (si, vi) not in theirs:
                continue
            calls = theirs[(si, vi)]
            ncu_ms = statistics.median(c[0] for c in calls)
            mine = ours[(si, name)]
            within = abs(mine - ncu_ms) <= max(REL_TOL * ncu_ms, ABS_TOL_MS)
            bad += not within
            rows.append({"shape": problem.shape.label, "variant": name, "pa_bench_ms": f"{mine:.5f}",
                         "ncu_ms": f"{ncu_ms:.5f}", "ratio": f"{mine / ncu_ms:.4f}", "within": within,
                         "ncu_kernels": calls[0][1]})
    with open(out_dir / "ncu_check.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]) if rows else ["shape"])
        w.writeheader()
        w.writerows(rows)
    for r in rows:
        print(f"{r['shape']:>10} {r['variant']:<20} pa-bench {float(r['pa_bench_ms']):9.4f} ms  "
              f"ncu {float(r['ncu_ms']):9.4f} ms  ratio {r['ratio']}  {'ok' if r['within'] else 'NOT WITHIN'}")
    print(f"{len(rows) - bad} of {len(rows)} rows within 3 % or 3 us")
    return 1 if bad or not rows else 0


if __name__ == "__main__":
    sys.exit(main())
