"""Build the Triton kernel for a GPU on a host without one, and report what each build uses.

    python3 scripts/triton_build.py                  # the H200 table's launches at the PR shapes, sm_90a
    python3 scripts/triton_build.py --shapes 32Kx1024 --configs m64-w4-s3-asm-tile-n128,m64-w4-s3-asm-tile-n128-dh
    python3 scripts/triton_build.py --arch 90 --json

For each shape of the config and each configuration (default: the one ``TUNED`` names for the
shape on the H200, and the kernel's default configuration) it plans the launch as a run does
(``triton_pa.plan_launch``: the problem's compile-time constants) and compiles ``pa_triton`` ahead of
time for the target, with the argument specialisation a launch gets (16-byte-aligned tensors; the
shape scalars the kernel leaves unspecialised). Then it reads the cubin: registers, stack bytes
(spills), shared memory, the programs an SM its registers and its shared memory allow, the wgmma
forms (A from registers or from shared memory), and counts of shared-memory stores and loads,
barriers and warpgroup waits in the SASS; and where S is waited for with P.V still in flight (the
Gluon loop), what ptxas placed between that wait and P.V's, step by step: the softmax's
exponentials (``exp2``: 34 a thread at 64-key tiles when all of it runs under P.V) and branches.

With the Triton version a GPU runs, the registers and shared memory are that GPU's (checked on an
H200 against Triton 3.6's own builds of the table's launches); other versions build other code, and
their spills in particular differ. No GPU is needed; Triton's NVIDIA backend brings ptxas and
cuobjdump. A configuration that fails to build is a row with its one-line error; exit status 1 then.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # this tree's pa_bench and kernels/

import sass_loops  # noqa: E402  (scripts/sass_loops.py: the SASS's loop and wait structure)
from pa_bench import fmt  # noqa: E402
from pa_bench.backends import triton_runner  # noqa: E402

GPU = "NVIDIA H200"
#: Per-SM limits of the archs a programs-an-SM estimate is given for: (registers, shared memory bytes).
SM_LIMITS = {80: (65536, 167936), 86: (65536, 102400), 89: (65536, 102400), 90: (65536, 233472)}
RESERVED_SMEM = 1024          # shared memory the driver reserves per block (sm_80 and later)
OPCODES = ("HGMMA", "HMMA", "STS", "LDS", "LDGSTS", "BAR.SYNC", "WARPGROUP.DEPBAR")
POINTERS = {"Q": "*fp16", "K": "*i8", "V": "*i8", "KS": "*fp32", "VS": "*fp32", "TABLE": "*i32"}
FLOATS = ("qk_scale_log2", "p_scale", "inv_p_scale")


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="configs/pr2092.yaml", help="config whose shapes and problem to use")
    ap.add_argument("--shapes", default=None, help="comma-separated shapes (default: the config's)")
    ap.add_argument("--configs", default=None,
                    help="comma-separated configuration names (default: the H200 table's and the default)")
    ap.add_argument("--arch", type=int, default=90, help="compute capability to build for (default 90: sm_90a)")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    return ap.parse_args(argv)


def _tool(name: str) -> str:
    import triton

    return str(Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / name)


def _kernel(mod, config):
    """The kernel a configuration launches: pa_triton, or for the Gluon loop gluon_pa's pa_gluon."""
    return mod.gluon_module().pa_gluon if config.gluon else mod.pa_triton


def _signature(mod, launch, out_dtype: str) -> tuple[dict, dict]:
    """The launched kernel's signature and attributes as a launch specialises them."""
    names = _kernel(mod, launch.config).arg_names
    sig, attrs = {}, {}
    for i, name in enumerate(names):
        if name in launch.constants:
            sig[name] = "constexpr"
        elif name == "OUT":
            sig[name] = "*fp16" if out_dtype == "float16" else "*fp32"
        elif name in POINTERS:
            sig[name] = POINTERS[name]
        else:
            sig[name] = "fp32" if name in FLOATS else "i32"
        if sig[name].startswith("*"):
            attrs[(i,)] = [["tt.divisibility", 16]]
    return sig, attrs


def programs_per_sm(arch: int, registers: int, threads: int, smem: int) -> tuple[int | None, int | None]:
    """Programs an SM by registers (allocated per warp in units of 256) and by shared memory."""
    if arch not in SM_LIMITS:
        return None, None
    regs, shared = SM_LIMITS[arch]
    per_warp = -(-registers * 32 // 256) * 256
    return regs // (per_warp * (threads // 32)), shared // (smem + RESERVED_SMEM)


def build(problem, config, arch: int = 90) -> dict:
    """Compile one configuration for one problem and read its cubin (module docstring)."""
    import triton
    from triton.backends.compiler import GPUTarget

    mod = triton_runner.kernel_module()
    pb = problem
    launch = mod.plan_launch(queries=pb.queries, context=pb.context, heads_q=pb.heads_q, heads_kv=pb.heads_kv,
                             head_dim=pb.head_dim, paged=pb.layout == "paged", page=pb.page, kv_stride=0,
                             scale_stride=0, seg_keys=0, qk_scale_log2=1.0, p_scale=1.0, config=config)
    sig, attrs = _signature(mod, launch, pb.out_dtype)
    if config.gluon:
        from triton.experimental.gluon._runtime import GluonASTSource

        src = GluonASTSource(fn=_kernel(mod, config), signature=sig, constexprs=dict(launch.constants), attrs=attrs)
        options = dict(num_warps=config.num_warps)
    else:
        src = triton.compiler.ASTSource(fn=mod.pa_triton, signature=sig, constexprs=dict(launch.constants),
                                        attrs=attrs)
        options = dict(num_warps=config.num_warps, num_stages=config.num_stages)
    if config.maxnreg:
        options["maxnreg"] = config.maxnreg
    suffix = "a" if arch == 90 else ""
    t0 = time.perf_counter()
    compiled = triton.compile(src, target=GPUTarget("cuda", arch, 32), options=options)
    seconds = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as tmp:
        cubin = Path(tmp) / "pa_triton.cubin"
        cubin.write_bytes(compiled.asm["cubin"])
        usage, sass = (subprocess.run([_tool("cuobjdump"), flag, str(cubin)], capture_output=True, text=True,
                                      check=True).stdout for flag in ("--dump-resource-usage", "-sass"))
    regs = int(re.search(r"REG:(\d+)", usage).group(1))
    stack = int(re.search(r"STACK:(\d+)", usage).group(1))
    ops = Counter(m.group(1) for m in re.finditer(r"\b(" + "|".join(re.escape(o) for o in OPCODES) + r")[.\s]", sass))
    ptx = compiled.asm["ptx"]
    forms = sorted({(shape, "rs" if a == "{" else "ss") for shape, a in
                    re.findall(r"wgmma\.mma_async\.sync\.aligned\.(m\d+n\d+k\d+)\.f32\.f16\.f16 \{[^}]*\}, (\{|%rd)", ptx)})
    smem = int(compiled.metadata.shared)
    waits = sass_loops.between_waits(sass.splitlines())
    threads = 32 * config.num_warps
    by_regs, by_smem = programs_per_sm(arch, regs, threads, smem)
    return {"shape": pb.shape.label, "config": config.name, "arch": f"sm_{arch}{suffix}", "registers": regs,
            "stack_bytes": stack, "shared_bytes": smem, "programs_by_registers": by_regs,
            "programs_by_shared": by_smem, "wgmma": [f"{s}-{a}" for s, a in forms],
            **{op.lower().replace(".", "_"): ops.get(op, 0) for op in OPCODES},
            "exp2_under_pv": [w["exp2"] for w in waits] or None,
            "branches_under_pv": sum(w["branches"] for w in waits) if waits else None, "build_s": round(seconds, 1)}


def configurations(problem, names: str | None) -> list:
    """The configurations to build for ``problem``: ``names``, else the H200 table's and the default."""
    mod = triton_runner.kernel_module()
    if names:
        return [mod.Config.parse(n) for n in names.split(",") if n.strip()]
    default, _ = triton_runner.planned_config(problem, None)
    table, where = triton_runner.planned_config(problem, GPU)
    return [table, default] if where == "table" and table != default else [default]


def main(argv=None) -> int:
    args = parse_args(argv)
    if triton_runner.interpreting():
        sys.exit("triton_build: TRITON_INTERPRET is set; the interpreter compiles nothing")
    try:
        import triton.backends.nvidia  # noqa: F401  (building needs Triton only, not torch)
    except ImportError as exc:
        sys.exit(f"triton_build: needs Triton with its NVIDIA backend ({fmt.error_line(exc)})")
    import pa_bench

    try:
        config = pa_bench.load_config(args.config, shapes=args.shapes or None)
        problems = [pa_bench.make_problem(shape, config) for shape in config.shapes]
        work = [(pb, cfg) for pb in problems for cfg in configurations(pb, args.configs)]
    except Exception as exc:
        sys.exit(f"triton_build: {fmt.error_line(exc)}")
    rows, failed = [], 0
    for pb, cfg in work:
        try:
            rows.append(build(pb, cfg, args.arch))
        except Exception as exc:   # a configuration that does not build is a row, not the end
            failed += 1
            rows.append({"shape": pb.shape.label, "config": cfg.name, "error": fmt.error_line(exc)})
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        import triton

        print(f"pa_triton built for sm_{args.arch}{'a' if args.arch == 90 else ''} by Triton {triton.__version__} "
              f"(no GPU); programs an SM by registers / by shared memory")
        head = f"  {'shape':10} {'config':32} {'regs':>4} {'stack':>5} {'smem KB':>7} {'progs':>5}  wgmma"
        print(head)
        for r in rows:
            if "error" in r:
                print(f"  {r['shape']:10} {r['config']:32} error: {r['error']}")
                continue
            progs = f"{r['programs_by_registers']}/{r['programs_by_shared']}" if r["programs_by_registers"] else "-"
            counts = ", ".join(f"{op} {r[op.lower().replace('.', '_')]}" for op in OPCODES)
            if r["exp2_under_pv"] is not None:
                counts += f"; under P.V: exp2 {'/'.join(map(str, r['exp2_under_pv']))}, branches {r['branches_under_pv']}"
            print(f"  {r['shape']:10} {r['config']:32} {r['registers']:>4} {r['stack_bytes']:>5} "
                  f"{r['shared_bytes'] / 1024:>7.1f} {progs:>5}  {' '.join(r['wgmma'])}; {counts}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
