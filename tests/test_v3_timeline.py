"""experiments/v3_timeline.py: its stamps still fit kernels/v3.cu (and build without spills), and its
summary reads a timeline right."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "experiments"))
import v3_timeline as T  # noqa: E402


def test_every_stamp_is_recorded_at_a_hooked_point_once():
    src = "".join((ROOT / "kernels" / f).read_text() for f in ("v3.cu", "v3_pairs.cuh"))
    out = T.stamp_hooks()
    for name, slot in T.STAMPS.items():
        assert out.count(f"pa_tl_stamp({slot})") == 1 or (name.startswith("wg") and "8 : 10" in out), name
    assert "pa_tl_row()[2] = smid" in out and "pa_tl_row()[3] = n" in out
    for point in T.BODIES:
        assert src.count(f"PA_V3_STAMP({point}, ") + src.count(f"PA_V3_STAMP_WG({point}, ") == 1, point


def _build(kd, tmp_path, *extra):
    return subprocess.run(["nvcc", "-cubin", "-arch=sm_90a", "-std=c++17", "-DPA_HEAD_DIM=128", "-DPA_PAGED=1",
                           "-DPA_OUT_F16=0", "-DPA_CTA_ROWS=128", f"-I{kd}", *extra, "-o", str(tmp_path / "v3.cubin"),
                           str(kd / "v3.cu")], capture_output=True, text=True)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_the_stamped_kernel_builds_for_sm90a_without_spills(tmp_path):
    res = _build(T.knockout_kernels(None), tmp_path, "-Xptxas", "-v")
    assert res.returncode == 0, res.stderr[-2000:]
    entry = res.stderr[res.stderr.index("Compiling entry function 'pa_v3' "):]
    spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", entry)
    regs = re.search(r"Used (\d+) registers", entry)
    assert spills and spills.groups() == ("0", "0") and regs and int(regs.group(1)) <= 168, entry[:400]


def _timeline(mhz=1800.0):
    """Two SMs: SM 0 runs CTAs of 8 and 2 tiles, SM 1 one of 4 tiles; a CTA takes 3 us + 1 us a tile,
    the next CTA on an SM starts 0.5 us after one ends."""
    rows = []

    def cta(sm, start_us, tiles):
        r = np.zeros(T.SLOTS, dtype=np.int64)
        dur = 3.0 + tiles
        end = start_us + dur
        r[T.SM_SLOT], r[T.TILES_SLOT] = sm, tiles
        for name, at in (("start", 0.0), ("q_ready", 1.0), ("landed", 0.8), ("first_softmax", 2.0),
                         ("last_turn", dur - 1.5), ("last_pv", dur - 1.0), ("producer_end", dur - 2.0),
                         ("wg0_end", dur), ("wg1_end", dur - 0.1)):
            r[T.STAMPS[name]] = int((start_us + at) * 1e3) + 10**9
            r[T.STAMPS[name] + 1] = int((start_us + at) * mhz) + 5 * 10**6
        rows.append(r)
        return end

    e = cta(0, 0.0, 8)
    cta(0, e + 0.5, 2)
    cta(1, 0.0, 4)
    return np.array(rows)


def test_the_summary_recovers_the_fixed_and_per_tile_cost_the_gaps_and_the_tail():
    s = T.summarize(_timeline())
    assert s["ctas"] == 3 and s["sms"] == 2 and s["ctas_per_sm"] == (1, 2)
    assert s["fixed_us"] == pytest.approx(3.0, abs=0.01) and s["per_tile_us"] == pytest.approx(1.0, abs=0.01)
    assert s["mhz"] == pytest.approx(1800, rel=1e-3)
    assert s["span_us"] == pytest.approx(11 + 0.5 + 5, abs=0.01)
    assert s["gap_us"] == pytest.approx(0.5, abs=0.01)
    assert s["tail_us"][1] == pytest.approx((0 + (16.5 - 7)) / 2, abs=0.01)
    assert s["producer_lead_us"] == pytest.approx(2.0, abs=0.01)
    assert s["stages"][2]["q_ready"] == pytest.approx(1.0, abs=0.01)
    assert s["stages"][8]["last_pv"] == pytest.approx(10.0, abs=0.01)
    # busy cycles per SM: SM 0 runs 11 + 5 us, SM 1 7 us, at 1,800 cycles a us
    assert s["busy_per_sm_mcycles"] == pytest.approx((16 + 7) * 1800 / 2 / 1e6, rel=1e-3)
    text = T.report("toy", s, 20.0)
    assert "3.00 us + 1.000 us x tiles" in text and "0.50 us after one ends" in text
    assert "0.0207 M cycles" in text


def test_stamps_a_build_never_writes_print_as_dashes():
    t = _timeline()
    for name in ("landed", "first_softmax", "last_turn", "last_pv"):   # the 128-key step's loop has none
        t[:, T.STAMPS[name]] = t[:, T.STAMPS[name] + 1] = 0
    s = T.summarize(t)
    assert np.isnan(s["stages"][8]["last_pv"]) and s["stages"][8]["q_ready"] == pytest.approx(1.0, abs=0.01)
    text = T.report("toy", s, None)
    assert "tile 0 landed -, first softmax -, last turn -, last P.V -, end 11.00" in text


def test_lengths_too_alike_give_no_fixed_part():
    t = _timeline()
    t = t[[0]]                                 # one CTA: no spread of lengths to fit
    s = T.summarize(t)
    assert np.isnan(s["fixed_us"]) and s["per_tile_us"] == pytest.approx(11 / 8, abs=0.01)
    assert "too alike" in T.report("toy", s, 1.0)


def test_list_schedule_hands_each_cta_to_the_sm_that_frees_first():
    assert T.list_schedule([5, 4, 3, 2], sms=2) == 7          # 5+2 on one SM, 4+3 on the other
    assert T.list_schedule([5, 4, 3, 2], sms=2, gap=0.5) == pytest.approx(7.5)
    assert T.list_schedule([1, 1, 1], sms=8) == 1


def test_the_model_schedules_the_fit_longest_first_and_a_persistent_grid_pays_the_fixed_cost_once():
    m = T.summarize(_timeline())["model"]
    # CTAs of 11, 7 and 5 us (3 + tiles) longest first on 2 SMs with 0.5 us between: 7 + 0.5 + 5
    assert m["list_us"] == pytest.approx(12.5, abs=0.01)
    # persistent: 3 us once, then 8 | 4 + 2 tiles of 1 us
    assert m["persistent_us"][0.0] == pytest.approx(11.0, abs=0.01)
    assert m["persistent_us"][1.0] == pytest.approx(3 + max(9, 5 + 3), abs=0.01)


def test_kept_stamps_are_summarised_without_a_gpu(tmp_path, capsys):
    np.save(tmp_path / "timeline_toy.npy", _timeline())
    assert T.main(["--stamps", str(tmp_path / "timeline_toy.npy")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("== toy: 3 CTAs on 2 SMs") and "3.00 us + 1.000 us x tiles" in out and "between events" not in out


@pytest.mark.parametrize("names", ["no-scales", "no-k-scales", "kscale-in-q", "no-softmax,no-copy"])
def test_knockouts_compose_with_the_stamps(names):
    import v3_knockouts as K

    kd = T.knockout_kernels(names)
    hooks = (kd / "v3_hooks.cuh").read_text()
    assert hooks.count("pa_tl_stamp(6)") == 1
    for p in {p for n in names.split(",") for p in K.KNOCKOUTS[n]}:
        assert f"#define PA_V3_KO_{p} 1" in hooks
    for f in ("v3.cu", "v3_pairs.cuh"):   # the sources themselves are not edited
        assert (kd / f).read_text() == (ROOT / "kernels" / f).read_text()


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_a_stamped_knockout_builds_for_sm90a(tmp_path):
    res = _build(T.knockout_kernels("kscale-in-q"), tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
