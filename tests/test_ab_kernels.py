"""scripts/ab_kernels.py without a GPU: its arguments, the launch choices it compares, its lines."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

import pa_bench

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "ab_kernels.py"
spec = importlib.util.spec_from_file_location("ab_kernels", SCRIPT)
ab = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ab)


def test_arguments():
    a = ab.parse_args([])
    assert (a.shapes, a.label, a.split, a.tiles, a.rows) == (["32Kx1024", "64Kx512", "0x1536", "2.1Kx256"], "A",
                                                             "rule", None, 6)
    a = ab.parse_args(["--label", "new", "--split", "both", "--tiles", "1", "64Kx512"])
    assert (a.shapes, a.label, a.split, a.tiles) == (["64Kx512"], "new", "both", 1)
    with pytest.raises(SystemExit):
        ab.parse_args(["--split", "sometimes"])


def test_launch_choices_pin_the_split_and_the_tiles():
    assert ab.launches("rule", None) == [pa_bench.Pins()]
    assert ab.launches("both", 2) == [pa_bench.Pins(split=False, tiles=2), pa_bench.Pins(split=True, tiles=2)]
    assert ab.launches("on", 1) == [pa_bench.Pins(split=True, tiles=1)]


def test_lines():
    line = ab.error_line("[A] 32Kx1024 split=0 tiles=2", "v2", 2e-6, 1e-6, True, {"num_regs": 96, "ctas_per_sm": 4})
    assert line == ("[A] 32Kx1024 split=0 tiles=2 v2: err 2.000e-06, model 1.000e-06 (x2.00), deterministic True; "
                    "96 regs, 4 CTAs/SM")
    flops = pa_bench.make_problem("32Kx1024").flops
    line = ab.time_line("[A] 32Kx1024", "v2t", [2.0, 1.0, 3.0], flops)
    assert line == f"[A] 32Kx1024 v2t  2.000 ms  {flops / 2.0 / 1e9:.0f} TFLOP/s  (3 samples)"
