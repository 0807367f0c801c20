"""Turn a config (plus command-line overrides) into the problems and cases to run.

A :class:`Problem` is one shape with every parameter needed to generate its inputs and to
count its work; a :class:`Case` is a problem and a variant; a :class:`Plan` lists them in
shape-major order (all variants of a shape together, so their timings can be interleaved).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterator, Sequence

from pa_bench import variants as registry
from pa_bench.problem.config import DATA_KINDS, LAYOUTS, OUT_DTYPES, Config
from pa_bench.errors import ConfigError
from pa_bench.problem.shapes import Shape


@dataclass(frozen=True)
class Problem:
    """One chunk of prompt attention with everything that defines its inputs."""

    shape: Shape
    heads_q: int = 32
    heads_kv: int = 8
    head_dim: int = 128
    layout: str = "paged"
    page: int = 64
    data: str = "normal"
    data_file: str | None = None
    seed: int = 0
    out_dtype: str = "float32"
    softmax_scale: float | None = None  # None -> 1/sqrt(head_dim), resolved on construction

    def __post_init__(self) -> None:
        for name, value in (("heads_q", self.heads_q), ("heads_kv", self.heads_kv),
                            ("head_dim", self.head_dim), ("page", self.page)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"problem: {name} must be a positive integer, got {value!r}")
        if self.heads_q % self.heads_kv:
            raise ConfigError(f"problem: heads_kv ({self.heads_kv}) must divide heads_q "
                              f"({self.heads_q})")
        if self.layout not in LAYOUTS:
            raise ConfigError(f"problem: layout must be one of {LAYOUTS}, got {self.layout!r}")
        if self.data not in DATA_KINDS:
            raise ConfigError(f"problem: data must be one of {DATA_KINDS}, got {self.data!r}")
        if self.data == "npz" and not self.data_file:
            raise ConfigError("problem: data npz needs a data_file")
        if self.out_dtype not in OUT_DTYPES:
            raise ConfigError(f"problem: out_dtype must be one of {OUT_DTYPES}, "
                              f"got {self.out_dtype!r}")
        scale = self.softmax_scale
        if scale is None:
            scale = 1.0 / math.sqrt(self.head_dim)
        object.__setattr__(self, "softmax_scale", float(scale))

    @property
    def context(self) -> int:
        return self.shape.context

    @property
    def queries(self) -> int:
        return self.shape.queries

    @property
    def keys(self) -> int:
        """Nk = context + queries: the keys the last query row sees."""
        return self.shape.context + self.shape.queries

    @property
    def label(self) -> str:
        return self.shape.label

    @property
    def group(self) -> int:
        """Query heads per KV head (GQA)."""
        return self.heads_q // self.heads_kv

    @property
    def n_pages(self) -> int:
        """Pages the KV cache needs: ceil(keys / page) (also for a contiguous layout)."""
        return -(-self.keys // self.page)

    @property
    def visible_pairs(self) -> int:
        """sum_{i<Nq} (ctx + i + 1): query/key pairs under the causal mask, per head."""
        nq, ctx = self.queries, self.context
        return nq * ctx + nq * (nq + 1) // 2

    @property
    def flops(self) -> int:
        """Causal FLOP count 4 * D * Hq * sum_i (ctx + i + 1), exact (Q.K^T and P.V)."""
        return 4 * self.head_dim * self.heads_q * self.visible_pairs

    @property
    def kv_bytes(self) -> int:
        """int8 K and V plus their fp32 scales that the chunk needs: Hkv * keys * (2*D + 8)."""
        return self.heads_kv * self.keys * (2 * self.head_dim + 8)

    @property
    def device_bytes(self) -> int:
        """Estimate of the GPU memory the inputs and one output need (before allocating)."""
        q = self.heads_q * self.queries * self.head_dim * 2
        out = self.heads_q * self.queries * self.head_dim * (4 if self.out_dtype == "float32" else 2)
        kv = self.kv_bytes
        if self.layout == "paged":
            kv = (2 * self.n_pages + 1) * self.page * self.heads_kv * (2 * self.head_dim + 8)
        return q + kv + out

    def params(self) -> dict:
        """The parameters a report prints for this problem (the PR leaves them open)."""
        return {
            "shape": self.label, "context": self.context, "queries": self.queries,
            "heads_q": self.heads_q, "heads_kv": self.heads_kv, "head_dim": self.head_dim,
            "layout": self.layout, "page": self.page, "data": self.data, "seed": self.seed,
            "out_dtype": self.out_dtype, "softmax_scale": self.softmax_scale,
        }


@dataclass(frozen=True)
class Case:
    """A problem run by one variant."""

    problem: Problem
    variant: str

    @property
    def is_kernel(self) -> bool:
        return registry.is_kernel(self.variant)

    @property
    def is_peer(self) -> bool:
        return registry.is_peer(self.variant)

    @property
    def key(self) -> str:
        """``<shape>|<variant>``, the key of this case's raw samples."""
        return f"{self.problem.label}|{self.variant}"


@dataclass
class Plan:
    """The problems and variants of one command, from a (possibly overridden) config."""

    config: Config
    problems: list[Problem] = field(default_factory=list)
    variants: list[str] = field(default_factory=list)

    def cases(self) -> Iterator[Case]:
        """Every problem x variant, shape-major (all variants of a shape together)."""
        for problem in self.problems:
            for variant in self.variants:
                yield Case(problem, variant)

    def __len__(self) -> int:
        return len(self.problems) * len(self.variants)

    @property
    def kernel_variants(self) -> list[str]:
        return [v for v in self.variants if registry.is_kernel(v)]

    @property
    def peer_variants(self) -> list[str]:
        return [v for v in self.variants if registry.is_peer(v)]


def problem_for(config: Config, shape: Shape) -> Problem:
    """The Problem for one shape under a config's parameters."""
    return Problem(
        shape=shape, heads_q=config.heads_q, heads_kv=config.heads_kv, head_dim=config.head_dim,
        layout=config.layout, page=config.page, data=config.data, data_file=config.data_file,
        seed=config.seed, out_dtype=config.out_dtype, softmax_scale=config.resolved_softmax_scale,
    )


def make_plan(config: Config, shapes: str | Sequence[str | Shape] | None = None,
              variants: str | Sequence[str] | None = None) -> Plan:
    """Problems x variants for a config; ``shapes``/``variants`` (CLI overrides) beat the config.

    ``shapes`` may be a comma string (``"32Kx1024,0x1536"``) or a list of strings/Shapes;
    a shape that is also in the config keeps the config's label (``0x1536`` shows as ``1.5K``).
    ``variants`` may be a comma string or a list.
    """
    if shapes is not None:
        shapes = _keep_config_labels(config, shapes)
    config = config.with_overrides(shapes=shapes, variants=variants)
    problems = [problem_for(config, s) for s in config.shapes]
    return Plan(config=config, problems=problems, variants=list(config.variants))


def _keep_config_labels(config: Config, shapes) -> list[Shape]:
    from pa_bench.problem.shapes import parse_shapes, split_shape_list

    by_dims = {(s.context, s.queries): s for s in config.shapes}
    by_label = {s.label: s for s in config.shapes}
    items = split_shape_list(shapes) if isinstance(shapes, str) else list(shapes)
    if not items:
        parse_shapes(shapes)  # "no shapes given in ..." with the text as typed
    resolved: list[Shape | str] = []
    for item in items:
        if isinstance(item, str) and item.strip() in by_label:  # --shapes 1.5K
            resolved.append(by_label[item.strip()])
        else:
            resolved.append(item)
    out = []
    for s in parse_shapes(resolved):
        out.append(by_dims.get((s.context, s.queries), s))
    return out


__all__ = ["Problem", "Case", "Plan", "make_plan", "problem_for"]
