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


def test_call_pairs_parse():
    assert ncu_check.call_pairs("0:6,3:5") == {(0, 6), (3, 5)}
    assert ncu_check.call_pairs(None) is None


def test_the_childs_own_l2_flush_is_in_no_calls_sum():
    # flushed mode: [scrub] [marker] [kernels of the call] [scrub] [marker] ...
    text = "\n".join([HEAD, row(0, "pa_l2_scrub", 50000), row(1, "pa_mark_0_6", 1), row(2, "dequant", 10),
                      row(3, "flash", 20), row(4, "pa_l2_scrub", 50000), row(5, "pa_mark_0_6", 1),
                      row(6, "dequant", 11), row(7, "flash", 21), row(8, "pa_l2_scrub", 50000)])
    assert ncu_check.parse_ncu_csv(text) == {(0, 6): [(pytest.approx(32e-6), 2)]}
