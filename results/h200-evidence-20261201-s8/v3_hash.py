"""Print the sha1 of v3's full output on a few shapes/layouts (bitwise comparison across kernel dirs)."""
from pa_bench.backends.cuda import CudaBackend
from pa_bench.problem.inputs import make_inputs
from pa_bench.problem.plan import Problem
from pa_bench.problem.shapes import parse_shape

CASES = [("1023x113", 128, 32, 8, "paged", 64, "realistic", "float32"),
         ("1023x113", 64, 16, 16, "contiguous", 64, "normal", "float32"),
         ("1000x37", 128, 32, 8, "paged", 16, "realistic", "float16"),
         ("0x1536", 128, 32, 8, "paged", 64, "normal", "float32"),
         ("4Kx512", 128, 32, 8, "paged", 64, "realistic", "float32")]
be = CudaBackend()
for shape, d, hq, hkv, layout, page, data, out in CASES:
    pb = Problem(parse_shape(shape), heads_q=hq, heads_kv=hkv, head_dim=d, layout=layout, page=page,
                 data=data, seed=3, out_dtype=out)
    prep = be.prepare(make_inputs(pb))
    ko = be.compute(prep, "v3", check_determinism=True)
    print(f"{shape} d{d} {hq}/{hkv} {layout}{page} {out}: {ko.full_hash} canary={ko.canary_ok} det={ko.deterministic}")
    be.release(prep)
