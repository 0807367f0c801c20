"""Peer ``torch-flex``: PyTorch's flex_attention, compiled, on fp16 K/V dequantised beforehand.

What a PyTorch user reaches for when SDPA does not fit: ``flex_attention`` compiled with
``torch.compile`` (Inductor generates a Triton kernel), with a block mask for bottom-right causal
alignment (query i sees keys j <= ctx + i) and ``enable_gqa``. Everything is built once per shape,
outside the timing: the fp16 K/V (shared with the sdpa peers), the block mask, and the compiled
function (the first call compiles). The call only calls it. Like the other torch peers it reads
the contiguous [Hkv, Nk, D] layout.

Dynamo keeps a bounded number of compiled graphs per function (``cache_size_limit``); a sweep has
more shapes than that, so each new peer resets Dynamo before it compiles its own graph.
"""

from __future__ import annotations

from pa_bench.fmt import first_line
from pa_bench.peers import CannotRun, Peer
from pa_bench.peers.torch_util import on_timed_stream, shared_tensors, torch_reason

#: torch.compile's mode for the peer (recorded in meta.json); None is torch's default.
COMPILE_MODE: str | None = None


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


_shape: dict = {}   # the shape last prepared: its key, block mask and compiled flex_attention


class FlexPeer(Peer):
    """One shape's tensors, block mask and compiled flex_attention."""

    name = "torch-flex"
    summary = "PyTorch flex_attention, compiled"
    compiles_ahead = True          # torch.compile's caches on disk: built ahead (pa_bench.backends.compile_ahead)

    @classmethod
    def unavailable(cls, problem) -> str | None:
        reason = torch_reason()
        if reason:
            return reason
        import inspect

        import torch
        try:
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

    def __init__(self, inputs, device: str = "cuda", compiled: bool = True):
        super().__init__(inputs, device)
        import torch
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        self.torch = torch
        pb = inputs.problem
        ctx = int(pb.context)
        self.scale = float(pb.softmax_scale)
        t = shared_tensors(inputs)
        self.q, self.k16, self.v16 = t.q, t.k16, t.v16
        # one block mask and one compiled function per shape, shared by the peers of its
        # placements of the inputs (the compiled graph guards on shapes, not addresses)
        key = (repr(pb), str(self.q.device), compiled)
        if _shape.get("key") != key:
            def bottom_right_causal(b, h, q_idx, kv_idx):
                return kv_idx <= q_idx + ctx

            mask = create_block_mask(bottom_right_causal, B=None, H=None, Q_LEN=pb.queries,
                                     KV_LEN=pb.keys, device=self.q.device)
            fn = flex_attention     # eager: the CPU test of the mask and the layout only
            if compiled:
                torch._dynamo.reset()      # a fresh graph cache per shape (see the module docstring)
                kwargs = {"dynamic": False} | ({"mode": COMPILE_MODE} if COMPILE_MODE else {})
                fn = torch.compile(flex_attention, **kwargs)
            _shape.clear()
            _shape.update(key=key, mask=mask, fn=fn)
        self.block_mask, self.fn = _shape["mask"], _shape["fn"]
        try:
            self.out = self._call()        # compiles here, once
            torch.cuda.synchronize()
        except Exception as exc:
            raise CannotRun(f"torch-flex cannot run this shape ({type(exc).__name__}: "
                            f"{first_line(exc)[:160]})") from None

    def _call(self):
        return self.fn(self.q, self.k16, self.v16, block_mask=self.block_mask, scale=self.scale,
                       enable_gqa=True)

    def call(self):
        fn, q, k, v, mask, scale = self.fn, self.q, self.k16, self.v16, self.block_mask, self.scale

        def run():
            self.out = fn(q, k, v, block_mask=mask, scale=scale, enable_gqa=True)

        return on_timed_stream(run)

    def output(self):
        self.call()()
        self.torch.cuda.synchronize()
        return self.out[0].float().cpu().numpy()

    def impl(self) -> str | None:
        return "inductor-triton"

    def describe(self) -> dict:
        return {"variant": self.name, "shape": self.inputs.problem.shape.label, **meta()}


__all__ = ["FlexPeer", "meta", "COMPILE_MODE"]
