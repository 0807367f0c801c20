"""A worked example of a pa-bench plug-in: one peer, ``toy-f32``.

It computes the chunk's attention in float32 on the dequantised int8 K/V, one query head at a
time, with every score materialised: NumPy on the numpy backend, CuPy on the cuda backend (where
its call is timed like any kernel). It is a toy (dense scores, no tiling), small shapes only.

    pa-bench run configs/smoke.yaml --backend numpy --plugin examples/plugin_peer.py \\
        --variant v1,toy-f32

A peer of another library looks the same: prepare that library's tensors in ``__init__``, and
have ``call()`` return a closure that launches its attention and nothing else.
"""

from __future__ import annotations

import numpy as np

from pa_bench.peers import CannotRun, Peer, register_peer

#: Query x key score pairs (all heads) the toy materialises at most.
MAX_SCORES = 1 << 28


@register_peer
class ToyFloat32(Peer):
    name = "toy-f32"
    summary = "plug-in example: float32 attention on the dequantised K/V (NumPy or CuPy), dense"
    backends = ("numpy", "cuda")

    @classmethod
    def unavailable(cls, problem):
        if problem.heads_q * problem.queries * problem.keys > MAX_SCORES:
            return f"toy-f32 materialises every score: at most {MAX_SCORES:,} query x key pairs"
        return None

    def __init__(self, inputs, device="cuda"):
        super().__init__(inputs, device)
        if device == "cuda":
            import cupy as xp
        else:
            xp = np
        self.xp = xp
        pb = inputs.problem
        if pb.heads_q % pb.heads_kv:
            raise CannotRun("toy-f32 needs heads_kv to divide heads_q")
        self.q = xp.asarray(inputs.q, dtype=xp.float32)
        self.k = xp.asarray(inputs.k_i8, dtype=xp.float32) * xp.asarray(inputs.k_scale)[..., None]
        self.v = xp.asarray(inputs.v_i8, dtype=xp.float32) * xp.asarray(inputs.v_scale)[..., None]
        rows = xp.arange(pb.queries)[:, None]
        keys = xp.arange(pb.keys)[None, :]
        self.visible = keys <= rows + pb.context            # bottom-right causal
        self.out = None

    def call(self):
        xp, q, k, v, visible = self.xp, self.q, self.k, self.v, self.visible
        pb = self.inputs.problem
        group, scale = pb.heads_q // pb.heads_kv, float(pb.softmax_scale)

        def run():
            out = xp.empty_like(q)
            for h in range(pb.heads_q):
                s = (q[h] @ k[h // group].T) * scale
                s = xp.where(visible, s, -xp.inf)
                p = xp.exp(s - s.max(axis=1, keepdims=True))
                out[h] = (p @ v[h // group]) / p.sum(axis=1, keepdims=True)
            self.out = out

        return run

    def output(self):
        self.call()()
        out = self.out
        return np.asarray(out.get() if hasattr(out, "get") else out, dtype=np.float32)

    def impl(self):
        return "cupy" if self.xp is not np else "numpy"
