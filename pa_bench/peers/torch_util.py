"""What the torch peers share: torch's availability, one shape's tensors on the GPU (made once per
placement of the inputs, for every torch peer of the shape), the stream pa-bench times, and the
kernels a call launches."""

from __future__ import annotations

import weakref
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator


def torch_reason() -> str | None:
    """Why torch peers cannot run here (one line), or None."""
    try:
        import torch
    except Exception:
        return "PyTorch is not installed (the torch peers need it: pip install torch)"
    if not torch.cuda.is_available():
        return "PyTorch sees no CUDA GPU"
    return None


@dataclass
class TorchTensors:
    """One shape's inputs as torch CUDA tensors with a batch dimension of 1: Q fp16 [1, Hq, Nq, D];
    the int8 K/V [1, Hkv, Nk, D] and their scales as fp16 [1, Hkv, Nk, 1]; fp16 K/V = int8 * scale."""

    q: Any
    k_i8: Any
    v_i8: Any
    ks: Any
    vs: Any
    k16: Any
    v16: Any


_cache: dict[str, Any] = {"inputs": None, "tensors": {}}   # tensors per placement
_placement = [0]   # the placement of the inputs that peers constructed now get


@contextmanager
def placement(index: int) -> Iterator[None]:
    """Peers constructed inside get their own copy ``index`` of the shape's tensors: a placement
    of the inputs elsewhere in GPU memory (the backend times every variant on several)."""
    before = _placement[0]
    _placement[0] = int(index)
    try:
        yield
    finally:
        _placement[0] = before


def shared_tensors(inputs) -> TorchTensors:
    """The torch tensors of ``inputs`` on the current placement, uploaded once while these inputs
    are the current shape's."""
    owner = _cache["inputs"]
    if owner is None or owner() is not inputs:
        _cache["inputs"], _cache["tensors"] = weakref.ref(inputs), {}
    held = _cache["tensors"].get(_placement[0])
    if held is not None:
        return held
    import torch

    dev = torch.device("cuda")

    def up(a):
        return torch.from_numpy(a).to(dev).unsqueeze(0).contiguous()

    ks = up(inputs.k_scale).to(torch.float16).unsqueeze(-1)
    vs = up(inputs.v_scale).to(torch.float16).unsqueeze(-1)
    k_i8, v_i8 = up(inputs.k_i8), up(inputs.v_i8)
    tensors = TorchTensors(q=up(inputs.q), k_i8=k_i8, v_i8=v_i8, ks=ks, vs=vs,
                           k16=k_i8.to(torch.float16) * ks, v16=v_i8.to(torch.float16) * vs)
    _cache["tensors"][_placement[0]] = tensors
    return tensors


def release(placement_index: int | None = None) -> None:
    """Drop the cached tensors (the backend calls it when a shape is done), or one placement's."""
    if placement_index is None:
        _cache["inputs"], _cache["tensors"] = None, {}
    else:
        _cache["tensors"].pop(placement_index, None)


def on_timed_stream(fn: Callable[[], None]) -> Callable[[], None]:
    """``fn`` as it must be called to enqueue on the stream pa-bench times (CuPy's current stream):
    ``fn`` itself where torch's current stream is that stream (the default: both are the legacy
    default stream), else ``fn`` inside ``torch.cuda.stream`` of it."""
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


def kernels_of(fn: Callable[[], None]) -> list[str]:
    """The names of the GPU kernels one call of ``fn`` launches (torch's profiler, one call after a
    warm one), in launch order and each once; [] where the profiler cannot run."""
    import torch

    try:
        from torch.autograd import DeviceType
        from torch.profiler import ProfilerActivity, profile

        fn()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        names = [e.name for e in prof.events() if e.device_type == DeviceType.CUDA]
    except Exception:
        return []
    kernels = [n for n in names if not n.lower().startswith(("memcpy", "memset"))]
    return list(dict.fromkeys(kernels))


__all__ = ["torch_reason", "TorchTensors", "shared_tensors", "release", "on_timed_stream", "kernels_of"]
