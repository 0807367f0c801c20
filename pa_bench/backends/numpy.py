"""Backend ``numpy``: the numerics model as the "kernel", and a NumPy FP64 reference.

It lets everything but timing run on a machine without a GPU: ``compute`` returns the
output of :func:`pa_bench.numerics.model.model_attention` with the variant's tile size and key split, so its
kernel/model error ratio is 1 by construction. A peer that runs on the CPU (``backends`` has
"numpy", ``pa_bench.peers``) gets its output checked against FP64; nothing is timed.
"""

from __future__ import annotations

import os
import platform

import numpy as np

from pa_bench import variants as registry
from pa_bench.backends.base import KernelOutput
from pa_bench.launch import NO_PINS, Launch, Pins, choose
from pa_bench.numerics.model import input_rounding, max_slack, pv_chain_keys, tile_keys
from pa_bench.problem.config import DEFAULT_MMA

# The determinism check runs the model a second time; do it only while that is cheap:
# at most this many (query head x row x visible key) score elements (about a second).
DETERMINISM_MAX_WORK = 1 << 21

#: Seconds the numerics model takes per score element (query head x row x visible key) at
#: head_dim 128 on one core of a 2-core x86 machine: the basis of the run's time estimate.
MODEL_SECONDS_PER_ELEMENT = 0.5e-6
#: A shape is refused when its estimated host memory is above this share of what is available.
HOST_MEMORY_SHARE = 0.9


def _model_work(inputs, rows) -> int:
    """Score elements one model run computes: query heads x rows x keys they see."""
    hq, nq, _ = inputs.q.shape
    ctx = inputs.k_i8.shape[1] - nq
    return rows_work(hq, ctx, nq, rows)


def rows_work(heads_q: int, context: int, queries: int, rows) -> int:
    """Score elements (query heads x rows x visible keys) of ``rows`` (None: every row)."""
    if rows is None:
        return heads_q * (queries * context + queries * (queries + 1) // 2)
    rows = np.asarray(rows)
    return int(heads_q * (len(rows) * context + int(rows.sum()) + len(rows)))


def estimate_host_bytes(problem) -> int:
    """Host memory a shape needs on the numpy backend: the float and int8 K/V, the shuffled page
    pool (twice the pages, filled), Q, and the FP64 reference's one KV head and score block."""
    hq, hkv, d, nq, nk = problem.heads_q, problem.heads_kv, problem.head_dim, problem.queries, problem.keys
    kv = hkv * nk * d * (2 * 4 + 2)            # K and V as float32, then as int8
    if problem.layout == "paged":
        kv += 2 * (2 * nk + problem.page) * hkv * (d + 4)   # two pools of 2x the pages, + scales
    q = hq * nq * d * (4 + 2)
    reference = 2 * nk * d * 8 + 256 * nk * 8 * 2          # one KV head in float64, a score block
    return kv + q + reference


def available_host_bytes() -> int | None:
    """Memory the system can give without swapping (MemAvailable), or None where unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def host_fit_reason(problem, available: int | None = None) -> str | None:
    """Why ``problem`` will not fit in host memory (one line with the estimate), or None."""
    have = available_host_bytes() if available is None else available
    need = estimate_host_bytes(problem)
    if have is None or need <= HOST_MEMORY_SHARE * have:
        return None
    return (f"needs about {_gib(need)} of host memory (K/V, page pool, FP64 reference), "
            f"{_gib(have)} available")


def refuse_if_nothing_fits(config) -> None:
    """Refuse a run none of whose shapes fits in host memory, before any work (one line with the
    estimate); where only some do not fit, their rows are skipped with the reason instead."""
    from pa_bench.errors import PaBenchError
    from pa_bench.problem.plan import make_plan

    have = available_host_bytes()
    problems = make_plan(config).problems
    reasons = [host_fit_reason(p, have) for p in problems]
    if problems and all(reasons):
        raise PaBenchError(f"shape {problems[0].shape.label} {reasons[0]}: nothing to run on the "
                           "numpy backend (choose smaller shapes)")


#: Seconds per value for the rest of a shape's work on the CPU, from the same machine: drawing,
#: quantising and paging K/V (per K/V value), and the FP64 references (per score element).
INPUT_SECONDS_PER_VALUE = 25e-9
REFERENCE_SECONDS_PER_ELEMENT = 20e-9


def arithmetics(backend, problem, variants) -> list[tuple]:
    """The distinct arithmetics (tile, split, P.V chain, segments, running maximum, input rounding)
    of ``variants``' kernels on ``problem``: the model runs once per arithmetic (the others reuse
    its output)."""

    launches = [(backend.launch(v, problem), v) for v in variants if registry.is_kernel(v)]
    keys = [(la.tile_keys, la.split_keys, pv_chain_keys(v), la.segment_keys, max_slack(v), input_rounding(v))
            for la, v in launches]
    return list(dict.fromkeys(keys))


def estimate(plan, rows_of, backend, determinism: bool = True) -> tuple[float, int]:
    """(seconds, score elements) a parity run of ``plan`` takes on the numpy backend, where
    ``rows_of(problem)`` gives the compared rows (None: all): the numerics model once per
    arithmetic (twice where the determinism check is cheap), the FP64 references (one more per input
    rounding) and the inputs."""
    seconds, elements = 0.0, 0
    for pb in plan.problems:
        runs = len(arithmetics(backend, pb, plan.variants))
        if not runs:
            continue
        work = rows_work(pb.heads_q, pb.context, pb.queries, rows_of(pb))
        repeat = 2 if determinism and work <= DETERMINISM_MAX_WORK else 1
        elements += runs * work
        seconds += runs * repeat * work * MODEL_SECONDS_PER_ELEMENT * pb.head_dim / 128
        references = 2 + len({input_rounding(v) for v in plan.variants} - {None})  # + one per rounding
        seconds += references * work * REFERENCE_SECONDS_PER_ELEMENT * pb.head_dim / 128
        seconds += 2 * pb.heads_kv * pb.keys * pb.head_dim * INPUT_SECONDS_PER_VALUE
    return seconds, elements


def _gib(n: float) -> str:
    return f"{n / 2**40:.1f} TiB" if n >= 2**40 else f"{n / 2**30:.1f} GiB"


class NumpyBackend:
    """Model outputs and an FP64 NumPy reference; no timing."""

    name = "numpy"
    kernels_are_model = True     # a kernel's output here is the numerics model's
    model_on_gpu = False

    def __init__(self, check_determinism: bool = True, pins: Pins = NO_PINS, mma: str = DEFAULT_MMA) -> None:
        self.check_determinism = check_determinism
        self.pins = pins         # what the caller fixes of every launch (pa_bench.launch.Pins)
        self.mma = mma           # the model's P.V accumulation (the config's parity.mma)
        # Variants whose arithmetic is the same here (v2 and v2t; v1, triton and, where it needs
        # no key segments, v3) have the same model output: computed once per shape.
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
                if "numpy" not in tuple(getattr(cls, "backends", ("cuda",))):   # a plug-in peer's optional member
                    return f"{variant} runs on the cuda backend only"
                return cls.unavailable(problem)
            except Exception as exc:
                return f"{variant} cannot say whether it runs here: {type(exc).__name__}: {exc}"
        return host_fit_reason(problem)

    def unsupported_timing(self, variant: str, problem) -> str | None:
        return "the numpy backend does not time kernels (needs CuPy and a GPU)"

    def prepare(self, inputs):
        return inputs

    def with_pins(self, pins: Pins) -> "NumpyBackend":
        """This backend with ``pins`` (pa_bench.launch.Pins) instead of its own: the model of
        another launch (its split and segments)."""
        return NumpyBackend(self.check_determinism, pins)

    def launch(self, variant: str, problem) -> Launch:
        """The launch whose arithmetic ``variant``'s output follows here: pa_bench.launch.choose with
        no GPU (every kernel's tile the registry's, v3's its consumer step) and this backend's pins."""
        return choose(variant, problem, None, self.pins)

    def tile_keys(self, variant: str, problem) -> int:
        """Keys per tile of ``variant``'s arithmetic (Launch.tile_keys)."""
        return self.launch(variant, problem).tile_keys

    def split_keys(self, variant: str, problem) -> int:
        """Where ``variant``'s arithmetic splits the keys (Launch.split_keys)."""
        return self.launch(variant, problem).split_keys

    def segment_keys(self, variant: str, problem) -> int:
        """Keys per key segment of ``variant``'s arithmetic (Launch.segment_keys)."""
        return self.launch(variant, problem).segment_keys

    def model(self, inputs, tile_keys: int, rows=None, split_keys: int = 0, pv_chain_keys: int = 0,
              segment_keys: int | None = None, max_slack: float | None = None,
              input_rounding: str | None = None) -> np.ndarray:
        """The numerics model on the CPU (pa_bench.numerics.model.model_attention)."""
        from pa_bench.numerics.model import model_attention

        return model_attention(inputs, tile_keys, rows, split_keys=split_keys, pv_chain_keys=pv_chain_keys,
                               segment_keys=segment_keys, max_slack=max_slack, input_rounding=input_rounding)

    def compute(self, prepared, variant: str, rows: np.ndarray | None,
                check_determinism: bool | None = None) -> KernelOutput:
        """The model's output for ``variant``'s tile size on ``rows`` (None: every row).

        Determinism (two runs bitwise equal) is checked when asked and cheap, else None.
        """
        from pa_bench.numerics.model import model_attention

        if registry.is_peer(variant):
            return self._compute_peer(prepared, variant, rows, check_determinism)
        launch = self.launch(variant, prepared.problem)
        tile, split, seg = launch.tile_keys, launch.split_keys, launch.segment_keys
        chain = pv_chain_keys(variant)
        slack = max_slack(variant)
        rounding = input_rounding(variant)
        check = self.check_determinism if check_determinism is None else check_determinism
        if self._cache_owner is not prepared:  # one shape's outputs at a time
            self._cache, self._cache_owner = {}, prepared
        key = (id(prepared), tile, split, chain, seg, slack, rounding, None if rows is None else np.asarray(rows).tobytes(),
               check)
        hit = self._cache.get(key)
        if hit is not None:
            return KernelOutput(out=hit.out.copy(), canary_ok=True, deterministic=hit.deterministic)
        kw = dict(split_keys=split, pv_chain_keys=chain, segment_keys=seg, max_slack=slack, mma=self.mma,
                  input_rounding=rounding)
        out = np.asarray(model_attention(prepared, tile, rows, **kw), dtype=np.float32)
        deterministic = None
        if check and _model_work(prepared, rows) <= DETERMINISM_MAX_WORK:
            again = np.asarray(model_attention(prepared, tile, rows, **kw), dtype=np.float32)
            deterministic = bool(again.tobytes() == out.tobytes())
        result = KernelOutput(out=out, canary_ok=True, deterministic=deterministic)
        self._cache[key] = result
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

    def compile_builds(self, problems, variants: list[str]) -> None:
        """Nothing is compiled here: the model is NumPy."""

    def close(self) -> None:
        """Nothing was started."""

    def release(self, prepared) -> None:
        self._impl.clear()
        self._cache.clear()
        self._cache_owner = None
