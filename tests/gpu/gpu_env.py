"""What GPU test modules import by name: CuPy and a GPU it can see (or the whole module skipped
with the reason: `pytest -m gpu` on a machine without them reports skips, not errors), and the
kernels, layouts and problems the kernel tests share. Their fixtures are in tests/gpu/conftest.py."""

from __future__ import annotations

import pytest

VARIANTS = ("v1", "v2", "v2t")  # the mma.sync kernels every GPU runs
# (head_dim, heads_q, heads_kv, layout, page, data, out_dtype)
LAYOUTS = {
    "d128-gqa-paged64-realistic": (128, 32, 8, "paged", 64, "realistic", "float32"),
    "d64-mha-paged16-normal": (64, 16, 16, "paged", 16, "normal", "float32"),
    "d128-mha-contig-normal-f16": (128, 16, 16, "contiguous", 64, "normal", "float16"),
    "d64-gqa-contig-realistic": (64, 32, 8, "contiguous", 64, "realistic", "float32"),
}


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


def problem(shape: str, layout_key: str, seed: int = 0, heads: tuple[int, int] | None = None):
    """The Problem of ``shape`` in layout ``layout_key`` (LAYOUTS); ``heads``: (Hq, Hkv) instead
    of the layout's."""
    from pa_bench.problem.plan import Problem
    from pa_bench.problem.shapes import parse_shape

    d, hq, hkv, layout, page, data, out = LAYOUTS[layout_key]
    hq, hkv = heads or (hq, hkv)
    return Problem(parse_shape(shape), heads_q=hq, heads_kv=hkv, head_dim=d, layout=layout,
                   page=page, data=data, seed=seed, out_dtype=out)
