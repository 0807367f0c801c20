"""Fixtures of the GPU tests (`pytest -m gpu`): one cuda backend per module, and one on the
forced sm_75 path. A module that needs a backend of its own (v3, triton) defines its own
``backend``. Names a module imports (LAYOUTS, VARIANTS, problem) are in gpu_env.py."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def backend():
    from pa_bench.backends.cuda import CudaBackend

    return CudaBackend()


@pytest.fixture(scope="module")
def turing_backend():
    """The cuda backend with v1/v2t on the sm_75 path (m16n8k8 MMAs) whatever the GPU."""
    from pa_bench.backends.cuda import CudaBackend

    return CudaBackend(force_turing=True)
