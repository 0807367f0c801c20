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


def _csv(values_ns, names=None):
    head = '"ID","Kernel Name","Metric Name","Metric Unit","Metric Value"\n'
    names = names or ["k"] * len(values_ns)
    rows = "".join(f'"{i}","{n}","gpu__time_duration.sum","ns","{v:,}"\n' for i, (n, v) in enumerate(zip(names, values_ns)))
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


def test_parse_sums_the_kernels_of_a_call():
    # v3 with key segments: pa_v3 then pa_combine, for each of 2 samples x 2 modes
    names = ["pa_v3", "pa_combine"] * 4
    got = fp.parse(_csv([40_000, 2_000, 41_000, 2_500, 39_000, 2_100, 42_000, 2_200], names),
                   [("2.1Kx256", "v3")], ["read", "read+smem"], 2)
    assert got[("2.1Kx256", "v3", "read")] == [pytest.approx(0.042), pytest.approx(0.0411)]
    assert got[("2.1Kx256", "v3", "read+smem")] == [pytest.approx(0.0435), pytest.approx(0.0442)]


def test_parse_refuses_counts_that_are_not_whole_calls():
    with pytest.raises(SystemExit, match="not a whole number per call"):
        fp.parse(_csv([1, 2, 3, 4, 5]), [("0x1536", "v2")], ["read", "half"], 2)
    with pytest.raises(SystemExit, match="do not repeat per call"):
        fp.parse(_csv([1, 2, 3, 4, 5, 6, 7, 8], ["a", "b", "a", "b", "a", "b", "b", "a"]),
                 [("0x1536", "v2")], ["read", "half"], 2)


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
