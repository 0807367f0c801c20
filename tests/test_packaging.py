"""Packaging: the console script and extras are declared, and pa_bench imports without CuPy."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")


@pytest.fixture(scope="module")
def pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def test_console_script_and_python(pyproject):
    project = pyproject["project"]
    assert project["name"] == "pa-bench"
    assert project["scripts"] == {"pa-bench": "pa_bench.cli:main"}
    assert project["requires-python"] == ">=3.10"
    deps = {re.split(r"[<>=!~ \[]", d)[0].lower() for d in project["dependencies"]}
    assert {"click", "numpy", "pandas", "rich", "pyyaml"} <= deps


def test_extras(pyproject):
    extras = {k: {re.split(r"[<>=!~ \[]", d)[0].lower() for d in v}
              for k, v in pyproject["project"]["optional-dependencies"].items()}
    assert extras["cuda12"] == {"cupy-cuda12x", "nvidia-ml-py"}  # NVML: the SM clock during samples
    assert extras["cuda13"] == {"cupy-cuda13x", "nvidia-ml-py"}
    assert "cupy-cuda13x>=13.6" in pyproject["project"]["optional-dependencies"]["cuda13"]
    assert pyproject["project"]["license"] == "MIT" and (REPO / "LICENSE").is_file()
    assert extras["plot"] == {"matplotlib"}
    assert {"pytest", "matplotlib"} <= extras["test"]


def test_pytest_leaves_gpu_tests_out_by_default(pyproject):
    opts = pyproject["tool"]["pytest"]["ini_options"]
    assert opts["testpaths"] == ["tests"]
    assert '-m "not gpu"' in opts["addopts"]
    markers = " ".join(opts["markers"])
    assert "gpu:" in markers and "pytest -m gpu" in markers and "nvcc:" in markers


def test_import_without_cupy():
    """Every module but the cuda backend imports with CuPy absent (blocked, if installed)."""
    code = (
        "import sys; sys.modules['cupy'] = None\n"
        "import pa_bench, pa_bench.cli, pa_bench.runner, pa_bench.backends, "
        "pa_bench.backends.numpy, pa_bench.present.report, pa_bench.present.compare\n"
        "from pa_bench.backends import cuda_problem\n"
        "print(pa_bench.__version__, cuda_problem())\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "CuPy" in proc.stdout


def test_module_entry_point_prints_help():
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", "pa_bench", "--help"], capture_output=True,
                          text=True, env=env, timeout=120)
    assert proc.returncode == 0
    for command in ("parity", "time", "run", "report", "compare", "kernels", "env"):
        assert command in proc.stdout


def test_readme_commands_and_ci_script_agree():
    readme = (REPO / "README.md").read_text()
    main_cmd = 'pip install -e ".[cuda12]" && pa-bench run'
    test_cmd = 'pip install -e ".[test,triton]" "torch==2.13.0" && python -m pytest'
    assert main_cmd in readme and test_cmd in readme and '".[cuda13]"' in readme
    assert readme.index(main_cmd) < readme.index("## ")  # on the first screen
    ci = REPO / ".ci" / "run"
    text = ci.read_text()
    assert text.startswith("#!/usr/bin/env bash") and "set -euo pipefail" in text
    assert test_cmd in text
    assert os.stat(ci).st_mode & stat.S_IXUSR
