"""experiments/v3_micro.py: its two microbenchmarks build for sm_90a from kernels/v3.cu without spills,
and ptxas keeps their wgmma chains pipelined (a serialised chain would time something else)."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "experiments"))
import v3_micro as M  # noqa: E402


def test_every_chain_mode_has_its_kernel():
    for mode in M.CHAINS:
        assert f"PA_MB_CHAIN({mode})" in M.CHAINS_SRC
    assert "mb_softmax0" in M.SOFTMAX_SRC and "mb_softmax1" in M.SOFTMAX_SRC
    assert all('#include "v3.cu"' in src for src in M.SOURCES.values())


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
@pytest.mark.parametrize("name", sorted(M.SOURCES))
def test_the_microbenchmark_builds_without_spills_and_keeps_wgmma_pipelined(tmp_path, name):
    (tmp_path / f"{name}.cu").write_text(M.SOURCES[name])
    res = subprocess.run(["nvcc", "-cubin", "-arch=sm_90a", "-std=c++17", *M.DEFINES, f"-I{ROOT / 'kernels'}",
                          "-Xptxas", "-v", "-o", str(tmp_path / f"{name}.cubin"), str(tmp_path / f"{name}.cu")],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-2000:]
    assert not re.search(r"C751[0-8]", res.stderr), "ptxas serialised a wgmma chain"
    kernels = re.findall(r"Compiling entry function '(mb_\w+)'", res.stderr)
    assert len(kernels) == (len(M.CHAINS) if name == "chains" else 2)
    for k in kernels:
        part = res.stderr[res.stderr.index(f"Compiling entry function '{k}'"):]
        spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", part)
        assert spills and spills.groups() == ("0", "0"), (k, part[:300])
