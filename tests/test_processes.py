"""``--processes N`` on the CPU: fake workers (tests/data/fake_process_worker.py writes a run of
known samples through the real store) run one after another by the real
pa_bench.devices.run_processes and merged by the real merge; the rows' pooled medians, each
process's median and the interval across processes; compare on such runs; and the option on
the command line, end to end on the numpy backend."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from pa_bench import devices
from pa_bench.measure import xproc
from pa_bench.present.compare import compare_runs, format_compare
from pa_bench.present.report import build_report
from pa_bench.problem.config import load_config
from pa_bench.problem.plan import make_plan
from pa_bench.store.results import open_run

FAKE_WORKER = Path(__file__).parent / "data" / "fake_process_worker.py"


def _fake(slow: dict | None = None, draw: int = 0):
    def argv(config_file, worker, *, mode, backend, results_root, sample_rows):
        return [sys.executable, str(FAKE_WORKER), str(config_file), str(worker), str(results_root),
                mode if worker == 0 else "time", json.dumps(slow or {}), str(draw)]
    return argv


@pytest.fixture
def config(smoke_yaml):
    return make_plan(load_config(smoke_yaml), shapes="256x64,0x96").config


def _processes_run(config, root, n=3, **kw) -> Path:
    return devices.run_processes(config, n, backend="cuda", results_root=root,
                                 argv_for=_fake(**kw), write_report=False)


def test_merged_run_pools_the_workers_samples_and_keeps_each_ones(config, tmp_path):
    path = _processes_run(config, tmp_path)
    run = open_run(path)
    records = run.records()
    plan = make_plan(config)
    assert [r.key() for r in records] == [(p.shape.written, v) for p in plan.problems
                                          for v in plan.variants]
    meta = run.read_meta()
    procs = meta["processes"]
    assert procs["count"] == 3 and procs["requested"] == 3
    assert [w["mode"] for w in procs["workers"]] == ["run", "time", "time"]
    assert meta["status"] == "complete" and meta["mode"] == "run" and meta["wall_seconds"] > 0
    assert meta["phase_seconds"] == {"timing": 3.0}  # the workers' seconds, summed
    parts = sorted((path / "parts").glob("proc*"))
    assert [p.name for p in parts] == ["proc0", "proc0.log", "proc1", "proc1.log", "proc2", "proc2.log"]
    for rec in records:
        key = f"{rec.shape}|{rec.variant}"
        assert procs["samples"][key] == [200, 210, 220]
        per = run.process_samples(rec.shape, rec.variant)
        worker_runs = [open_run(next((path / "parts" / f"proc{k}").iterdir())) for k in range(3)]
        assert per == [w.samples_for(rec.shape, rec.variant) for w in worker_runs]
        pooled = [x for p in per for x in p]
        assert rec.samples == 630 and rec.ms_median == pytest.approx(float(np.median(pooled)))
        assert rec.processes == 3 and rec.ci_kind == "processes"
        assert xproc.parse_medians(rec.ms_proc_medians) == pytest.approx(
            [float(np.median(p)) for p in per])
        assert (rec.ms_ci_lo, rec.ms_ci_hi) == (rec.ms_xproc_lo, rec.ms_xproc_hi)
        # the workers' medians sit at -0.1 %, 0 and +0.1 % of the row's centre: all inside
        medians = xproc.parse_medians(rec.ms_proc_medians)
        assert rec.ms_xproc_lo <= min(medians) * 1.0003 and rec.ms_xproc_hi >= max(medians) * 0.9997
        assert rec.parity_pass is True                      # the first worker's parity columns
        assert rec.sm_clock_mhz == 1801.0 and rec.stop_reason == "noise"
        assert len(run.clocks()[key]) == 630
    # speed-up from each worker's own rounds, pooled: every row's centre is 0.1 x (i + 1)
    v2 = next(r for r in records if r.variant == "v2" and r.shape == "256x64")
    assert v2.speedup_vs_v1 == pytest.approx(0.5, rel=0.01)
    assert "across 3 worker processes" in build_report(path, plots=False)


def test_an_old_single_process_run_reads_as_before(config, tmp_path):
    argv = _fake()(Path(config.path), 0, mode="run", backend="cuda", results_root=tmp_path,
                   sample_rows=None)
    import subprocess

    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    run = open_run(json.loads(out)["run"])
    rec = run.records()[0]
    assert run.process_samples(rec.shape, rec.variant) is None
    assert rec.ci_kind == "samples" and rec.ms_xproc_lo is None and rec.processes is None


def test_compare_two_processes_runs_of_the_same_numbers_calls_no_row_changed(config, tmp_path):
    a = _processes_run(config, tmp_path / "a")
    b = _processes_run(config, tmp_path / "b", draw=7)   # other noise, the same centres
    df = compare_runs(a, b)
    assert set(df["basis"]) == {"processes"} and set(df["verdict"]) == {"same"}
    # the rule needs no --min-change: a huge one or none changes nothing
    assert set(compare_runs(a, b, min_change=0.0)["verdict"]) == {"same"}
    assert "p: both runs ran --processes" in format_compare(df)


def test_compare_calls_the_row_two_percent_slower_in_every_process_slower(config, tmp_path):
    a = _processes_run(config, tmp_path / "a")
    b = _processes_run(config, tmp_path / "b", slow={"v2": 0.02}, draw=7)
    df = compare_runs(a, b)
    verdicts = {(r["shape"], r["variant"]): r["verdict"] for r in df.to_dict(orient="records")}
    assert {k for k, v in verdicts.items() if v != "same"} == {("256x64", "v2"), ("0x96", "v2")}
    assert {verdicts[("256x64", "v2")], verdicts[("0x96", "v2")]} == {"slower"}
    row = df[(df["variant"] == "v2") & (df["shape"] == "256x64")].iloc[0]
    assert row["change"] == pytest.approx(0.02, abs=0.003) and row["change_lo"] > 0
    # B against A is the mirror image
    back = compare_runs(b, a)
    assert set(back[back["variant"] == "v2"]["verdict"]) == {"faster"}


def test_compare_of_a_processes_run_with_a_single_process_run_keeps_todays_rule(config, tmp_path):
    import subprocess

    a = _processes_run(config, tmp_path / "a")
    argv = _fake(slow={"v2": 0.005})(a / "parts" / "config.yaml", 0, mode="run", backend="cuda",
                                     results_root=tmp_path / "b", sample_rows=None)
    b = json.loads(subprocess.run(argv, capture_output=True, text=True, check=True).stdout)["run"]
    df = compare_runs(a, b)
    assert set(df["basis"]) == {"samples"}          # the bootstrap of the raw samples, as today
    # 0.5 % slower is under today's --min-change of 1 %: the same
    assert set(df["verdict"]) == {"same"}
    assert set(compare_runs(a, b, min_change=0.0)[lambda d: d["variant"] == "v2"]["verdict"]) == {"slower"}


def test_a_failed_worker_leaves_an_incomplete_run_of_the_others(config, tmp_path):
    def some_fail(config_file, worker, **kw):
        if worker == 1:
            return [sys.executable, "-c", "import sys; print('error: out of memory'); sys.exit(2)"]
        return _fake()(config_file, worker, **kw)

    path = devices.run_processes(config, 3, backend="cuda", results_root=tmp_path,
                                 argv_for=some_fail, write_report=False)
    run = open_run(path)
    meta = run.read_meta()
    assert meta["status"] == "incomplete" and meta["processes"]["count"] == 2
    assert meta["processes"]["requested"] == 3
    assert {r.processes for r in run.records()} == {2}


def test_workers_that_all_fail_are_one_line(config, tmp_path):
    def broken(config_file, worker, **_):
        return [sys.executable, "-c", "import sys; print('error: no GPU here'); sys.exit(2)"]

    with pytest.raises(devices.PaBenchError, match="no worker wrote a run: process 0: error: no GPU here"):
        devices.run_processes(config, 2, backend="cuda", results_root=tmp_path, argv_for=broken)


def test_process_argv_first_worker_runs_the_command_the_others_time(tmp_path):
    cfg = tmp_path / "c.yaml"
    first = devices.process_argv(cfg, 0, mode="run", backend="cuda", results_root=tmp_path,
                                 sample_rows=8)
    other = devices.process_argv(cfg, 2, mode="run", backend="cuda", results_root=tmp_path,
                                 sample_rows=8)
    assert first[2:4] == ["pa_bench", "run"] and "--sample-rows" in first
    assert other[2:4] == ["pa_bench", "time"] and "--sample-rows" not in other
    assert devices.process_env(2, base={})["PA_BENCH_WORKER"] == "2"
    with pytest.raises(devices.ProcessesError, match="at least 1"):
        devices.check_processes(0)


def test_cli_processes_end_to_end_on_numpy(smoke_yaml, numpy_args, invoke, tmp_path):
    res = invoke("run", smoke_yaml, *numpy_args, "--shapes", "0x96", "--variant", "v1",
                 "--processes", "2", "--sample-rows", "4", "--results", tmp_path)
    assert res.exit_code == 0, res.output
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    run = open_run(run_dir)
    meta = run.read_meta()
    assert [w["mode"] for w in meta["processes"]["workers"]] == ["run", "time"]
    (rec,) = run.records()
    assert rec.parity_pass is True and rec.sampled_rows == 4   # the first worker's parity
    assert rec.ms_median is None                                # numpy does not time


@pytest.mark.parametrize("args, needle", [
    (("--processes", "2", "--shard", "0/2"), "without --shard"),
    (("--processes", "0"), "--processes"),
])
def test_cli_processes_refusals(smoke_yaml, numpy_args, invoke, tmp_path, args, needle):
    res = invoke("run", smoke_yaml, *numpy_args, *args, "--results", tmp_path)
    assert res.exit_code == 2 and needle in res.output


def test_the_slowdown_knob_parses_and_sizes_its_spin():
    from pa_bench.measure import timing
    from pa_bench.measure.settings import slow_spec

    assert slow_spec("") == {}
    assert slow_spec("v3=0.02, triton=0.05") == {"v3": 0.02, "triton": 0.05}
    for bad in ("v3", "v3=2", "=0.02", "v3=x"):
        with pytest.raises(ValueError, match="timing.slow"):
            slow_spec(bad)
    # 2 % of a 2.8 ms call at 1,800 MHz, less what an empty spin's launch already adds (2 us)
    assert timing.spin_cycles(2.8, 2.802, 1800.0, 0.02) == 97_200   # (0.056 - 0.002) ms x 1.8e6 cycles/ms
    assert timing.spin_cycles(0.05, 0.052, 1800.0, 0.02) == 0      # the launch alone is 4 %
    assert timing.spin_cycles(2.8, 2.8, None, 0.02) == 0
    fns = {"v1": lambda: None}
    assert timing.slowed_on_purpose(fns, timer=None, spec={"v3": 0.02}) is fns  # not in this shape


def test_api_bench_processes_runs_the_workers_and_returns_the_merged_run(smoke_yaml, tmp_path):
    import pa_bench

    frame = pa_bench.bench(smoke_yaml, shapes="0x96", variants="v1", backend="numpy",
                           parity=True, sample_rows=4, results=tmp_path, processes=2)
    meta = open_run(frame.attrs["run_dir"]).read_meta()
    assert meta["processes"]["count"] == 2 and list(frame["variant"]) == ["v1"]
    assert bool(frame["parity_pass"].iloc[0]) is True
    with pytest.raises(pa_bench.PaBenchError, match="processes=0"):
        pa_bench.bench(smoke_yaml, backend="numpy", results=tmp_path, processes=0)
