"""Backend ``numpy``: the numerics model as the "kernel", and a NumPy FP64 reference.

It lets everything but timing run on a machine without a GPU: ``compute`` returns the
output of :func:`pa_bench.numerics.model.model_attention` with the variant's tile size and key split, so its
kernel/model error ratio is 1 by construction. A peer that runs on the CPU (``backends`` has
"numpy", ``pa_bench.peers``) gets its output checked against FP64; nothing is timed.
"""

from __future__ import annotations

import platform

import numpy as np

from pa_bench import variants as registry
from pa_bench.backends.base import KernelOutput
from pa_bench.numerics.model import pv_chain_keys, tile_keys

# The determinism check runs the model a second time; do it only while that is cheap:
# at most this many (query head x row x visible key) score elements (about a second).
DETERMINISM_MAX_WORK = 1 << 25


def _model_work(inputs, rows) -> int:
    """Score elements one model run computes: query heads x rows x keys they see."""
    hq, nq, _ = inputs.q.shape
    ctx = inputs.k_i8.shape[1] - nq
    if rows is None:
        return hq * (nq * ctx + nq * (nq + 1) // 2)
    rows = np.asarray(rows)
    return int(hq * (len(rows) * ctx + int(rows.sum()) + len(rows)))


class NumpyBackend:
    """Model outputs and an FP64 NumPy reference; no timing."""

    name = "numpy"

    def __init__(self, check_determinism: bool = True) -> None:
        self.check_determinism = check_determinism
        # v2 and v2t share a tile size, so their model outputs are the same: compute once.
        self._cache: dict[tuple, KernelOutput] = {}
        self._cache_owner = None  # keeps id(prepared) in the cache key unique
        self._impl: dict[str, str | None] = {}

    def describe(self) -> dict:
        return {
            "backend": self.name,
            "gpu": "cpu",
            "arch": "cpu",
            "cpu": platform.processor() or platform.machine(),
            "numpy": np.__version__,
            "mma": "model",
        }

    def meta(self) -> dict:
        return {
            "backend": self.name,
            "kernels": "numerics model (pa_bench.numerics.model), no CUDA kernels",
            "tile_keys": {v: tile_keys(v) for v in registry.names("kernel")},
            "mma": "none (NumPy model)",
        }

    def unsupported_parity(self, variant: str, problem) -> str | None:
        entry = registry.find(variant)
        if entry is None:
            return f"unknown variant {variant!r}"
        if entry.is_peer:
            try:
                cls = entry.resolve_runner()
                if "numpy" not in tuple(getattr(cls, "backends", ("cuda",))):
                    return f"{variant} runs on the cuda backend only"
                return cls.unavailable(problem)
            except Exception as exc:
                return f"{variant} cannot say whether it runs here: {type(exc).__name__}: {exc}"
        return None

    def unsupported_timing(self, variant: str, problem) -> str | None:
        return "the numpy backend does not time kernels (needs CuPy and a GPU)"

    def prepare(self, inputs):
        return inputs

    def split_keys(self, variant: str, problem) -> int:
        """Where ``variant``'s arithmetic splits the keys (pa_bench.numerics.model.split_keys)."""
        from pa_bench.numerics.model import split_keys

        return split_keys(variant, problem.queries, problem.context, problem.heads_q)

    def segment_keys(self, variant: str, problem) -> int:
        """Keys per key segment of ``variant``'s arithmetic (pa_bench.numerics.model.segment_keys)."""
        from pa_bench.numerics.model import segment_keys

        return segment_keys(problem.context, variant, problem.queries, problem.heads_q, problem.heads_kv)

    def compute(self, prepared, variant: str, rows: np.ndarray | None,
                check_determinism: bool | None = None) -> KernelOutput:
        """The model's output for ``variant``'s tile size on ``rows`` (None: every row).

        Determinism (two runs bitwise equal) is checked when asked and cheap, else None.
        """
        from pa_bench.numerics.model import model_attention

        if registry.is_peer(variant):
            return self._compute_peer(prepared, variant, rows, check_determinism)
        tile = tile_keys(variant)
        split = self.split_keys(variant, prepared.problem)
        chain = pv_chain_keys(variant)
        seg = self.segment_keys(variant, prepared.problem)
        check = self.check_determinism if check_determinism is None else check_determinism
        key = (id(prepared), tile, split, chain, seg, None if rows is None else np.asarray(rows).tobytes(), check)
        hit = self._cache.get(key)
        if hit is not None:
            return KernelOutput(out=hit.out.copy(), canary_ok=True, deterministic=hit.deterministic)
        kw = dict(split_keys=split, pv_chain_keys=chain, segment_keys=seg)
        out = np.asarray(model_attention(prepared, tile, rows, **kw), dtype=np.float32)
        deterministic = None
        if check and _model_work(prepared, rows) <= DETERMINISM_MAX_WORK:
            again = np.asarray(model_attention(prepared, tile, rows, **kw), dtype=np.float32)
            deterministic = bool(again.tobytes() == out.tobytes())
        result = KernelOutput(out=out, canary_ok=True, deterministic=deterministic)
        self._cache = {key: result}  # one shape's outputs at a time
        self._cache_owner = prepared
        return result

    def _compute_peer(self, inputs, variant: str, rows, check_determinism) -> KernelOutput:
        """A CPU peer's output (pa_bench.peers), twice when determinism is checked."""
        from pa_bench.errors import PaBenchError
        from pa_bench.peers import CannotRun

        try:
            peer = registry.get(variant).resolve_runner()(inputs, device="cpu")
            out = np.asarray(peer.output(), dtype=np.float32)
            check = self.check_determinism if check_determinism is None else check_determinism
            deterministic = bool(np.array_equal(out, peer.output())) if check else None
        except CannotRun as exc:
            raise PaBenchError(str(exc)) from None
        self._impl[variant] = peer.impl()
        sel = out if rows is None else out[:, np.asarray(rows), :]
        return KernelOutput(out=np.ascontiguousarray(sel), canary_ok=True, deterministic=deterministic)

    def impl(self, prepared, variant: str) -> str | None:
        """What ran a peer on this shape (its ``impl()``), None for a model row."""
        return self._impl.get(variant)

    def max_diff(self, prepared, a: str, b: str) -> float | None:
        """None: this backend keeps no full outputs (the runner diffs the compared rows)."""
        return None

    def reference(self, inputs, rows, quantised: bool = True) -> np.ndarray | None:
        """FP64 attention on the dequantised int8 K/V, or on the float K/V (None if absent)."""
        from pa_bench.numerics.reference import reference_attention

        problem = inputs.problem
        if quantised:  # int8 K/V dequantised one KV head at a time inside the reference
            return reference_attention(
                inputs.q, inputs.k_i8, inputs.v_i8, problem.context, problem.softmax_scale,
                rows=rows, xp=np, k_scale=inputs.k_scale, v_scale=inputs.v_scale,
            )
        if inputs.k_float is None or inputs.v_float is None:
            return None
        return reference_attention(
            inputs.q, inputs.k_float, inputs.v_float, problem.context, problem.softmax_scale,
            rows=rows, xp=np,
        )

    def time(self, prepared, variants, settings) -> dict:
        reason = self.unsupported_timing("", None)
        return {variant: reason for variant in variants}

    def release(self, prepared) -> None:
        self._impl.clear()
        self._cache.clear()
        self._cache_owner = None
