"""Peers: what a user would run instead — PyTorch's scaled_dot_product_attention (flash).

``torch-sdpa`` times the flash backend on fp16 K/V that were dequantised beforehand (GQA,
bottom-right causal alignment: query i sees keys j <= ctx + i). ``torch-sdpa+dequant`` times
the int8 -> fp16 dequantisation of the whole K/V too, as part of every call. Peers read the
contiguous [Hkv, Nk, D] layout (torch has no page-table gather).

Everything that needs no GPU work — the causal mask object, the tensors' views, the choice of
the flash backend (``session()``, entered once around all samples) — is built once, so a
call enqueues the GPU work and nothing else. Peers run on the stream that pa-bench times
(CuPy's current stream): torch is pointed at it once, in ``session()``.

A peer's output is checked against the same FP64 reference as the kernels (max abs error,
relative L2, NaN/Inf), for information: a peer has no numerics model, so it never passes or
fails parity.
"""

from __future__ import annotations

import contextlib


def unavailable_reason() -> str | None:
    """Why the torch peers cannot run here, or None."""
    try:
        import torch
    except Exception:
        return "PyTorch is not installed (the torch-sdpa peers need it)"
    if not torch.cuda.is_available():
        return "PyTorch sees no CUDA GPU"
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: F401
    except Exception:
        return f"torch {torch.__version__} has no torch.nn.attention.sdpa_kernel"
    return None


class TorchPeer:
    """One shape's tensors in torch, and launchers for the two peer variants."""

    def __init__(self, inputs):
        import torch
        from torch.nn.attention import SDPBackend

        self.torch = torch
        self.backend = SDPBackend.FLASH_ATTENTION
        pb = inputs.problem
        dev = torch.device("cuda")
        self.scale = float(pb.softmax_scale)
        self.q = torch.from_numpy(inputs.q).to(dev).unsqueeze(0).contiguous()
        self.k_i8 = torch.from_numpy(inputs.k_i8).to(dev).unsqueeze(0).contiguous()
        self.v_i8 = torch.from_numpy(inputs.v_i8).to(dev).unsqueeze(0).contiguous()
        self.ks = torch.from_numpy(inputs.k_scale).to(dev).to(torch.float16).unsqueeze(0).unsqueeze(-1)
        self.vs = torch.from_numpy(inputs.v_scale).to(dev).to(torch.float16).unsqueeze(0).unsqueeze(-1)
        self.k16 = self.k_i8.to(torch.float16) * self.ks
        self.v16 = self.v_i8.to(torch.float16) * self.vs
        self.nq, self.nk = pb.queries, pb.keys
        self.gqa = pb.heads_q != pb.heads_kv
        self.note = "flash backend, enable_gqa, causal_lower_right" if self.nq != self.nk else "flash backend, enable_gqa, is_causal"
        self._mask = None
        if self.nq != self.nk:
            from torch.nn.attention.bias import causal_lower_right

            self._mask = causal_lower_right(self.nq, self.nk)
        self._sdpa = torch.nn.functional.scaled_dot_product_attention
        with self.session():
            self.out = self.attend(self.k16, self.v16)   # fails here, once, if flash cannot run this shape
        torch.cuda.synchronize()

    @contextlib.contextmanager
    def session(self):
        """The flash backend, on the stream pa-bench times: enter once around many calls."""
        torch = self.torch
        from torch.nn.attention import sdpa_kernel

        stream = _timed_stream(torch)
        with contextlib.ExitStack() as stack:
            if stream is not None:
                stack.enter_context(torch.cuda.stream(stream))
            stack.enter_context(sdpa_kernel(self.backend))
            yield self

    def attend(self, k, v):
        if self._mask is None:
            return self._sdpa(self.q, k, v, is_causal=True, scale=self.scale, enable_gqa=self.gqa)
        return self._sdpa(self.q, k, v, attn_mask=self._mask, scale=self.scale, enable_gqa=self.gqa)

    def launcher(self, dequant: bool):
        """One call: the GPU work of the peer and nothing else (call it inside ``session()``)."""
        torch = self.torch
        k_i8, v_i8, ks, vs, k16, v16, attend = self.k_i8, self.v_i8, self.ks, self.vs, self.k16, self.v16, self.attend
        f16 = torch.float16

        if dequant:
            def run():
                self.out = attend(k_i8.to(f16) * ks, v_i8.to(f16) * vs)
        else:
            def run():
                self.out = attend(k16, v16)
        return run

    def output(self, dequant: bool = False):
        """One fresh call's output as a NumPy float32 [Hq, Nq, D] array."""
        with self.session():
            self.launcher(dequant)()
        return self.out[0].float().cpu().numpy()


def _timed_stream(torch):
    """CuPy's current stream as a torch stream (None when CuPy is absent or it is torch's own)."""
    try:
        import cupy as cp
    except Exception:
        return None
    ptr = cp.cuda.get_current_stream().ptr
    if ptr == torch.cuda.current_stream().cuda_stream:
        return None
    return torch.cuda.ExternalStream(ptr)
