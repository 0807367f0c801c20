"""Backend selection: ``auto`` | ``cuda`` | ``numpy``.

``auto`` picks ``cuda`` where CuPy imports and sees an NVIDIA GPU, else ``numpy`` (and
says so on one line). ``cuda`` without CuPy or a GPU is a :class:`BackendUnavailable`
error whose one-line message says what is missing and how to install it.
"""

from __future__ import annotations

from typing import Callable

from pa_bench.backends.base import Backend, KernelOutput
from pa_bench.errors import BackendUnavailable, PaBenchError
from pa_bench.fmt import first_line

BACKENDS = ("auto", "cuda", "numpy")

INSTALL_HINT = "install with: pip install 'pa-bench[cuda12]' (or 'pa-bench[cuda13]' for CUDA 13 drivers)"


def cuda_problem() -> str | None:
    """Why the cuda backend cannot run here (one line), or None when CuPy sees a GPU."""
    try:
        import cupy  # noqa: F401
    except Exception as exc:  # ImportError, or a broken CuPy install (missing CUDA libs)
        detail = "" if isinstance(exc, ModuleNotFoundError) else f" ({type(exc).__name__}: {first_line(exc)})"
        return f"CuPy is not installed or cannot be imported{detail}"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:
        return f"CuPy sees no NVIDIA GPU ({first_line(exc)})"
    if count < 1:
        return "CuPy sees no NVIDIA GPU"
    return None


def cuda_unavailable_message(problem: str) -> str:
    """The one-line error for a backend that needs CuPy and a GPU."""
    return f"the cuda backend needs CuPy and an NVIDIA GPU: {problem}{_hint(problem)}"


def make_backend(name: str, config=None, *, notice: Callable[[str], None] | None = None) -> Backend:
    """Build the backend called ``name`` for ``config``.

    ``notice`` receives the one-line message printed when ``auto`` falls back to numpy.
    """
    if name not in BACKENDS:
        raise PaBenchError(f"unknown backend {name!r} (choose from {', '.join(BACKENDS)})")
    if name == "numpy":
        return _numpy_backend(config)
    problem = cuda_problem()
    if problem is None:
        return _cuda_backend(config)
    if name == "cuda":
        raise BackendUnavailable(cuda_unavailable_message(problem))
    if notice is not None:
        notice(f"note: {problem}; using the numpy backend (parity on sampled rows, no timing){_hint(problem)}")
    return _numpy_backend(config)


def _numpy_backend(config) -> Backend:
    from pa_bench.backends.numpy import NumpyBackend

    determinism = True if config is None else bool(config.parity.determinism)
    return NumpyBackend(check_determinism=determinism)


def _cuda_backend(config) -> Backend:
    try:
        from pa_bench.backends.cuda import CudaBackend
    except ImportError as exc:
        raise BackendUnavailable(f"the cuda backend cannot be loaded: {first_line(exc)}") from exc
    return CudaBackend(config=config, force_turing=bool(config is not None and config.force_turing))


def _hint(problem: str) -> str:
    """The install hint, where installing CuPy is what is missing (not where a GPU is)."""
    return f"; {INSTALL_HINT}" if problem.startswith("CuPy is not installed") else ""


__all__ = ["Backend", "KernelOutput", "BACKENDS", "make_backend", "cuda_problem", "cuda_unavailable_message"]
