"""The numerics model's key parts as one fused CUDA kernel: kernels/pa_model.cu through CuPy.

``model_attention(..., engine="kernel")`` calls :func:`online_softmax_parts` in place of the
array-module steps (model._online_softmax_parts): one launch computes the state (m, l per lane,
acc) of every (KV head, stacked row, key part), with the same bits (docs/NUMERICS.md, "The fused
model kernel"); the parts are merged in Python, as on the array-module path. :func:`kernel_launch` lays out the
arguments for any array module, so the CPU test (tests/test_model_kernel_host.py) hands the very
same arguments to the kernel's source compiled for the host.

CuPy is imported only when the kernel runs: importing this module needs no GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from pa_bench import resources
from pa_bench.numerics import mma as M

KERNEL_FILE = "pa_model.cu"
FUNCTION = "pa_model"
OPTIONS = ("--fmad=false", "-std=c++17")
MAX_SHARED_BYTES = 48 * 1024   # dynamic shared memory without an opt-in
_K_PAD = 4                     # pam::K_PAD: bytes of padding per K row in shared memory


def kernel_path():
    """kernels/pa_model.cu (the wheel's copy when installed)."""
    return resources.KERNEL_DIR / KERNEL_FILE


def cta_threads(d: int, tile: int) -> int:
    """Threads per CTA: whole warps covering max(D, tile) (pa_model.cu's opening comment)."""
    return 32 * -(-max(int(d), int(tile)) // 32)


def smem_bytes(d: int, tile: int) -> int:
    """Dynamic shared memory per CTA, as pam::smem_bytes: q (D doubles), s/p/P (tile floats
    each) and the tile's K rows (D + 4 bytes each)."""
    return 8 * d + 12 * tile + tile * (d + _K_PAD)


@dataclass
class Launch:
    """One launch of pa_model: geometry, the arguments in the kernel's order, and the outputs
    (m [P, Hkv, GR], l [P, Hkv, GR, 4], acc [P, Hkv, GR, D], float32) that it fills."""

    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_mem: int
    args: tuple
    m: Any
    l: Any
    acc: Any

    def parts(self) -> list[tuple[Any, Any, Any]]:
        """The (m, l, acc) of each part, in part order (the model's merge reads them)."""
        return [(self.m[z], self.l[z], self.acc[z]) for z in range(self.m.shape[0])]


def kernel_launch(a, qf, limit, tile: int, ranges, mma: str, mma_k: int, pv_chain: int,
                  slack: float | None = None) -> Launch:
    """pa_model's launch for model._online_softmax_parts' arguments, on ``a.xp`` (numpy or cupy):
    ``qf`` [Hkv, GR, D] float64 stacked rows, ``limit`` [GR] each row's last visible key,
    ``ranges`` the key parts [(k0, k1), ...], ``slack`` the lazy running maximum's (None: exact)."""
    xp = a.xp
    hkv, gr, d = (int(n) for n in qf.shape)
    tile = int(tile)
    if mma not in ("emulated", "rn") or mma_k not in (8, 16):
        raise ValueError(f"mma {mma!r} / mma_k {mma_k} not supported by {KERNEL_FILE}")
    threads, shared = cta_threads(d, tile), smem_bytes(d, tile)
    if threads > 1024 or shared > MAX_SHARED_BYTES:
        raise ValueError(f"{KERNEL_FILE}: D={d} with {tile}-key tiles needs {threads} threads and "
                         f"{shared} bytes of shared memory (at most 1024 and {MAX_SHARED_BYTES})")
    n_parts = len(ranges)
    nk = int(a.k_i8.shape[1])
    f32, i32 = np.float32, np.int32
    m = xp.empty((n_parts, hkv, gr), dtype=xp.float32)
    l = xp.empty((n_parts, hkv, gr, 4), dtype=xp.float32)
    acc = xp.empty((n_parts, hkv, gr, d), dtype=xp.float32)
    parts = xp.asarray(np.asarray(ranges, dtype=np.int32).reshape(n_parts, 2))
    args = (xp.ascontiguousarray(qf, dtype=xp.float64),
            xp.ascontiguousarray(a.k_i8), xp.ascontiguousarray(a.v_i8),
            xp.ascontiguousarray(a.k_mult, dtype=f32), xp.ascontiguousarray(a.v_mult, dtype=f32),
            xp.ascontiguousarray(limit, dtype=xp.int64), parts, m, l, acc,
            i32(hkv), i32(gr), i32(d), i32(tile), np.int64(nk), i32(mma == "emulated"), i32(mma_k),
            i32(M.EXTRA_BITS), i32(pv_chain), i32(slack is not None), f32(slack or 0.0))
    return Launch((gr, hkv, n_parts), (threads, 1, 1), shared, args, m, l, acc)


@lru_cache(maxsize=None)
def _function(device_id: int):
    """pa_model compiled by NVRTC for the current device (once per process and device)."""
    import cupy as cp

    module = cp.RawModule(code=kernel_path().read_text(), options=OPTIONS)
    return module.get_function(FUNCTION)


def online_softmax_parts(a, qf, limit, tile: int, ranges, mma: str, mma_k: int, pv_chain: int,
                         slack: float | None = None):
    """model._online_softmax_parts on the GPU in one launch of kernels/pa_model.cu (CuPy arrays):
    the (m, l, acc) of each key part, the same bits as the array-module steps."""
    import cupy as cp

    launch = kernel_launch(a, qf, limit, tile, ranges, mma, mma_k, pv_chain, slack)
    if launch.grid[0] and launch.grid[1] and launch.grid[2]:
        fn = _function(cp.cuda.Device().id)
        fn(launch.grid, launch.block, launch.args, shared_mem=launch.shared_mem)
    return launch.parts()


__all__ = ["KERNEL_FILE", "FUNCTION", "OPTIONS", "Launch", "kernel_launch", "kernel_path",
           "cta_threads", "smem_bytes", "online_softmax_parts"]
