"""experiments/v3_smem_patterns.py: every pattern builds for sm_90a from kernels/v3.cu without spills,
and its loop keeps the accesses it times, at the width it names (ptxas hoists repeated plain
loads out of a loop and narrows a wide load whose results are partly unused: either would time
something else)."""

import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "experiments"))
sys.path.insert(0, str(ROOT / "scripts"))   # sass_loops, a maintained tool
import sass_loops  # noqa: E402
import v3_smem_patterns as M  # noqa: E402

_OPS = re.compile(r"\b((?:LDS|STS|SHFL)(?:\.[A-Z0-9]+)*|SYNCS(?:\.[A-Z0-9]+)+)\b")


def test_every_pattern_has_its_kernel_and_instruction():
    assert set(M.PATTERNS) == set(M.SASS_OP)
    for p in M.PATTERNS:
        assert f"PA_SP({p})" in M.SRC
    assert '#include "v3.cu"' in M.SRC


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not installed")
    d = tmp_path_factory.mktemp("smem")
    (d / "p.cu").write_text(M.SRC)
    res = subprocess.run(["nvcc", "-cubin", "-arch=sm_90a", "-std=c++17", *M.DEFINES, f"-I{ROOT / 'kernels'}",
                          "-Xptxas", "-v", "-o", str(d / "p.cubin"), str(d / "p.cu")],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-2000:]
    return d / "p.cubin", res.stderr


def test_the_patterns_build_without_spills_and_the_chains_stay_pipelined(built):
    _, log = built
    assert not re.search(r"C751[0-8]", log), "ptxas serialised sp_mix's wgmma chain"
    for p in [*M.PATTERNS, "_mix_ss", "_mix_rs"]:
        part = log[log.index(f"Compiling entry function 'sp{p}'"):]
        spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", part)
        assert spills and spills.groups() == ("0", "0"), (p, part[:300])


@pytest.mark.skipif(shutil.which("cuobjdump") is None or shutil.which("nvdisasm") is None,
                    reason="cuobjdump/nvdisasm are not on PATH")
def test_each_loop_keeps_the_accesses_it_times(built):
    cubin, _ = built
    sass = subprocess.run(["cuobjdump", "-sass", str(cubin)], capture_output=True, text=True, check=True).stdout
    for p, (name, per_rep) in M.PATTERNS.items():
        ins = sass_loops.function_instructions(sass, f"sp{p}")
        body = sass_loops.loops(ins, min_body=per_rep)
        assert body, (name, "no repetition loop")
        want = M.SASS_OP[p]
        # the repetitions' loop: the one holding most of the pattern's instruction (the other
        # loops fill shared memory and retry the mbarrier waits)
        counts = [Counter(op for a, t in ins if lp.start <= a <= lp.end for op in _OPS.findall(t))
                  for lp in body]
        ops = max(counts, key=lambda c: c[want])
        # at least one repetition's worth of the pattern's own instruction inside the loop, and
        # (for loads and stores) no other width of it there
        assert ops[want] >= per_rep - (8 if p == 12 else 0), (name, ops)
        if want.startswith(("LDS.", "STS.")):
            assert not [op for op in ops if op.split(".")[0] == want.split(".")[0] and op != want], (name, ops)
