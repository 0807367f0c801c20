"""What a bug report needs: Python, packages, CuPy, the GPU, driver, CUDA, nvcc, torch, git.

`environment()` never raises: with no CuPy, no GPU, no nvcc or no git the matching fields are
None (and `gpu_error` holds CUDA's error when CuPy is there but the GPU is not; the text form
says "no NVIDIA GPU found" for CUDA's no-device and no-driver errors, as the backends do).
It is used by `pa-bench env` (through `format_environment`) and stored in `meta.json`.

Keys of `environment()` (all present, None when unknown):
python, implementation, platform, pa_bench, numpy, pandas, click, rich, pyyaml, matplotlib,
cupy, torch, cuda_available, device, gpu, compute_capability, arch, sm_count, l2_bytes,
gpu_memory_bytes, sm_clock_max_mhz, driver, cuda_driver, cuda_runtime, gpu_error, nvcc,
nvcc_path, git_commit.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pa_bench
from pa_bench import fmt
from pa_bench.store.results import git_commit

_PACKAGES = {  # key -> distribution name
    "numpy": "numpy",
    "pandas": "pandas",
    "click": "click",
    "rich": "rich",
    "pyyaml": "PyYAML",
    "matplotlib": "matplotlib",
}

NO_GPU = "no NVIDIA GPU found"
# CUDA's errors that mean "this machine has no usable NVIDIA GPU": no device, or no driver at all
# (CUDA reports a missing driver as an insufficient one); pa_bench.backends reads them alike
NO_GPU_ERRORS = ("cudaErrorInsufficientDriver", "cudaErrorNoDevice")

_GPU_KEYS = (
    "device", "gpu", "compute_capability", "arch", "sm_count", "l2_bytes", "gpu_memory_bytes",
    "sm_clock_max_mhz", "driver", "cuda_driver", "cuda_runtime", "gpu_error",
)


def _dist_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except Exception:  # noqa: BLE001 - any metadata problem means "unknown"
        return None


def _run(cmd: list[str], timeout: float = 15.0) -> str | None:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout if proc.returncode == 0 else None


def parse_nvcc_version(text: str | None) -> str | None:
    """'... Cuda compilation tools, release 12.4, V12.4.131' -> '12.4'."""
    if not text:
        return None
    m = re.search(r"release\s+(\d+\.\d+)", text)
    return m.group(1) if m else None


def nvcc_info() -> tuple[str | None, str | None]:
    """(version, path) of the nvcc on PATH, or (None, None)."""
    path = shutil.which("nvcc")
    if path is None:
        return None, None
    return parse_nvcc_version(_run([path, "--version"])), path


def _cupy() -> Any | None:
    try:
        return importlib.import_module("cupy")
    except Exception:  # noqa: BLE001 - ImportError, or a broken CUDA install raising on import
        return None


def _nvidia_smi(device: int) -> dict[str, Any]:
    """Driver version and max SM clock from nvidia-smi ({} if unavailable)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return {}
    out = _run([smi, f"--id={device}", "--query-gpu=driver_version,clocks.max.sm",
                "--format=csv,noheader,nounits"])
    if not out:
        return {}
    parts = [p.strip() for p in out.strip().splitlines()[0].split(",")]
    info: dict[str, Any] = {}
    if parts and parts[0]:
        info["driver"] = parts[0]
    if len(parts) > 1:
        try:
            info["sm_clock_max_mhz"] = float(parts[1])
        except ValueError:
            pass
    return info


def _text(x: Any) -> str:
    return x.decode(errors="replace").rstrip("\x00") if isinstance(x, bytes) else str(x)


def gpu_info(device: int = 0) -> dict[str, Any]:
    """GPU fields (see module docstring); all None without CuPy or a GPU. Never raises."""
    info: dict[str, Any] = dict.fromkeys(_GPU_KEYS)
    info["cuda_available"] = False
    cp = _cupy()
    if cp is None:
        return info
    try:
        rt = cp.cuda.runtime
        try:
            info["cuda_runtime"] = fmt.cuda_version(rt.runtimeGetVersion())
        except Exception:  # noqa: BLE001
            pass
        try:
            info["cuda_driver"] = fmt.cuda_version(rt.driverGetVersion())
        except Exception:  # noqa: BLE001
            pass
        if rt.getDeviceCount() <= device:
            info["gpu_error"] = f"CuPy sees no GPU {device}"
            return info
        props = rt.getDeviceProperties(device)
        major, minor = int(props["major"]), int(props["minor"])
        info.update(
            device=device,
            gpu=_text(props.get("name", "")) or None,
            compute_capability=f"{major}.{minor}",
            arch=f"sm_{major}{minor}",
            sm_count=int(props["multiProcessorCount"]),
            l2_bytes=int(props["l2CacheSize"]) if "l2CacheSize" in props else None,
            gpu_memory_bytes=int(props["totalGlobalMem"]) if "totalGlobalMem" in props else None,
            sm_clock_max_mhz=props["clockRate"] / 1000.0 if props.get("clockRate") else None,
        )
        info["cuda_available"] = True
    except Exception as exc:  # noqa: BLE001 - no driver, no device, a broken install ...
        info["gpu_error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
        return info
    try:
        smi = _nvidia_smi(device)
    except Exception:  # noqa: BLE001
        smi = {}
    info["driver"] = smi.get("driver")
    if info["sm_clock_max_mhz"] is None:
        info["sm_clock_max_mhz"] = smi.get("sm_clock_max_mhz")
    return info


def environment(device: int = 0) -> dict[str, Any]:
    """Describe this machine for `pa-bench env` and meta.json. Never raises."""
    env: dict[str, Any] = {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "pa_bench": pa_bench.__version__,
    }
    for key, dist in _PACKAGES.items():
        env[key] = _dist_version(dist)
    cp = _cupy()
    env["cupy"] = getattr(cp, "__version__", None) if cp is not None else None  # a broken CuPy may lack it
    env["torch"] = _dist_version("torch")  # metadata only: importing torch takes seconds
    env.update(gpu_info(device))
    try:
        env["nvcc"], env["nvcc_path"] = nvcc_info()
    except Exception:  # noqa: BLE001
        env["nvcc"], env["nvcc_path"] = None, None
    try:
        env["git_commit"] = git_commit(Path(pa_bench.__file__).resolve().parent.parent)
    except Exception:  # noqa: BLE001
        env["git_commit"] = None
    return env


def _fmt_bytes(n: int | None) -> str | None:
    if n is None:
        return None
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def gpu_absence(error: str | None) -> str | None:
    """The GPU probe's error in words: "no NVIDIA GPU found" for CUDA's no-device and no-driver
    errors (CUDA's own words stay in ``gpu_error``, `pa-bench env --json`), else the error."""
    if error and any(name in error for name in NO_GPU_ERRORS):
        return NO_GPU
    return error


def format_environment(d: dict[str, Any]) -> str:
    """Human-readable text (newline-separated 'name: value' lines) for `pa-bench env`."""

    def v(x: Any) -> str:
        return "-" if x is None or x == "" else str(x)

    lines = [
        f"pa-bench      {v(d.get('pa_bench'))}  (git {v(d.get('git_commit'))})",
        f"python        {v(d.get('python'))} ({v(d.get('implementation'))}) on {v(d.get('platform'))}",
        "packages      " + ", ".join(f"{k} {v(d.get(k))}" for k in _PACKAGES),
        f"cupy          {v(d.get('cupy')) if d.get('cupy') else 'not installed'}",
        f"torch         {v(d.get('torch')) if d.get('torch') else 'not installed'}",
    ]
    if d.get("cuda_available"):
        lines += [
            f"gpu           {v(d.get('gpu'))} ({v(d.get('arch'))}, compute capability "
            f"{v(d.get('compute_capability'))})",
            f"SMs           {v(d.get('sm_count'))}, L2 {v(_fmt_bytes(d.get('l2_bytes')))}, "
            f"memory {v(_fmt_bytes(d.get('gpu_memory_bytes')))}, max SM clock "
            f"{v(d.get('sm_clock_max_mhz'))} MHz",
        ]
    else:
        why = gpu_absence(d.get("gpu_error")) or ("CuPy is not installed" if not d.get("cupy") else "no GPU")
        lines.append(f"gpu           none ({why})")
    lines += [
        f"driver        {v(d.get('driver'))}  (CUDA driver API {v(d.get('cuda_driver'))})",
        f"cuda runtime  {v(d.get('cuda_runtime'))}",
        "nvcc          "
        + (f"{v(d.get('nvcc'))}  ({d['nvcc_path']})" if d.get("nvcc_path") else "not on PATH"),
    ]
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover - handy for bug reports without the CLI
    sys.stdout.write(format_environment(environment()) + "\n")
