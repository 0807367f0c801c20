"""Where pa-bench's data files live: the CUDA kernels (``kernels/``) and the configs (``configs/``).

A wheel ships them as the packages ``pa_bench._kernels`` and ``pa_bench._configs``
(pyproject.toml maps the repository's ``kernels/`` and ``configs/`` onto them); in a checkout or
an editable install they are the repository's own ``kernels/`` and ``configs/``.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def data_dir(name: str) -> Path:
    """``kernels`` or ``configs``: the installed copy inside the package, else the checkout's."""
    installed = _PACKAGE / f"_{name}"
    return installed if installed.is_dir() else _PACKAGE.parent / name


KERNEL_DIR = data_dir("kernels")
CONFIG_DIR = data_dir("configs")

__all__ = ["data_dir", "KERNEL_DIR", "CONFIG_DIR"]
