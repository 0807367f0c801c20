"""The command line end to end on the numpy backend, and its one-line errors."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pa_bench import backends
from pa_bench import runner
from spec_columns import SPEC_COLUMNS

REPO = Path(__file__).resolve().parent.parent
SMALL = ["--heads", "4/2", "--head-dim", "64"]  # keeps PR-config shapes fast on the CPU


@pytest.fixture
def no_gpu(monkeypatch):
    """This machine has no CuPy; make it so on any machine."""
    monkeypatch.setattr(backends, "cuda_problem",
                        lambda: "CuPy is not installed or cannot be imported")


def run_dirs(root: Path) -> list[Path]:
    return sorted(p for p in root.iterdir() if p.is_dir())


def read_csv(path: Path) -> tuple[list[str], list[dict]]:
    with open(path, newline="") as fh:
        reader = csv.DictReader(fh)
        return list(reader.fieldnames), list(reader)


# --------------------------------------------------------------------------- end to end


def test_run_smoke_on_numpy_writes_a_complete_run_dir(numpy_args, smoke_yaml, invoke, tmp_path):
    result = invoke("run", smoke_yaml, *numpy_args, "--results", tmp_path)
    assert result.exit_code == 0, result.output
    (run_dir,) = run_dirs(tmp_path)
    header, rows = read_csv(run_dir / "records.csv")
    assert set(SPEC_COLUMNS) <= set(header)
    assert len(rows) == 3 * 3  # smoke: 3 shapes x v1, v2, v2t
    assert {(r["shape"], r["variant"]) for r in rows} == {
        (s, v) for s in ("256x64", "1023x113", "0x96") for v in ("v1", "v2", "v2t")}
    assert all(r["parity_pass"] == "True" for r in rows)
    assert all(r["status"] == "ok" and r["backend"] == "numpy" for r in rows)
    assert (run_dir / "report.md").read_text().startswith("# pa-bench")
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["config"]["name"] == "smoke" and meta["seed"] == 0
    assert meta["command"] and "run" in meta["command"]
    # tables on stdout, the run directory on stderr
    assert "parity against FP64" in result.stdout and "max err vs FP64" in result.stdout
    assert str(run_dir) in result.stderr
    assert "does not time kernels" in result.stdout  # timing skipped, said once


def test_parity_prints_model_and_quantisation_error(numpy_args, invoke, tmp_path):
    result = invoke("parity", *numpy_args, "--shapes", "2Kx256", "--sample-rows", 8,
                    *SMALL, "--results", tmp_path)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "model err" in out and "quant err" in out
    assert "2Kx256 (2048x256)" in out and "8 sampled rows" in out
    (run_dir,) = run_dirs(tmp_path)
    _, rows = read_csv(run_dir / "records.csv")
    for r in rows:
        if r["variant"] in ("v1", "v2", "v2t", "v3", "triton"):   # the config's kernels (the numpy backend models them)
            assert float(r["model_max_abs_err"]) > 0 and float(r["quant_max_abs_err"]) > 0
            assert r["sampled_rows"] == "8"
            assert f"{float(r['model_max_abs_err']):.2e}" in out
            assert f"{float(r['quant_max_abs_err']):.2e}" in out
        else:
            assert r["status"] == "skipped" and "runs on the cuda backend only" in r["reason"]


def test_json_output_parses(numpy_args, smoke_yaml, invoke, tmp_path):
    result = invoke("parity", *numpy_args, "--shapes", "256x64", "--variant", "v1,v2t",
                    "--config", smoke_yaml, "--results", tmp_path, "--json")
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    assert [r["variant"] for r in data["records"]] == ["v1", "v2t"]
    assert data["records"][0]["parity_pass"] is True
    assert Path(data["run"]).is_dir()


def test_save_outputs(numpy_args, smoke_yaml, invoke, tmp_path):
    out = tmp_path / "npy"
    result = invoke("parity", "--config", smoke_yaml, *numpy_args, "--shapes", "1023x113",
                    "--results", tmp_path / "r", "--save-outputs", out)
    assert result.exit_code == 0
    names = sorted(p.name for p in (out / "1023x113").iterdir())
    assert names == ["reference.npy", "rows.npy", "v1.npy", "v2.npy", "v2t.npy"]


def test_time_on_the_numpy_backend_skips_rows_with_the_reason(numpy_args, smoke_yaml, invoke,
                                                              tmp_path):
    result = invoke("time", "--config", smoke_yaml, *numpy_args, "--shapes", "256x64",
                    "--results", tmp_path)
    assert result.exit_code == 0
    (run_dir,) = run_dirs(tmp_path)
    _, rows = read_csv(run_dir / "records.csv")
    assert all(r["status"] == "skipped" and "needs CuPy and a GPU" in r["reason"] for r in rows)


def test_auto_backend_falls_back_with_a_notice(smoke_yaml, invoke, tmp_path, no_gpu):
    result = invoke("parity", "--config", smoke_yaml, "--shapes", "256x64", "--variant", "v1",
                    "--results", tmp_path)
    assert result.exit_code == 0
    assert "using the numpy backend" in result.stderr


def test_overrides_reach_the_records(numpy_args, smoke_yaml, invoke, tmp_path):
    result = invoke("parity", "--config", smoke_yaml, *numpy_args, "--shapes", "100x20",
                    "--variant", "v2t", "--layout", "contiguous", "--heads", "2/1", "--seed", 5,
                    "--data", "normal", "--results", tmp_path, "--json")
    assert result.exit_code == 0
    (rec,) = json.loads(result.stdout)["records"]
    assert (rec["layout"], rec["heads_q"], rec["heads_kv"], rec["seed"], rec["data"]) == (
        "contiguous", 2, 1, 5, "normal")
    assert (rec["context"], rec["queries"]) == (100, 20)


def test_runs_are_never_overwritten(numpy_args, smoke_yaml, invoke, tmp_path):
    args = ("parity", "--config", smoke_yaml, *numpy_args, "--shapes", "256x64",
            "--variant", "v1", "--results", tmp_path)
    assert invoke(*args).exit_code == 0
    assert invoke(*args).exit_code == 0
    assert len(run_dirs(tmp_path)) == 2


def test_resume_recomputes_only_missing_rows(numpy_args, smoke_yaml, invoke, tmp_path, monkeypatch):
    args = ("parity", "--config", smoke_yaml, *numpy_args, "--shapes", "256x64,0x96",
            "--results", tmp_path)
    assert invoke(*args).exit_code == 0
    (run_dir,) = run_dirs(tmp_path)
    records = run_dir / "records.csv"
    lines = records.read_text().splitlines()
    # simulate a run interrupted before its last row: drop 0x96 v2t
    dropped = [ln for ln in lines if ln.startswith("smoke,0x96,") and ",v2t," in ln]
    assert len(dropped) == 1
    records.write_text("\n".join(ln for ln in lines if ln not in dropped) + "\n")

    from pa_bench.backends.numpy import NumpyBackend

    computed = []
    original = NumpyBackend.compute

    def spy(self, prepared, variant, rows, check_determinism=None):
        computed.append((prepared.problem.label, variant))
        return original(self, prepared, variant, rows, check_determinism)

    monkeypatch.setattr(NumpyBackend, "compute", spy)
    result = invoke(*args, "--resume", run_dir)
    assert result.exit_code == 0, result.output
    assert len(run_dirs(tmp_path)) == 1  # resumed in place
    assert ("0x96", "v2t") in computed
    assert {shape for shape, _ in computed} == {"0x96"}  # 256x64 was not recomputed
    after = records.read_text().splitlines()
    assert len(after) == len(lines)
    for ln in lines:
        if ln.startswith("smoke,256x64,"):
            assert ln in after  # finished rows untouched
    assert any(ln.startswith("smoke,0x96,") and ",v2t," in ln and ",True," in ln for ln in after)
    meta = json.loads((run_dir / "meta.json").read_text())
    assert len(meta["resumes"]) == 1


def test_resume_alone_reuses_the_runs_config(numpy_args, smoke_yaml, invoke, tmp_path):
    assert invoke("run", smoke_yaml, *numpy_args, "--shapes", "256x64", "--variant", "v1",
                  "--results", tmp_path).exit_code == 0
    (run_dir,) = run_dirs(tmp_path)
    result = invoke("run", *numpy_args, "--shapes", "256x64", "--variant", "v1",
                    "--results", tmp_path, "--resume", run_dir.name)
    assert result.exit_code == 0, result.output


def test_resume_takes_the_runs_settings_and_refuses_others(numpy_args, smoke_yaml, invoke,
                                                           tmp_path):
    """--resume alone keeps the run's sampled rows; a conflicting option is one line, exit 2."""
    assert invoke("parity", "--config", smoke_yaml, *numpy_args, "--shapes", "256x64,0x96",
                  "--variant", "v1", "--sample-rows", "16", "--results", tmp_path).exit_code == 0
    (run_dir,) = run_dirs(tmp_path)
    records = run_dir / "records.csv"
    records.write_text("\n".join(ln for ln in records.read_text().splitlines() if ",0x96," not in ln) + "\n")
    result = invoke("parity", *numpy_args, "--results", tmp_path, "--resume", run_dir.name)
    assert result.exit_code == 0, result.output
    rows = [ln.split(",") for ln in records.read_text().splitlines()]
    col = rows[0].index("sampled_rows")
    assert [r[col] for r in rows[1:]] == ["16", "16"]
    bad = invoke("parity", *numpy_args, "--results", tmp_path, "--resume", run_dir.name,
                 "--heads", "4/2", "--head-dim", "128")
    assert bad.exit_code == 2
    assert bad.output.strip().splitlines() == [
        f"error: cannot resume {run_dir.name}: head_dim is 128 here but 64 in the run; leave the option out "
        "to resume with the run's settings"]


def test_interrupt_says_where_rows_are_kept(numpy_args, smoke_yaml, invoke, tmp_path, monkeypatch):
    calls = []
    original = runner._run_shape

    def interrupt_second(job, problem, variants):
        calls.append(problem)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return original(job, problem, variants)

    monkeypatch.setattr(runner, "_run_shape", interrupt_second)
    result = invoke("parity", "--config", smoke_yaml, *numpy_args, "--results", tmp_path)
    assert result.exit_code == 130
    (run_dir,) = run_dirs(tmp_path)
    assert result.stderr.strip() == (f"interrupted: finished rows kept in {run_dir}; "
                                     f"resume with --resume {run_dir}")
    _, rows = read_csv(run_dir / "records.csv")
    assert {r["shape"] for r in rows} == {"256x64"}


def test_report_and_compare_on_stored_runs(numpy_args, smoke_yaml, invoke, tmp_path):
    for _ in range(2):
        assert invoke("run", smoke_yaml, *numpy_args, "--shapes", "256x64,0x96",
                      "--results", tmp_path).exit_code == 0
    a, b = run_dirs(tmp_path)
    # report: newest run by default, printed and written into the run
    (b / "report.md").unlink()
    result = invoke("report", "--results", tmp_path, "--no-plots")
    assert result.exit_code == 0
    assert result.stdout.startswith("# pa-bench") and (b / "report.md").is_file()
    out = tmp_path / "elsewhere" / "a.md"
    result = invoke("report", a, "-o", out, "--no-plots")
    assert result.exit_code == 0 and out.read_text().startswith("# pa-bench")
    # compare: the two newest by default, older as A
    result = invoke("compare", "--results", tmp_path)
    assert result.exit_code == 0
    assert f"A: {a}" in result.stdout and f"B: {b}" in result.stdout
    result = invoke("compare", a, b, "--json", "--fail-on-slowdown")
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    assert {(r["shape"], r["variant"]) for r in data["rows"]} == {
        (s, v) for s in ("256x64", "0x96") for v in ("v1", "v2", "v2t")}


def test_report_and_compare_without_runs(one_line_error, invoke, tmp_path):
    one_line_error(invoke("report", "--results", tmp_path), "no runs")
    one_line_error(invoke("compare", "--results", tmp_path), "no two runs")


def test_env_and_kernels(invoke, monkeypatch):
    result = invoke("env")
    assert result.exit_code == 0 and "python" in result.stdout
    data = json.loads(invoke("env", "--json").stdout)
    assert "python" in data and "cupy" in data

    from pa_bench.backends import kernel_info

    seen = {}

    def fake_table(archs=None, head_dim=128, force_turing=False, **kw):
        seen.update(archs=archs, head_dim=head_dim, force_turing=force_turing)
        return [{"variant": "v2t", "arch": "sm_75", "compiled": True, "reason": None,
                 "registers": 128, "spill_bytes": 0, "smem_bytes": 32768, "cta": "4 warps",
                 "cp_async": False, "mma": "m16n8k8"}]

    monkeypatch.setattr(kernel_info, "kernel_table", fake_table)
    result = invoke("kernels", "--arch", "sm_75,sm_90", "--head-dim", 64, "--json")
    assert result.exit_code == 0
    assert json.loads(result.stdout)[0]["registers"] == 128
    assert seen == {"archs": ["sm_75", "sm_90"], "head_dim": 64, "force_turing": False}
    assert "m16n8k8" in invoke("kernels").stdout


# --------------------------------------------------------------------------- errors


def test_bad_shape_string(numpy_args, one_line_error, invoke, tmp_path):
    one_line_error(invoke("parity", "--shapes", "32Kx", *numpy_args, "--results", tmp_path),
                   "32Kx")


def test_unknown_config_key(numpy_args, one_line_error, invoke, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nshapes: [256x64]\ntimming: {hot: true}\n")
    line = one_line_error(invoke("run", bad, *numpy_args, "--results", tmp_path), "timming")
    assert "bad.yaml" in line


def test_missing_config_file(numpy_args, one_line_error, invoke, tmp_path):
    one_line_error(invoke("parity", "--config", tmp_path / "nope.yaml", *numpy_args),
                   "nope.yaml")


def test_unknown_variant(numpy_args, one_line_error, invoke):
    one_line_error(invoke("parity", "--variant", "v1,v9", *numpy_args), "v9")


def test_time_without_a_gpu(one_line_error, invoke, tmp_path, no_gpu):
    line = one_line_error(invoke("time", "--variant", "v2t", "--results", tmp_path),
                          "CuPy", "GPU")
    assert "pip install" in line
    assert not tmp_path.exists() or not any(tmp_path.iterdir())  # no run dir for nothing


def test_backend_cuda_without_cupy(one_line_error, invoke, tmp_path, no_gpu):
    result = invoke("parity", "--backend", "cuda", "--shapes", "256x64", "--results", tmp_path)
    line = one_line_error(result, "CuPy", "NVIDIA GPU", "pa-bench[cuda12]", "cuda13")
    assert result.exit_code == 2
    assert line.count("error:") == 1


def test_usage_errors_are_one_line(one_line_error, invoke):
    result = invoke("parity", "--bogus")
    one_line_error(result, "--bogus")
    assert result.exit_code == 2
    one_line_error(invoke("parity", "--heads", "32/x"), "--heads")
    one_line_error(invoke("compare", "only-one"), "two runs")


def test_no_traceback_in_a_real_process(tmp_path):
    """`python -m pa_bench` on a bad input: one line on stderr, exit 2, no traceback."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("PA_BENCH_DEBUG", None)
    proc = subprocess.run(
        [sys.executable, "-m", "pa_bench", "parity", "--shapes", "32Kx1O24", "--backend", "numpy",
         "--results", str(tmp_path)],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]
    assert proc.stderr.startswith("error: ") and "32Kx1O24" in proc.stderr
    assert proc.stdout == ""


# --------------------------------------------------------------------------- on a GPU


@pytest.mark.gpu
def test_run_smoke_on_cuda(smoke_yaml, invoke, tmp_path):
    """`pytest -m gpu`: the CLI end to end on the cuda backend (parity and timing)."""
    result = invoke("run", smoke_yaml, "--backend", "cuda", "--max-seconds", 2, "--results", tmp_path)
    assert result.exit_code == 0, result.output
    (run_dir,) = run_dirs(tmp_path)
    _, rows = read_csv(run_dir / "records.csv")
    assert len(rows) == 9
    for r in rows:
        if r["status"] == "skipped":  # v2 on a pre-sm_80 GPU
            assert r["variant"] == "v2" and "sm_80" in r["reason"]
            continue
        assert r["status"] == "ok" and r["parity_pass"] == "True", r
        assert r["deterministic"] == "True" and r["canary_ok"] == "True"
        assert float(r["ms_median"]) > 0 and int(r["samples"]) >= 1
        assert r["backend"] == "cuda" and r["arch"].startswith("sm_")
        if r["variant"] == "v2t" and r["diff_vs_v2"]:
            assert float(r["diff_vs_v2"]) == 0.0
    samples = json.loads((run_dir / "samples.json").read_text())
    assert any(key.endswith("|v2t") for key in samples)
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["backend_meta"]["kernel_sources"]
