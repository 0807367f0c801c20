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


def test_a_markers_kernels_split_into_equal_calls_and_the_warm_up_is_dropped():
    lines = ["==PROF== Connected to process 1", HEAD, row(0, "pa_mark_0_1", 1500)]
    i = 1
    for k1, k2 in [(900, 100), (1000, 200), (1100, 300)]:   # warm-up first: 2 kernels a call
        lines += [row(i, "void flash_fwd_kernel<...>(Params)", f"{k1:,}"), row(i + 1, "elementwise_kernel", k2)]
        i += 2
    lines += [row(i, "pa_mark_1_0", 1500), row(i + 1, "pa_v2", 2000, unit="us"),
              row(i + 2, "pa_v2", 4000, unit="usecond"), row(i + 3, "pa_v2", 3000, unit="usecond"),
              row(i + 3, "pa_v2", 77, metric="other__metric")]
    got = ncu_check.parse_ncu_csv("\n".join(lines), calls_per_marker=3)
    assert [c[1] for c in got[(0, 1)]] == [2, 2]
    assert [c[0] for c in got[(0, 1)]] == pytest.approx([1200e-6, 1400e-6])
    assert got[(1, 0)] == [(pytest.approx(4.0), 1), (pytest.approx(3.0), 1)]   # 2000 us warm-up dropped


def test_kernels_before_the_first_marker_and_uneven_groups_are_left_out():
    text = "\n".join([HEAD, row(0, "pa_hold_stream", 5), row(1, "pa_mark_0_0", 1), row(2, "pa_v1", 10),
                      row(3, "pa_v1", 20), row(4, "pa_mark_0_1", 1), row(5, "a", 1), row(6, "b", 1),
                      row(7, "c", 1)])
    # variant 1's three kernels cannot be two calls of equal size: no row rather than a wrong one
    assert ncu_check.parse_ncu_csv(text, calls_per_marker=2) == {(0, 0): [(pytest.approx(20e-6), 1)]}


def test_call_pairs_parse():
    assert ncu_check.call_pairs("0:6,3:5") == {(0, 6), (3, 5)}
    assert ncu_check.call_pairs(None) is None


def test_the_childs_own_l2_flush_is_in_no_calls_sum():
    # flushed mode (should the profiler not be paused around it): [marker] [scrub] [call] [scrub] [call]
    text = "\n".join([HEAD, row(1, "pa_mark_0_6", 1), row(0, "pa_l2_scrub", 50000), row(2, "dequant", 10),
                      row(3, "flash", 20), row(4, "pa_l2_scrub", 50000), row(6, "dequant", 11),
                      row(7, "flash", 21)])
    assert ncu_check.parse_ncu_csv(text, calls_per_marker=2) == {(0, 6): [(pytest.approx(32e-6), 2)]}


class _Recorder:
    """A fake CUDA side for ncu_check.child: records launches, flushes and profiler toggles."""

    def __init__(self):
        self.events, self.profiling = [], False

    def start(self):
        assert not self.profiling
        self.profiling = True
        self.events.append("start")

    def stop(self):
        assert self.profiling
        self.profiling = False
        self.events.append("stop")


def _fake_child(monkeypatch, names, only=None, reps=2, reps_map=None):
    import types

    rec = _Recorder()

    class Session:
        """What the child asks of a pa_bench.Session."""

        def flush_l2(self):
            assert not rec.profiling, "the child's own flush must not be profiled"
            rec.events.append("flush")

        def launchers(self, wanted):
            def call(name):
                return lambda: rec.events.append(("call", name, rec.profiling))
            return {n: call(n) for n in wanted}, {}

        def sync(self):
            pass

        def close(self):
            pass

    monkeypatch.setattr(ncu_check, "_setup", lambda *a: (None, ["shape0"], names, lambda problem: Session()))
    monkeypatch.setattr(ncu_check, "_profiler", lambda: (rec.start, rec.stop))
    marker = types.SimpleNamespace(get_function=lambda f: (lambda *a: rec.events.append(("mark", f))))
    monkeypatch.setattr(ncu_check, "_marker_module", lambda n, names: marker)
    args = types.SimpleNamespace(config="c", shapes=None, variants=None, only=only, reps=reps, l2_flush=None,
                                 reps_map=reps_map)
    ncu_check.child(args)
    return rec.events


def test_the_child_profiles_a_marker_and_the_calls_only_after_an_unprofiled_first_call(monkeypatch):
    ev = _fake_child(monkeypatch, ["v1", "torch-sdpa"], reps=2)
    first = [e for e in ev if isinstance(e, tuple) and e[0] == "call"][:2]
    assert first == [("call", "v1", False), ("call", "torch-sdpa", False)]   # compiles, autotuning
    profiled = ev[ev.index("start"):]
    assert profiled == ["start", ("mark", "pa_mark_0_0")] + [("call", "v1", True)] * 3 + ["stop",
                        "start", ("mark", "pa_mark_0_1")] + [("call", "torch-sdpa", True)] * 3 + ["stop"]


def test_the_flushed_pass_runs_only_the_listed_calls_each_after_an_unprofiled_flush(monkeypatch):
    ev = _fake_child(monkeypatch, ["v1", "torch-sdpa+dequant"], only="0:1", reps=1)
    assert ("call", "v1", False) not in ev and ("call", "v1", True) not in ev
    profiled = ev[ev.index("start"):]
    assert profiled == ["start", ("mark", "pa_mark_0_1"),
                        "stop", "flush", "start", ("call", "torch-sdpa+dequant", True),
                        "stop", "flush", "start", ("call", "torch-sdpa+dequant", True), "stop"]


def test_rows_judge_pa_bench_against_the_range_of_ncus_processes():
    shapes, names = ["1.5K", "2.1Kx256"], ["v1", "torch-sdpa", "torch-sdpa+dequant"]
    ours = {(0, "v1"): 0.1460, (0, "torch-sdpa"): 0.1102, (0, "torch-sdpa+dequant"): 0.1330,
            (1, "v1"): 0.0912}                               # (1, sdpa) not timed: no row
    # three fresh ncu processes; PyTorch's flash kernel reads 0.1021, 0.1056, 0.1078 in them
    theirs = [{(0, 0): [(0.1455, 1)] * 3, (0, 1): [(0.1021, 1)] * 3, (0, 2): [(0.1360, 5)] * 3,
               (1, 0): [(0.0899, 1)] * 3, (1, 1): [(0.05, 2)] * 3},
              {(0, 0): [(0.1450, 1)] * 3, (0, 1): [(0.1050, 1), (0.1056, 1), (0.1060, 1)],
               (0, 2): [(0.1362, 5)] * 3, (1, 0): [(0.0901, 1)] * 3},
              {(0, 0): [(0.1458, 1)] * 3, (0, 1): [(0.1078, 1)] * 3, (0, 2): [(0.1359, 5)] * 3,
               (1, 0): [(0.0900, 1)] * 3}]
    whole = [{(0, 1): [0.1098, 0.1102, 0.1096], (0, 2): [0.1320] * 3}, {(0, 2): [0.1325] * 3},
             {(0, 2): [0.1318] * 3}]
    rows = {(r["shape"], r["variant"]): r for r in ncu_check.build_rows(shapes, names, ours, theirs, whole)}
    assert set(rows) == {("1.5K", "v1"), ("1.5K", "torch-sdpa"), ("1.5K", "torch-sdpa+dequant"), ("2.1Kx256", "v1")}
    v1 = rows[("1.5K", "v1")]
    assert v1["within"] is True and v1["ncu_mode"] == "kernel" and v1["ncu_flushed_ms"] == "" and v1["within_flushed"] == ""
    assert v1["ncu_processes"] == 3 and (v1["ncu_min_ms"], v1["ncu_max_ms"]) == ("0.14500", "0.14580")
    sdpa = rows[("1.5K", "torch-sdpa")]                     # one kernel: judged on ncu's own flush ...
    assert (sdpa["ncu_ms"], sdpa["ncu_min_ms"], sdpa["ncu_max_ms"]) == ("0.10560", "0.10210", "0.10780")
    assert sdpa["ratio"] == "1.0436" and sdpa["within"] is True      # 1.044 of the median, inside the range
    assert sdpa["ncu_flushed_ms"] == "0.10980" and sdpa["within_flushed"] is True   # ... and shown after ours
    deq = rows[("1.5K", "torch-sdpa+dequant")]              # several kernels: judged on the flushed figure
    assert deq["ncu_mode"] == "flushed" and deq["ncu_ms"] == "0.13200" and deq["ncu_kernel_sum_ms"] == "0.13600"
    assert (deq["ncu_min_ms"], deq["ncu_max_ms"]) == ("0.13180", "0.13250") and deq["within"] is True
    assert rows[("2.1Kx256", "v1")]["within"] is True       # 1.1 us over the range: inside the 3 us floor


def test_one_process_alone_would_have_failed_the_same_row():
    rows = ncu_check.build_rows(["1.5K"], ["torch-sdpa"], {(0, "torch-sdpa"): 0.1102},
                                [{(0, 0): [(0.1021, 1)] * 3}], [])
    assert rows[0]["within"] is False and rows[0]["ncu_processes"] == 1
    assert ncu_check._within(0.1102, 0.1021, 0.1078) and not ncu_check._within(0.1102, 0.1021)
    assert ncu_check._within(0.0393, 0.0364)       # 8 % over, but 2.9 us: inside the 3 us floor
    assert not ncu_check._within(0.0395, 0.0364)   # 3.1 us: outside


def test_a_call_of_several_kernels_is_judged_with_the_launches_between_them():
    # H200, 2.1Kx256, torch-sdpa-cudnn: six kernels, 0.0704 ms of kernels after one flush, pa-bench's
    # span 0.0754 ms, six empty kernels 8.06 us more than one: outside the kernels alone (beyond
    # the 3 us floor), inside [kernels, kernels + launches]
    theirs = [{(0, 0): [(0.0752, 6)] * 3} for _ in range(3)]
    whole = [{(0, 0): [0.0703] * 3}, {(0, 0): [0.0704] * 3}, {(0, 0): [0.0705] * 3}]
    ours = {(0, "torch-sdpa-cudnn"): 0.0754}
    bare = ncu_check.build_rows(["2.1Kx256"], ["torch-sdpa-cudnn"], ours, theirs, whole)[0]
    assert bare["within"] is False and bare["launch_gaps_ms"] == "0.00000"
    row = ncu_check.build_rows(["2.1Kx256"], ["torch-sdpa-cudnn"], ours, theirs, whole, {6: 0.00806, 2: 0.0022})[0]
    assert row["launch_gaps_ms"] == "0.00806" and (row["ncu_min_ms"], row["ncu_max_ms"]) == ("0.07030", "0.07856")
    assert row["within"] is True and row["ncu_ms"] == "0.07040"        # ncu's own figure is the kernels'
    long = ncu_check.build_rows(["2.1Kx256"], ["torch-sdpa-cudnn"], {(0, "torch-sdpa-cudnn"): 0.0840},
                                theirs, whole, {6: 0.00806})[0]
    assert long["within"] is False                                      # beyond kernels + launches + 3 us
    one = ncu_check.build_rows(["1.5K"], ["v1"], {(0, "v1"): 0.1}, [{(0, 0): [(0.1, 1)]}], [], {6: 0.0045})[0]
    assert one["launch_gaps_ms"] == "0.00000" and one["ncu_max_ms"] == "0.10000"   # one kernel: no launches


def test_short_calls_get_more_reps_within_the_cap():
    assert ncu_check.reps_for(1.5, 5) == 5                    # a long call: the base
    assert ncu_check.reps_for(0.15, 5) == 7                   # 1 ms of GPU time
    assert ncu_check.reps_for(0.05, 5) == ncu_check.MAX_REPS
    assert ncu_check.reps_for(None, 10) == 10                 # not timed by pa-bench: the base
    assert ncu_check.reps_for(0.05, 80) == 80                 # the cap never lowers --reps
    assert ncu_check.reps_map("0:6:40,3:5:10") == {(0, 6): 40, (3, 5): 10}
    assert ncu_check.reps_map(None) == {}


def test_calls_per_marker_may_differ_per_row():
    text = "\n".join([HEAD, row(0, "pa_mark_0_0", 1), row(1, "pa_v1", 10), row(2, "pa_v1", 20),
                      row(3, "pa_mark_0_1", 1), row(4, "k", 1), row(5, "k", 2), row(6, "k", 3), row(7, "k", 4)])
    got = ncu_check.parse_ncu_csv(text, {(0, 0): 2, (0, 1): 4})
    assert got[(0, 0)] == [(pytest.approx(20e-6), 1)]
    assert [c[0] for c in got[(0, 1)]] == pytest.approx([2e-6, 3e-6, 4e-6])


def test_rows_say_how_many_calls_ncus_median_is_over_and_their_spread():
    rows = ncu_check.build_rows(["1.5K"], ["v1"], {(0, "v1"): 0.1},
                                [{(0, 0): [(0.098, 1), (0.100, 1), (0.102, 1), (0.110, 1), (0.090, 1)]}], [])
    assert rows[0]["ncu_calls"] == 5 and rows[0]["ncu_iqr_ms"] == "0.00400"


def test_the_child_makes_each_rows_own_number_of_calls(monkeypatch):
    ev = _fake_child(monkeypatch, ["v1", "torch-sdpa"], reps=2, reps_map="0:1:4")
    profiled = [e for e in ev[ev.index("start"):] if isinstance(e, tuple) and e[0] == "call"]
    assert profiled.count(("call", "v1", True)) == 3 and profiled.count(("call", "torch-sdpa", True)) == 5


def test_a_hung_ncu_is_killed_and_what_it_wrote_is_kept(tmp_path):
    import time

    t0 = time.monotonic()
    rc, text = ncu_check._run_ncu(["sh", "-c", "echo measured; sleep 30"], tmp_path / "log", timeout_s=1.0)
    assert rc == 124 and time.monotonic() - t0 < 10
    assert "measured" in text and "stopped after 1 s" in text


def test_rows_ncu_never_measured_are_named():
    ours = {(0, "v1"): 0.1, (0, "torch-sdpa"): 0.1, (1, "v1"): 0.2}
    rows = [{"shape": "1.5K", "variant": "v1"}]
    assert ncu_check.missing_rows(["1.5K", "2.1Kx256"], ["v1", "torch-sdpa"], ours, rows) == [
        "1.5K torch-sdpa", "2.1Kx256 v1"]


def test_setup_reads_the_config_through_the_public_api():
    config, problems, names, open_session = ncu_check._setup(
        str(Path(__file__).resolve().parents[1] / "configs" / "pr2092.yaml"), "1.5K,2.1Kx256", "v1,v2", "discard")
    assert config.timing.l2_flush == "discard"
    assert [p.shape.label for p in problems] == ["1.5K", "2.1Kx256"]   # the config's label kept
    assert [(p.context, p.queries, p.heads_q, p.heads_kv) for p in problems] == [(0, 1536, 32, 8), (2150, 256, 32, 8)]
    assert names == ["v1", "v2"] and callable(open_session)
    _, _, every, _ = ncu_check._setup(
        str(Path(__file__).resolve().parents[1] / "configs" / "pr2092.yaml"), None, None, None)
    assert every == list(config.variants)
