"""Kernels launched for an NVIDIA tool: one variant on one shape a few times (Nsight Compute), or
every variant once over small shapes, both layouts, both head dimensions and head pairings
(compute-sanitizer).

    ncu --clock-control none --set full -k regex:pa_v2$ -c 1 \\
        python scripts/launch_target.py --variant v2 --shape 32Kx1024 [--launches N] [--tiles 1|2]
        [--rows 128|192] [--share rule|on|off] [--step 64|128] [--segment-keys N]
    compute-sanitizer --tool memcheck|racecheck|synccheck \\
        python scripts/launch_target.py --sweep [--force-turing] [--only v3] [--small]

What is launched is what a run times (``pa_bench.Session.launcher``): a kernel's launcher, or a
peer's prepared call (v3-f16, torch's). The launch options pin parts of the launch
(``pa_bench.Pins``); what is not pinned is the launch policy's choice for the shape.
``--dry-run`` prints what would be launched, without a GPU.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

import pa_bench

SWEEP_SHAPES = ("448x64", "1023x113")  # small (8 tiles of 64 keys); not a multiple of the tile or page sizes
SWEEP_SETUPS = (  # head_dim, heads_q, heads_kv, layout, page
    (128, 4, 2, "paged", 16),
    (64, 2, 2, "contiguous", 64),
    (128, 32, 8, "paged", 64),  # the PR's heads: v3 packs 4 query heads into a CTA's rows
)
BUILTIN = ("v1", "v3", "triton", "v2", "v2t")


@dataclass(frozen=True)
class Item:
    """One launch of the sweep: a variant on a problem with what it pins."""

    problem: pa_bench.Problem
    variant: str
    pins: pa_bench.Pins

    @property
    def label(self) -> str:
        pb, p = self.problem, self.pins
        what = f"rows={p.rows}" if self.variant == "v3" else f"tiles={p.tiles}"
        return f"{pb.label} d{pb.head_dim} {pb.layout} {self.variant} {what} split={p.split}"


def sweep_problems(small: bool) -> list[pa_bench.Problem]:
    shapes = SWEEP_SHAPES[:1] if small else SWEEP_SHAPES
    return [pa_bench.make_problem(shape, heads_q=hq, heads_kv=hkv, head_dim=d, layout=layout, page=page,
                                  data="realistic")
            for shape in shapes for d, hq, hkv, layout, page in SWEEP_SETUPS]


def sweep_items(problem: pa_bench.Problem, only: set[str] | None) -> list[Item]:
    """Every variant's launches on ``problem``: v3 at both CTA sizes, v2/v2t at both tile counts
    with the key split off and (after a context) on; a plug-in's named in ``only`` once."""
    splits = (False, True) if problem.context >= 32 else (False,)
    picks = [("v1", 1, False), ("v3", 1, False), ("v3", 2, False), ("triton", 1, False)]
    picks += [(v, t, sp) for v in ("v2", "v2t") for t in (2, 1) for sp in splits]
    picks += [(name, 1, False) for name in sorted(only or ()) if name not in BUILTIN]
    items = []
    for variant, tiles, split in picks:
        if only is not None and variant not in only:
            continue
        rows = (128, 192)[tiles - 1] if variant == "v3" else None  # v3: both CTA sizes
        items.append(Item(problem, variant, pa_bench.Pins(tiles=tiles, split=split, rows=rows)))
    return items


def pins_of(args: argparse.Namespace) -> pa_bench.Pins:
    """The launch options as pins (None: the policy's choice)."""
    segments = None if args.segment_keys is None else (args.segment_keys or False)
    share = None if args.share == "rule" else args.share == "on"
    return pa_bench.Pins(tiles=args.tiles, rows=args.rows, share=share, step=args.step, segments=segments)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sweep", action="store_true",
                    help="every variant once over small shapes, layouts and head setups (compute-sanitizer)")
    ap.add_argument("--only", default=None, help="--sweep: these variants only (comma list)")
    ap.add_argument("--small", action="store_true", help="--sweep: the smaller shape only")
    ap.add_argument("--force-turing", action="store_true", help="build the kernels for the Turing path")
    ap.add_argument("--variant", default="v2")
    ap.add_argument("--shape", default="32Kx1024")
    ap.add_argument("--launches", type=int, default=3)
    ap.add_argument("--tiles", type=int, choices=(1, 2), default=None,
                    help="v2/v2t: m16 query tiles per warp (default: per shape)")
    ap.add_argument("--rows", type=int, default=None, help="v3: rows of a CTA, 128 or 192 (default: the policy's)")
    ap.add_argument("--share", choices=("rule", "on", "off"), default="rule",
                    help="v3: shared tiles (default: the policy's)")
    ap.add_argument("--step", type=int, choices=(64, 128), default=None,
                    help="v3: keys a consumer step (128: with shared tiles at 128 rows)")
    ap.add_argument("--segment-keys", type=int, default=None,
                    help="keys a key segment (0: none; default: the policy's)")
    ap.add_argument("--plugin", action="append", default=[], help="a plug-in module or .py file to load first")
    ap.add_argument("--dry-run", action="store_true", help="print what would be launched; no GPU")
    args = ap.parse_args(argv)
    if args.launches < 1:
        ap.error("--launches must be at least 1")
    return args


def sweep(args: argparse.Namespace) -> int:
    only = set(args.only.split(",")) if args.only else None
    last = None  # sessions share one backend, so each build compiles once
    for problem in sweep_problems(args.small):
        items = sweep_items(problem, only)
        if args.dry_run:
            print("\n".join(item.label for item in items))
            continue
        s = (pa_bench.session(problem, force_turing=args.force_turing, plugins=args.plugin)
             if last is None else last.another(problem))
        last = s
        with s:
            for item in items:
                why = s.unsupported(item.variant)
                if why:
                    print(f"{problem.label} {item.variant}: skipped ({why})")
                    continue
                res = s.compute(item.variant, None, launch=item.pins, check_determinism=False)
                print(f"{item.label}: canary_ok={res.canary_ok}", flush=True)
    return 0


def profile(args: argparse.Namespace) -> int:
    pins = pins_of(args)
    problem = pa_bench.make_problem(args.shape)
    if args.dry_run:
        print(f"{args.variant} on {problem.label} x {args.launches}, pins {pins}")
        return 0
    with pa_bench.session(problem, force_turing=args.force_turing, plugins=args.plugin) as s:
        launch = s.launcher(args.variant, launch=pins)
        for _ in range(args.launches):
            launch()
        s.sync()
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        return sweep(args) if args.sweep else profile(args)
    except pa_bench.PaBenchError as exc:
        print(f"launch_target: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
