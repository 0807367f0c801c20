"""scripts/ncu_check.py's reading of Nsight Compute's CSV (the GPU part runs on the device)."""

import importlib.util

import pytest
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "ncu_check.py"
spec = importlib.util.spec_from_file_location("ncu_check", SCRIPT)
ncu_check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ncu_check)

HEAD = '"ID","Kernel Name","Metric Name","Metric Unit","Metric Value"'


def row(i, name, ns, metric="gpu__time_duration.sum", unit="nsecond"):
    return f'"{i}","{name}","{metric}","{unit}","{ns}"'


def test_calls_are_split_at_markers_and_summed_without_the_warm_up():
    lines = ["==PROF== Connected to process 1", HEAD]
    i = 0
    for call, (k1, k2) in enumerate([(900, 100), (1000, 200), (1100, 300)]):   # warm-up first
        lines += [row(i, "pa_mark_0_1", 1500), row(i + 1, "void flash_fwd_kernel<...>(Params)", f"{k1:,}"),
                  row(i + 2, "elementwise_kernel", k2)]
        i += 3
    lines += [row(i, "pa_mark_1_0", 1500), row(i + 1, "pa_v2", 2000, unit="us")]
    lines += [row(i + 2, "pa_mark_1_0", 1500), row(i + 3, "pa_v2", 4000, unit="usecond"),
              row(i + 3, "pa_v2", 77, metric="other__metric")]
    got = ncu_check.parse_ncu_csv("\n".join(lines))
    assert [c[1] for c in got[(0, 1)]] == [2, 2]
    assert [c[0] for c in got[(0, 1)]] == pytest.approx([1200e-6, 1400e-6])
    assert got[(1, 0)] == [(pytest.approx(4.0), 1)]      # 4000 us; the warm-up call (2000 us) is dropped


def test_kernels_before_the_first_marker_are_ignored():
    text = "\n".join([HEAD, row(0, "pa_hold_stream", 5), row(1, "pa_mark_0_0", 1), row(2, "pa_v1", 10),
                      row(3, "pa_mark_0_0", 1), row(4, "pa_v1", 20)])
    assert ncu_check.parse_ncu_csv(text) == {(0, 0): [(pytest.approx(20e-6), 1)]}


def test_ranges_map_to_the_calls_in_the_childs_order():
    # two calls run as ranges, 2 reps each (the warm-up runs outside any range)
    text = "\n".join(["==PROF== Connected", HEAD, row(0, "range", 100), row(1, "range", 110),
                      row(2, "range", "1,000"), row(2, "range", 5, metric="other__metric"),
                      row(3, "range", 1.2, unit="usecond")])
    got = ncu_check.parse_ncu_ranges(text, [(3, 6), (0, 6)], reps=2)
    assert got[(0, 6)] == pytest.approx([100e-6, 110e-6])   # sorted order: (0, 6) ran first
    assert got[(3, 6)] == pytest.approx([1000e-6, 1.2e-3])


def test_a_wrong_count_of_ranges_is_an_error_not_a_silent_mapping():
    text = "\n".join([HEAD, row(0, "range", 100), row(1, "range", 110), row(2, "range", 120)])
    with pytest.raises(ValueError, match="3 results, expected 2 calls x 2 = 4"):
        ncu_check.parse_ncu_ranges(text, [(0, 6), (1, 6)], reps=2)


def test_range_pairs_parse():
    assert ncu_check.range_pairs("0:6,3:5") == {(0, 6), (3, 5)}
    assert ncu_check.range_pairs(None) is None


def test_the_childs_own_l2_flush_is_in_no_calls_sum():
    # flushed mode: [scrub] [marker] [kernels of the call] [scrub] [marker] ...
    text = "\n".join([HEAD, row(0, "pa_l2_scrub", 50000), row(1, "pa_mark_0_6", 1), row(2, "dequant", 10),
                      row(3, "flash", 20), row(4, "pa_l2_scrub", 50000), row(5, "pa_mark_0_6", 1),
                      row(6, "dequant", 11), row(7, "flash", 21), row(8, "pa_l2_scrub", 50000)])
    assert ncu_check.parse_ncu_csv(text) == {(0, 6): [(pytest.approx(32e-6), 2)]}
