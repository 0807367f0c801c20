"""Peers: what a user would run instead — PyTorch's scaled_dot_product_attention (flash).

``torch-sdpa`` times the flash backend on fp16 K/V that were dequantised beforehand (GQA,
bottom-right causal alignment: query i sees keys j <= ctx + i). ``torch-sdpa+dequant`` times
the int8 -> fp16 dequantisation of the whole K/V too, as part of every launch. Peers read the
contiguous [Hkv, Nk, D] layout (torch has no page-table gather); they are timing-only.
"""

from __future__ import annotations


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
        self.out = self.attend(self.k16, self.v16)   # fails here, once, if flash cannot run this shape

    def attend(self, k, v):
        torch = self.torch
        from torch.nn.attention import sdpa_kernel

        with sdpa_kernel(self.backend):
            if self._mask is None:
                return torch.nn.functional.scaled_dot_product_attention(
                    self.q, k, v, is_causal=True, scale=self.scale, enable_gqa=self.gqa)
            return torch.nn.functional.scaled_dot_product_attention(
                self.q, k, v, attn_mask=self._mask, scale=self.scale, enable_gqa=self.gqa)

    def launcher(self, dequant: bool):
        torch = self.torch

        if dequant:
            def run():
                k = self.k_i8.to(torch.float16) * self.ks
                v = self.v_i8.to(torch.float16) * self.vs
                self.out = self.attend(k, v)
        else:
            def run():
                self.out = self.attend(self.k16, self.v16)
        return run

    def output(self):
        """The last output as a NumPy float32 [Hq, Nq, D] array."""
        return self.out[0].float().cpu().numpy()
