"""Peer ``torch-flex``: PyTorch's flex_attention, compiled, on fp16 K/V dequantised beforehand.

What a PyTorch user reaches for when SDPA does not fit: ``flex_attention`` compiled with
``torch.compile`` (Inductor generates a Triton kernel), with a block mask for bottom-right causal
alignment (query i sees keys j <= ctx + i) and ``enable_gqa``. Everything is built once per shape,
outside the timing: the fp16 K/V (``int8 * scale`` in fp16, as the torch-sdpa peer does), the
block mask, and the compiled function (the first call compiles). The launcher only calls it.
Like the other peers it reads the contiguous [Hkv, Nk, D] layout and is timing-only.

Dynamo keeps a bounded number of compiled graphs per function (``cache_size_limit``); a sweep has
more shapes than that, so each new peer resets Dynamo before it compiles its own graph.
"""

from __future__ import annotations

VARIANT = "torch-flex"   # its name in pa_bench.variants
#: torch.compile's mode for the peer (recorded in meta.json); None is torch's default.
COMPILE_MODE: str | None = None


def unavailable_reason() -> str | None:
    """Why the torch-flex peer cannot run here, or None."""
    try:
        import torch
    except Exception:
        return "PyTorch is not installed (the torch-flex peer needs it)"
    if not torch.cuda.is_available():
        return "PyTorch sees no CUDA GPU"
    try:
        import inspect

        from torch.nn.attention.flex_attention import create_block_mask, flex_attention  # noqa: F401
    except Exception:
        return f"torch {torch.__version__} has no torch.nn.attention.flex_attention"
    if "enable_gqa" not in inspect.signature(flex_attention).parameters:
        return f"torch {torch.__version__}'s flex_attention has no enable_gqa"
    try:
        import triton  # noqa: F401  (Inductor compiles flex_attention to Triton)
    except Exception:
        return "Triton is not installed (torch.compile of flex_attention needs it)"
    return None


def meta() -> dict:
    """torch version and compile settings, for meta.json."""
    out = {"compile_mode": COMPILE_MODE or "default", "dynamic": False,
           "kv": "fp16, dequantised beforehand (int8 * scale in fp16)", "mask": "block mask, kv <= q + ctx",
           "enable_gqa": True}
    try:
        import torch
    except Exception:
        return out | {"unavailable": "PyTorch is not installed"}
    return out | {"torch": torch.__version__}


class FlexPeer:
    """One shape's tensors, block mask and compiled flex_attention."""

    def __init__(self, inputs, device: str = "cuda", compiled: bool = True):
        import torch
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        self.torch = torch
        pb = inputs.problem
        dev = torch.device(device)
        ctx = int(pb.context)
        self.scale = float(pb.softmax_scale)
        self.q = torch.from_numpy(inputs.q).to(dev).unsqueeze(0).contiguous()
        ks = torch.from_numpy(inputs.k_scale).to(dev).to(torch.float16).unsqueeze(-1)
        vs = torch.from_numpy(inputs.v_scale).to(dev).to(torch.float16).unsqueeze(-1)
        self.k16 = (torch.from_numpy(inputs.k_i8).to(dev).to(torch.float16) * ks).unsqueeze(0).contiguous()
        self.v16 = (torch.from_numpy(inputs.v_i8).to(dev).to(torch.float16) * vs).unsqueeze(0).contiguous()

        def bottom_right_causal(b, h, q_idx, kv_idx):
            return kv_idx <= q_idx + ctx

        self.block_mask = create_block_mask(bottom_right_causal, B=None, H=None, Q_LEN=pb.queries,
                                            KV_LEN=pb.keys, device=dev)
        self.fn = flex_attention        # eager: the CPU test of the mask and the layout only
        if compiled:
            torch._dynamo.reset()      # a fresh graph cache per shape (see the module docstring)
            kwargs = {"dynamic": False} | ({"mode": COMPILE_MODE} if COMPILE_MODE else {})
            self.fn = torch.compile(flex_attention, **kwargs)
        self.out = self._call()        # compiles here, once; fails here if flex cannot run the shape
        if self.q.is_cuda:
            torch.cuda.synchronize()

    def _call(self):
        return self.fn(self.q, self.k16, self.v16, block_mask=self.block_mask, scale=self.scale,
                       enable_gqa=True)

    def launcher(self):
        """One call: the compiled function on the prepared arguments, on the stream pa-bench times."""
        from pa_bench.backends.triton_runner import on_timed_stream

        fn, q, k, v, mask, scale = self.fn, self.q, self.k16, self.v16, self.block_mask, self.scale

        def run():
            self.out = fn(q, k, v, block_mask=mask, scale=scale, enable_gqa=True)

        return on_timed_stream(run) if q.is_cuda else run

    def output(self, fresh: bool = True):
        """One fresh call's output (or the last one's) as a NumPy float32 [Hq, Nq, D] array."""
        if fresh:
            self.launcher()()
            if self.q.is_cuda:
                self.torch.cuda.synchronize()   # the call may have run on pa-bench's stream
        return self.out[0].float().cpu().numpy()


__all__ = ["VARIANT", "unavailable_reason", "meta", "FlexPeer", "COMPILE_MODE"]
