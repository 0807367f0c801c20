"""scripts/flush_probe.py's CPU parts: the --calls grammar and the reading of ncu's CSV."""

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "flush_probe.py"
spec = importlib.util.spec_from_file_location("flush_probe", SCRIPT)
fp = importlib.util.module_from_spec(spec)
sys.modules["flush_probe"] = fp
spec.loader.exec_module(fp)


def test_calls_grammar_and_grouping_keep_the_order_given():
    calls = fp.parse_calls("0x1536:torch-sdpa,2.1Kx256:v2,0x1536:v3")
    assert calls == [("0x1536", "torch-sdpa"), ("2.1Kx256", "v2"), ("0x1536", "v3")]
    assert fp.by_shape(calls) == {"0x1536": ["torch-sdpa", "v3"], "2.1Kx256": ["v2"]}
    with pytest.raises(SystemExit, match="not SHAPE:VARIANT"):
        fp.parse_calls("0x1536")


def _csv(values_ns):
    head = '"ID","Kernel Name","Metric Name","Metric Unit","Metric Value"\n'
    rows = "".join(f'"{i}","k","gpu__time_duration.sum","ns","{v:,}"\n' for i, v in enumerate(values_ns))
    return "==PROF== Connected\n" + head + rows


def test_parse_assigns_kernels_in_the_childs_order():
    # the child takes, per shape (in --calls order) and per variant, `samples` rounds of every mode
    calls = [("0x1536", "torch-sdpa"), ("2.1Kx256", "v2"), ("0x1536", "v3")]
    modes, samples = ["read", "read+touch"], 2
    order = [(s, v, m) for s, vs in fp.by_shape(calls).items() for v in vs for _ in range(samples) for m in modes]
    values = [100_000 + i for i in range(len(order))]
    got = fp.parse(_csv(values), calls, modes, samples)
    for key, v in zip(order, values):
        assert v * 1e-6 in [pytest.approx(x) for x in got[key]]
    assert all(len(xs) == samples for xs in got.values())
    assert list(got)[:2] == [("0x1536", "torch-sdpa", "read"), ("0x1536", "torch-sdpa", "read+touch")]


def test_parse_refuses_a_call_of_several_kernels():
    with pytest.raises(SystemExit, match="expected 4"):
        fp.parse(_csv([1, 2, 3, 4, 5]), [("0x1536", "v2")], ["read", "half"], 2)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
def test_the_preparation_kernels_compile_and_are_named_as_the_probe_looks_them_up(tmp_path):
    # the probe's kernels are compiled by CuPy on the GPU machine only: a missing or misspelt
    # kernel would otherwise first show there, as CUDA_ERROR_NOT_FOUND after the machine started
    src = tmp_path / "prep.cu"
    src.write_text(fp._TOUCH_SRC)
    subprocess.run(["nvcc", "-ptx", "-arch=sm_90", "-o", str(tmp_path / "prep.ptx"), str(src)], check=True)
    ptx = (tmp_path / "prep.ptx").read_text()
    looked_up = set(re.findall(r'get_function\("(\w+)"\)', SCRIPT.read_text()))
    assert looked_up == {"pa_touch", "pa_smem"}
    for name in looked_up:
        assert re.search(rf"\.entry {name}\(", ptx), name
