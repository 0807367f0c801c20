"""What one call of a torch peer enqueues on the GPU: its kernels (and any memset or copy) with
their mean device time, from torch.profiler over 10 calls after 3 warm-up calls (L2 warm: these
are the kernels' own times, not pa-bench's cold ones). Needs a GPU, CuPy and torch.

    python scripts/peer_gpu_work.py [SHAPES] [VARIANTS]     # default 0x1536,2.1Kx256 and both sdpa peers

pa-bench times one call between two events; Nsight Compute (scripts/ncu_check.py) sums the
kernels it sees. A memset or copy inside a call would be in the first and not the second: this
lists them (there were none on the H200 for torch-sdpa, 2026-12-01).
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ncu_check import _setup  # noqa: E402


def main(argv: list[str]) -> int:
    import torch

    from pa_bench.problem.inputs import make_inputs

    shapes = argv[0] if argv else "0x1536,2.1Kx256"
    variants = argv[1] if len(argv) > 1 else "torch-sdpa,torch-sdpa+dequant"
    _config, plan, names, backend = _setup("configs/pr2092.yaml", shapes, variants)
    for problem in plan.problems:
        prep = backend.prepare(make_inputs(problem))
        fns, reasons, sessions = backend.callables(prep, names)
        for name, why in reasons.items():
            print(f"== {problem.shape.label} {name}: not run ({why})")
        with contextlib.ExitStack() as stack:
            for ctx in sessions:
                stack.enter_context(ctx)
            for name, fn in fns.items():
                for _ in range(3):
                    fn()
                torch.cuda.synchronize()
                with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                    for _ in range(10):
                        fn()
                    torch.cuda.synchronize()
                events = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
                print(f"== {problem.shape.label} {name}: {len(events)} GPU operations in 10 calls")
                by_name: dict[str, list[float]] = {}
                for e in events:
                    by_name.setdefault(e.name, []).append(float(getattr(e, "device_time_total", 0.0)))
                for op, us in by_name.items():
                    print(f"   {len(us):3d} x {sum(us) / len(us):9.2f} us  {op[:120]}")
        backend.release(prep)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
