"""A/B of two hand-made runs: verdicts, parity changes, rows in one run only, has_slowdown."""

import datetime as dt
import math
from pathlib import Path

import numpy as np
import pytest

from pa_bench.present.compare import (NothingToCompare, compare_runs, format_compare,
                                      has_parity_regression, has_slowdown)
from pa_bench.store.records import Record
from pa_bench.store.results import new_run_dir
from pa_bench.measure.stats import IQR_TO_SIGMA

WHEN = dt.datetime(2026, 11, 30, 3, 0, 0, tzinfo=dt.timezone.utc)


def rec(shape, variant, ms, rel=0.005, parity=True, status="ok", gpu="NVIDIA H200", **kw):
    half = 0.5 * IQR_TO_SIGMA * rel * ms if ms is not None else None
    return Record(shape=shape, variant=variant, status=status, gpu=gpu, ms_median=ms,
                  ms_q1=None if ms is None else ms - half, ms_q3=None if ms is None else ms + half,
                  ms_rel_spread=rel if ms is not None else None, parity_pass=parity,
                  max_abs_err=3.7e-6, **kw)


def make(tmp_path, name, records, minutes=0):
    run = new_run_dir(tmp_path, name, "cuda", WHEN + dt.timedelta(minutes=minutes))
    for r in records:
        run.save_record(r)
    return run


@pytest.fixture
def runs(tmp_path):
    a = make(tmp_path, "base", [
        rec("32Kx1024", "v1", 13.0),
        rec("32Kx1024", "v2t", 7.6),
        rec("64Kx512", "v1", 6.7, rel=0.05),
        rec("64Kx512", "v2t", 4.8),
        rec("2.1Kx256", "v2t", 2.3),
        rec("0x1536", "v2", None, status="skipped", reason="sm_75"),
    ])
    b = make(tmp_path, "change", [
        rec("32Kx1024", "v1", 13.0),               # identical -> same
        rec("32Kx1024", "v2t", 8.36),              # +10 % with 0.5 % noise -> slower
        rec("64Kx512", "v1", 6.9, rel=0.05),       # +3 % within 5 % noise -> same
        rec("64Kx512", "v2t", 4.0, parity=False),  # faster, but parity regressed
        rec("1Kx113", "v2t", 0.5),                 # new shape
        rec("0x1536", "v2", None, status="skipped", reason="sm_75"),
    ], minutes=5)
    return a, b


def test_compare_verdicts(runs):
    a, b = runs
    df = compare_runs(a.path, b.path)
    v = {(r.shape, r.variant): r for r in df.itertuples()}
    assert v["32Kx1024", "v1"].verdict == "same" and v["32Kx1024", "v1"].change == 0.0
    slow = v["32Kx1024", "v2t"]
    assert slow.verdict == "slower" and slow.change == pytest.approx(0.10)
    noise = 2 * math.sqrt(2) * 0.005  # no raw samples: the interval comes from the quartiles
    assert slow.basis == "quartiles"
    assert slow.change_lo == pytest.approx(1.1 / (1 + noise) - 1)
    assert slow.change_hi == pytest.approx(1.1 * (1 + noise) - 1)
    within = v["64Kx512", "v1"]
    assert within.verdict == "same" and within.change_lo < 0 < within.change_hi
    fast = v["64Kx512", "v2t"]
    assert fast.verdict == "faster" and fast.change == pytest.approx(4.0 / 4.8 - 1)
    assert fast.parity_change == "regressed" and fast.parity_a is True and fast.parity_b is False
    assert v["2.1Kx256", "v2t"].verdict == "only in A" and v["2.1Kx256", "v2t"].presence == "only_a"
    assert v["1Kx113", "v2t"].verdict == "only in B" and math.isnan(v["1Kx113", "v2t"].ms_a)
    assert v["0x1536", "v2"].verdict == "n/a"
    # A's rows first, in A's order, then B's new rows
    assert list(zip(df["shape"], df["variant"]))[-1] == ("1Kx113", "v2t")
    assert df.attrs["run_a"] == a.run_id and df.attrs["run_b"] == b.run_id
    assert has_slowdown(df) and has_parity_regression(df)


def test_no_slowdown_when_only_faster_or_same(tmp_path):
    a = make(tmp_path, "a", [rec("32Kx1024", "v1", 13.0), rec("32Kx1024", "v2t", 7.6)])
    b = make(tmp_path, "b", [rec("32Kx1024", "v1", 13.02), rec("32Kx1024", "v2t", 7.0)], minutes=1)
    df = compare_runs(a, b)
    assert list(df["verdict"]) == ["same", "faster"]
    assert not has_slowdown(df) and not has_parity_regression(df)
    # and the other way round it is a slowdown
    assert has_slowdown(compare_runs(b, a))


def test_compare_warns_when_gpus_differ(tmp_path):
    a = make(tmp_path, "a", [rec("32Kx1024", "v1", 13.0, gpu="RTX 2080 Ti")])
    b = make(tmp_path, "b", [rec("32Kx1024", "v1", 6.0)], minutes=1)
    df = compare_runs(a, b)
    assert df.attrs["warnings"] == ["gpu differs: A RTX 2080 Ti, B NVIDIA H200"]
    assert "warning: gpu differs" in format_compare(df)


@pytest.mark.parametrize("flags", [(), ("--wide",)])
def test_the_compare_command_says_each_warning_once(invoke, tmp_path, flags):
    a = make(tmp_path, "a", [rec("32Kx1024", "v1", 13.0, gpu="RTX 2080 Ti")])
    b = make(tmp_path, "b", [rec("32Kx1024", "v1", 6.0)], minutes=1)
    res = invoke("compare", a.path, b.path, *flags)
    assert res.exit_code == 0
    assert res.output.count("gpu differs") == 1


def test_format_compare(runs):
    a, b = runs
    text = format_compare(compare_runs(a, b))
    lines = text.splitlines()
    assert lines[0] == f"A: {a.run_id}" and lines[1] == f"B: {b.run_id}"
    header = next(l for l in lines if l.startswith("shape"))
    assert header.split() == ["shape", "variant", "A", "ms", "B", "ms", "change", "95%", "interval",
                              "verdict", "parity"]
    slow = next(l for l in lines if l.startswith("32Kx1024") and " v2t " in l)
    assert "7.600" in slow and "8.360" in slow and "+10.0%" in slow and "[+8.5%, +11.6%] q" in slow
    assert "slower" in slow
    reg = next(l for l in lines if l.startswith("64Kx512") and " v2t " in l)
    assert "pass -> FAIL (regressed)" in reg and "faster" in reg
    assert lines[-2] == "1 faster, 1 slower, 2 same (B against A); 1 parity regression"
    assert lines[-1].startswith("q: no raw samples")


@pytest.mark.parametrize("rows_a, rows_b", [
    ([], []),
    ([rec("32Kx1024", "v1", 13.0)], [rec("64Kx512", "v1", 6.7)]),
    ([rec("32Kx1024", "v1", 13.0)], [rec("32Kx1024", "v2t", 7.6)]),
])
def test_runs_with_no_row_in_common_are_an_error(tmp_path, rows_a, rows_b):
    a, b = make(tmp_path, "a", rows_a), make(tmp_path, "b", rows_b, minutes=1)
    a.write_meta({}), b.write_meta({})
    with pytest.raises(NothingToCompare, match="no shape x variant in common"):
        compare_runs(a, b)


# --------------------------------------------------------------------------- symmetry


def _with_samples(tmp_path, name, samples: dict, minutes=0):
    from pa_bench.measure.stats import summarize

    records = []
    for (shape, variant), ms in samples.items():
        st = summarize(ms)
        records.append(Record(shape=shape, variant=variant, status="ok", gpu="NVIDIA H200",
                              ms_median=st.median, ms_q1=st.q1, ms_q3=st.q3,
                              ms_rel_spread=st.rel_stdev))
    run = make(tmp_path, name, records, minutes)
    for (shape, variant), ms in samples.items():
        run.save_samples(shape, variant, ms)
    return run


def _mirrored(ab, ba):
    flip = {"faster": "slower", "slower": "faster", "same": "same"}
    ba = ba.set_index(["shape", "variant"]).loc[list(zip(ab["shape"], ab["variant"]))]
    assert [flip[v] for v in ab["verdict"]] == list(ba["verdict"])
    # the interval of B against A is exactly the reciprocal of A against B
    for col_ab, col_ba in (("change", "change"), ("change_lo", "change_hi"),
                           ("change_hi", "change_lo")):
        assert list((1 + ab[col_ab]) * (1 + ba[col_ba].to_numpy())) == pytest.approx(
            [1.0] * len(ab), rel=1e-12)


def test_verdicts_from_samples_are_symmetric_at_the_bound(tmp_path):
    """Pairs made to sit at the edge of the 1 % floor: whatever is said one way is mirrored."""
    rng = np.random.default_rng(7)
    base = 1.0 + 0.004 * rng.standard_normal(400)
    a, b = {}, {}
    for i, shift in enumerate([0.0, 0.0095, 0.0100, 0.0105, 0.012, -0.0095, -0.0105, -0.05]):
        key = (f"{i}x64", "v1")
        a[key] = list(base * 2.0)
        b[key] = list((base[rng.permutation(400)] + 0.004 * rng.standard_normal(400)) * 2.0
                      * (1 + shift))
    ra, rb = _with_samples(tmp_path, "a", a), _with_samples(tmp_path, "b", b, minutes=1)
    ab, ba = compare_runs(ra, rb), compare_runs(rb, ra)
    assert set(ab["basis"]) == {"samples"}
    _mirrored(ab, ba)
    verdicts = list(ab["verdict"])
    assert verdicts[0] == "same" and verdicts[-1] == "faster" and "slower" in verdicts
    assert has_slowdown(ab) == ("faster" in list(ba["verdict"]))


DATA = Path(__file__).resolve().parent / "data"
REFERENCE = Path(__file__).resolve().parent.parent / "results" / "reference" / "h200"


def test_h200_runs_of_two_schema_versions_compare_symmetrically():
    """Two H200 runs (copies in tests/data, 40 samples a row; schema versions 1 and 2, migrated
    on read): A-vs-B and B-vs-A are mirror images."""
    ab, ba = compare_runs(DATA / "run_v1", DATA / "run_v2"), compare_runs(DATA / "run_v2", DATA / "run_v1")
    ab, ba = ab[ab["basis"] == "samples"], ba[ba["basis"] == "samples"]   # rows in both runs
    assert len(ab) == 20                     # 4 shapes x (v1, v2, v2t and two peers)
    _mirrored(ab, ba)
    v = {(r.shape, r.variant): r.verdict for r in ab.itertuples()}
    # the later run's timing window holds no host time: the peers read faster on the short
    # shapes by 33-69 %
    assert all(v[s, k] == "faster" for s in ("0x1536", "2.1Kx256")
               for k in ("torch-sdpa-flash", "torch-sdpa+dequant"))
    assert has_slowdown(ba) and not all(x == "same" for x in ab["verdict"])


def test_committed_h200_runs_compare_symmetrically():
    """Two committed H200 runs of the PR config (read only), whose kernels differ in v3 alone:
    A-vs-B and B-vs-A are mirror images."""
    before, after = REFERENCE / "20261201-142427-pr2092-cuda", REFERENCE / "20261201-153035-pr2092-cuda"
    ab, ba = compare_runs(before, after), compare_runs(after, before)
    ab, ba = ab[ab["basis"] == "samples"], ba[ba["basis"] == "samples"]   # rows in both runs
    assert len(ab) == 32                     # 4 shapes x (v1, v2, v2t, v3, triton and three peers)
    _mirrored(ab, ba)
    v = {(r.shape, r.variant): r.verdict for r in ab.itertuples()}
    # v3's V scales loaded ahead of the P.V wait: 2.0 % and 2.6 % faster at the long shapes;
    # every unchanged kernel and peer reads the same
    assert v["32Kx1024", "v3"] == v["64Kx512", "v3"] == "faster"
    assert all(verdict == "same" for (shape, variant), verdict in v.items() if variant != "v3")
    assert has_slowdown(ba) and not has_slowdown(ab)


def _clocked(tmp_path, name, ms, mhz, minutes=0, source="sm-cycles", n=40, seed=0):
    """A run of one row whose samples (ms) ran at ``mhz``, stored with their clocks."""
    rng = np.random.default_rng(seed)
    samples = list(ms * (1 + 0.002 * rng.standard_normal(n)))
    run = make(tmp_path, name, [rec("32Kx1024", "v3", float(np.median(samples)), rel=0.002,
                                    sm_clock_mhz=mhz, clock_source=source)], minutes)
    run.save_samples("32Kx1024", "v3", samples, [mhz] * n)
    return run


def test_cycles_compare_two_gpus_whose_clocks_differ(tmp_path):
    """The same launch (1,978 k cycles) on two GPUs at 1,805 and 1,750 MHz: 3 % slower in time,
    the same in cycles; the time comparison warns of the clocks' difference."""
    a = _clocked(tmp_path, "fast-clock", 1978.0 / 1805.0, 1805.0)
    b = _clocked(tmp_path, "slow-clock", 1978.0 / 1750.0, 1750.0, minutes=5, seed=1)
    by_time = compare_runs(a.path, b.path)
    t = by_time.iloc[0]
    assert t.verdict == "slower" and t.change == pytest.approx(1805 / 1750 - 1, abs=0.003)
    assert t.mhz_a == 1805.0 and t.kcyc_a == pytest.approx(1978.0, rel=0.003)
    assert any("SM clocks differ by up to -3.0%" in w and "--cycles" in w for w in by_time.attrs["warnings"])
    by_cycles = compare_runs(a.path, b.path, cycles=True)
    c = by_cycles.iloc[0]
    assert by_cycles.attrs["measure"] == "cycles" and c.basis == "samples"
    assert c.verdict == "same" and abs(c.change) < 0.003
    assert c.change_lo < 0 < c.change_hi
    assert any("compared in cycles" in w for w in by_cycles.attrs["warnings"])
    assert "A kcyc" in format_compare(by_cycles) and "A ms" not in format_compare(by_cycles)


def test_cycles_need_a_stamped_clock_on_both_sides(tmp_path):
    """NVML's reading is the clock the GPU is set to, not the one the samples ran at: no verdict."""
    a = _clocked(tmp_path, "stamped", 1.1, 1800.0)
    b = _clocked(tmp_path, "nvml", 1.1, 1980.0, minutes=5, source="nvml")
    c = compare_runs(a.path, b.path, cycles=True).iloc[0]
    assert c.verdict == "no clock" and math.isnan(c.change)
    assert math.isnan(c.kcyc_b) and c.kcyc_a == pytest.approx(1.1 * 1800.0, rel=0.01)
    # and a time comparison of them warns of no clock difference it cannot measure
    assert not any("SM clocks" in w for w in compare_runs(a.path, b.path).attrs["warnings"])


def test_cycles_from_the_quartiles_without_raw_samples(tmp_path):
    a = make(tmp_path, "a", [rec("32Kx1024", "v3", 1.0, sm_clock_mhz=1800.0, clock_source="sm-cycles")])
    b = make(tmp_path, "b", [rec("32Kx1024", "v3", 1.2, sm_clock_mhz=1500.0, clock_source="sm-cycles")], 5)
    c = compare_runs(a.path, b.path, cycles=True).iloc[0]
    assert c.basis == "quartiles" and c.change == pytest.approx(0.0) and c.verdict == "same"
