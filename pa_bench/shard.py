"""Shards of a run: which shapes of a config shard ``I`` of ``N`` runs (``--shard I/N``).

The unit dealt is a *shape*: every variant of a shape stays in one shard, because a shape's
variants are timed interleaved (drift hits them alike) and share one set of inputs and one FP64
reference. Shapes are dealt by expected cost, not by their place in the config, so that N shards
take about the same time:

- cost of a shape = query heads x (query, key) pairs under the causal mask
  (``heads_q * sum_i (ctx + i + 1)``, i.e. keys x queries x heads): the kernels' work and, for the
  FP64 reference and the numerics model, the work per compared row;
- greedy longest-processing-time: shapes sorted by cost, largest first (ties: the config's
  order), each given to the shard with the least cost so far (ties: the lowest shard index).

The deal depends only on the config's shapes and heads and on N, so every copy of a command
(SLURM array task, ``--devices`` worker, a rerun next week) computes the same deal. A shape is
indivisible, so no shard can cost less than the costliest shape; within that, greedy LPT keeps
the costliest shard within 4/3 of the best possible deal.

``I`` is 0-based (``0 .. N-1``), as ``$SLURM_ARRAY_TASK_ID`` is under ``--array=0-(N-1)``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from pa_bench.errors import PaBenchError

RULE = "greedy LPT over shapes by heads_q x causal (query, key) pairs"


class ShardError(PaBenchError):
    """A bad ``--shard`` value, or a resumed shard run given another shard."""


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` (0-based) of ``count``."""

    index: int
    count: int

    def __post_init__(self) -> None:
        if self.count < 1:
            raise ShardError(f"--shard {self}: N must be at least 1")
        if not 0 <= self.index < self.count:
            raise ShardError(f"--shard {self}: I must be 0..{self.count - 1} (0-based; with SLURM "
                             f"use --array=0-{self.count - 1})")

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(text: str) -> Shard:
    """``"2/8"`` -> Shard(2, 8). One-line :class:`ShardError` for anything else."""
    m = re.fullmatch(r"\s*(-?\d+)\s*/\s*(-?\d+)\s*", str(text))
    if m is None:
        raise ShardError(f"--shard {text!r} is not I/N (e.g. 0/4, or "
                         "$SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT)")
    return Shard(int(m.group(1)), int(m.group(2)))


def shape_cost(problem) -> int:
    """Expected cost of one shape (a :class:`~pa_bench.problem.plan.Problem`): query heads x
    causal (query, key) pairs."""
    return int(problem.heads_q) * int(problem.visible_pairs)


def deal(costs: Sequence[int], count: int) -> list[list[int]]:
    """Deal items with these costs to ``count`` shards (greedy LPT, deterministic ties).

    Returns, per shard, the items' indices in their original order."""
    if count < 1:
        raise ShardError(f"cannot deal to {count} shards")
    order = sorted(range(len(costs)), key=lambda i: (-costs[i], i))
    loads = [0] * count
    shards: list[list[int]] = [[] for _ in range(count)]
    for i in order:
        target = min(range(count), key=lambda s: (loads[s], s))
        shards[target].append(i)
        loads[target] += costs[i]
    return [sorted(s) for s in shards]


def shard_problems(problems: Sequence, shard: Shard) -> list:
    """The problems (shapes) of ``shard``, in the config's order."""
    picked = deal([shape_cost(p) for p in problems], shard.count)[shard.index]
    return [problems[i] for i in picked]


def shard_meta(problems: Sequence, shard: Shard, shape_key) -> dict[str, Any]:
    """What meta.json records of a shard run: I, N, the rule and the shapes it got
    (``shape_key(problem)``: the shape as records.csv keys it)."""
    mine = shard_problems(problems, shard)
    total = sum(shape_cost(p) for p in problems) or 1
    return {"index": shard.index, "count": shard.count, "rule": RULE,
            "shapes": [shape_key(p) for p in mine],
            "cost_share": round(sum(shape_cost(p) for p in mine) / total, 4)}


def stored_shard(meta: Mapping[str, Any]) -> Shard | None:
    """The shard a run was made as (its meta.json), or None for a whole run."""
    s = meta.get("shard")
    if not isinstance(s, Mapping):
        return None
    return Shard(int(s["index"]), int(s["count"]))


def resume_shard(run_name: str, meta: Mapping[str, Any], given: Shard | None) -> Shard | None:
    """The shard a resumed run carries on: its own; a different ``--shard`` is refused."""
    made = stored_shard(meta)
    if given is not None and given != made:
        there = "a whole run (no --shard)" if made is None else f"shard {made}"
        raise ShardError(f"cannot resume {run_name}: --shard is {given} here but the run is "
                         f"{there}; leave the option out to resume with the run's settings")
    return made


__all__ = ["RULE", "Shard", "ShardError", "parse_shard", "shape_cost", "deal", "shard_problems",
           "shard_meta", "stored_shard", "resume_shard"]
