"""What a new user meets first, on a machine without a GPU: the plain "no NVIDIA GPU found"
notice, a first run that says what it will do and fits a minute, the faster numerics model (the
same bits), committed reference runs that the README's commands read but never rewrite, and a
fresh clone that those commands leave clean."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from pa_bench import backends
from pa_bench.backends import NO_GPU, device_count_problem, plan_notice
from pa_bench.backends.numpy import NumpyBackend, estimate, rows_work
from pa_bench.cli import cli
from pa_bench.numerics import mma as M
from pa_bench.problem.config import load_config
from pa_bench.problem.plan import make_plan

REPO = Path(__file__).resolve().parent.parent
TINY = ["--backend", "numpy", "--shapes", "256x64", "--heads", "4/2", "--head-dim", "64",
        "--sample-rows", "4", "--variant", "v1,v2t"]


def invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


# --------------------------------------------------------------------------- "no NVIDIA GPU found"


class FakeCudaError(Exception):
    """What CuPy raises from cudaGetDeviceCount (cupy_backends...CUDARuntimeError)."""

    def __init__(self, status: int, text: str):
        super().__init__(text)
        self.status = status


@pytest.mark.parametrize("exc", [
    FakeCudaError(35, "cudaErrorInsufficientDriver: CUDA driver version is insufficient for CUDA runtime version"),
    FakeCudaError(100, "cudaErrorNoDevice: no CUDA-capable device is detected"),
    RuntimeError("cudaErrorNoDevice: no CUDA-capable device is detected"),  # no status attribute
])
def test_no_device_and_no_driver_errors_read_no_nvidia_gpu_found(exc):
    assert device_count_problem(exc) == NO_GPU == "no NVIDIA GPU found"


def test_other_cuda_errors_keep_their_detail():
    exc = FakeCudaError(2, "cudaErrorMemoryAllocation: out of memory")
    assert device_count_problem(exc) == "CuPy sees no NVIDIA GPU (cudaErrorMemoryAllocation: out of memory)"


def _fake_cupy(raises: Exception):
    def count():
        raise raises
    runtime = types.SimpleNamespace(getDeviceCount=count)
    return types.SimpleNamespace(cuda=types.SimpleNamespace(runtime=runtime))


def test_cupy_without_a_driver_falls_back_with_the_plain_notice(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy(
        FakeCudaError(35, "cudaErrorInsufficientDriver: CUDA driver version is insufficient")))
    notes = []
    be = backends.make_backend("auto", notice=notes.append)
    assert isinstance(be, NumpyBackend)
    assert notes == ["note: no NVIDIA GPU found; using the numpy backend (parity on sampled rows, no timing)"]


def test_no_cupy_and_no_gpu_says_there_is_no_gpu(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy raises ImportError
    monkeypatch.setattr(backends, "gpu_device_present", lambda: False)
    assert backends.cuda_problem() == "no NVIDIA GPU found (CuPy is not installed either)"
    monkeypatch.setattr(backends, "gpu_device_present", lambda: True)  # a GPU, no CuPy: install it
    assert backends.cuda_problem().startswith("CuPy is not installed")


# --------------------------------------------------------------------------- the first run


def _numpy_rows(plan, n):
    from pa_bench.numerics.reference import sample_rows

    return lambda pb: None if n is None or n >= pb.queries else sample_rows(pb.queries, n, pb.seed)


def test_the_default_run_on_a_cpu_is_estimated_well_under_a_minute():
    config = load_config("pr2092")
    plan = make_plan(config)
    rows = config.parity.numpy_sample_rows
    assert rows == 8
    seconds, elements = estimate(plan, _numpy_rows(plan, rows), NumpyBackend(), True)
    # (v3 at 32Kx1024 runs in key segments: an arithmetic of its own, the model runs it apart)
    assert seconds < 50 and elements < 80e6
    old, _ = estimate(plan, _numpy_rows(plan, 64), NumpyBackend(), True)
    assert old > 5 * seconds  # what 64 rows per shape cost


def test_the_run_says_up_front_what_it_will_do_and_how_long():
    config = load_config("pr2092")
    plan = make_plan(config)
    text, seconds = plan_notice("run", plan, NumpyBackend(), _numpy_rows(plan, 8))
    first, second = text.splitlines()
    assert 10 < seconds < 60
    assert first.startswith("run pr2092 on numpy: 4 shapes x 5 kernels, parity against FP64 on 8 sampled rows")
    assert "5 peers and all timing skipped (they need a GPU)" in first
    assert second.startswith("estimated time: about ") and " s on this CPU" in second
    assert "query heads x compared rows x visible keys" in second


def test_the_notice_and_the_sampled_rows_reach_the_user(tmp_path, monkeypatch):
    monkeypatch.setattr(backends, "QUIET_SECONDS", 0.0)  # announce even a run of seconds
    res = invoke("run", *TINY, "--results", tmp_path)
    assert res.exit_code == 0, res.output
    assert "run pr2092 on numpy: 1 shape x 2 kernels, parity against FP64 on 4 sampled rows" in res.stderr
    assert "estimated time: about 5 s" in res.stderr
    assert "FP64 on 4 sampled rows per shape" in res.stdout  # the table's heading line says so
    (run,) = tmp_path.iterdir()
    assert "4 sampled query rows" in (run / "report.md").read_text()


def test_a_run_of_seconds_is_not_announced(tmp_path):
    res = invoke("run", *TINY, "--results", tmp_path)
    assert res.exit_code == 0 and "estimated time" not in res.stderr


def test_variants_of_the_same_arithmetic_run_the_model_once_per_shape(monkeypatch):
    from pa_bench.numerics import model as model_mod
    from pa_bench.problem.inputs import make_inputs

    config = load_config("pr2092")
    pb = make_plan(config, shapes="512x128").problems[0]   # too short for v3 to split its keys
    calls = []
    real = model_mod.model_attention
    monkeypatch.setattr(model_mod, "model_attention", lambda *a, **k: calls.append(a[1]) or real(*a, **k))
    be = NumpyBackend(check_determinism=False)
    prepared = be.prepare(make_inputs(pb))
    rows = np.array([0, 127])
    outs = {v: be.compute(prepared, v, rows).out for v in ("v1", "v2", "v2t", "v3", "triton")}
    assert calls == [64, 16, 64]  # v1 (= triton), v2 (= v2t) and v3 (its lazy running maximum)
    assert np.array_equal(outs["v1"], outs["triton"]) and np.array_equal(outs["v2"], outs["v2t"])
    assert not np.array_equal(outs["v1"], outs["v3"])


# --------------------------------------------------------------------------- the faster model, same bits


def _block_fma_reference(acc, p16, v, k_group=16):
    """mma_accumulate as block_fma on float64 products (the documented emulation)."""
    pt = np.swapaxes(p16, -1, -2).astype(np.float64)[..., :, :, None]
    vt = v.astype(np.float64)[..., :, None, :]
    for k0 in range(0, p16.shape[-1], k_group):
        prods = pt[..., k0:k0 + k_group, :, :] * vt[..., k0:k0 + k_group, :, :]
        acc = M.block_fma(acc, prods, np, axis=-3)
    return acc


@pytest.mark.parametrize("k_group", [16, 8])
def test_mma_accumulate_gives_block_fmas_bits(k_group):
    rng = np.random.default_rng(5)
    for trial in range(120):
        kind = trial % 5
        p = rng.random((2, 5, 16)) * 2.0 ** int(rng.integers(-30, 16))
        if kind == 1:
            p[rng.random(p.shape) < 0.5] = 0                          # masked keys
        if kind == 2:
            p *= 2.0 ** -rng.integers(0, 40, p.shape)                  # fp16 subnormals too
        if kind == 3:
            p[:] = 0                                                   # all products zero
        p16 = p.astype(np.float16).astype(np.float32)
        v = rng.integers(-128, 128, (2, 16, 8)).astype(np.int8)
        acc = (rng.standard_normal((2, 5, 8)) * 2.0 ** int(rng.integers(-140, 20))).astype(np.float32)
        if kind == 4:
            acc[:] = 0
        want = _block_fma_reference(acc, p16, v, k_group)
        assert M.mma_accumulate(acc, p16, v, k_group=k_group).tobytes() == want.tobytes(), trial


def test_round_toward_zero_matches_nextafter_everywhere():
    rng = np.random.default_rng(6)
    for scale in (1.0, 1e-38, 1e-42, 1e30):
        s = rng.standard_normal(50000) * scale
        s[:4] = [0.0, 2.0**-149, -(2.0**-150), 1 + 2.0**-30]
        r = s.astype(np.float32)
        want = np.where(np.abs(r.astype(np.float64)) > np.abs(s), np.nextafter(r, np.float32(0)), r)
        assert M.round_toward_zero_f32(s).tobytes() == want.tobytes()


def test_the_model_on_threads_gives_the_same_bits(monkeypatch):
    from pa_bench.numerics import model as model_mod
    from pa_bench.problem.inputs import make_inputs

    pb = make_plan(load_config("pr2092"), shapes="300x40").problems[0]
    inp = make_inputs(pb)
    rows = np.array([0, 9, 39])
    monkeypatch.setattr(model_mod, "_threads", lambda: 1)
    one = model_mod.model_attention(inp, 64, rows)
    monkeypatch.setattr(model_mod, "_threads", lambda: 3)  # 8 KV heads dealt 3/3/2
    assert model_mod._kv_head_ranges(8, np) == [(0, 2), (2, 5), (5, 8)]
    assert model_mod.model_attention(inp, 64, rows).tobytes() == one.tobytes()


def test_rows_work_counts_heads_rows_and_visible_keys():
    assert rows_work(2, 100, 4, None) == 2 * (4 * 100 + 10)
    assert rows_work(2, 100, 4, np.array([0, 3])) == 2 * (101 + 104)


# --------------------------------------------------------------------------- reference runs


def _digest(path: Path) -> dict:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(path.iterdir())}


@pytest.fixture
def results(tmp_path):
    """results/ with one committed reference run (results/reference/h200/<id>) and no user run."""
    made = tmp_path / "made"
    res = invoke("run", *TINY, "--results", made)
    assert res.exit_code == 0, res.output
    (run,) = made.iterdir()
    root = tmp_path / "results"
    ref = root / "reference" / "h200" / "20261130-000000-pr2092-cuda"
    shutil.copytree(run, ref)
    return root, ref


def test_report_prints_a_reference_run_without_rewriting_it(results):
    root, ref = results
    before = _digest(ref)
    res = invoke("report", ref)
    assert res.exit_code == 0, res.output
    assert "# pa-bench: pr2092" in res.stdout
    assert "committed reference run: printed, not rewritten" in res.stderr
    assert _digest(ref) == before
    res = invoke("report", "--results", root, "20261130-000000-pr2092-cuda", "--json")  # by run id
    assert res.exit_code == 0 and json.loads(res.stdout)[0]["report"] is None
    assert _digest(ref) == before


def test_report_writes_a_reference_runs_report_where_o_says(results, tmp_path):
    _root, ref = results
    before = _digest(ref)
    res = invoke("report", ref, "-o", tmp_path / "out" / "report.md")
    assert res.exit_code == 0, res.output
    assert (tmp_path / "out" / "report.md").is_file() and _digest(ref) == before


def test_report_and_compare_without_a_run_never_pick_a_reference_run(results):
    root, ref = results
    res = invoke("report", "--results", root)
    assert res.exit_code == 2
    line = res.stderr.strip()
    assert line.startswith("error: no runs of yours under") and "pa-bench run configs/smoke.yaml" in line
    assert f"pa-bench report {ref}" in line  # a reference run one can name instead
    res = invoke("compare", "--results", root)
    assert res.exit_code == 2 and "(it needs two)" in res.stderr and len(res.stderr.splitlines()) == 1
    assert invoke("compare", ref, ref).exit_code == 0  # two named runs compare


def test_a_reference_run_is_not_resumed(results):
    _root, ref = results
    res = invoke("run", "--backend", "numpy", "--resume", ref)
    assert res.exit_code == 2 and "committed reference run" in res.stderr


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_the_readmes_commands_leave_a_fresh_clone_clean(results, tmp_path, monkeypatch):
    """A repository with the project's .gitignore and a committed reference run: run, report,
    compare (named runs) and report of the reference run leave `git status` empty."""
    _root, made_ref = results
    repo = tmp_path / "clone"
    (repo / "results" / "reference" / "h200").mkdir(parents=True)
    shutil.copy2(REPO / ".gitignore", repo / ".gitignore")
    ref = repo / "results" / "reference" / "h200" / made_ref.name
    shutil.copytree(made_ref, ref)
    git = lambda *a: subprocess.run(["git", "-C", str(repo), *a], capture_output=True, text=True, check=True)
    git("init", "-q")
    git("add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "fresh")
    monkeypatch.chdir(repo)
    assert invoke("run", "configs/smoke.yaml", "--backend", "numpy").exit_code == 0
    assert invoke("report").exit_code == 0
    assert invoke("report", ref).exit_code == 0
    assert invoke("compare", ref, ref).exit_code == 0
    assert git("status", "--porcelain").stdout == ""
    assert len([p for p in (repo / "results").iterdir() if p.name != "reference"]) == 1  # the user's run


def test_compare_without_runs_suggests_two_reference_runs_of_one_config(results):
    root, ref = results
    base = root / "reference" / "h200"
    shutil.copytree(ref, base / "20261130-010000-pr2092-cuda")
    shutil.copytree(ref, base / "20261201-000000-long-cuda")  # newer, but alone of its config
    res = invoke("compare", "--results", root)
    assert res.exit_code == 2
    assert res.stderr.strip().endswith(f"e.g. pa-bench compare {ref} {base / '20261130-010000-pr2092-cuda'}")


# --------------------------------------------------------------------------- what a CPU run says


def test_peers_skipped_on_a_cpu_are_said_once(tmp_path):
    """The peers skipped at every shape leave the table for one line naming them and their reason
    (records.csv keeps every row; --wide shows them all)."""
    args = ["parity", *TINY[:-1], "v1,torch-sdpa,torch-flex", "--shapes", "256x64,0x64",
            "--results", tmp_path]
    res = invoke(*args)
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert [ln for ln in lines if "cuda backend only" in ln] == [
        "skipped at every shape: torch-sdpa, torch-flex (each runs on the cuda backend only)"]
    assert not any(ln.split()[1:2] in (["torch-sdpa"], ["torch-flex"]) for ln in lines)  # no table row
    assert sum(ln.split()[1:2] == ["v1"] for ln in lines) == 2
    run = next(p for p in tmp_path.iterdir() if p.is_dir())
    rows = (run / "records.csv").read_text().splitlines()
    assert len(rows) == 1 + 2 * 3 and sum(",skipped," in r for r in rows) == 4
    wide = invoke(*args, "--wide")
    assert sum(" torch-flex " in f" {ln} " for ln in wide.stdout.splitlines()) >= 2


def test_a_prompt_with_nothing_timed_says_so_in_one_line(tmp_path):
    res = invoke("prompt", "--backend", "numpy", "--heads", "4/2", "--head-dim", "64",
                 "--sample-rows", "4", "--variant", "v1,v2t", "--tokens", "512", "--chunk", "256",
                 "--results", tmp_path)
    assert res.exit_code == 0, res.output
    out = res.stdout
    assert ("prompt read: 512 tokens in 2 chunks of 256, not timed: the numpy backend does not "
            "time kernels (needs CuPy and a GPU)") in out.replace("\n", " ")
    assert "attention-only" not in out and "tok/s" not in out.split("beside the PR")[0]


def test_env_without_a_driver_says_no_nvidia_gpu_found_as_run_does(monkeypatch):
    from pa_bench.present import envinfo

    detail = "cudaErrorInsufficientDriver: CUDA driver version is insufficient for CUDA runtime version"

    def count():
        raise FakeCudaError(35, detail)
    runtime = types.SimpleNamespace(getDeviceCount=count, runtimeGetVersion=lambda: 13020,
                                    driverGetVersion=lambda: 0)
    cupy = types.ModuleType("cupy")
    cupy.__version__, cupy.cuda = "14.2.0", types.SimpleNamespace(runtime=runtime)
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    env = envinfo.environment()
    text = envinfo.format_environment(env)
    assert "gpu           none (no NVIDIA GPU found)" in text and "insufficient" not in text
    assert detail in env["gpu_error"]            # CUDA's own words stay in `pa-bench env --json`
    assert envinfo.NO_GPU == NO_GPU == device_count_problem(FakeCudaError(35, detail))
    other = "cudaErrorMemoryAllocation: out of memory"
    assert envinfo.gpu_absence(other) == other and envinfo.gpu_absence(None) is None


def test_kernels_show_v3s_dynamic_shared_memory():
    from pa_bench.backends import kernel_info as ki
    from pa_bench.present.kernel_rows import smem_cell

    ptx = (".visible .entry pa_v3_smem_bytes(\n\t.param .u64 pa_v3_smem_bytes_param_0\n)\n{\n"
           "\tmov.u32 \t%r1, 219216;\n\tst.global.u32 \t[%rd2], %r1;\n\tret;\n\n}\n"
           ".visible .entry pa_v3(\n)\n{\n\tret;\n}\n")
    assert ki.dynamic_smem_bytes(ptx, "pa_v3") == 219216
    assert ki.dynamic_smem_bytes(ptx, "pa_v1") is None
    assert smem_cell({"smem_bytes": 0, "dynamic_smem_bytes": 219216}) == "219216 dynamic"
    assert smem_cell({"smem_bytes": 1024, "dynamic_smem_bytes": 2048}) == "1024 + 2048 dynamic"
    assert smem_cell({"smem_bytes": 16896}) == "16896"
    if ki.nvcc_path() is None:
        pytest.skip("nvcc (the CUDA compiler) is not on PATH")
    v3, v1 = ki.compile_one("v3", "sm_90"), ki.compile_one("v1", "sm_90")
    assert v3["smem_bytes"] == 0 and 200 * 1024 < v3["dynamic_smem_bytes"] <= 227 * 1024
    assert v1["smem_bytes"] > 0 and v1["dynamic_smem_bytes"] is None


def test_resuming_a_finished_run_says_there_is_nothing_to_do(tmp_path):
    assert invoke("parity", *TINY, "--results", tmp_path).exit_code == 0
    run = next(p for p in tmp_path.iterdir() if p.is_dir())
    before = (run / "records.csv").read_bytes()
    res = invoke("parity", *TINY, "--results", tmp_path, "--resume", run)
    assert res.exit_code == 0, res.output
    assert f"nothing to resume: {run.name} has no row left to run" in res.stderr.splitlines()
    assert (run / "records.csv").read_bytes() == before
