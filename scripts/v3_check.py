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

import pa_bench  # noqa: E402 - this tree's pa_bench


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


def case_problem(c: Case) -> pa_bench.Problem:
    return pa_bench.make_problem(c.shape, heads_q=c.heads_q, heads_kv=c.heads_kv, head_dim=c.head_dim,
                                 layout=c.layout, page=c.page, data=c.data, seed=0, out_dtype=c.out_dtype)


def case_pins(c: Case) -> pa_bench.Pins:
    """The case's launch: key segments of ``c.segments`` keys where it forces them, else the policy's."""
    return pa_bench.Pins(segments=c.segments)


def run_case(s: pa_bench.Session, c: Case, dump: Path | None) -> tuple[bool, str]:
    pb, pins = s.problem, case_pins(c)
    rows = None if c.sample is None else s.sample_rows(c.sample, seed=0)
    ko = s.compute("v3", rows, launch=pins, check_determinism=True)
    ref = s.reference(rows)
    model = s.model("v3", rows, launch=pins, mma="rn", pv_chain_keys=0)
    pm = pa_bench.parity_verdict(ko.out, ref, model, canary_ok=ko.canary_ok)
    ok = bool(pm.parity_pass and ko.deterministic)
    line = (f"{c.name:<20} {pb.shape.label:>10} {c.heads_q:>2}/{c.heads_kv:<2} D{c.head_dim:<3} "
            f"{c.layout[:6]:<6} {c.page if c.layout == 'paged' else '-':>3} "
            f"err {pm.max_abs_err:9.3e} model {pm.model_max_abs_err:9.3e} "
            f"ratio {pm.err_ratio if pm.err_ratio is not None else float('nan'):6.2f} "
            f"canary {'ok' if ko.canary_ok else 'BAD'} det {'ok' if ko.deterministic else 'NO'} "
            f"{'PASS' if ok else 'FAIL'}")
    if not ok:
        line += "\n" + explain(pb, ko.out, ref, model, rows, pm, ko, s.launch_of("v3", launch=pins).rows)
        if dump is not None:
            dump.mkdir(parents=True, exist_ok=True)
            np.savez_compressed(dump / f"{c.name}.npz", out=ko.out, ref=ref, model=model,
                                rows=np.arange(pb.queries) if rows is None else rows)
            line += f"\n    arrays saved to {dump / (c.name + '.npz')}"
    return ok, line


def explain(pb, out, ref, model, rows, pm, ko, cta: int) -> str:
    """Where the error lives: enough to tell a layout/descriptor bug from a numerics one.
    ``cta``: the rows of the launch's CTAs."""
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


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="three small cases, no timing")
    ap.add_argument("--case", action="append", help="run only this case (repeatable)")
    ap.add_argument("--no-time", action="store_true", help="skip the timing")
    ap.add_argument("--no-v2", action="store_true", help="do not time v2 beside v3")
    ap.add_argument("--dump", type=Path, help="save out/ref/model arrays of failing cases here")
    args = ap.parse_args(argv)
    unknown = sorted(set(args.case or ()) - {c.name for c in CASES})
    if unknown:
        ap.error(f"unknown case {unknown[0]!r} (known: {', '.join(c.name for c in CASES)})")
    return args


def chosen_cases(args: argparse.Namespace) -> list[Case]:
    return [c for c in CASES if (not args.quick or c.name in QUICK) and (not args.case or c.name in args.case)]


def build_line(info: dict) -> str:
    """How one build of v3 was made, from Session.kernel_info."""
    return (f"  build {info['build']}: {info['compiler'] or '?'}, {info['num_regs']} regs, "
            f"local (spill) {info['local_size_bytes']} B, dynamic smem {info['max_dynamic_shared_size_bytes']} B, "
            f"static {info['shared_size_bytes']} B, binary sm_{info['binary_version']}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    t0 = time.time()
    import cupy as cp

    cases = chosen_cases(args)
    results = []
    built = set()
    last = None   # every case on one backend: each build compiles once
    for c in cases:
        t = time.time()
        try:
            s = pa_bench.session(case_problem(c)) if last is None else last.another(case_problem(c))
            if last is None:
                d = s.describe()
                print(f"{d['gpu']} {d['arch']} {d['sm_count']} SMs, CuPy {d['cupy_version']}, "
                      f"NVRTC {d['nvrtc_version']}, driver {d['driver_version']}, runtime {d['runtime_version']}")
                if d["arch"] not in ("sm_90", "sm_90a"):
                    print(f"v3 runs on sm_90a only; this GPU is {d['arch']}")
                    s.close()
                    return 2
            last = s
            with s:
                ok, line = run_case(s, c, args.dump)
                info = s.kernel_info("v3", launch=case_pins(c))
                if info["build"] not in built:   # how this flavour was built, once
                    built.add(info["build"])
                    print(build_line(info))
        except Exception as exc:
            ok, line = False, f"{c.name:<20} ERROR {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            traceback.print_exc(limit=3)
        print(f"{line}   [{time.time() - t:.1f} s]", flush=True)
        results.append((c.name, ok))

    if not args.quick and not args.no_time:
        try:
            pb = pa_bench.make_problem("32Kx1024", seed=0)
            with (pa_bench.session(pb) if last is None else last.another(pb)) as s:
                for var in ("v3",) + (() if args.no_v2 else ("v2",)):
                    ms = time_ms(cp, s.launcher(var))
                    info = s.kernel_info(var)
                    print(f"time {var} 32Kx1024 32/8 D128 paged 64: median {ms:.3f} ms, "
                          f"{pb.flops / ms / 1e9:.1f} TFLOP/s (hot, 20 launches; grid {list(info['grid'])} x {info['block']})")
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
