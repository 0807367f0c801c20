"""What every GPU test module needs first: CuPy and a GPU it can see, or the whole module skipped
with the reason (`pytest -m gpu` on a machine without them reports skips, not errors)."""

from __future__ import annotations

import pytest


def require_cupy_gpu():
    """The ``cupy`` module, or skip the calling test module (call it at module level)."""
    cp = pytest.importorskip("cupy")
    try:
        have_gpu = cp.cuda.runtime.getDeviceCount() > 0
    except Exception:  # pragma: no cover
        have_gpu = False
    if not have_gpu:  # pragma: no cover
        pytest.skip("no GPU visible to CuPy", allow_module_level=True)
    return cp
