"""The `triton` variant's host side: load kernels/triton_pa.py, give it torch tensors, launch it.

On the cuda backend the tensors are zero-copy torch views of the backend's CuPy buffers
(``torch.as_tensor`` through ``__cuda_array_interface__``), so the Triton kernel reads the very
bytes v1/v2/v2t read and writes into the same canary-framed outputs. The tests build the tensors
from the host arrays instead (on the CPU, for Triton's interpreter). The launch (grid, scalars,
configuration) is planned once per shape; the launcher callable only calls the kernel.

The configuration never changes a row's arithmetic: keys per tile (BLOCK_N, the numerics model's
``tile_keys``) are fixed; only rows per program, warps and pipeline stages vary
(``triton_pa.default_config``; ``scripts/triton_check.py --sweep`` measures the candidates).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys

from pa_bench.backends.kernels import KERNEL_DIR

VARIANT = "triton"   # its name in pa_bench.variants
KERNEL_FILE = "triton_pa.py"
MIN_CC = 80          # Triton's NVIDIA support (and the kernel's fp16 tl.dot): sm_80+
HEAD_DIMS = (64, 128)

_modules: dict[bool, object] = {}


def unavailable_reason(need_gpu: bool = True) -> str | None:
    """Why the triton variant cannot run here (one line), or None."""
    try:
        import torch
    except Exception:
        return "PyTorch is not installed (the triton variant needs triton and torch: pip install 'pa-bench[triton]')"
    try:
        import triton  # noqa: F401
    except Exception as exc:
        return f"Triton cannot be imported ({type(exc).__name__}); pip install 'pa-bench[triton]'"
    if need_gpu and not torch.cuda.is_available():
        return "PyTorch sees no CUDA GPU (the triton variant launches through torch's CUDA context)"
    return None


def unsupported(cc: int, head_dim: int) -> str | None:
    """Why the triton variant cannot run on compute capability ``cc`` with ``head_dim``, or None."""
    reason = unavailable_reason()
    if reason:
        return reason
    if cc < MIN_CC:
        return f"triton needs sm_{MIN_CC}+ (Triton's supported GPUs), not sm_{cc}"
    if head_dim not in HEAD_DIMS:
        return f"head_dim {head_dim} is not supported by the triton kernel (64 or 128)"
    return None


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def kernel_module():
    """kernels/triton_pa.py as a module (Triton decides at import whether it interprets, so one
    module per TRITON_INTERPRET setting)."""
    key = interpreting()
    mod = _modules.get(key)
    if mod is None:
        name = f"pa_bench_triton_pa{'_interp' if key else ''}"
        spec = importlib.util.spec_from_file_location(name, KERNEL_DIR / KERNEL_FILE)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod          # Triton reads the kernel's source through its module
        spec.loader.exec_module(mod)
        _modules[key] = mod
    return mod


def tile_keys() -> int:
    """Keys per tile of the kernel (read from the source, without importing Triton)."""
    for line in (KERNEL_DIR / KERNEL_FILE).read_text().splitlines():
        if line.startswith("BLOCK_N = "):
            return int(line.split("=")[1].split("#")[0])
    raise RuntimeError(f"{KERNEL_FILE} defines no BLOCK_N")


def source_hash() -> str:
    return hashlib.sha256((KERNEL_DIR / KERNEL_FILE).read_bytes()).hexdigest()[:16]


def meta() -> dict:
    """What meta.json records of the triton variant: versions and the kernel's source hash (each
    shape's configuration is in the backend's launches)."""
    out = {"source": f"kernels/{KERNEL_FILE}", "source_sha256": source_hash(), "block_n": tile_keys()}
    reason = unavailable_reason(need_gpu=False)
    if reason:
        return out | {"unavailable": reason}
    import torch
    import triton

    return out | {"triton": triton.__version__, "torch": torch.__version__}


def on_timed_stream(fn):
    """``fn`` as it must be called to run on the stream pa-bench times (CuPy's current stream):
    ``fn`` itself where torch's current stream is that stream (the default: both are the legacy
    default stream), else ``fn`` inside ``torch.cuda.stream`` of it. Triton and torch launch on
    torch's current stream."""
    try:
        import cupy as cp
        import torch

        ptr = cp.cuda.get_current_stream().ptr
        if not torch.cuda.is_available() or ptr == torch.cuda.current_stream().cuda_stream:
            return fn
        stream = torch.cuda.ExternalStream(ptr)
    except Exception:
        return fn

    def run():
        with torch.cuda.stream(stream):
            fn()

    return run


class TritonVariant:
    """One shape's tensors in torch and the planned launch of the triton kernel.

    ``arrays``: the cuda backend's device buffers (q, k, v, ks, vs, table as CuPy arrays; contiguous
    scales may have padded rows), viewed without a copy; None: copies of ``inputs``' host arrays on
    ``device`` (the CPU for the interpreter)."""

    def __init__(self, inputs, arrays: dict | None = None, device: str = "cuda", sm_count: int | None = None,
                 config=None):
        import torch

        from pa_bench.numerics.model import segment_keys

        self.torch = torch
        self.mod = kernel_module()
        pb = inputs.problem
        self.problem = pb
        if arrays is None:
            arrays = _host_arrays(inputs)
        dev = torch.device(device)
        self.t = {name: torch.as_tensor(a, device=dev) for name, a in arrays.items()}
        paged = pb.layout == "paged"
        kv_stride = 0 if paged else int(self.t["k"].shape[1])
        scale_stride = 0 if paged else int(self.t["ks"].shape[-1])
        group = pb.heads_q // pb.heads_kv
        self.config = config or self.mod.default_config(pb.head_dim, group, pb.queries, pb.heads_q, sm_count)
        self.launch = self.mod.plan_launch(
            queries=pb.queries, context=pb.context, heads_q=pb.heads_q, heads_kv=pb.heads_kv,
            head_dim=pb.head_dim, paged=paged, page=pb.page, kv_stride=kv_stride, scale_stride=scale_stride,
            seg_keys=segment_keys(pb.context), qk_scale_log2=inputs.qk_scale_log2, p_scale=inputs.p_scale,
            config=self.config)

    def launcher(self, out):
        """A callable launching the kernel once into ``out`` (a CuPy array or a torch tensor whose
        first Hq*Nq*D elements are the output)."""
        t = self.t
        out_t = out if isinstance(out, self.torch.Tensor) else self.torch.as_tensor(out, device=t["q"].device)
        run = self.mod.launcher(self.launch, t["q"], t["k"], t["v"], t["ks"], t["vs"], t["table"], out_t)
        return on_timed_stream(run) if out_t.is_cuda else run

    def describe(self) -> dict:
        pb = self.problem
        return {"variant": VARIANT, "shape": pb.shape.label, **self.launch.describe()}


def _host_arrays(inputs) -> dict:
    """The kernel's inputs from the host arrays: the page pool with its table, or contiguous K/V."""
    import numpy as np

    if inputs.problem.layout == "paged":
        pk = inputs.paged
        return {"q": inputs.q, "k": pk.k_pool, "v": pk.v_pool, "ks": pk.k_scale_pool, "vs": pk.v_scale_pool,
                "table": pk.page_table.astype(np.int32)}
    return {"q": inputs.q, "k": np.ascontiguousarray(inputs.k_i8), "v": np.ascontiguousarray(inputs.v_i8),
            "ks": np.ascontiguousarray(inputs.k_scale, dtype=np.float32),
            "vs": np.ascontiguousarray(inputs.v_scale, dtype=np.float32),
            "table": np.zeros(1, dtype=np.int32)}


__all__ = ["VARIANT", "unavailable_reason", "unsupported", "kernel_module", "tile_keys", "source_hash", "meta",
           "on_timed_stream", "TritonVariant", "MIN_CC"]
