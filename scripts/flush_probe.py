#!/usr/bin/env python3
"""Which cold state does a benchmark time? One call timed after different "cold" preparations,
by Nsight Compute and by pa-bench's own events.

    python3 scripts/flush_probe.py [--config configs/pr2092.yaml] [--calls 0x1536:torch-sdpa,2.1Kx256:v2]

For each call it takes interleaved samples under these preparations (``MODES``):

- ``ncu``: nothing; Nsight Compute's ``--cache-control all`` flushes and invalidates its caches;
- ``read``: pa-bench's flush (reads twice the L2 size of fresh memory);
- ``read+touch``: the flush, then one 4-byte read per 64 KB of every buffer the call may use
  (CuPy arrays of the prepared inputs, every segment of torch's allocator): L2 stays cold (a
  32-byte sector per 64 KB is brought in), the GPU's address translations of those buffers warm;
- ``half``: a flush that reads the L2 size once, not twice (fewer fresh pages);
- ``read+smem``: the flush, then an empty kernel on every SM that asks for the most dynamic
  shared memory a block may have, so the SMs' L1/shared split is the large-shared one again (the
  flush kernel uses no shared memory; in ncu's own mode the kernel before the call is the call's
  own previous run).

and times each three ways: under ``ncu --cache-control all`` (modes ``ncu`` and ``read``: does the
kernel *before* the call matter when ncu flushes anyway?), under ``ncu --cache-control none``
(the other modes, the preparation not profiled), and with pa-bench's blocking-kernel events
outside Nsight Compute. It prints one line per call and mode: medians and
interquartile ranges in microseconds. The question it answers (docs/TIMING.md): is the gap
between pa-bench and Nsight Compute on a short call a difference of cold state, and which one.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ncu_check import METRIC, _MS_PER_UNIT, _iqr, _profiler, _setup, ready_calls  # noqa: E402

MODES = ("read", "read+touch", "half", "read+smem")
NCU_ALL_MODES = ("ncu", "read")
TOUCH_STRIDE = 64 * 1024

_TOUCH_SRC = r"""
extern "C" __global__ void pa_touch(const unsigned char* p, unsigned long long n, unsigned long long stride,
                                    unsigned* sink) {
    unsigned acc = 0;
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i * stride < n;
         i += (unsigned long long)gridDim.x * blockDim.x)
        acc += *(const volatile unsigned char*)(p + i * stride);
    if (acc == 0xdeadbeefu) *sink = acc;
}
extern "C" __global__ void pa_smem(unsigned* sink) {
    extern __shared__ unsigned s[];
    if (threadIdx.x == 0) s[0] = blockIdx.x;
    __syncthreads();
    if (s[0] == 0xdeadbeefu) *sink = s[0];
}
"""


def parse_calls(text: str) -> list[tuple[str, str]]:
    """``"0x1536:torch-sdpa,2.1Kx256:v2"`` -> [("0x1536", "torch-sdpa"), ("2.1Kx256", "v2")]."""
    out = []
    for item in text.split(","):
        shape, _, variant = item.partition(":")
        if not shape or not variant:
            raise SystemExit(f"--calls: {item!r} is not SHAPE:VARIANT")
        out.append((shape, variant))
    return out


def buffers(prep) -> list[tuple[int, int]]:
    """(pointer, bytes) of every CuPy array of the prepared inputs and every torch segment."""
    import cupy as cp

    seen: list[tuple[int, int]] = []
    for value in vars(prep).values():
        if isinstance(value, cp.ndarray) and value.nbytes:
            seen.append((int(value.data.ptr), int(value.nbytes)))
    with contextlib.suppress(Exception):
        import torch

        for seg in torch.cuda.memory_snapshot():
            seen.append((int(seg["address"]), int(seg["total_size"])))
    return seen


class Prep:
    """The cold preparations of MODES, enqueued on CuPy's current stream."""

    def __init__(self, backend, prep):
        import cupy as cp
        import numpy as np
        from pa_bench.measure import timing

        self.cp, self.np = cp, np
        self.timer = backend.timer()
        self.half = timing.CupyTimer(int(backend.props["l2CacheSize"]) // 2, flush="read")
        mod = cp.RawModule(code=_TOUCH_SRC)
        self._touch = mod.get_function("pa_touch")
        self._sink = cp.zeros(1, dtype=cp.uint32)
        self._smem = mod.get_function("pa_smem")
        self._smem_bytes = int(backend.props.get("sharedMemPerBlockOptin", 0)) or 48 * 1024
        self._smem.max_dynamic_shared_size_bytes = self._smem_bytes
        self._sms = int(backend.props["multiProcessorCount"])
        self.ranges = buffers(prep)

    def refresh(self, prep) -> None:
        self.ranges = buffers(prep)

    def __call__(self, mode: str) -> None:
        np = self.np
        if mode == "ncu":
            return
        if mode == "half":
            self.half.flush()
            return
        self.timer.flush()
        if mode == "read+smem":
            self._smem((self._sms,), (128,), (self._sink,), shared_mem=self._smem_bytes)
        if mode == "read+touch":
            for ptr, nbytes in self.ranges:
                n = max(1, nbytes // TOUCH_STRIDE)
                self._touch((min(1024, (n + 255) // 256),), (256,),
                            (np.uint64(ptr), np.uint64(nbytes), np.uint64(TOUCH_STRIDE), self._sink))


def by_shape(calls: list[tuple[str, str]]) -> dict[str, list[str]]:
    """The calls grouped by shape, in the order given (the order the samples are taken in)."""
    out: dict[str, list[str]] = {}
    for s, v in calls:
        out.setdefault(s, []).append(v)
    return out


def _problems(args):
    """[(shape as given, problem, [variant, ...])] in the order of --calls, and the backend."""
    calls = by_shape(parse_calls(args.calls))
    config, plan, names, backend = _setup(args.config, ",".join(calls), ",".join({v for vs in calls.values() for v in vs}))
    # the plan keeps the config's labels (0x1536 shows as 1.5K): match by the problem's sizes
    from pa_bench.problem.shapes import parse_shape

    def same(shape, spec) -> bool:
        want = parse_shape(spec)
        return (shape.context, shape.queries) == (want.context, want.queries)

    return [(s, next(p for p in plan.problems if same(p.shape, s)), vs) for s, vs in calls.items()], backend


def child(args) -> None:
    """Under ncu: for each call, samples of each mode interleaved; the preparation unprofiled."""
    work, backend = _problems(args)
    modes = args.modes.split(",")
    p_start, p_stop = _profiler(backend.cp)
    sync = backend.cp.cuda.runtime.deviceSynchronize
    for spec, problem, wanted in work:
        with ready_calls(backend, problem, wanted) as (prep, fns):
            cold = Prep(backend, prep)
            for name in wanted:
                for _ in range(args.samples):
                    for mode in modes:
                        cold(mode)
                        sync()
                        p_start()
                        fns[name]()
                        sync()
                        p_stop()


def events(args) -> dict[tuple[str, str, str], list[float]]:
    """Outside ncu: pa-bench's hold, the preparation, the events around one call."""
    work, backend = _problems(args)
    out: dict[tuple[str, str, str], list[float]] = {}
    for spec, problem, wanted in work:
        with ready_calls(backend, problem, wanted) as (prep, fns):
            cold = Prep(backend, prep)
            t = cold.timer
            for _ in range(args.samples * 3):
                for name in wanted:
                    for mode in MODES:
                        t.hold()
                        cold(mode)
                        t.start()
                        fns[name]()
                        t.stop()
                        t.release()
                        ms, _late = t.elapsed()
                        out.setdefault((spec, name, mode), []).append(ms)
    return out


def parse(text: str, calls: list[tuple[str, str]], modes: list[str], samples: int) -> dict:
    """ncu's CSV -> {(shape, variant, mode): [ms]}, kernels in the child's order. A call of several
    kernels (v3 with key segments and its combine) is the sum of its kernels: every call of one
    variant launches the same number, so the count per call is read off each variant's share."""
    import csv
    import io

    rows = [r for r in csv.DictReader(io.StringIO(text[text.find('"ID"'):])) if r.get("Metric Name") == METRIC]
    vals = [float(r["Metric Value"].replace(",", "")) * _MS_PER_UNIT[r["Metric Unit"]] for r in rows]
    names = [r["Kernel Name"] for r in rows]
    n_calls = len(calls) * samples * len(modes)
    if not n_calls or len(vals) % n_calls:
        raise SystemExit(f"ncu gave {len(vals)} kernels for {n_calls} calls: not a whole number per call")
    per = len(vals) // n_calls
    out: dict = {}
    i = 0
    for s, vs in by_shape(calls).items():
        for v in vs:
            for _ in range(samples):
                for m in modes:
                    out.setdefault((s, v, m), []).append(sum(vals[i:i + per]))
                    i += per
    # every call of the same variant must be the same kernels (else the grouping above is off)
    for start in range(0, len(names), per * samples * len(modes)):
        block = names[start:start + per * samples * len(modes)]
        if block != block[:per] * (len(block) // per):
            raise SystemExit(f"ncu's kernels do not repeat per call ({block[:per]} ...): calls of different kernel counts")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="configs/pr2092.yaml")
    ap.add_argument("--calls", default="0x1536:torch-sdpa,2.1Kx256:v2")
    ap.add_argument("--samples", type=int, default=20)
    ap.add_argument("--ncu", default=os.environ.get("NCU", "ncu"))
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--modes", default=",".join(MODES), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
        return 0
    calls = parse_calls(args.calls)
    me = [sys.executable, os.path.abspath(__file__), "--child", "--config", args.config, "--calls", args.calls,
          "--samples", str(args.samples)]
    base = [args.ncu, "--clock-control", "none", "--profile-from-start", "off", "--metrics", METRIC, "--csv",
            "--print-units", "base"]
    results: dict = {}
    for cache, modes in (("all", list(NCU_ALL_MODES)), ("none", list(MODES))):
        p = subprocess.run(base[:1] + ["--cache-control", cache] + base[1:] + me + ["--modes", ",".join(modes)],
                           capture_output=True, text=True)
        if p.returncode:
            print(p.stdout[-3000:], p.stderr[-3000:], sep="\n")
            return 1
        results.update({(s, v, m, f"ncu/{cache}"): x for (s, v, m), x in parse(p.stdout, calls, modes, args.samples).items()})
    results.update({(s, v, m, "events"): x for (s, v, m), x in events(args).items()})
    print(f"{'shape':9} {'variant':12} {'mode':11} {'timed by':10} {'n':>3} {'median us':>10} {'IQR us':>8}")
    for (s, v, m, how), xs in sorted(results.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][3], kv[0][2])):
        med, iqr = statistics.median(xs), _iqr(xs)
        print(f"{s:9} {v:12} {m:11} {how:10} {len(xs):3d} {1e3 * med:10.2f} {1e3 * iqr:8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
