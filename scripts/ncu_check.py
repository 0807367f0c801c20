"""Check pa-bench's timing against Nsight Compute, shape by shape and variant by variant.

    python scripts/ncu_check.py [--config configs/pr2092.yaml] [--out DIR] [--reps 5]

For every shape of the config and every variant (kernels and peers) it

1. times the variant with pa-bench's own method (``pa_bench.Session.time``: the blocking-kernel,
   L2-flushed, interleaved sampling of pa_bench.measure.timing; a short budget), and
2. runs itself as a child under ``ncu --clock-control none --cache-control all --metrics
   gpu__time_duration.sum``, which calls every variant ``--reps`` times (short calls more: about
   REP_BUDGET_MS of GPU time per row, since ncu's figure of a short kernel varies by several per
   cent from call to call) after one warm-up call,
   the calls of a variant preceded by one marker kernel (``pa_mark_<shape>_<variant>``), so that
   the kernels of each call (one for a kernel variant, several for a peer: every call launches
   the same kernels) can be told apart and summed;

3. for a call of several kernels (the ``torch-sdpa+dequant`` peer: the dequantisation kernels, then
   flash attention) measures the call once more with one L2 flush before the whole call, as
   pa-bench does: kernel replay with ``--cache-control none``, the child flushing L2 itself
   (pa-bench's read of twice the L2) before each call's marker. With ``--cache-control all``
   Nsight Compute flushes L2 before *every* kernel, so the attention kernel no longer finds the
   fp16 K/V that the dequantisation has just written to L2, and the sum over kernels reads 4-6 %
   high at short shapes (H200, 2026-12-01: 0.943 and 0.957). ``--replay-mode range`` (one flush per
   range) refuses torch's launches: they call cuKernelSetAttribute, which range capture does not
   support.

Nsight Compute profiles only between cudaProfilerStart and Stop (``--profile-from-start off``):
each variant is built and called once before, so torch.compile's and Triton's autotuning kernels
are not profiled.

and writes ``ncu_check.csv`` (shape, variant, pa_bench_ms, ncu_ms, ncu_min_ms, ncu_max_ms, ratio,
within, ncu_kernels, ncu_mode, ncu_kernel_sum_ms). Nsight Compute runs ``--processes`` times (3 by
default), each a fresh process: ncu's figure of one short kernel moves by several per cent from
one process to the next (PyTorch's flash kernel at 0x1536 on the H200: 0.1021-0.1078 ms), so
pa-bench is judged against that range, not one draw from it. ``ncu_ms`` is the median of the
processes' medians, ``ncu_min_ms``/``ncu_max_ms`` their range, and ``within`` is true when
pa-bench's median lies in [ncu_min_ms - tol, ncu_max_ms + tol], tol = max(3 %, 3 us). ``ncu_ms``
is the one-flush figure where the call has several kernels (``ncu_mode`` = flushed) and the
kernel's figure otherwise (``kernel``); ``ncu_kernel_sum_ms`` keeps the kernel-replay sum. A
call of k kernels spans, besides its kernels, the k - 1 launches between them, which ncu does not
time. The span lies between the kernels' sum (launches that cost nothing) and that sum plus
``launch_gaps_ms``, pa-bench's own time of k empty kernels minus one's, measured in the same
process (a launch as it costs in a chain of kernels that do nothing): ``ncu_max_ms`` has it added.
``--flushed-all`` measures every call after pa-bench's flush too (``ncu_flushed_ms``,
``within_flushed``): the cold state differs between the two flushes, and one kernel shows it
(H200, 2026-12-01: PyTorch's flash kernel at 0x1536 runs 105.3 us after ncu's invalidation and
109.8 us after pa-bench's read of twice the L2, 40 calls each; v1 145.9 and 145.3 us).
``ncu_calls`` and ``ncu_iqr_ms`` say how many calls ncu's median is over and how much they spread.
Nsight Compute follows the child process only (``--target-processes application-only``: torch's
compile workers and Triton's compiler processes launch nothing worth measuring, and would each
start under ncu's injection). Each ncu pass is killed after ``--ncu-timeout`` seconds, a one-flush
pass after ``--flushed-timeout`` (ncu once hung after "Failed to profile unrolled_elementwise_kernel"); the rows measured before are kept and the calls without a row are
named (exit code 1).
``--samples-out`` also writes every pa-bench sample (ms) of every row. Exit code 1 if any row is
not within.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import math
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

REL_TOL, ABS_TOL_MS = 0.03, 0.003
# ncu's figure of one short kernel varies by several per cent from call to call (PyTorch's flash
# kernel at 0x1536 on the H200: 97.6-111.6 us over 40 calls), so its median over a few calls is
# itself uncertain by more than 1 %. Short calls get more reps: about REP_BUDGET_MS of GPU time per
# row (pa-bench's own median says how long a call is), at least --reps, at most MAX_REPS.
REP_BUDGET_MS, MAX_REPS = 1.0, 8      # ncu spends about a third of a second per profiled kernel
PROCESSES = 3                         # fresh ncu processes per row (ncu's own figure moves between them)
METRIC = "gpu__time_duration.sum"
_MS_PER_UNIT = {"nsecond": 1e-6, "ns": 1e-6, "usecond": 1e-3, "us": 1e-3, "msecond": 1.0, "ms": 1.0,
                "second": 1e3, "s": 1e3}


def _setup(config_path: str, shapes: str | None, variants: str | None, l2_flush: str | None = None):
    """(config, its problems, the variants, open_session): ``open_session(problem)`` gives the
    problem's pa_bench.Session, all on one backend (each build compiles once)."""
    import pa_bench

    config = pa_bench.load_config(config_path, shapes=shapes, l2_flush=l2_flush)
    problems = [pa_bench.make_problem(shape, config) for shape in config.shapes]
    names = variants.split(",") if variants else list(config.variants)
    last: list = []

    def open_session(problem):
        s = last[0].another(problem) if last else pa_bench.session(problem, config=config)
        last[:] = [s]
        return s

    return config, problems, names, open_session


def _marker_module(n_shapes: int, names: list[str]):
    import cupy as cp

    src = "".join(f'extern "C" __global__ void pa_mark_{s}_{v}() {{}}\n'
                  for s in range(n_shapes) for v in range(len(names)))
    return cp.RawModule(code=src)


def _profiler():
    """(start, stop): cudaProfilerStart/Stop; under ``--profile-from-start off`` Nsight Compute
    profiles only the kernels between them (not a torch.compile's or Triton's autotuning)."""
    import cupy as cp

    rt = cp.cuda.runtime
    if hasattr(rt, "profilerStart"):
        return rt.profilerStart, rt.profilerStop
    from cupy.cuda import profiler  # older CuPy

    return profiler.start, profiler.stop


def reps_for(call_ms: float | None, base: int, budget_ms: float = REP_BUDGET_MS, cap: int = MAX_REPS) -> int:
    """Profiled calls of one row: enough for ``budget_ms`` of GPU time, at least ``base`` and at
    most ``max(base, cap)``; ``base`` where pa-bench has no time for the call."""
    if not call_ms or call_ms <= 0:
        return base
    return max(base, min(cap, math.ceil(budget_ms / call_ms)))


def reps_map(text: str | None) -> dict[tuple[int, int], int]:
    """``"0:6:40,3:5:10"`` -> {(0, 6): 40, (3, 5): 10}: reps per (shape index, variant index)."""
    if not text:
        return {}
    return {(int(a), int(b)): int(n) for a, b, n in (item.split(":") for item in text.split(","))}


def call_pairs(text: str | None) -> set[tuple[int, int]] | None:
    """``"0:6,3:6"`` -> {(0, 6), (3, 6)}: the (shape index, variant index) calls to run."""
    if not text:
        return None
    return {(int(a), int(b)) for a, b in (item.split(":") for item in text.split(","))}


@contextlib.contextmanager
def ready_calls(open_session, problem, names: list[str]):
    """One shape's calls, ready to profile or time: the inputs on the GPU, ``{variant: one call}``
    (those that can run), each called once unprofiled (compiles, autotuning) and the GPU
    synchronised; the inputs released on the way out. Yields (session, fns)."""
    s = open_session(problem)
    try:
        fns, _reasons = s.launchers(names)
        for name in names:
            if name in fns:
                fns[name]()
        s.sync()
        yield s, fns
    finally:
        s.close()


def child(args) -> None:
    """Under ncu: each variant built and called once unprofiled (compiles, autotuning), then,
    between cudaProfilerStart and Stop, a marker and 1 + reps calls of each (the first is
    dropped). With ``--only``, just the listed calls, each after pa-bench's own L2 flush with the
    profiler paused (run with ``--cache-control none``: one flush per call, as pa-bench times it)."""
    os.environ["PA_BENCH_PEER_PROFILE"] = "0"   # torch's profiler cannot run under ncu
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")   # no compile workers to start
    config, problems, names, open_session = _setup(args.config, args.shapes, args.variants, args.l2_flush)
    only = call_pairs(args.only)
    reps = reps_map(args.reps_map)
    mod = _marker_module(len(problems), names)
    p_start, p_stop = _profiler()
    for si, problem in enumerate(problems):
        wanted = [(vi, n) for vi, n in enumerate(names) if only is None or (si, vi) in only]
        if not wanted:
            continue
        with ready_calls(open_session, problem, [n for _, n in wanted]) as (s, fns):
            for vi, name in wanted:
                if name not in fns:
                    continue
                p_start()
                mod.get_function(f"pa_mark_{si}_{vi}")((1,), (1,), ())   # one marker per variant
                for _ in range(1 + reps.get((si, vi), args.reps)):
                    if only is not None:              # pa-bench's flush, not profiled
                        s.sync()
                        p_stop()
                        s.flush_l2()
                        s.sync()
                        p_start()
                    fns[name]()
                s.sync()
                p_stop()


def parse_ncu_csv(text: str, calls_per_marker: int | dict[tuple[int, int], int]) -> dict[tuple[int, int], list[tuple[float, int]]]:
    """{(shape index, variant index): [(ms of one call, kernels in it), ...]} from ncu's CSV.

    The child launches one marker kernel (``pa_mark_<s>_<v>``) and then ``calls_per_marker``
    calls of one variant (a warm-up and the reps; a dict gives the number per (shape index,
    variant index)): the kernels after a marker are split into that
    many calls of equal kernel count, and the first (the warm-up) is dropped. A group whose kernels
    do not split evenly is left out (its row is then missing, not wrong). The child's own L2 flush
    and hold kernels belong to no call."""
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    groups: dict[tuple[int, int], list[list[float]]] = {}
    current: list[float] | None = None
    for row in csv.DictReader(lines):
        if row.get("Metric Name") != METRIC:
            continue
        name = row["Kernel Name"].split("(")[0].strip()
        if name.startswith(("pa_l2_scrub", "pa_hold_stream")):
            continue
        ms = float(row["Metric Value"].replace(",", "")) * _MS_PER_UNIT[(row.get("Metric Unit") or "nsecond").strip()]
        if name.startswith("pa_mark_"):
            _, _, si, vi = name.split("_")[:4]
            current = []
            groups.setdefault((int(si), int(vi)), []).append(current)
        elif current is not None:
            current.append(ms)
    out = {}
    for key, lst in groups.items():
        n_calls = calls_per_marker.get(key, 0) if isinstance(calls_per_marker, dict) else calls_per_marker
        calls = []
        for group in lst:
            per = len(group) // n_calls if n_calls else 0
            if per == 0 or per * n_calls != len(group):
                continue
            calls += [group[i * per:(i + 1) * per] for i in range(1, n_calls)]
        if calls:
            out[key] = [(sum(c), len(c)) for c in calls]
    return out


def _iqr(xs: list[float]) -> float:
    """Interquartile range of ``xs`` (0 for fewer than two): how much ncu's own figure varies."""
    if len(xs) < 2:
        return 0.0
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return q[2] - q[0]


def _tol(ms: float) -> float:
    return max(REL_TOL * ms, ABS_TOL_MS)


def _within(mine: float, lo: float, hi: float | None = None) -> bool:
    """pa-bench's median within [lo - tol, hi + tol] (hi: lo when one figure is given)."""
    hi = lo if hi is None else hi
    return lo - _tol(lo) <= mine <= hi + _tol(hi)


def build_rows(shapes: list[str], names: list[str], ours: dict, theirs: list[dict], whole: list[dict],
               gaps: dict[int, float] | None = None) -> list[dict]:
    """The rows of ncu_check.csv. ``ours``: {(shape index, name): pa-bench's median ms};
    ``theirs``: one parse_ncu_csv of the ``--cache-control all`` pass per ncu process; ``whole``:
    one {(shape index, variant index): [ms per call]} of the pass after pa-bench's own flush
    (``--cache-control none``) per process. Per process the figure is the median of its calls:
    the flushed one for a call of several kernels (ncu would flush L2 between its kernels), ncu's
    own cold figure for one kernel; ``ncu_ms`` is the median over processes, ``ncu_min_ms`` and
    ``ncu_max_ms`` their range, and ``within`` judges pa-bench against that range.
    ``ncu_flushed_ms`` / ``within_flushed``: the flushed figure wherever it was measured (every
    call with --flushed-all), empty elsewhere.
    ``gaps``: {kernels in a call: ms}, what k - 1 launches cost as a chain of empty kernels
    (``launch_gaps``). Nsight Compute times kernels, pa-bench the span from the first kernel's
    start to the last one's end, which also holds the launches between them: a call of k kernels
    is judged against [its kernels' lowest flushed sum, their highest + gaps[k]] (column
    ``launch_gaps_ms``), the span with launches that cost nothing and with launches that cost as
    much as in a chain of empty kernels."""
    rows = []
    for si, label in enumerate(shapes):
        for vi, name in enumerate(names):
            passes = [t[(si, vi)] for t in theirs if t.get((si, vi))]
            if (si, name) not in ours or not passes:
                continue
            kernel_sums = [statistics.median(c[0] for c in calls) for calls in passes]
            flushed = [statistics.median(w[(si, vi)]) for w in whole if w.get((si, vi))]
            multi = passes[0][0][1] > 1
            mode = "flushed" if multi and flushed else "kernel"
            gap = (gaps or {}).get(passes[0][0][1], 0.0) if mode == "flushed" else 0.0
            figures = flushed if mode == "flushed" else kernel_sums
            ncu_ms, lo, hi = statistics.median(figures), min(figures), max(figures) + gap
            mine = ours[(si, name)]
            calls = [c[0] for p in passes for c in p]
            flushed_ms = statistics.median(flushed) if flushed else None
            rows.append({"shape": label, "variant": name, "pa_bench_ms": f"{mine:.5f}",
                         "ncu_ms": f"{ncu_ms:.5f}", "ncu_min_ms": f"{lo:.5f}", "ncu_max_ms": f"{hi:.5f}",
                         "ratio": f"{mine / ncu_ms:.4f}", "within": _within(mine, lo, hi),
                         "ncu_processes": len(figures), "ncu_kernels": passes[0][0][1], "ncu_mode": mode,
                         "ncu_kernel_sum_ms": f"{statistics.median(kernel_sums):.5f}",
                         "launch_gaps_ms": f"{gap:.5f}",
                         "ncu_flushed_ms": "" if flushed_ms is None else f"{flushed_ms:.5f}",
                         "within_flushed": "" if not flushed else _within(mine, min(flushed), max(flushed)),
                         "ncu_calls": len(calls), "ncu_iqr_ms": f"{_iqr(calls):.5f}"})
    return rows


def _run_ncu(cmd: list[str], log: Path, timeout_s: float | None = None) -> tuple[int, str]:
    """Run ncu, its output going to ``log`` as it comes (so a run stopped by a time limit leaves
    what it had); (exit code, stdout). Past ``timeout_s`` ncu and its target are killed (exit
    code 124): ncu has been seen to hang after failing to profile a kernel ("Failed to profile
    ..."), and the rows it measured before are still worth having."""
    with open(log, "w") as fh:
        fh.write(" ".join(cmd) + "\n")
        fh.flush()
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            rc = 124
            fh.write(f"\nncu_check: stopped after {timeout_s:g} s\n")
    return rc, log.read_text()


def launch_gaps(session, counts: list[int]) -> dict[int, float]:
    """{k: ms}: pa-bench's median of a call of k empty kernels minus that of one, timed by
    pa-bench's own method (interleaved, L2 flushed, GPU time only). That is what the launches
    between a call's k kernels add to its span: time that Nsight Compute, which times each kernel,
    does not see."""
    import cupy as cp

    empty = cp.RawModule(code='extern "C" __global__ void pa_empty() {}').get_function("pa_empty")

    def chain(k: int):
        return lambda: [empty((1,), (1,), ()) for _ in range(k)]

    fns = {f"empty{k}": chain(k) for k in sorted({1, *counts})}
    res = session.time_calls(fns, max_seconds=1.0)
    one = statistics.median(res["empty1"].samples_ms)
    return {k: statistics.median(res[f"empty{k}"].samples_ms) - one for k in counts if k > 1}


def _write_csv(out_dir: Path, rows: list[dict]) -> None:
    with open(out_dir / "ncu_check.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]) if rows else ["shape"])
        w.writeheader()
        w.writerows(rows)


def missing_rows(shapes: list[str], names: list[str], ours: dict, rows: list[dict]) -> list[str]:
    """``shape variant`` of every call pa-bench timed that has no row (ncu measured no call of it)."""
    have = {(r["shape"], r["variant"]) for r in rows}
    return [f"{label} {name}" for si, label in enumerate(shapes) for name in names
            if (si, name) in ours and (label, name) not in have]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="configs/pr2092.yaml")
    ap.add_argument("--shapes", default=None)
    ap.add_argument("--variants", default=None, help="comma list (default: the config's variants)")
    ap.add_argument("--processes", type=int, default=PROCESSES,
                    help="fresh ncu processes per pass: pa-bench is judged against the range of their figures")
    ap.add_argument("--reps", type=int, default=5,
                    help=f"profiled calls per row at least (short calls get more: about {REP_BUDGET_MS:g} ms "
                         f"of GPU time, at most {MAX_REPS})")
    ap.add_argument("--seconds", type=float, default=3.0, help="pa-bench's timing budget per shape")
    ap.add_argument("--out", default=".")
    ap.add_argument("--ncu", default=os.environ.get("NCU", "ncu"))
    ap.add_argument("--samples-out", default=None, help="also write every pa-bench sample to this CSV")
    ap.add_argument("--flushed-all", action="store_true",
                    help="also measure every single-kernel call after pa-bench's own L2 flush (column "
                         "ncu_flushed_ms): the same cold state as pa-bench, where ncu's --cache-control all "
                         "invalidates L2 instead")
    ap.add_argument("--l2-flush", choices=("read", "discard"), default=None,
                    help="pa-bench's cold flush, here and in the flushed pass (default: the config's "
                         "timing.l2_flush)")
    ap.add_argument("--ncu-timeout", type=float, default=900.0,
                    help="seconds each ncu pass may take before it is killed (its measured rows are kept)")
    ap.add_argument("--flushed-timeout", type=float, default=120.0,
                    help="seconds before a one-flush ncu pass (calls of several kernels only) is killed")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--only", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--reps-map", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
        return 0

    config, problems, names, open_session = _setup(args.config, args.shapes, args.variants, args.l2_flush)
    ours: dict[tuple[int, str], float] = {}
    samples: list[tuple[str, str, float]] = []
    last = None
    for si, problem in enumerate(problems):
        with open_session(problem) as s:
            if si == 0:
                print(f"pa-bench's L2 flush: {s.l2_flush_method}")
            res = s.time(names, max_seconds=args.seconds)
        last = s
        for name, r in res.items():
            if not isinstance(r, str):
                ours[(si, name)] = statistics.median(r.samples_ms)
                samples += [(problem.shape.label, name, ms) for ms in r.samples_ms]
            else:
                print(f"{problem.shape.label} {name}: skipped ({r})")

    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    if args.samples_out:
        with open(args.samples_out, "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["shape", "variant", "ms"])
            w.writerows((a, b, f"{ms:.6f}") for a, b, ms in samples)
    # ncu follows only the child itself: torch's compile workers and Triton's compiler processes,
    # each started under ncu's injection, cost a pass minutes and launch nothing to measure
    base = [args.ncu, "--target-processes", "application-only", "--clock-control", "none",
            "--cache-control", "all", "--profile-from-start", "off", "--metrics", METRIC, "--csv",
            "--print-units", "base"]
    reps = {(si, vi): reps_for(ours.get((si, name)), args.reps)
            for si in range(len(problems)) for vi, name in enumerate(names)}
    child_args = [sys.executable, __file__, "--child", "--config", args.config, "--reps", str(args.reps),
                  "--reps-map", ",".join(f"{si}:{vi}:{n}" for (si, vi), n in reps.items()),
                  "--variants", ",".join(names)] + (["--shapes", args.shapes] if args.shapes else []) + (
                  ["--l2-flush", args.l2_flush] if args.l2_flush else [])
    calls_per_marker = {key: 1 + n for key, n in reps.items()}
    theirs: list[dict] = []
    for k in range(args.processes):
        t0 = time.perf_counter()
        rc, text = _run_ncu(base + child_args, out_dir / f"ncu_check.ncu.{k}.log", args.ncu_timeout)
        print(f"ncu process {k + 1} of {args.processes}: {time.perf_counter() - t0:.0f} s, exit {rc}", flush=True)
        if rc != 0:
            print(f"warning: ncu exited {rc}; see {out_dir / f'ncu_check.ncu.{k}.log'}; the rows it "
                  "measured are kept", file=sys.stderr)
        theirs.append(parse_ncu_csv(text, calls_per_marker))

    # the rows so far, kept should a one-flush pass below not finish
    _write_csv(out_dir, build_rows([p.shape.label for p in problems], names, ours, theirs, []))

    # calls of several kernels (every call with --flushed-all): once more with one flush before the
    # whole call, pa-bench's own
    multi = sorted({key for t in theirs for key, calls in t.items()
                    if calls and (calls[0][1] > 1 or args.flushed_all)})
    whole: list[dict] = []
    if multi:
        spec = ",".join(f"{s}:{v}" for s, v in multi)
        flushed = [a if a != "all" else "none" for a in base]
        for k in range(args.processes):
            t0 = time.perf_counter()
            frc, ftext = _run_ncu(flushed + child_args + ["--only", spec],
                                  out_dir / f"ncu_check.flushed.{k}.log", args.flushed_timeout)
            print(f"one-flush process {k + 1} of {args.processes}: {time.perf_counter() - t0:.0f} s, "
                  f"exit {frc}", flush=True)
            if frc == 0:
                got = parse_ncu_csv(ftext, calls_per_marker)
                whole.append({key: [c[0] for c in got[key]] for key in multi if got.get(key)})
            else:
                print(f"warning: ncu exited {frc} in the one-flush pass; calls of several "
                      "kernels keep the kernel-replay sum", file=sys.stderr)

    counts = sorted({theirs_calls[0][1] for t in theirs for key, theirs_calls in t.items()
                     if key in multi and theirs_calls})
    gaps = launch_gaps(last, counts) if whole and last is not None else {}
    if gaps:
        print("launch gaps (pa-bench's span of k empty kernels minus one's): "
              + ", ".join(f"k={k} {ms * 1e3:.2f} us" for k, ms in gaps.items()))
    rows = build_rows([p.shape.label for p in problems], names, ours, theirs, whole, gaps)
    bad = sum(not r["within"] for r in rows)
    _write_csv(out_dir, rows)
    for r in rows:
        fl = (f"  after pa-bench's flush {float(r['ncu_flushed_ms']):9.4f} ms "
              f"{'ok' if r['within_flushed'] else 'NOT WITHIN'}") if r["ncu_flushed_ms"] else ""
        print(f"{r['shape']:>10} {r['variant']:<20} pa-bench {float(r['pa_bench_ms']):9.4f} ms  "
              f"ncu {float(r['ncu_ms']):9.4f} ms [{float(r['ncu_min_ms']):.4f}-{float(r['ncu_max_ms']):.4f}]  "
              f"ratio {r['ratio']}  {'ok' if r['within'] else 'NOT WITHIN'}{fl}")
    print(f"{len(rows) - bad} of {len(rows)} rows within 3 % or 3 us of ncu's range over "
          f"{args.processes} processes")
    missing = missing_rows([p.shape.label for p in problems], names, ours, rows)
    if missing:
        print(f"not measured by ncu ({len(missing)}): {', '.join(missing)}")
    return 1 if bad or missing or not rows else 0


if __name__ == "__main__":
    sys.exit(main())
