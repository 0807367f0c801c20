"""Launch one kernel variant on one shape a few times, for Nsight Compute.

    ncu --clock-control none --set full -k regex:pa_v2$ -c 1 \
        python scripts/profile_target.py --variant v2 --shape 32Kx1024 [--plugin MODULE]

``--plugin`` loads a plug-in first (as ``pa-bench --plugin``), so its variants can be profiled;
what is launched is what a run times (``CudaBackend.callables``): a kernel's launcher, or the
closure a peer's ``call()`` returns (``v3-f16``, the torch peers).
Defaults are the PR config's (32/8 heads, D=128, paged, page 64, normal data).
"""

from __future__ import annotations

import argparse
import sys

from pa_bench import plugins
from pa_bench.backends.cuda import CudaBackend
from pa_bench.problem.inputs import make_inputs
from pa_bench.problem.plan import Problem
from pa_bench.problem.shapes import parse_shape


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variant", default="v2")
    ap.add_argument("--shape", default="32Kx1024")
    ap.add_argument("--launches", type=int, default=3)
    ap.add_argument("--tiles", type=int, default=None, help="v2/v2t: m16 query tiles per warp (1 or 2; default: per shape)")
    ap.add_argument("--rows", type=int, default=None, help="v3: rows of a CTA (128 or 192; default: the launch's choice, model.cta_rows)")
    ap.add_argument("--share", choices=("rule", "on", "off"), default="rule", help="v3: shared tiles (default: the rule's)")
    ap.add_argument("--step", type=int, choices=(64, 128), default=None,
                    help="v3: keys a consumer step (128: with shared tiles at 128 rows)")
    ap.add_argument("--segment-keys", type=int, default=None,
                    help="keys a key segment (0: none; default: the launch's, model.segment_keys)")
    ap.add_argument("--plugin", action="append", default=[], help="a plug-in module or .py file to load first")
    args = ap.parse_args()
    for name in args.plugin:
        plugins.load(name)
    backend = CudaBackend()
    backend.tiles = args.tiles
    backend.rows = args.rows
    backend.share = None if args.share == "rule" else args.share == "on"
    backend.step = args.step
    if args.segment_keys is not None:
        backend.segments = args.segment_keys or False
    pb = Problem(parse_shape(args.shape))
    prep = backend.prepare(make_inputs(pb))
    # what a run times: a kernel's launcher, or a peer's prepared call (v3-f16, torch's)
    fns, reasons = backend.callables(prep, [args.variant])
    if args.variant not in fns:
        sys.exit(f"profile_target: {args.variant} cannot run {args.shape}: {reasons.get(args.variant)}")
    launch = fns[args.variant]
    for _ in range(args.launches):
        launch()
    backend.cp.cuda.runtime.deviceSynchronize()


if __name__ == "__main__":
    main()
