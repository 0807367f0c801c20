"""What many CPU test modules share, as fixtures: the smoke config, ``pa-bench`` run in-process,
and the check every bad input must pass (one line ``error: ...`` on stderr, no traceback).

Fixtures rather than importable names: tests/gpu/ has a conftest.py of its own, and two
modules named ``conftest`` cannot both be imported by name.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from pa_bench.cli import cli
from pa_bench.problem.config import CONFIG_DIR

SMOKE = str(CONFIG_DIR / "smoke.yaml")


def _sass_tools_on_path() -> None:
    """cuobjdump and nvdisasm for the machine-code tests (test_v3_nvcc.py, test_sass_loops.py): the
    CUDA toolkit's where they are on PATH, else the copies Triton's wheel carries (the test command
    installs it), appended to PATH, so that a machine with nvcc but no full toolkit checks v3's SASS
    too. Without either the tests skip with the reason."""
    if shutil.which("cuobjdump") and shutil.which("nvdisasm"):
        return
    spec = importlib.util.find_spec("triton")
    if spec is None or not spec.submodule_search_locations:
        return
    bin_dir = Path(list(spec.submodule_search_locations)[0]) / "backends" / "nvidia" / "bin"
    if (bin_dir / "cuobjdump").is_file() and (bin_dir / "nvdisasm").is_file():
        os.environ["PATH"] = os.environ.get("PATH", "") + os.pathsep + str(bin_dir)


_sass_tools_on_path()


@pytest.fixture(autouse=True)
def _no_compile_ahead(monkeypatch):
    """No run of a test starts pa_bench.backends.compile_ahead's child (tests/test_compile_ahead.py turns it
    on where it tests it): fake backends named "cuda" would otherwise start one."""
    monkeypatch.setenv("PA_BENCH_COMPILE_AHEAD", "0")  # three small shapes of v1, v2, v2t: fast on the CPU
NUMPY = ("--backend", "numpy")


@pytest.fixture(scope="session")
def smoke_yaml() -> str:
    """The path of configs/smoke.yaml."""
    return SMOKE


@pytest.fixture(scope="session")
def numpy_args() -> tuple[str, str]:
    """``--backend numpy``: the numerics model on the CPU, the same on every machine."""
    return NUMPY


@pytest.fixture
def invoke():
    """``invoke(*args, env=None)``: ``pa-bench ARGS`` in-process; its result has exit_code,
    stdout and stderr. ``env``: extra environment variables while it runs."""
    def run(*args, env: dict[str, str] | None = None):
        return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False, env=env)

    return run


def _one_line_error(result, *needles: str, code: int | None = None) -> str:
    """Assert ``result`` failed (with ``code`` when given) on one line ``error: ...`` naming
    every needle, with no traceback and no internal error; returns the line."""
    assert result.exit_code != 0 and (code is None or result.exit_code == code), \
        (result.exit_code, result.output)
    assert "Traceback" not in result.stderr and "Traceback" not in result.stdout
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ") and not lines[0].startswith("error: internal error")
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def one_line_error():
    """``one_line_error(result, *needles, code=None)``: see :func:`_one_line_error`."""
    return _one_line_error
