"""scripts/flush_probe.py's CPU parts: the --calls grammar and the reading of ncu's CSV."""

import importlib.util
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
