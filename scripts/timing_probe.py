"""Does the hold method time GPU work alone? torch's flash SDPA on the PR's shapes, three ways.

    python scripts/timing_probe.py            # on a GPU with torch, CuPy and ncu

1. pa-bench's method (pa_bench.measure.timing: hold kernel, L2 flush by reading, events), and
   the same with nvbench's memset flush;
2. the method before #11: events around a call that enters ``sdpa_kernel`` and reads the
   SM clock between the launch and the end event;
3. Nsight Compute's gpu__time_duration of the same call (a child process under ncu).
It needs nothing of pa-bench but pa_bench.measure, so it runs while the rest is changing.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
from dataclasses import dataclass

SHAPES = [("0x1536", 0, 1536), ("2.1Kx256", 2150, 256), ("32Kx1024", 32768, 1024)]


@dataclass
class S:
    hot: bool = False
    warmup: int = 5
    min_samples: int = 20
    min_seconds: float = 0.3
    max_seconds: float = 2.0
    max_noise: float = 0.005
    max_samples: int = 2000


def make(ctx, nq):
    import torch

    g = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(1, 32, nq, 128, device="cuda", dtype=torch.float16, generator=g)
    k = torch.randn(1, 8, ctx + nq, 128, device="cuda", dtype=torch.float16, generator=g)
    v = torch.randn(1, 8, ctx + nq, 128, device="cuda", dtype=torch.float16, generator=g)
    from torch.nn.attention.bias import causal_lower_right

    mask = causal_lower_right(nq, ctx + nq) if ctx else None
    f = torch.nn.functional.scaled_dot_product_attention
    if mask is None:
        return lambda: f(q, k, v, is_causal=True, enable_gqa=True)
    return lambda: f(q, k, v, attn_mask=mask, enable_gqa=True)


def child():
    import cupy as cp
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    mark = cp.RawModule(code="".join(f'extern "C" __global__ void pa_mark_{i}_0() {{}}\n'
                                     for i in range(len(SHAPES))))
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        for i, (_, ctx, nq) in enumerate(SHAPES):
            call = make(ctx, nq)
            for _ in range(6):
                mark.get_function(f"pa_mark_{i}_0")((1,), (1,), ())
                call()
            torch.cuda.synchronize()


def main():
    if "--child" in sys.argv:
        return child()
    import cupy as cp
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from pa_bench.measure import timing

    l2 = cp.cuda.runtime.getDeviceProperties(0)["l2CacheSize"]
    timer = timing.CupyTimer(l2)

    class MemsetTimer(timing.CupyTimer):          # nvbench's flush: a memset (dirty lines)
        def flush(self):
            cp.cuda.runtime.memsetAsync(self._flush.data.ptr, 0, l2, self.stream.ptr)

    memset_timer = MemsetTimer(l2)
    clock = timing.ClockReader(0)
    flush = cp.empty(l2, dtype=cp.uint8)
    ours, old, memset = {}, {}, {}
    for label, ctx, nq in SHAPES:
        call = make(ctx, nq)
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            r = timing.time_interleaved({label: call}, S(), timer=timer, clock=clock)[label]
            memset[label] = statistics.median(
                timing.time_interleaved({label: call}, S(), timer=memset_timer, clock=clock)[label].samples_ms)
        ours[label] = (statistics.median(r.samples_ms), r.stop_reason, r.host_bound, len(r.samples_ms),
                       r.clock_source, statistics.median([c for c in r.clocks_mhz if c] or [0]))
        start, end = cp.cuda.Event(), cp.cuda.Event()
        samples = []
        for _ in range(200):                       # the old window: host work between the events
            flush.fill(0)
            start.record()
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                call()
            clock.read()
            end.record()
            end.synchronize()
            samples.append(cp.cuda.get_elapsed_time(start, end))
        old[label] = statistics.median(samples[20:])
    sys.path.insert(0, "scripts")
    from ncu_check import parse_ncu_csv

    proc = subprocess.run(["ncu", "--clock-control", "none", "--cache-control", "all", "--metrics",
                           "gpu__time_duration.sum", "--csv", "--print-units", "base", sys.executable,
                           __file__, "--child"], capture_output=True, text=True)
    theirs = parse_ncu_csv(proc.stdout) if proc.returncode == 0 else {}
    if proc.returncode:
        print(proc.stderr[-3000:])
    print(f"{'shape':>10} {'hold ms':>9} {'memset':>9} {'old ms':>9} {'ncu ms':>9} {'hold/ncu':>9} "
          f"{'mset/ncu':>9}  stop  host_bound  n  clock")
    for i, (label, _, _) in enumerate(SHAPES):
        ncu = statistics.median(c[0] for c in theirs[(i, 0)]) if (i, 0) in theirs else float("nan")
        o = ours[label]
        print(f"{label:>10} {o[0]:9.4f} {memset[label]:9.4f} {old[label]:9.4f} {ncu:9.4f} {o[0] / ncu:9.3f} "
              f"{memset[label] / ncu:9.3f}  {o[1]}  {o[2]}  {o[3]}  {o[4]} {o[5]:.0f} MHz")


if __name__ == "__main__":
    main()
