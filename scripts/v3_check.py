#!/usr/bin/env python3
"""v3 on a Hopper GPU in about a minute: build, parity, canaries, determinism, one timing.

    python3 scripts/v3_check.py                 # every case, then v3 (and v2) timed at 32Kx1024
    python3 scripts/v3_check.py --quick         # three small cases, no timing (for compute-sanitizer)
    python3 scripts/v3_check.py --case odd-d128-p64 --dump $OUT/v3   # one case; arrays saved on failure

It prints how v3 was built (NVRTC through CuPy with --gpu-architecture=sm_90a, or the nvcc cubin
fallback) and its registers, shared memory and local memory (spills), then one line per case:
max abs error against the FP64 reference, the numerics model's (pa_bench.numerics.model with
tile_keys = 64 and mma = "rn": v3 sums each tile's P.V in a fresh 4-step wgmma chain added with
__fadd_rn, which "rn" mirrors to rounding level), the parity rule (kernel <= 2 x model + floor),
canaries, determinism (two launches bitwise equal). A failing case prints where the error lives
(per query head, per 16-row block, per 64-dim block, the first bad rows, kernel vs model) so a
layout or descriptor bug can be told from a numerics one. Exit status 0 iff every case passes.
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


@dataclass(frozen=True)
class Case:
    name: str
    shape: str
    heads_q: int = 32
    heads_kv: int = 8
    head_dim: int = 128
    layout: str = "paged"
    page: int = 64
    data: str = "normal"
    out_dtype: str = "float32"
    segments: int | None = None   # force key segments of this many keys (None: the model's rule)
    sample: int | None = None     # rows checked (None: all)


CASES = [
    Case("tiny-d128", "0x16"),
    Case("odd-d128-p64", "1023x113"),
    Case("odd-d128-p16", "1023x113", page=16),
    Case("odd-d128-contig", "1023x113", layout="contiguous"),
    Case("odd-d64-p64", "1023x113", head_dim=64),
    Case("odd-16/16", "1023x113", heads_q=16, heads_kv=16),
    Case("odd-24/8-d64-p16", "1023x113", heads_q=24, heads_kv=8, head_dim=64, page=16),
    Case("odd-realistic", "1023x113", data="realistic"),
    Case("odd-f16-out", "1023x113", out_dtype="float16"),
    Case("odd-segments-512", "1023x113", segments=512),
    Case("first-chunk-0x1536", "0x1536"),
    Case("pr-2.1Kx256", "2.1Kx256"),
    Case("pr-32Kx1024", "32Kx1024", sample=96),
]
QUICK = ("tiny-d128", "odd-d128-p64", "odd-d64-p64")


def run_case(be, cp, c: Case, dump: Path | None) -> tuple[bool, str, object, object]:
    from pa_bench.numerics import metrics
    from pa_bench.numerics.model import max_slack, model_arrays, model_attention
    from pa_bench.numerics.reference import sample_rows
    from pa_bench.problem.inputs import make_inputs
    from pa_bench.problem.plan import Problem
    from pa_bench.problem.shapes import parse_shape

    pb = Problem(parse_shape(c.shape), heads_q=c.heads_q, heads_kv=c.heads_kv, head_dim=c.head_dim,
                 layout=c.layout, page=c.page, data=c.data, seed=0, out_dtype=c.out_dtype)
    inp = make_inputs(pb)
    be.segments = c.segments
    rows = None if c.sample is None else sample_rows(pb.queries, c.sample, seed=0)
    prep = be.prepare(inp)
    try:
        ko = be.compute(prep, "v3", rows=rows, check_determinism=True)
        ref = be.reference(inp, rows)
        seg = be.segment_keys("v3", pb)
        model = cp.asnumpy(model_attention(model_arrays(inp, cp), be.tile_keys("v3", pb), rows, segment_keys=seg,
                                           mma="rn", max_slack=max_slack("v3")))
        pm = metrics.evaluate_parity(ko.out, ref, model_out=model, canary_ok=ko.canary_ok)
        ok = bool(pm.parity_pass and ko.deterministic)
        line = (f"{c.name:<20} {pb.shape.label:>10} {c.heads_q:>2}/{c.heads_kv:<2} D{c.head_dim:<3} "
                f"{c.layout[:6]:<6} {c.page if c.layout == 'paged' else '-':>3} "
                f"err {pm.max_abs_err:9.3e} model {pm.model_max_abs_err:9.3e} "
                f"ratio {pm.err_ratio if pm.err_ratio is not None else float('nan'):6.2f} "
                f"canary {'ok' if ko.canary_ok else 'BAD'} det {'ok' if ko.deterministic else 'NO'} "
                f"{'PASS' if ok else 'FAIL'}")
        if not ok:
            line += "\n" + explain(pb, ko.out, ref, model, rows, pm, ko)
            if dump is not None:
                dump.mkdir(parents=True, exist_ok=True)
                np.savez_compressed(dump / f"{c.name}.npz", out=ko.out, ref=ref, model=model,
                                    rows=np.arange(pb.queries) if rows is None else rows)
                line += f"\n    arrays saved to {dump / (c.name + '.npz')}"
        return ok, line, pb, prep
    finally:
        be.segments = None


def explain(pb, out, ref, model, rows, pm, ko) -> str:
    """Where the error lives: enough to tell a layout/descriptor bug from a numerics one."""
    from pa_bench.numerics.model import cta_rows

    lines = [f"    why: {pm.reason}; deterministic={ko.deterministic} canary_ok={ko.canary_ok}"]
    rows = np.arange(out.shape[1]) if rows is None else np.asarray(rows)
    bad_nan = ~np.isfinite(out)
    if bad_nan.any():
        h, r, d = np.argwhere(bad_nan)[0]
        lines.append(f"    {int(bad_nan.sum())} NaN/Inf; first at head {h} row {rows[r]} dim {d}")
    err = np.abs(out.astype(np.float64) - ref)
    err = np.where(np.isfinite(err), err, np.inf)
    merr = np.abs(model.astype(np.float64) - ref)
    kvm = np.abs(out.astype(np.float64) - model)
    kvm = np.where(np.isfinite(kvm), kvm, np.inf)
    lines.append(f"    |kernel - model| max {kvm.max():.3e} (a layout bug is O(|out|) = {np.abs(ref).max():.3e}; "
                 f"numerics are O(model err) = {merr.max():.3e})")
    bound = 2 * merr.max() + pm.floor
    per_head = err.max(axis=(1, 2))
    lines.append("    max err per query head: " + " ".join(f"{x:.1e}" for x in per_head))
    g = pb.heads_q // pb.heads_kv
    cta = cta_rows("v3", pb.context, pb.queries, pb.heads_q, pb.heads_kv)
    ppc = cta // g
    wg = (rows % ppc) * g // 64          # consumer warpgroup of each row (for the first head of a group)
    for w in range(cta // 64):
        sel = wg == w
        if sel.any():
            lines.append(f"    consumer warpgroup {w} rows: max err {err[:, sel].max():.3e}")
    d = out.shape[2]
    lines.append("    max err per 64-dim block: " + " ".join(f"{err[:, :, b:b + 64].max():.2e}" for b in range(0, d, 64)))
    lines.append("    max err per 16-row block (row0:err): " + " ".join(
        f"{rows[i]}:{err[:, i:i + 16].max():.1e}" for i in range(0, len(rows), 16)))
    badr = np.argwhere(err.max(axis=2) > bound)
    if len(badr):
        shown = ", ".join(f"(head {h}, row {rows[r]})" for h, r in badr[:6])
        lines.append(f"    {len(badr)} (head, row) pairs over the bound {bound:.2e}; first: {shown}")
        h, r = badr[0]
        dd = int(np.argmax(err[h, r]))
        lines.append(f"    head {h} row {rows[r]}: worst dim {dd} out {out[h, r, dd]:.6g} ref {ref[h, r, dd]:.6g} "
                     f"model {model[h, r, dd]:.6g}; out[:4] {np.array2string(out[h, r, :4], precision=4)} "
                     f"ref[:4] {np.array2string(ref[h, r, :4].astype(np.float32), precision=4)}")
    return "\n".join(lines)


def time_ms(cp, fn, n: int = 20, warm: int = 3) -> float:
    """Median of ``n`` back-to-back launches, each between two CUDA events (hot L2)."""
    for _ in range(warm):
        fn()
    cp.cuda.Device().synchronize()
    ts = []
    for _ in range(n):
        a, b = cp.cuda.Event(), cp.cuda.Event()
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(cp.cuda.get_elapsed_time(a, b))
    return float(np.median(ts))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="three small cases, no timing")
    ap.add_argument("--case", action="append", help="run only this case (repeatable)")
    ap.add_argument("--no-time", action="store_true", help="skip the timing")
    ap.add_argument("--no-v2", action="store_true", help="do not time v2 beside v3")
    ap.add_argument("--dump", type=Path, help="save out/ref/model arrays of failing cases here")
    args = ap.parse_args()
    t0 = time.time()
    import cupy as cp

    from pa_bench.backends.cuda import CudaBackend

    be = CudaBackend()
    d = be.describe()
    print(f"{d['gpu']} {d['arch']} {d['sm_count']} SMs, CuPy {d['cupy_version']}, NVRTC {d['nvrtc_version']}, "
          f"driver {d['driver_version']}, runtime {d['runtime_version']}")
    if be.cc != 90:
        print(f"v3 runs on sm_90a only; this GPU is sm_{be.cc}")
        return 2

    cases = [c for c in CASES if (not args.quick or c.name in QUICK) and (not args.case or c.name in args.case)]
    results = []
    built = set()
    for c in cases:
        t = time.time()
        try:
            ok, line, pb, prep = run_case(be, cp, c, args.dump)
            b = be.build("v3", pb)
            if b not in built:   # how this flavour was built, once
                built.add(b)
                fn = be.kernel(b)
                at = fn.attributes
                print(f"  build D={b.head_dim} paged={int(b.paged)} f16={int(b.out_f16)}: {be.compilers.get(b, '?')}, "
                      f"{at.get('num_regs')} regs, local (spill) {at.get('local_size_bytes')} B, "
                      f"dynamic smem {at.get('max_dynamic_shared_size_bytes')} B, static {at.get('shared_size_bytes')} B, "
                      f"binary sm_{at.get('binary_version')}")
            be.release(prep)
        except Exception as exc:
            ok, line = False, f"{c.name:<20} ERROR {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            traceback.print_exc(limit=3)
        print(f"{line}   [{time.time() - t:.1f} s]", flush=True)
        results.append((c.name, ok))

    if not args.quick and not args.no_time:
        try:
            from pa_bench.problem.inputs import make_inputs
            from pa_bench.problem.plan import Problem
            from pa_bench.problem.shapes import parse_shape

            pb = Problem(parse_shape("32Kx1024"), seed=0)
            prep = be.prepare(make_inputs(pb))
            for var in ("v3",) + (() if args.no_v2 else ("v2",)):
                ms = time_ms(cp, be.launcher(prep, var))
                geo = be.geometry(var, pb)
                print(f"time {var} 32Kx1024 32/8 D128 paged 64: median {ms:.3f} ms, "
                      f"{pb.flops / ms / 1e9:.1f} TFLOP/s (hot, 20 launches; grid {list(geo.grid)} x {geo.block})")
            be.release(prep)
        except Exception as exc:
            print(f"timing ERROR {type(exc).__name__}: {exc}")
            traceback.print_exc(limit=3)
            results.append(("timing", False))

    n_fail = sum(1 for _, ok in results if not ok)
    print(f"\n{'PASS' if n_fail == 0 else 'FAIL'}: {len(results) - n_fail} passed, {n_fail} failed "
          f"({time.time() - t0:.0f} s)")
    for name, ok in results:
        if not ok:
            print(f"  failed: {name}")
    return 0 if n_fail == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
