"""experiments/v3_steps.py: its stamps still fit kernels/v3.cu (and build without spills or wgmma
serialisation), and its summary reads a record of steps right."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "experiments"))
import v3_steps as S  # noqa: E402


def test_every_event_is_a_stamp_point_hooked_once():
    src = (ROOT / "kernels" / "v3.cu").read_text()
    out = S.stamp_hooks(64, 128)
    assert out.startswith("#define PA_ST_FIRST 64\n#define PA_ST_COUNT 128\n")
    for r, role in enumerate(S.ROLES):
        assert len(S.POINTS[role]) == len(S.EVENTS[role])
        for k, point in enumerate(S.POINTS[role]):
            hook = f"PA_V3_STAMP_WG({point}, " if r < 2 else f"PA_V3_STAMP({point}, "
            assert src.count(hook) == 1, (role, point)
            call = f"pa_st({'wg' if r < 2 else 2}, n, {k})"
            assert out.count(call) == 1, (role, k)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_the_stamped_kernel_builds_for_sm90a_without_spills_or_serialised_wgmma(tmp_path):
    import v3_stamping as V

    kd = V.hooked_kernels(ROOT / "kernels", "pa-test-steps-", S.stamp_hooks(100, 200))
    res = subprocess.run(["nvcc", "-cubin", "-arch=sm_90a", "-std=c++17", "-DPA_HEAD_DIM=128", "-DPA_PAGED=1",
                          "-DPA_OUT_F16=0", "-DPA_CTA_ROWS=128", f"-I{kd}", "-Xptxas", "-v", "-o", str(tmp_path / "v3.cubin"),
                          str(kd / "v3.cu")], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-2000:]
    assert not re.search(r"C751[0-8]", res.stderr), "ptxas serialised the wgmma chains"
    entry = res.stderr[res.stderr.index("Compiling entry function 'pa_v3' "):]
    spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", entry)
    assert spills and spills.groups() == ("0", "0"), entry[:400]


def _record(steps=6):
    """Steps of 1000 cycles: each consumer's events 0, 50, 60, 100, 300, 400, 450, 850, 900 cycles
    into its step (warpgroup 1 200 cycles behind warpgroup 0), the producer's 0, 100, 500, 700, 750, 800."""
    t = np.zeros((3, S.MAX_STEPS, S.SLOTS), dtype=np.int64)
    cons = [0, 50, 60, 100, 300, 400, 450, 850, 900]
    prod = [0, 100, 500, 700, 750, 800]
    for n in range(steps):
        t[0, n, :9] = [10**6 + 1000 * n + c for c in cons]
        t[1, n, :9] = [10**6 + 200 + 1000 * n + c for c in cons]
        t[2, n, :6] = [10**6 + 1000 * n + c for c in prod]
    return t


def test_the_summary_gives_each_stretch_the_period_and_the_turns():
    s = S.summarize(_record())
    for role in ("wg0", "wg1"):
        r = s[role]
        assert r["steps"] == 5 and r["period"] == 1000        # the last step has no next top
        assert r["stretches"]["top->full"] == 50 and r["stretches"]["s_done->softmax"] == 400
        assert r["stretches"]["pv_done->next top"] == 100
    assert s["producer"]["stretches"]["landed->empty"] == 400 and s["producer"]["stretches"]["barrier->next top"] == 200
    assert s["turns"]["wg0 issue to wg1 issue"] == 200 and s["turns"]["wg1 turn after wg0 issued"] == 200 + 60 - 400
    text = S.report("toy", s)
    assert "wg0: 5 steps, a step 1000 cycles" in text and "s_done->softmax 400" in text


def test_steps_with_a_missing_stamp_are_left_out():
    t = _record()
    t[0, 2, 4] = 0                             # wg0's step 2 lost a stamp: steps 1 and 2 have no full period
    s = S.summarize(t)
    assert s["wg0"]["steps"] == 3 and s["wg1"]["steps"] == 5


def test_kept_stamps_are_summarised_without_a_gpu(tmp_path, capsys):
    np.save(tmp_path / "steps_toy.npy", _record())
    assert S.main(["--stamps", str(tmp_path / "steps_toy.npy")]) == 0
    assert capsys.readouterr().out.startswith("== toy\n  wg0: 5 steps")


def test_a_bad_window_is_refused():
    with pytest.raises(SystemExit, match="--window"):
        S.main(["--window", "10:5"])
