"""Backend selection: ``auto`` | ``cuda`` | ``numpy``.

``auto`` picks ``cuda`` where CuPy imports and sees an NVIDIA GPU, else ``numpy`` (and
says so on one line: "no NVIDIA GPU found" on a machine without one, whatever CUDA error
CuPy raised for it). ``cuda`` without CuPy or a GPU is a :class:`BackendUnavailable`
error whose one-line message says what is missing and how to install it.
"""

from __future__ import annotations

from typing import Callable

from pa_bench.backends.base import Backend, KernelOutput
from pa_bench.errors import BackendUnavailable, PaBenchError
from pa_bench.fmt import first_line
from pa_bench.launch import NO_PINS, Pins

BACKENDS = ("auto", "cuda", "numpy")

INSTALL_HINT = "install with: pip install 'pa-bench[cuda12]' (or 'pa-bench[cuda13]' for CUDA 13 drivers)"


NO_GPU = "no NVIDIA GPU found"

# CUDA runtime errors that mean "this machine has no usable NVIDIA GPU": no device, or no
# driver at all (CUDA reports a missing driver as an insufficient one).
_NO_GPU_ERRORS = {35: "cudaErrorInsufficientDriver", 100: "cudaErrorNoDevice"}


def cuda_problem() -> str | None:
    """Why the cuda backend cannot run here (one line), or None when CuPy sees a GPU."""
    try:
        import cupy  # noqa: F401
    except Exception as exc:  # ImportError, or a broken CuPy install (missing CUDA libs)
        if not gpu_device_present():  # installing CuPy would not help: say what is missing
            either = "is not installed" if isinstance(exc, ModuleNotFoundError) else "cannot be imported"
            return f"{NO_GPU} (CuPy {either} either)"
        detail = "" if isinstance(exc, ModuleNotFoundError) else f" ({type(exc).__name__}: {first_line(exc)})"
        return f"CuPy is not installed or cannot be imported{detail}"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:
        return device_count_problem(exc)
    if count < 1:
        return NO_GPU
    return None


def device_count_problem(exc: BaseException) -> str:
    """CuPy's error on counting devices, in words: "no NVIDIA GPU found" for CUDA's no-device
    and no-driver errors (a machine without a GPU), the error itself for anything else."""
    status = getattr(exc, "status", None)
    text = first_line(exc)
    if status in _NO_GPU_ERRORS or any(name in text for name in _NO_GPU_ERRORS.values()):
        return NO_GPU
    return f"CuPy sees no NVIDIA GPU ({text})"


def gpu_device_present() -> bool:
    """Whether this machine shows signs of an NVIDIA GPU and driver: a /dev/nvidia<N> device
    node, the driver's /proc entry, or nvidia-smi on PATH (WSL has no device node)."""
    import shutil
    from pathlib import Path

    if any(Path("/dev").glob("nvidia[0-9]*")) or Path("/proc/driver/nvidia/gpus").is_dir():
        return True
    return shutil.which("nvidia-smi") is not None


def cuda_unavailable_message(problem: str) -> str:
    """The one-line error for a backend that needs CuPy and a GPU."""
    return f"the cuda backend needs CuPy and an NVIDIA GPU: {problem}{_hint(problem)}"


def make_backend(name: str, config=None, *, notice: Callable[[str], None] | None = None,
                 pins: Pins = NO_PINS) -> Backend:
    """Build the backend called ``name`` for ``config``.

    ``notice`` receives the one-line message printed when ``auto`` falls back to numpy.
    ``pins``: what the caller fixes of every launch (pa_bench.launch.Pins; the policy picks the
    rest).
    """
    if name not in BACKENDS:
        raise PaBenchError(f"unknown backend {name!r} (choose from {', '.join(BACKENDS)})")
    if name == "numpy":
        return _numpy_backend(config, pins)
    problem = cuda_problem()
    if problem is None:
        return _cuda_backend(config, pins)
    if name == "cuda":
        raise BackendUnavailable(cuda_unavailable_message(problem))
    if notice is not None:
        notice(f"note: {problem}; using the numpy backend (parity on sampled rows, no timing){_hint(problem)}")
    return _numpy_backend(config, pins)


def _numpy_backend(config, pins: Pins) -> Backend:
    from pa_bench.backends.numpy import NumpyBackend, refuse_if_nothing_fits
    from pa_bench.problem.config import DEFAULT_MMA

    if config is not None:
        refuse_if_nothing_fits(config)  # before any input is drawn
    determinism = True if config is None else bool(config.parity.determinism)
    return NumpyBackend(check_determinism=determinism, pins=pins,
                        mma=DEFAULT_MMA if config is None else config.parity.mma)


def _cuda_backend(config, pins: Pins) -> Backend:
    try:
        from pa_bench.backends.cuda import CudaBackend
    except ImportError as exc:
        raise BackendUnavailable(f"the cuda backend cannot be loaded: {first_line(exc)}") from exc
    return CudaBackend(config=config, force_turing=bool(config is not None and config.force_turing), pins=pins)


#: A numpy run estimated to take less than this is not announced (it is over before one reads it).
QUIET_SECONDS = 10.0


def announce_plan(mode: str, plan, backend, rows_of, log: Callable[[str], None]) -> None:
    """Before a run starts: ``log`` what it is about to do and how long it will take
    (:func:`plan_notice`), except for a numpy run estimated under QUIET_SECONDS."""
    notice, seconds = plan_notice(mode, plan, backend, rows_of)
    if seconds is None or seconds >= QUIET_SECONDS:
        log(notice)


def plan_notice(mode: str, plan, backend, rows_of) -> tuple[str, float | None]:
    """One or two lines, printed before a run starts: what it is about to do and, on the numpy
    backend, roughly how long it will take (from the work: query heads x compared rows x visible
    keys, per arithmetic of the kernels), with that estimate in seconds (None where there is
    none). ``rows_of(problem)``: the compared rows (None: all)."""
    from pa_bench import variants as registry

    def count(n: int, what: str) -> str:
        return f"{n} {what}{'' if n == 1 else 's'}"

    kernels = [v for v in plan.variants if registry.is_kernel(v)]
    peers = [v for v in plan.variants if registry.is_peer(v)]
    numpy = backend.kernels_are_model     # the numpy backend: its kernels are the model, nothing is timed
    parity = mode in ("parity", "run") and bool(kernels)
    timing = mode in ("time", "run")
    what = [count(len(plan.problems), "shape") + " x " +
            (count(len(kernels), "kernel") if numpy else count(len(plan.variants), "variant"))]
    if parity:
        rows = [rows_of(p) for p in plan.problems]
        counts = sorted({len(r) for r in rows if r is not None})
        what.append("parity against FP64 on " + ("every row" if not counts else
                    "/".join(map(str, counts)) + " sampled rows per shape (seeded; first and last "
                    "included)" + ("" if all(r is not None for r in rows) else " or every row")))
    if timing and not numpy:
        what.append(f"timing up to {plan.config.timing.max_seconds:g} s per shape")
    skipped = ([count(len(peers), "peer")] if numpy and peers else []) + (["all timing"] if numpy and timing else [])
    if skipped:
        what.append(" and ".join(skipped) + " skipped (they need a GPU)")
    line = f"{mode} {plan.config.name} on {backend.name}: " + ", ".join(what)
    if not (numpy and parity):
        return line, None
    from pa_bench.backends import numpy as nb

    seconds, elements = nb.estimate(plan, rows_of, backend, plan.config.parity.determinism)
    return (f"{line}\nestimated time: about {_duration(seconds)} on this CPU (the numerics model: "
            f"{elements / 1e6:.0f}M scores = query heads x compared rows x visible keys, once per "
            "tile size and key split)"), seconds


def _duration(seconds: float) -> str:
    """``20 s``, ``3 min``: a rough figure, rounded up."""
    if seconds < 60:
        return f"{max(5, -(-int(seconds) // 5) * 5)} s"
    return f"{-(-int(seconds) // 60)} min"


def _hint(problem: str) -> str:
    """The install hint, where installing CuPy is what is missing (not where a GPU is)."""
    return f"; {INSTALL_HINT}" if problem.startswith("CuPy is not installed") else ""


__all__ = ["Backend", "KernelOutput", "BACKENDS", "NO_GPU", "make_backend", "cuda_problem", "device_count_problem",
           "gpu_device_present", "cuda_unavailable_message", "plan_notice", "announce_plan"]
