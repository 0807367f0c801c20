"""A plug-in: a candidate v3, from another tree's kernels/, registered beside v3 as ``v3_cand``.

    PA_V3_CANDIDATE=v3-scale-prefetch pa-bench run --plugin scripts/v3_candidate.py --variant v3,v3_cand
    PA_V3_CANDIDATE=/path/to/kernels  pa-bench run --config sweep --plugin scripts/v3_candidate.py --variant v3,v3_cand

``PA_V3_CANDIDATE`` names a git ref of this repository (its ``kernels/`` as committed there) or a
directory holding a ``v3.cu``. The candidate's kernel files are copied to a temporary folder, with
the entry points renamed (``pa_v3`` -> ``pa_v3_cand``, and its shared-memory probe), and
registered as v3's own registry entry under another name. So a run checks the candidate's parity
against the numerics model and times it in turns with v3, on the launches v3's rule picks (rows,
segments, shared tiles, consumer step): an A/B of two kernel sources with pa-bench's timing.
The candidate's ``pa_common.cuh`` and ``v3_pairs.cuh`` are its own (its folder comes first on the
include path). Not for a candidate that changes the host's side (the launch rule, the arguments).

A candidate meant to keep v3's bits (a schedule change) says so with ``PA_V3_CANDIDATE_SAME_BITS=1``:
``v3_cand`` then has v3 as its bitwise twin, and a run of both (``--variant v3,v3_cand``; v3,
registered first, is computed first) fails the candidate's parity on any shape where its output
differs from v3's by a bit.
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import tempfile
from pathlib import Path

from pa_bench import variants as registry
from pa_bench import PaBenchError

NAME = "v3_cand"
ROOT = Path(__file__).resolve().parents[1]
_ENTRY = re.compile(r"\bpa_v3(?=\s*\(|_smem_bytes\b)")   # the kernel and its probe; not pa_v3_images


def candidate_files(spec: str) -> dict[str, str]:
    """The kernel files (name -> text) of ``spec``: a directory with v3.cu, or a git ref's kernels/."""
    folder = Path(spec).expanduser()
    if folder.is_dir():
        files = {p.name: p.read_text() for p in folder.iterdir() if p.suffix in (".cu", ".cuh")}
    else:
        def git(*args: str) -> str:
            proc = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
            if proc.returncode != 0:
                raise PaBenchError(f"PA_V3_CANDIDATE={spec!r}: neither a folder nor a git ref here "
                                   f"({proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else 'git failed'})")
            return proc.stdout

        names = [n for n in git("ls-tree", "--name-only", f"{spec}:kernels").split() if n.endswith((".cu", ".cuh"))]
        files = {n: git("show", f"{spec}:kernels/{n}") for n in names}
    if "v3.cu" not in files:
        raise PaBenchError(f"PA_V3_CANDIDATE={spec!r}: no v3.cu there")
    return files


def renamed(v3_source: str) -> str:
    """``v3_source`` with its entry points renamed for the candidate (``pa_v3_cand``)."""
    out, n = _ENTRY.subn("pa_" + NAME, v3_source)
    if n < 2:
        raise PaBenchError("v3_candidate: the candidate's v3.cu defines no pa_v3 kernel and probe to rename")
    return out


def register(spec: str | None = None) -> str:
    """Register ``v3_cand`` from ``spec`` (default: $PA_V3_CANDIDATE); returns its source path."""
    spec = spec or os.environ.get("PA_V3_CANDIDATE")
    if not spec:
        raise PaBenchError("v3_candidate: set PA_V3_CANDIDATE to a git ref or a folder with a v3.cu")
    files = candidate_files(spec)
    folder = Path(tempfile.mkdtemp(prefix="pa-v3-cand-"))
    for name, text in files.items():
        (folder / name).write_text(renamed(text) if name == "v3.cu" else text)
    from pa_bench.backends import kernels

    v3 = registry.get("v3")
    same_bits = os.environ.get("PA_V3_CANDIDATE_SAME_BITS", "") not in ("", "0")
    registry.register(dataclasses.replace(
        v3, name=NAME, summary=f"v3 as built from {spec} (scripts/v3_candidate.py)",
        source=str(folder / "v3.cu"), geometry=kernels.GEOMETRY["v3"],
        bitwise_twin="v3" if same_bits else v3.bitwise_twin))
    return str(folder / "v3.cu")


if registry.find(NAME) is None:   # loaded as a plug-in: register now (unset: one line, exit 2)
    register()
