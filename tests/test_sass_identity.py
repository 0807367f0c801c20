"""The machine code of every production kernel build stays byte for byte what it was.

Each configuration below is compiled with nvcc the way ``pa_bench.backends.kernels`` builds it
(``KernelBuild.options()``, ``-O3``, a cubin for the arch), disassembled with ``cuobjdump -sass``
and hashed; the hashes are compared with ``tests/data/sass_digests.json``. Nothing is normalised:
``cuobjdump -sass`` of a cubin names no file, so the whole listing (every instruction and its
encoding) is compared. A change to a kernel source that should not change its code (a comment,
a refactoring, a hook the tools define) must leave every digest as it is; a change that means
to change the code rewrites the file on purpose::

    PYTHONPATH=$PWD python tests/test_sass_identity.py --write

What it covers (``CONFIGS``), chosen to fit about a minute of CI on two cores:

- v1, v2, v2t at D 64 and 128 on sm_75, sm_80 and sm_90 (v2 from sm_80: cp.async), the
  warp-tiles variants at 1 and 2 tiles a warp, each in the default flavour (paged, fp32 output)
  and the other one (contiguous, fp16 output); the forced Turing path at sm_80, D 128;
- v3 (sm_90a) at D 64 and 128: 128 and 192 rows, its own and shared tiles, 64-key steps, and
  128-key steps where they are built (shared tiles at 128 rows), in both flavours.

The comparison builds (v3's fp16 control and dq images) are not production code; their own tests
build them. A few of the tools' builds (``TOOL_BUILDS``: experiments/ switching on v3's knock-out
and stamp hooks, kernels/v3_hooks.cuh) are compared too, with the digests of what the tools built
before the hooks existed (text edits of v3.cu), so that the hooks keep building the same code.

The digests hold for the nvcc (and cuobjdump) they were recorded with; with another, or without
either tool, the test skips and says why.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from pa_bench import variants as registry  # noqa: E402
from pa_bench.backends import kernels as K  # noqa: E402

DIGESTS = Path(__file__).resolve().parent / "data" / "sass_digests.json"


@dataclass(frozen=True)
class Config:
    """One production build: a KernelBuild and the arch nvcc targets."""

    build: K.KernelBuild
    arch: str

    @property
    def name(self) -> str:
        b = self.build
        parts = [b.variant, f"d{b.head_dim}", self.arch, "paged" if b.paged else "contig",
                 "f16out" if b.out_f16 else "f32out"]
        if registry.get(b.variant).warp_tiles:
            parts.append(f"tiles{b.tiles}")
        if b.force_turing:
            parts.append("turing")
        if b.cta_rows:
            parts.append(f"rows{b.cta_rows}")
        if b.kv_shared:
            parts.append("shared")
        if b.step_keys != 64:
            parts.append(f"step{b.step_keys}")
        return "-".join(parts)


FLAVOURS = ((True, False), (False, True))     # (paged, out_f16): the default and the other one


def _configs() -> list[Config]:
    out = []
    for variant, archs in (("v1", ("sm_75", "sm_80", "sm_90")), ("v2", ("sm_80", "sm_90")),
                           ("v2t", ("sm_75", "sm_80", "sm_90"))):
        tiles = (1, 2) if registry.get(variant).warp_tiles else (K.DEFAULT_TILES,)
        for d in (64, 128):
            for arch in archs:
                for t in tiles:
                    for paged, out_f16 in FLAVOURS:
                        out.append(Config(K.KernelBuild(variant, head_dim=d, paged=paged, out_f16=out_f16, tiles=t), arch))
        if registry.get(variant).turing_path:
            out.append(Config(K.KernelBuild(variant, head_dim=128, force_turing=True), "sm_80"))
    launches = ((128, False, 64), (128, True, 64), (128, True, 128), (192, False, 64), (192, True, 64))
    for d in (64, 128):
        for rows, shared, step in launches:
            for paged, out_f16 in FLAVOURS:
                out.append(Config(K.KernelBuild("v3", head_dim=d, paged=paged, out_f16=out_f16, cta_rows=rows,
                                                kv_shared=shared, step_keys=step), "sm_90a"))
    return out


CONFIGS = _configs()

TOOL_FLAGS = ("-O3", "-std=c++17", "-DPA_HEAD_DIM=128", "-DPA_PAGED=1", "-DPA_OUT_F16=0", "-DPA_FORCE_TURING=0")


def _tool_builds() -> dict[str, tuple[str, tuple[str, ...]]]:
    """name -> (the hook definitions put before kernels/v3_hooks.cuh's defaults, nvcc -D options)."""
    sys.path.insert(0, str(ROOT / "experiments"))
    import v3_knockouts as KO
    import v3_steps as ST
    import v3_timeline as TL

    def ko(name):
        return "".join(f"#define {o.removeprefix('-D').replace('=', ' ')}\n" for o in KO.defines(KO.KNOCKOUTS[name]))

    return {"ko-gemm-only-shared-128": (ko("gemm-only"), ("-DPA_V3_SHARE=1", "-DPA_CTA_ROWS=128", "-DPA_V3_STEP_KEYS=128")),
            "ko-no-store-own192": (ko("no-store"), ("-DPA_CTA_ROWS=192",)),
            "ko-fp16-softmax-own128": (ko("fp16-softmax"), ("-DPA_CTA_ROWS=128",)),
            "timeline-own192": (TL.stamp_hooks(), ("-DPA_CTA_ROWS=192",)),
            "steps-own128": (ST.stamp_hooks(64, 128), ("-DPA_CTA_ROWS=128",))}


def tool_sass(name: str, hooks: str, defines: tuple[str, ...], tmp: Path) -> str:
    """``cuobjdump -sass`` of v3 built from a copy of kernels/ whose hooks start with ``hooks``."""
    kd = tmp / name
    shutil.copytree(ROOT / "kernels", kd)
    (kd / "v3_hooks.cuh").write_text(hooks + (kd / "v3_hooks.cuh").read_text())
    cubin = tmp / f"{name}.cubin"
    subprocess.run(["nvcc", "-cubin", "-arch=sm_90a", *TOOL_FLAGS, *defines, f"-I{kd}", "-o", str(cubin), str(kd / "v3.cu")],
                   capture_output=True, text=True, check=True)
    return subprocess.run(["cuobjdump", "-sass", str(cubin)], capture_output=True, text=True, check=True).stdout


def tool_versions() -> dict[str, str] | None:
    """nvcc's and cuobjdump's release lines, or None where either is missing."""
    nvcc, cuobjdump = shutil.which("nvcc"), shutil.which("cuobjdump")
    if nvcc is None or cuobjdump is None:
        return None

    def release(tool: str) -> str:
        text = subprocess.run([tool, "--version"], capture_output=True, text=True).stdout
        found = re.search(r"release [^\n]*", text)
        return found.group(0) if found else text.strip().splitlines()[-1]

    return {"nvcc": release(nvcc), "cuobjdump": release(cuobjdump)}


def sass(config: Config, tmp: Path) -> str:
    """``cuobjdump -sass`` of the configuration's cubin."""
    b = config.build
    cubin = tmp / f"{config.name}.cubin"
    subprocess.run(["nvcc", "-cubin", f"-arch={config.arch}", "-O3", *b.options(), "-o", str(cubin),
                    str(K.kernel_path(b.variant))], capture_output=True, text=True, check=True)
    return subprocess.run(["cuobjdump", "-sass", str(cubin)], capture_output=True, text=True, check=True).stdout


def digests(configs: list[Config] = CONFIGS, tools: bool = True, jobs: int | None = None) -> dict[str, str]:
    """sha256 of each configuration's SASS (and of the tools' builds), compiled ``jobs`` at a time
    (the machine's cores)."""
    jobs_ = [(c.name, lambda tmp, c=c: sass(c, tmp)) for c in configs]
    if tools:
        jobs_ += [(n, lambda tmp, n=n, h=h, d=d: tool_sass(n, h, d, tmp)) for n, (h, d) in _tool_builds().items()]
    with tempfile.TemporaryDirectory(prefix="pa-sass-") as tmp:
        with ThreadPoolExecutor(max_workers=jobs or os.cpu_count() or 1) as pool:
            texts = pool.map(lambda job: job[1](Path(tmp)), jobs_)
            return {name: hashlib.sha256(t.encode()).hexdigest() for (name, _), t in zip(jobs_, texts)}


@pytest.mark.nvcc
def test_every_production_build_keeps_its_machine_code():
    versions = tool_versions()
    if versions is None:
        pytest.skip("nvcc or cuobjdump is not on PATH")
    recorded = json.loads(DIGESTS.read_text())
    if recorded["versions"] != versions:
        pytest.skip(f"the digests were recorded with {recorded['versions']}, this machine has {versions}")
    assert sorted(recorded["sass"]) == sorted(c.name for c in CONFIGS), "configurations changed: --write"
    assert sorted(recorded["tools"]) == sorted(_tool_builds()), "the tools' builds changed: --write"
    now = digests()
    changed = sorted(n for n in now if now[n] != {**recorded["sass"], **recorded["tools"]}[n])
    assert not changed, f"{len(changed)} of {len(now)} builds changed their machine code: {', '.join(changed)}"


def test_the_configurations_are_distinct_builds():
    names = [c.name for c in CONFIGS]
    assert len(set(names)) == len(names)
    assert len({(c.build.variant, c.build.options(), c.arch) for c in CONFIGS}) == len(CONFIGS)


def write() -> None:
    """Record the digests of the tree as it is now."""
    versions = tool_versions()
    if versions is None:
        raise SystemExit("nvcc or cuobjdump is not on PATH")
    now = digests()
    tools = set(_tool_builds())
    data = {"versions": versions, "sass": {n: d for n, d in now.items() if n not in tools},
            "tools": {n: d for n, d in now.items() if n in tools}}
    DIGESTS.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    print(f"{len(now)} digests written to {DIGESTS}")


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        raise SystemExit("usage: python tests/test_sass_identity.py --write")
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import conftest  # noqa: F401  (puts Triton's cuobjdump on PATH where the toolkit's is missing)

    write()
