"""A real package: the wheel carries the kernels and configs, and a non-editable
install runs from any directory. Builds offline (no build isolation, no index)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "pa_bench", "kernels", "configs")


def _setuptools_major() -> int:
    try:
        import setuptools
    except ImportError:
        return 0
    return int(setuptools.__version__.split(".")[0])


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(pa-bench executable, environment) of the wheel installed into a fresh venv."""
    if _setuptools_major() < 77:
        pytest.skip("building the wheel offline needs setuptools>=77 (pip install -e '.[test]')")
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    for name in SOURCES:  # a copy, so that the build leaves nothing in the checkout
        path = REPO / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(path, src / name)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PA_BENCH_KERNELS")}
    run = lambda *cmd: subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True, timeout=300)
    built = run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                "-w", str(tmp / "dist"), str(src))
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp / "dist").glob("pa_bench-*.whl")
    venv = tmp / "venv"
    assert run(sys.executable, "-m", "venv", "--system-site-packages", str(venv)).returncode == 0
    py = venv / "bin" / "python"
    done = run(str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--ignore-installed", str(wheel))
    assert done.returncode == 0, done.stderr
    return wheel, venv / "bin" / "pa-bench", env, tmp


def test_the_wheel_holds_the_kernels_configs_and_license(installed):
    import zipfile

    wheel = installed[0]
    names = set(zipfile.ZipFile(wheel).namelist())
    for f in (REPO / "kernels").iterdir():
        if f.suffix in (".cu", ".cuh"):
            assert f"pa_bench/_kernels/{f.name}" in names
    for f in (REPO / "configs").glob("*.yaml"):
        assert f"pa_bench/_configs/{f.name}" in names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    meta = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("/METADATA"))).decode()
    assert "License-Expression: MIT" in meta


def test_an_installed_pa_bench_runs_from_another_directory(installed, tmp_path):
    _wheel, exe, env, _tmp = installed
    where = subprocess.run([str(exe.parent / "python"), "-c", "import pa_bench; print(pa_bench.__file__)"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert str(exe.parent.parent) in where.stdout  # the wheel's copy, not the checkout
    proc = subprocess.run([str(exe), "run", "--backend", "numpy", "--sample-rows", "8", "--shapes", "256x64",
                           "--variant", "v1,v2t", "--heads", "4/2", "--head-dim", "64", "--json",
                           "--results", "res"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    records = json.loads(proc.stdout)["records"]
    assert [(r["variant"], r["status"], r["parity_pass"], r["sampled_rows"]) for r in records] == [
        ("v1", "ok", True, 8), ("v2t", "ok", True, 8)]
    assert records[0]["config"] == "pr2092"  # the default config, read from the wheel


@pytest.mark.nvcc
def test_an_installed_pa_bench_compiles_its_kernels(installed, tmp_path):
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH")
    _wheel, exe, env, _tmp = installed
    proc = subprocess.run([str(exe), "kernels", "--arch", "sm_80", "--json"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    rows = {r["variant"]: r for r in json.loads(proc.stdout)}
    assert all(rows[v]["compiled"] for v in ("v1", "v2", "v2t")), rows
