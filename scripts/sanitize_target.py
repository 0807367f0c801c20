"""Launch every kernel variant once on a small and a non-aligned shape, for compute-sanitizer.

    compute-sanitizer --tool memcheck python scripts/sanitize_target.py [--force-turing] [--only v3] [--small]
        [--plugin MODULE]

Both layouts (paged with 16-key pages, contiguous), both head dims, paired heads (4/2),
row-paired tiles (2/2), the PR's 32/8 heads, one and two tiles per v2/v2t warp, v2/v2t with split keys (forced on
1023x113, whose context is long enough for a split point) and without; v3 where the GPU has it
(sm_90a); triton where Triton is installed (its configuration: PA_BENCH_TRITON_CONFIG or the tuned one); no timing, no reference. ``--only NAME[,NAME]`` keeps those variants; ``--small``
only the small shape (racecheck on v3's 215 KB of shared memory took over 70 s a launch of
1023x113 on the H200). ``--plugin MODULE`` (repeatable) loads a plug-in first; the variants it
registers are launched too when ``--only`` names them. The small shape has 512 keys, 8 key tiles of 64: v3's four fp16 stages
and v2's double buffers are each reused, so a missing barrier before a refill shows.
"""

from __future__ import annotations

import sys

from pa_bench import plugins
from pa_bench.backends.cuda import CudaBackend
from pa_bench.problem.inputs import make_inputs
from pa_bench.problem.plan import Problem
from pa_bench.problem.shapes import parse_shape

SHAPES = ("448x64", "1023x113")          # small (8 tiles of 64 keys); not a multiple of the tile or page sizes
SETUPS = (  # head_dim, heads_q, heads_kv, layout, page
    (128, 4, 2, "paged", 16),
    (64, 2, 2, "contiguous", 64),
    (128, 32, 8, "paged", 64),        # the PR's heads: v3 packs 4 query heads into a CTA's rows
)


def main(argv: list[str]) -> int:
    force = "--force-turing" in argv
    only = set(argv[argv.index("--only") + 1].split(",")) if "--only" in argv else None
    shapes = SHAPES[:1] if "--small" in argv else SHAPES
    for i, arg in enumerate(argv):
        if arg == "--plugin":
            plugins.load(argv[i + 1])
    builtin = ("v1", "v3", "triton", "v2", "v2t")
    extra = [(name, 1, False) for name in sorted(only or ()) if name not in builtin]
    backend = CudaBackend(force_turing=force)
    for shape in shapes:
        for d, hq, hkv, layout, page in SETUPS:
            pb = Problem(parse_shape(shape), heads_q=hq, heads_kv=hkv, head_dim=d, layout=layout, page=page,
                         data="realistic")
            prep = backend.prepare(make_inputs(pb))
            splits = (False, True) if pb.context >= 32 else (False,)
            for variant, tiles, split in [("v1", 1, False), ("v3", 1, False), ("v3", 2, False), ("triton", 1, False)] + [
                    (v, t, sp) for v in ("v2", "v2t") for t in (2, 1) for sp in splits] + extra:
                if only is not None and variant not in only:
                    continue
                why = backend.unsupported_parity(variant, pb)
                if why:
                    print(f"{shape} {variant}: skipped ({why})")
                    continue
                backend.tiles, backend.split = tiles, split
                backend.rows = (128, 192)[tiles - 1] if variant == "v3" else None   # v3: both CTA sizes
                res = backend.compute(prep, variant, None, check_determinism=False)
                what = f"rows={backend.rows}" if variant == "v3" else f"tiles={tiles}"
                print(f"{shape} d{d} {layout} {variant} {what} split={backend.split_keys(variant, pb)}: "
                      f"canary_ok={res.canary_ok}", flush=True)
            backend.release(prep)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
