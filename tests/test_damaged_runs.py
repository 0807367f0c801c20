"""Damaged runs and risky input are refused in one line `error: ...` with exit code 2 (or never
start): a cut records.csv, a missing or malformed meta.json, an empty shape in a list, a data file
whose chunk is not the config's, a shape too large for the host; result files a lab's group can
read; a resumed run that keeps its first command's seconds."""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from pa_bench.cli import cli
from pa_bench.store.results import new_run_dir, open_run

TINY = ["--backend", "numpy", "--shapes", "256x64", "--heads", "4/2", "--head-dim", "64",
        "--sample-rows", "4"]


def invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def one_line_error(result, *needles: str) -> str:
    assert result.exit_code == 2, (result.exit_code, result.output)
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "internal error" not in lines[0] and "Traceback" not in result.output
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def made_run(tmp_path_factory):
    """One finished numpy run (two variants), copied by each test that damages it."""
    root = tmp_path_factory.mktemp("made")
    res = invoke("run", *TINY, "--variant", "v1,v2t", "--results", root)
    assert res.exit_code == 0, res.output
    (path,) = [p for p in root.iterdir() if p.is_dir()]
    return path


@pytest.fixture
def run_copy(made_run, tmp_path):
    def copy(name: str = "20261201-000000-tiny-numpy") -> Path:
        dest = tmp_path / "results" / name
        shutil.copytree(made_run, dest)
        return dest
    return copy


# --------------------------------------------------------------------------- records.csv, meta.json


def test_a_records_csv_cut_inside_a_line_is_refused_by_report_compare_and_merge(run_copy, tmp_path):
    good, bad = run_copy("20261201-000000-a-numpy"), run_copy("20261201-000001-b-numpy")
    text = (bad / "records.csv").read_bytes()
    (bad / "records.csv").write_bytes(text[:len(text) - 40])  # as `truncate -s -40` leaves it
    one_line_error(invoke("report", bad), "records.csv", "damaged")
    one_line_error(invoke("compare", good, bad), "records.csv", "damaged")
    one_line_error(invoke("merge", good, bad, "-o", tmp_path / "merged"), "records.csv", "damaged")


def test_a_records_csv_cut_at_a_line_end_is_refused_for_a_complete_run(run_copy):
    run = run_copy()
    lines = (run / "records.csv").read_text().splitlines(keepends=True)
    (run / "records.csv").write_text("".join(lines[:-1]))  # the last row gone, whole lines left
    line = one_line_error(invoke("report", run), "records.csv", "1 of the 2 rows", "cut short")
    assert "256x64 v2t" in line


def test_a_deleted_meta_json_is_refused_by_report_and_merge(run_copy, tmp_path):
    a, b = run_copy("20261201-000000-a-numpy"), run_copy("20261201-000001-b-numpy")
    (b / "meta.json").unlink()
    one_line_error(invoke("report", b), "meta.json", "missing")
    one_line_error(invoke("merge", a, b, "-o", tmp_path / "merged"), "meta.json")


@pytest.mark.parametrize("text", ["{\"status\": \"complete\",", "[1, 2]", ""])
def test_a_malformed_meta_json_is_bad_input_rc_2(run_copy, text):
    run = run_copy()
    (run / "meta.json").write_text(text)
    one_line_error(invoke("report", run), "meta.json")
    one_line_error(invoke("compare", run, run), "meta.json")


def test_an_intact_run_still_reports(run_copy):
    res = invoke("report", run_copy(), "--no-plots")
    assert res.exit_code == 0, res.output
    assert "# pa-bench: pr2092" in res.stdout


# --------------------------------------------------------------------------- permissions


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_result_files_get_a_plain_writes_permissions(tmp_path, umask, mode):
    old = os.umask(umask)
    try:
        run = new_run_dir(tmp_path, "perm", "numpy")
        run.write_meta({"status": "running"})
        run.write_records([])
        run.save_samples("256x64", "v1", [1.0, 2.0], [1500.0, None])
    finally:
        os.umask(old)
    for name in ("meta.json", "records.csv", "samples.json", "clocks.json"):
        assert stat.S_IMODE((run.path / name).stat().st_mode) == mode, name


# --------------------------------------------------------------------------- --resume


def test_resuming_a_finished_run_keeps_its_wall_seconds(run_copy):
    run = run_copy()
    before = json.loads((run / "meta.json").read_text())
    res = invoke("run", "--backend", "numpy", "--resume", run)
    assert res.exit_code == 0, res.output
    after = json.loads((run / "meta.json").read_text())
    assert after["wall_seconds"] == before["wall_seconds"]
    assert after["phase_seconds"] == before["phase_seconds"]
    resume = after["resumes"][-1]
    assert resume["wall_seconds"] >= 0 and isinstance(resume["phase_seconds"], dict)
    assert len(after["resumes"]) == len(before.get("resumes", [])) + 1


# --------------------------------------------------------------------------- options and data


@pytest.mark.parametrize("shapes", ["1Kx5,,", "1Kx5,,2Kx8", ",,1Kx5"])
def test_a_shape_list_with_an_empty_item_is_refused(tmp_path, shapes):
    res = invoke("run", "--backend", "numpy", "--shapes", shapes, "--results", tmp_path)
    one_line_error(res, "empty", shapes)
    assert not any(tmp_path.iterdir())


def _capture(path: Path, hq=4, hkv=2, nq=28, nk=128, d=64) -> Path:
    rng = np.random.default_rng(0)
    np.savez(path, q=rng.standard_normal((hq, nq, d)).astype(np.float32),
             k=rng.standard_normal((hkv, nk, d)).astype(np.float32),
             v=rng.standard_normal((hkv, nk, d)).astype(np.float32))
    return path


def test_data_that_replaces_the_configs_shapes_names_the_run_after_the_data(tmp_path):
    cap = _capture(tmp_path / "layer7.npz")
    res = invoke("parity", "--config", "smoke", "--backend", "numpy", "--variant", "v1", "--data", cap,
                 "--results", tmp_path / "res", "--json")
    assert res.exit_code == 0, res.output
    assert "layer7.npz holds 100x28" in res.stderr and "named 'layer7'" in res.stderr
    records = json.loads(res.stdout)["records"]
    assert [(r["config"], r["shape"], r["heads_q"]) for r in records] == [("layer7", "100x28", 4)]
    (run,) = (tmp_path / "res").iterdir()
    assert "-layer7-numpy" in run.name


def test_data_that_matches_the_asked_shape_keeps_the_configs_name(tmp_path):
    cap = _capture(tmp_path / "cap.npz", hq=4, hkv=2, nq=64, nk=256 + 64, d=64)
    res = invoke("parity", "--backend", "numpy", "--variant", "v1", "--data", cap, "--shapes",
                 "256x64", "--heads", "4/2", "--head-dim", "64", "--results", tmp_path, "--json")
    assert res.exit_code == 0, res.output
    assert "note:" not in res.stderr
    assert json.loads(res.stdout)["records"][0]["config"] == "pr2092"


def test_a_shape_too_large_for_host_memory_is_refused_before_any_work(tmp_path):
    res = invoke("run", "--backend", "numpy", "--shapes", "100000Kx100000", "--results", tmp_path)
    one_line_error(res, "100000Kx100000", "host memory", "available")
    assert not any(tmp_path.iterdir())  # no run directory, no input drawn


def test_in_a_sweep_a_shape_too_large_is_a_skipped_row(tmp_path):
    res = invoke("parity", "--backend", "numpy", "--shapes", "256x64,100000Kx100000", "--heads",
                 "4/2", "--head-dim", "64", "--variant", "v1", "--sample-rows", "4",
                 "--results", tmp_path, "--json")
    assert res.exit_code == 0, res.output
    rows = {r["shape"]: r for r in json.loads(res.stdout)["records"]}
    assert rows["256x64"]["status"] == "ok"
    assert rows["100000Kx100000"]["status"] == "skipped"
    assert "host memory" in rows["100000Kx100000"]["reason"]
