"""The resource table of every kernel on every arch, from ``nvcc`` alone (no GPU needed).

For each variant x arch it compiles the variant with the backend's own options, keeps the
PTX beside the cubin, and reads: registers per thread, spill bytes, static shared memory per
CTA (``-Xptxas -v``), dynamic shared memory where the module says how much it launches with
(v3's ``<function>_smem_bytes`` entry, read from its PTX), whether the PTX uses ``cp.async`` (LDGSTS) or the TMA unit's bulk copies
(``cp.async.bulk``), and which ``mma.sync`` or ``wgmma`` shapes it uses.
Every module also carries pa_combine (the key-segment merge, pa_common.cuh): its registers are a
column of their own, and its spills count with the kernel's.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pa_bench import variants as registry
from pa_bench.backends import kernels as K
from pa_bench.errors import PaBenchError


def nvcc_path() -> str | None:
    return shutil.which("nvcc")


COMBINE_FUNCTION = "pa_combine"



def _parse_ptxas(log: str, function: str | None = None) -> dict:
    """Resources of ``function`` (every entry function of the log when None or absent), spills
    and stack of every entry function, and pa_combine's registers."""
    parts = dict(re.findall(r"Compiling entry function '(\w+)'(.*?)(?=Compiling entry function|\Z)", log, re.S))
    main = parts.get(function, log) if function else log
    regs = re.findall(r"Used (\d+) registers", main)
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
    smem = re.findall(r"(\d+) bytes smem", main)
    stack = re.findall(r"(\d+) bytes stack frame", log)
    comb = re.findall(r"Used (\d+) registers", parts.get(COMBINE_FUNCTION, ""))
    return {
        "registers": max(map(int, regs)) if regs else None,
        "spill_bytes": sum(int(a) + int(b) for a, b in spills) if spills else 0,
        "smem_bytes": max(map(int, smem)) if smem else 0,
        "stack_bytes": max(map(int, stack)) if stack else 0,
        "combine_registers": int(comb[0]) if comb else None,
        # ptxas's "(C75xx) Potential Performance Loss: wgmma.mma_async instructions are serialized
        # due to ...": the warpgroup MMAs then run one at a time; the reason, or None
        "wgmma_serialized": _wgmma_serialized(log),
    }


def _wgmma_serialized(log: str) -> str | None:
    m = re.search(r"wgmma\S* instructions are serialized due to ([^\n]*?)(?: in the function '\w+')?\s*$", log, re.M)
    return m.group(1).strip() if m else None


def dynamic_smem_bytes(ptx: str, function: str) -> int | None:
    """The dynamic shared memory a kernel launches with, where its module exports
    ``<function>_smem_bytes`` (a one-thread kernel that stores the byte count, v3.cu): the constant
    that entry stores, from the PTX. None for a kernel without it (static shared memory only)."""
    m = re.search(rf"\.entry\s+{re.escape(function)}_smem_bytes\s*\((.*?)\n\}}", ptx, re.S)
    if m is None:
        return None
    body = m.group(1)
    value = re.search(r"st\.global\.[us]32\s+\[[^\]]+\],\s*(\d+);", body) or \
        re.search(r"mov\.[us]32\s+%r\d+,\s*(\d+);", body)
    return int(value.group(1)) if value else None


def _parse_ptx(ptx: str) -> dict:
    shapes = sorted(set(re.findall(r"mma\.sync\.aligned\.(m\d+n\d+k\d+)", ptx)))
    shapes += sorted({f"wgmma.{s}" for s in re.findall(r"wgmma\.mma_async\.sync\.aligned\.(m\d+n\d+k\d+)", ptx)})
    # cp.async of 4-16 bytes a thread (LDGSTS) and the bulk copies of the TMA unit are different
    # machinery: v2 uses the first, v3 the second
    return {"cp_async": re.search(r"\bcp\.async\.c[ag]\.", ptx) is not None,
            "bulk_copy": "cp.async.bulk." in ptx, "mma": ",".join(shapes) if shapes else None}


@functools.lru_cache(maxsize=None)
def compile_one(variant: str, arch: str, head_dim: int = 128, force_turing: bool = False,
                paged: bool = True, out_f16: bool = False, kv_f16: bool = False, cta_rows: int = 0,
                kv_images: bool = False, kv_shared: bool = False, step_keys: int = 64) -> dict:
    """Compile one build with nvcc and describe it (cached per process); ``kv_f16``: v3's fp16-K/V
    control (KernelBuild.kv_f16); ``kv_images``, ``kv_shared``: v3 on fp16 stage images
    (KernelBuild.kv_images, the peer v3-dq; KernelBuild.kv_shared, v3's shared tiles); ``step_keys``:
    v3's keys a consumer step (KernelBuild.step_keys); ``cta_rows``: the
    rows of a CTA where the variant offers several (KernelBuild.cta_rows; 0: the kernel's default)."""
    cc = int(arch.removeprefix("sm_").rstrip("a"))  # sm_90a: the variant adds its suffix itself
    row = {"variant": variant, "arch": arch, "head_dim": head_dim, "force_turing": force_turing,
           "cta": registry.get(variant).cta, "compiled": False, "reason": None, "registers": None, "spill_bytes": None,
           "smem_bytes": None, "dynamic_smem_bytes": None, "stack_bytes": None, "cp_async": None, "bulk_copy": None, "mma": None,
           "combine_registers": None, "wgmma_serialized": None}
    why = K.build_unsupported(variant, cc, force_turing, head_dim)
    if why:
        row["reason"] = f"not built: {why}"
        return row
    nvcc = nvcc_path()
    if nvcc is None:
        raise PaBenchError("nvcc (the CUDA compiler) is not on PATH; `pa-bench kernels` needs it")
    build = K.KernelBuild(variant, head_dim=head_dim, paged=paged, out_f16=out_f16, force_turing=force_turing,
                          kv_f16=kv_f16, cta_rows=cta_rows, kv_images=kv_images, kv_shared=kv_shared,
                          step_keys=step_keys)
    with tempfile.TemporaryDirectory(prefix="pa-bench-nvcc-") as tmp:
        cmd = [nvcc, "-cubin", f"-arch={registry.get(variant).nvcc_arch(cc)}", "-O3", "-Xptxas", "-v", "--keep", f"--keep-dir={tmp}",
               *build.options(), "-o", os.path.join(tmp, "k.cubin"), str(K.kernel_path(variant))]
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp)
        if proc.returncode != 0:
            first = next((ln for ln in proc.stderr.splitlines() if "error" in ln), proc.stderr.strip()[:200])
            row["reason"] = f"nvcc failed: {first.strip()}"
            return row
        row.update(_parse_ptxas(proc.stderr + proc.stdout, build.function))
        ptx = "".join(p.read_text() for p in Path(tmp).glob("*.ptx"))
        row.update(_parse_ptx(ptx))
        row["dynamic_smem_bytes"] = dynamic_smem_bytes(ptx, build.function)
        row["compiled"] = True
    return row


def kernel_table(archs: list[str] | None = None, head_dim: int = 128, force_turing: bool = False,
                 variants: list[str] | None = None, jobs: int | None = None) -> list[dict]:
    """One row per variant x arch (see the module docstring), compiled in parallel."""
    archs = list(archs or K.ARCHS)
    for a in archs:
        if not re.fullmatch(r"sm_\d{2,3}a?", a):
            raise PaBenchError(f"bad arch {a!r} (expected e.g. sm_90)")
    known = K.kernel_variants()
    variants = list(variants or known)
    for v in variants:
        if v not in known:
            raise PaBenchError(f"unknown kernel variant {v!r} (choose from {', '.join(known)})")
    jobs = jobs or max(1, min(4, os.cpu_count() or 1))
    todo = [(v, a) for v in variants for a in archs]
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(lambda va: compile_one(va[0], va[1], head_dim, force_turing), todo))
