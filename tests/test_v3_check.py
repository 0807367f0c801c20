"""scripts/v3_check.py without a GPU: its arguments and cases, and the diagnosis of a failing case
on made-up arrays (a bad query head, a NaN)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

import pa_bench

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "v3_check.py"
spec = importlib.util.spec_from_file_location("v3_check", SCRIPT)
vc = importlib.util.module_from_spec(spec)
sys.modules["v3_check"] = vc   # its dataclass looks its module up
spec.loader.exec_module(vc)


def test_cases_and_arguments(capsys):
    assert len(vc.CASES) == 13 and len({c.name for c in vc.CASES}) == 13
    assert [c.name for c in vc.chosen_cases(vc.parse_args(["--quick"]))] == list(vc.QUICK)
    assert [c.name for c in vc.chosen_cases(vc.parse_args(["--case", "odd-d64-p64", "--case", "tiny-d128"]))] == \
        ["tiny-d128", "odd-d64-p64"]
    with pytest.raises(SystemExit):
        vc.parse_args(["--case", "no-such-case"])
    assert "unknown case 'no-such-case'" in capsys.readouterr().err


def test_a_case_is_a_problem_and_its_pins():
    case = next(c for c in vc.CASES if c.name == "odd-24/8-d64-p16")
    pb = vc.case_problem(case)
    assert (pb.label, pb.heads_q, pb.heads_kv, pb.head_dim, pb.page, pb.seed) == ("1023x113", 24, 8, 64, 16, 0)
    assert vc.case_pins(case) == pa_bench.Pins()
    seg = next(c for c in vc.CASES if c.segments)
    assert vc.case_pins(seg) == pa_bench.Pins(segments=512)


def test_build_line():
    info = {"build": "-DPA_HEAD_DIM=128", "compiler": "nvrtc", "num_regs": 168, "local_size_bytes": 0,
            "max_dynamic_shared_size_bytes": 214016, "shared_size_bytes": 0, "binary_version": 90}
    assert vc.build_line(info) == ("  build -DPA_HEAD_DIM=128: nvrtc, 168 regs, local (spill) 0 B, "
                                   "dynamic smem 214016 B, static 0 B, binary sm_90")


def test_explain_points_at_the_bad_head_and_the_nan():
    rng = np.random.default_rng(0)
    pb = pa_bench.make_problem("0x64", heads_q=8, heads_kv=2, head_dim=64)
    ref = rng.standard_normal((8, 64, 64))
    model = ref + 1e-6
    out = (ref + 2e-6).astype(np.float32)
    out[5, 10, :] += 0.5                 # a layout bug in query head 5, row 10
    out[2, 3, 7] = np.nan
    pm = pa_bench.parity_verdict(out, ref, model)

    class Ko:
        deterministic, canary_ok = True, True

    text = vc.explain(pb, out, ref, model, None, pm, Ko(), cta=128)
    assert not pm.parity_pass and text.startswith(f"    why: {pm.reason}")
    assert "1 NaN/Inf; first at head 2 row 3 dim 7" in text
    per_head = next(line for line in text.splitlines() if "max err per query head" in line).split(": ")[1].split()
    assert per_head[2] == "inf" and float(per_head[5]) == pytest.approx(0.5, rel=1e-3)
    assert "(head 5, row 10)" in text and "consumer warpgroup 0 rows" in text
