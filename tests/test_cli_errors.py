"""Bad input on the command line: one line `error: ...` naming what is wrong, and exit code 2:
bad --data contents, missing run directories, empty option values, signals."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from pa_bench.cli import cli

SMALL = ["--sample-rows", "4"]  # with numpy_args: quick rows on the CPU


def runs_under(root: Path) -> list[Path]:
    return [p for p in root.iterdir() if p.is_dir()] if root.is_dir() else []


# --------------------------------------------------------------------------- --data FILE.npz


def _capture(**change):
    rng = np.random.default_rng(0)
    arrays = dict(q=rng.standard_normal((4, 28, 64)).astype(np.float32),
                  k=rng.standard_normal((2, 128, 64)).astype(np.float32),
                  v=rng.standard_normal((2, 128, 64)).astype(np.float32))
    arrays.update(change)
    return {n: a for n, a in arrays.items() if a is not None}


def _nan_k():
    k = np.ones((2, 128, 64), np.float32)
    k[1, 5, 3] = np.nan
    return k


K8 = np.zeros((2, 128, 64), np.int8)


@pytest.mark.parametrize("arrays, args, needles", [
    (_capture(k=np.ones((2, 128, 32), np.float32), v=np.ones((2, 128, 32), np.float32)), [],
     ["'k' has head dim 32", "'q' has 64"]),
    (_capture(k=None, v=None, k_i8=K8, v_i8=K8, k_scale=np.ones((2, 128), np.float32)), [],
     ["but not ['v_scale']"]),
    (_capture(k=_nan_k()), [], ["'k'", "NaN at index [1, 5, 3]"]),
    (_capture(q=np.zeros((4, 28, 64), np.int32)), [], ["'q' is int32"]),
    (_capture(q=np.zeros((3, 28, 64), np.float32)), [], ["'q' has 3 heads", "2 KV heads"]),
    (_capture(), ["--heads", "8/2"], ["holds 4/2 heads", "8/2", "--heads"]),
    (_capture(), ["--head-dim", "128"], ["head dim 64", "128", "--head-dim"]),
    (_capture(), ["--shapes", "1Kx28"], ["100x28 chunk", "1Kx28", "--shapes"]),
])
def test_bad_data_contents_stop_the_run_before_it_starts(numpy_args, one_line_error, invoke,
                                                         tmp_path, arrays, args, needles):
    path = tmp_path / "cap.npz"
    np.savez(path, **arrays)
    res = invoke("run", *numpy_args, *SMALL, "--data", path, "--results", tmp_path / "res", *args)
    one_line_error(res, *needles, code=2)
    assert runs_under(tmp_path / "res") == []  # nothing ran, no run directory claims otherwise


@pytest.mark.parametrize("content, needles", [
    (b"", ["empty (0 bytes)"]),
    (b"q k v\n1 2 3\n", ["not an .npz archive"]),
    (b"\x93NUMPY\x01\x00v\x00{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }",
     ["single .npy array"]),
])
def test_unreadable_data_files_are_bad_input(numpy_args, one_line_error, invoke, tmp_path, content,
                                             needles):
    path = tmp_path / "cap.npz"
    path.write_bytes(content)
    res = invoke("parity", *numpy_args, *SMALL, "--data", path, "--results", tmp_path / "res")
    line = one_line_error(res, *needles, code=2)
    assert "pickle" not in line


def test_a_good_capture_fixes_shape_heads_and_head_dim(numpy_args, invoke, tmp_path):
    path = tmp_path / "cap.npz"
    np.savez(path, **_capture())
    res = invoke("parity", *numpy_args, *SMALL, "--variant", "v1", "--data", path,
                 "--results", tmp_path)
    assert res.exit_code == 0, res.output
    assert "heads 4/2" in res.stdout and "head_dim 64" in res.stdout and "100x28" in res.stdout


# --------------------------------------------------------------------------- options


def test_a_repeated_variant_option_keeps_every_list(numpy_args, invoke, tmp_path):
    """``--variant v1 --variant v2,v1`` runs v1 and v2 (once each), not only the last list."""
    res = invoke("parity", *numpy_args, *SMALL, "--shapes", "256x64", "--heads", "4/2", "--head-dim", "64",
                 "--variant", "v1", "--variant", "v2,v1", "--results", tmp_path, "--json")
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout)["records"]
    assert [r["variant"] for r in rows] == ["v1", "v2"], rows


def test_empty_variant_list_is_an_error(one_line_error, invoke):
    one_line_error(invoke("run", "--variant", ""), "'--variant'", "empty", code=2)
    one_line_error(invoke("parity", "--variant", " , "), "'--variant'", "empty", code=2)


def test_sample_rows_and_heads_must_be_positive(one_line_error, invoke):
    one_line_error(invoke("run", "--sample-rows", "0"), "'--sample-rows'", "at least 1", code=2)
    one_line_error(invoke("run", "--sample-rows", "x"), "'--sample-rows'", "'x'", code=2)
    one_line_error(invoke("parity", "--heads", "0/0"), "'--heads'", "at least 1", code=2)
    one_line_error(invoke("parity", "--heads", "8/0"), "'--heads'", "at least 1", code=2)


def test_plain_pa_bench_prints_help(invoke):
    res = invoke()
    assert res.exit_code == 0 and res.stderr == ""
    assert "Usage: " in res.stdout and "Commands:" in res.stdout and "run " in res.stdout


# --------------------------------------------------------------------------- run directories


@pytest.mark.parametrize("args", [
    ["report", "no-such-run"],
    ["compare", "no-such-run", "no-such-run-either"],
    ["run", "--backend", "numpy", "--resume", "no-such-run"],
])
def test_a_missing_run_directory_is_bad_input(one_line_error, invoke, tmp_path, args):
    one_line_error(invoke(*args, "--results", tmp_path), "no run directory no-such-run", code=2)


def test_a_directory_that_is_not_a_run_is_bad_input(one_line_error, invoke, tmp_path):
    (tmp_path / "empty").mkdir()
    one_line_error(invoke("report", tmp_path / "empty"), "is not a pa-bench run", code=2)


def test_no_runs_to_report_is_bad_input(one_line_error, invoke, tmp_path):
    one_line_error(invoke("report", "--results", tmp_path), "no runs", code=2)


def test_an_unwritable_results_directory_is_bad_input(numpy_args, one_line_error, invoke, tmp_path):
    (tmp_path / "file").write_text("")
    res = invoke("parity", *numpy_args, "--shapes", "256x64", "--variant", "v1",
                 "--results", tmp_path / "file" / "sub")
    one_line_error(res, "cannot create results directory", "file/sub", code=2)


# --------------------------------------------------------------------------- signals


def test_sigterm_stops_a_run_as_ctrl_c_does(invoke, tmp_path):
    """A real process: SIGTERM mid-sweep marks the run interrupted and says where its rows are."""
    import json
    import os
    import signal
    import subprocess
    import sys
    import time

    repo = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": str(repo)}
    env.pop("PA_BENCH_DEBUG", None)
    # a tiny first shape, then one the numpy backend needs minutes for
    proc = subprocess.Popen(
        [sys.executable, "-m", "pa_bench", "parity", "--backend", "numpy", "--variant", "v1",
         "--shapes", "256x64,64Kx2048", "--sample-rows", "all", "--results", str(tmp_path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path, env=env)
    try:
        deadline = time.monotonic() + 120
        while not list(tmp_path.glob("*/records.csv")):  # the first shape is done
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the first row never finished"
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert proc.returncode == 143, err
    *announced, last = err.strip().splitlines()  # a run of minutes first says what it will do
    assert last == f"terminated (SIGTERM): finished rows kept in {run_dir}; resume with --resume {run_dir}"
    assert len(announced) == 2 and announced[1].startswith("estimated time: about "), err
    assert json.loads((run_dir / "meta.json").read_text())["status"] == "interrupted"
    # the report says which planned row is missing, and does not claim everything ran
    res = invoke("report", run_dir, "--no-plots")
    assert res.exit_code == 0, res.output
    assert "**Incomplete run**: the run was interrupted" in res.stdout
    assert "- 64Kx2048 v1: missing: the run stopped before this row" in res.stdout
    assert "every planned shape x variant ran" not in res.stdout


# --------------------------------------------------------------------------- kernels


def test_kernels_fails_when_nothing_builds(one_line_error, invoke, monkeypatch):
    from pa_bench.backends import kernel_info

    def nothing_builds(archs=None, head_dim=128, force_turing=False, **kw):
        return [{"variant": v, "arch": "sm_90", "compiled": False, "reason": "nvcc failed: boom",
                 "registers": None, "spill_bytes": None, "smem_bytes": None, "cta": None,
                 "cp_async": None, "mma": None} for v in ("v1", "v2t")]

    monkeypatch.setattr(kernel_info, "kernel_table", nothing_builds)
    res = invoke("kernels")
    one_line_error(res, "no kernel built (2 tried)", "v1 sm_90", "nvcc failed: boom", code=1)
    assert "v2t" in res.stdout  # the table is still printed


def test_kernels_below_sm_75_gives_the_arch_as_the_reason(one_line_error, invoke):
    res = invoke("kernels", "--arch", "sm_70")
    one_line_error(res, "no kernel built", "v1 needs sm_75", code=1)
    assert "cp.async" not in res.stderr
    assert "this GPU" not in res.stdout


# --------------------------------------------------------------------------- compare


def _timed_run(root: Path, minutes: int, rows: dict):
    import datetime as dt

    from pa_bench.store.records import Record
    from pa_bench.store.results import new_run_dir

    when = dt.datetime(2026, 11, 30, 3, minutes, tzinfo=dt.timezone.utc)
    run = new_run_dir(root, "ab", "cuda", when)
    run.write_meta({})
    rng = np.random.default_rng(minutes)
    for (shape, variant), ms in rows.items():
        samples = list(ms * (1 + 0.003 * rng.standard_normal(200)))
        run.save_record(Record(shape=shape, variant=variant, status="ok", ms_median=ms,
                               ms_q1=ms, ms_q3=ms))
        run.save_samples(shape, variant, samples)
    return run


@pytest.mark.parametrize("flags", [[], ["--fail-on-slowdown"], ["--json"]])
def test_compare_of_runs_with_nothing_in_common_is_an_error(one_line_error, invoke, tmp_path,
                                                            flags):
    a = _timed_run(tmp_path, 0, {("32Kx1024", "v1"): 2.0})
    b = _timed_run(tmp_path, 1, {("64Kx512", "v1"): 2.0})
    one_line_error(invoke("compare", a.path, b.path, *flags), "nothing to compare", code=2)


def test_fail_on_slowdown_fails_one_way_only(one_line_error, invoke, tmp_path):
    a = _timed_run(tmp_path, 0, {("32Kx1024", "v1"): 2.0, ("32Kx1024", "v2t"): 2.0})
    b = _timed_run(tmp_path, 1, {("32Kx1024", "v1"): 2.0, ("32Kx1024", "v2t"): 1.7})
    assert invoke("compare", a.path, b.path, "--fail-on-slowdown").exit_code == 0
    res = invoke("compare", b.path, a.path, "--fail-on-slowdown")
    one_line_error(res, "slower than A", "32Kx1024 v2t", code=1)


# --------------------------------------------------------------------------- report


@pytest.mark.parametrize("header_only", [False, True])
def test_report_of_a_run_without_rows_is_an_error(one_line_error, invoke, tmp_path, header_only):
    from pa_bench.store.results import new_run_dir

    run = new_run_dir(tmp_path, "x", "numpy")
    run.write_meta({"status": "interrupted"})
    if header_only:
        run.write_records([])
    res = invoke("report", run.path)
    one_line_error(res, "nothing to report", "header" if header_only else "missing",
                   "interrupted", code=2)


def test_report_json_lists_the_plots(invoke, tmp_path):
    pytest.importorskip("matplotlib")
    import json

    run = _timed_run(tmp_path, 0, {("32Kx1024", "v1"): 2.0, ("64Kx512", "v1"): 2.5})
    res = invoke("report", run.path, "--json")
    assert res.exit_code == 0, res.output
    (entry,) = json.loads(res.stdout)
    assert entry["report"] == str(run.path / "report.md")
    assert entry["plots"] == [str(run.path / "ms_per_chunk.png")]
    assert all(Path(p).is_file() for p in entry["plots"])


def test_only_commands_that_take_resume_are_told_to_resume():
    from pa_bench import exits as E

    assert E._resumable(["run", "configs/smoke.yaml"]) and E._resumable(["parity", "--backend", "numpy"])
    assert not E._resumable(["prompt", "--config", "configs/prompt98k.yaml"])
    # every command named resumable really takes --resume
    for name in E.RESUMABLE:
        assert any(p.name == "resume" for p in cli.commands[name].params), name
