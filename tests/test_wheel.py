"""A real package: the wheel carries the kernels and configs, installs with nothing but its
declared dependencies, and runs from any directory. Builds offline (no build isolation, no index).

The venv is made without the system's site-packages, whatever interpreter runs pytest (a venv
too), and gets the wheel's own ``Requires-Dist`` from a local wheelhouse: ``$PA_BENCH_WHEELHOUSE``
where set, else a folder under the temp directory, keyed on the dependencies and the interpreter,
filled once by ``pip download`` (pip's cache, or the index where the network allows). Where
neither can provide them the test is skipped with the reason."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "pa_bench", "kernels", "configs")
WHEELHOUSE_ENV = "PA_BENCH_WHEELHOUSE"


def _setuptools_major() -> int:
    try:
        import setuptools
    except ImportError:
        return 0
    return int(setuptools.__version__.split(".")[0])


def declared_dependencies(wheel: Path) -> list[str]:
    """The wheel's ``Requires-Dist`` requirements, without the optional extras."""
    with zipfile.ZipFile(wheel) as zf:
        meta = zf.read(next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    deps = [line.split(":", 1)[1].strip() for line in meta.splitlines() if line.startswith("Requires-Dist:")]
    return [d for d in deps if "extra ==" not in d]


def wheelhouse(deps: list[str], run) -> Path:
    """A folder of wheels for ``deps`` on this interpreter (see the module's docstring)."""
    given = os.environ.get(WHEELHOUSE_ENV)
    if given:
        return Path(given)
    tag = f"{sys.implementation.cache_tag}-{sysconfig.get_platform()}"
    key = hashlib.sha256("\n".join([tag, *sorted(deps)]).encode()).hexdigest()[:16]
    house = Path(tempfile.gettempdir()) / f"pa-bench-wheelhouse-{key}"
    if (house / ".complete").is_file():
        return house
    part = Path(tempfile.mkdtemp(prefix=f"{house.name}.part-", dir=house.parent))
    got = run(sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:", "--dest", str(part), *deps)
    if got.returncode != 0:
        shutil.rmtree(part, ignore_errors=True)
        last = (got.stderr.strip().splitlines() or ["no output"])[-1]
        pytest.skip(f"the wheel's dependencies cannot be gathered offline or from an index "
                    f"(pip download: {last}); set {WHEELHOUSE_ENV} to a folder of their wheels")
    (part / ".complete").write_text("\n".join(deps) + "\n")
    try:
        part.rename(house)
    except OSError:  # another run filled it meanwhile
        shutil.rmtree(part, ignore_errors=True)
    return house


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(wheel, pa-bench executable, environment, tmp) of the wheel installed into a fresh venv
    that holds only the wheel and its declared dependencies."""
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
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PA_BENCH_KERNELS", "VIRTUAL_ENV", "PYTHONHOME")}
    run = lambda *cmd: subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True, timeout=300)
    built = run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                "-w", str(tmp / "dist"), str(src))
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp / "dist").glob("pa_bench-*.whl")
    house = wheelhouse(declared_dependencies(wheel), run)
    venv = tmp / "venv"
    made = run(sys.executable, "-m", "venv", str(venv))  # no --system-site-packages
    assert made.returncode == 0, made.stderr
    py = venv / "bin" / "python"
    done = run(str(py), "-m", "pip", "install", "-q", "--no-index", "--find-links", str(house), str(wheel))
    assert done.returncode == 0, done.stderr
    return wheel, venv / "bin" / "pa-bench", env, tmp


def test_the_venv_holds_only_the_wheel_and_its_declared_dependencies(installed):
    wheel, exe, env, _tmp = installed
    code = "import json, sys; print(json.dumps([sys.prefix, sys.path]))"
    got = subprocess.run([str(exe.parent / "python"), "-s", "-c", code], env=env, capture_output=True,
                         text=True, timeout=60)
    prefix, path = json.loads(got.stdout)
    assert Path(prefix) == exe.parent.parent
    outside = [p for p in path if "site-packages" in p and not p.startswith(prefix)]
    assert outside == []  # the system's (or the outer venv's) packages are not visible
    assert "click" in " ".join(declared_dependencies(wheel)) and "rich" in " ".join(declared_dependencies(wheel))


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


def test_the_readmes_config_paths_find_the_packaged_configs_from_any_directory(installed, tmp_path):
    _wheel, exe, env, _tmp = installed
    for given in ("configs/smoke.yaml", "smoke.yaml", "smoke"):
        proc = subprocess.run([str(exe), "parity", "--config", given, "--backend", "numpy", "--variant", "v1",
                               "--shapes", "256x64", "--json", "--results", "res"], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, (given, proc.stderr)
        assert json.loads(proc.stdout)["records"][0]["config"] == "smoke"
    missing = subprocess.run([str(exe), "run", "configs/nope.yaml"], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=120)
    assert missing.returncode == 2
    assert missing.stderr.strip().splitlines() == [
        "error: configs/nope.yaml: config file not found (packaged configs, by name: long, pr2092, "
        "prompt98k, smoke, sweep)"]


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
