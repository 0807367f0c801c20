"""PyTorch's ``scaled_dot_product_attention`` as peers: as a user calls it, and pinned.

- ``torch-sdpa``: the call as a user writes it, nothing pinned; torch picks the kernel (on an
  H200 with torch 2.11, cuDNN's for a square causal chunk and flash otherwise). The ``impl``
  column names what it picked, read once per shape from torch's profiler outside the timing.
- ``torch-sdpa-flash`` / ``torch-sdpa-cudnn``: one backend pinned (``sdpa_kernel``); a shape the
  backend refuses is a row skipped with torch's reason.
- ``torch-sdpa+dequant``: the default call, with the int8 -> fp16 dequantisation of the whole
  K/V inside every call.

All on fp16 K/V (``int8 * scale`` in fp16, dequantised once per shape), GQA (``enable_gqa``),
bottom-right causal (query i sees keys j <= ctx + i: ``causal_lower_right`` where the chunk
has earlier context, ``is_causal`` for a first chunk). Peers read the contiguous [Hkv, Nk, D]
layout: torch has no page-table gather.
"""

from __future__ import annotations

import contextlib
import os

from pa_bench.fmt import first_line
from pa_bench.peers import CannotRun, Peer
from pa_bench.peers.torch_util import kernels_of, shared_tensors, torch_reason, on_timed_stream

#: Set PA_BENCH_PEER_PROFILE=0 to skip the profiler pass that names a peer's kernel (e.g. under
#: Nsight Compute, which cannot share the GPU's profiling with torch's profiler).
PROFILE_ENV = "PA_BENCH_PEER_PROFILE"


def classify(kernel_names: list[str]) -> str | None:
    """The SDPA backend a call's kernels belong to: cudnn, flash, efficient or math."""
    low = [k.lower() for k in kernel_names]
    if any("cudnn" in k for k in low):
        return "cudnn"
    if any("flash" in k for k in low):
        return "flash"
    if any("fmha" in k or "efficient" in k or "cutlass" in k for k in low):
        return "efficient"
    return "math" if low else None


class _Sdpa(Peer):
    """One shape's tensors and one SDPA call; subclasses pin a backend or add the dequantisation."""

    pin: str | None = None       # a torch.nn.attention.SDPBackend member name, or None
    dequant: bool = False

    @classmethod
    def unavailable(cls, problem) -> str | None:
        reason = torch_reason()
        if reason:
            return reason
        try:
            from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: F401
        except Exception:
            import torch

            return f"torch {torch.__version__} has no torch.nn.attention.sdpa_kernel"
        if cls.pin is not None and not hasattr(SDPBackend, cls.pin):
            return f"this torch has no SDPA backend {cls.pin}"
        return None

    def __init__(self, inputs, device: str = "cuda"):
        super().__init__(inputs, device)
        import torch

        self.torch = torch
        pb = inputs.problem
        t = shared_tensors(inputs)
        self.q, self.k16, self.v16 = t.q, t.k16, t.v16
        self.k_i8, self.v_i8, self.ks, self.vs = t.k_i8, t.v_i8, t.ks, t.vs
        self.scale = float(pb.softmax_scale)
        self.gqa = pb.heads_q != pb.heads_kv
        self.mask = None
        if pb.queries != pb.keys:
            from torch.nn.attention.bias import causal_lower_right

            self.mask = causal_lower_right(pb.queries, pb.keys)
        self.out = None
        self._kernels: list[str] = []
        try:
            self.call()()                  # fails here, once, if the backend refuses the shape
            torch.cuda.synchronize()
        except Exception as exc:
            what = f"{self.pin.lower().replace('_attention', '')} backend" if self.pin else "sdpa"
            raise CannotRun(f"{self.name}: the {what} cannot run this shape "
                            f"({type(exc).__name__}: {first_line(exc)[:160]})") from None
        if os.environ.get(PROFILE_ENV, "1") != "0":
            self._kernels = kernels_of(self.call())

    def _context(self):
        if self.pin is None:
            return contextlib.nullcontext()
        from torch.nn.attention import SDPBackend, sdpa_kernel

        return sdpa_kernel(getattr(SDPBackend, self.pin))

    def call(self):
        torch = self.torch
        sdpa = torch.nn.functional.scaled_dot_product_attention
        q, mask, scale, gqa, context = self.q, self.mask, self.scale, self.gqa, self._context
        if self.dequant:
            k_i8, v_i8, ks, vs, f16 = self.k_i8, self.v_i8, self.ks, self.vs, torch.float16

            def kv():
                return k_i8.to(f16) * ks, v_i8.to(f16) * vs
        else:
            k16, v16 = self.k16, self.v16

            def kv():
                return k16, v16

        def run():
            k, v = kv()
            with context():
                if mask is None:
                    self.out = sdpa(q, k, v, is_causal=True, scale=scale, enable_gqa=gqa)
                else:
                    self.out = sdpa(q, k, v, attn_mask=mask, scale=scale, enable_gqa=gqa)

        return on_timed_stream(run)

    def output(self):
        self.call()()
        self.torch.cuda.synchronize()
        return self.out[0].float().cpu().numpy()

    def impl(self) -> str | None:
        return classify(self._kernels)

    def describe(self) -> dict:
        return {"variant": self.name, "shape": self.inputs.problem.shape.label, "impl": self.impl(),
                "kernels": self._kernels, "pinned": self.pin,
                "causal": "causal_lower_right" if self.mask is not None else "is_causal"}


class SdpaDefault(_Sdpa):
    name = "torch-sdpa"
    summary = "PyTorch SDPA as a user calls it (torch picks the kernel)"


class SdpaFlash(_Sdpa):
    name = "torch-sdpa-flash"
    summary = "PyTorch SDPA pinned to flash"
    pin = "FLASH_ATTENTION"


class SdpaCudnn(_Sdpa):
    name = "torch-sdpa-cudnn"
    summary = "PyTorch SDPA pinned to cuDNN"
    pin = "CUDNN_ATTENTION"


class SdpaDequant(_Sdpa):
    name = "torch-sdpa+dequant"
    summary = "PyTorch SDPA with the int8 -> fp16 dequantisation in every call"
    dequant = True


__all__ = ["SdpaDefault", "SdpaFlash", "SdpaCudnn", "SdpaDequant", "classify", "PROFILE_ENV"]
