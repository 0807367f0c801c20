"""Resuming a run, decided from data alone: which settings a resumed run keeps, and which of a
shape's rows still need work.

A resumed run keeps the settings it was made with (its meta.json): its config, its sampled rows,
its backend and its command. An option that would change one of them is refused with one line
(exit 2), so that one records.csv never mixes rows made two ways.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from pa_bench.errors import PaBenchError
from pa_bench.problem.config import ALL_ROWS, config_defaults
from pa_bench.store.records import STATUS_OK, Record


class ResumeConflict(PaBenchError):
    """An option given with --resume contradicts the resumed run's settings."""


def _flat(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, Mapping) and k != "reference":
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def check_resume(run_name: str, stored: Mapping[str, Any], *, mode: str, config: Mapping[str, Any],
                 backend: str, sample_rows: int | None) -> int | None:
    """Refuse a resume whose settings differ from the stored run's; return the sampled rows to use.

    ``stored``: the run's meta (``mode``, ``config``, ``backend.backend``, ``sample_rows``);
    ``config``: ``Config.to_dict()`` of the config the command built (the run's, with the
    command line's options applied); ``sample_rows``: the command line's (None: not given).
    """
    def refuse(what: str, here: Any, there: Any, hint: str = "leave the option out") -> ResumeConflict:
        return ResumeConflict(f"cannot resume {run_name}: {what} is {here} here but {there} in the run; "
                              f"{hint} to resume with the run's settings")

    made_mode = stored.get("mode")
    if made_mode is not None and made_mode != mode:
        raise refuse("the command", f"'{mode}'", f"'{made_mode}'", f"use 'pa-bench {made_mode} --resume'")
    made_on = (stored.get("backend") or {}).get("backend")
    if made_on is not None and made_on != backend:
        raise refuse("the backend", backend, made_on, f"pass --backend {made_on}")
    made_with = stored.get("config")
    if isinstance(made_with, Mapping):
        ours, theirs = _flat(config), _flat(made_with)
        unset = _flat(config_defaults())   # a key the run's config predates: its default
        for key in list(ours) + [k for k in theirs if k not in ours]:  # the config's order: name first
            here, there = ours.get(key, unset.get(key)), theirs.get(key, unset.get(key))
            if here != there:
                raise refuse(key, _show(here), _show(there))
    made_rows = stored.get("sample_rows")
    if sample_rows is not None and sample_rows != made_rows:
        raise refuse("--sample-rows", _rows(sample_rows), _rows(made_rows))
    return made_rows


def _show(value: Any) -> str:
    if isinstance(value, list):
        return ",".join(map(str, value))
    return repr(value) if isinstance(value, str) else str(value)


def _rows(n: int | None) -> str:
    return "the config's default" if n is None else ("all" if n == ALL_ROWS else str(n))


@dataclass(frozen=True)
class ShapeWork:
    """What one shape's rows need, in the plan's variant order."""

    kept: tuple[str, ...]     # finished rows of the resumed run: left as they are
    parity: tuple[str, ...]   # variants whose parity runs
    timing: tuple[str, ...]   # variants timed (every timable one together, when any is)
    skipped: tuple[str, ...]  # nothing can run: saved as skipped with the reasons

    @property
    def active(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(self.parity + self.timing))

    def last_phase(self, parity_phase: str, timing_phase: str) -> dict[str, str]:
        """The phase after which each row that runs is finished (its progress step)."""
        return {v: timing_phase if v in self.timing else parity_phase
                for v in self.active if v not in self.kept}


def shape_work(variants: list[str], *, parity: bool, timing: bool, parity_reasons: Mapping[str, str | None],
               timing_reasons: Mapping[str, str | None], previous: Mapping[str, Record],
               hold: set[str] = frozenset()) -> ShapeWork:
    """Which rows of one shape run which phase. ``*_reasons``: why a variant cannot run that
    phase (None: it can); ``previous``: the resumed run's record of each variant of the shape;
    ``hold``: variants not to run again (their kernel hung: ``--retry-failed`` runs them)."""
    kept, todo_p, todo_t, skipped = [], [], [], []
    for v in variants:
        prev = previous.get(v)
        if v in hold and prev is not None:
            kept.append(v)
            continue
        p_reason, t_reason = parity_reasons.get(v), timing_reasons.get(v)
        if (prev is not None and prev.status == STATUS_OK
                and (not parity or p_reason is not None or prev.parity_pass is not None)
                and (not timing or t_reason is not None or prev.ms_median is not None)):
            kept.append(v)
            continue
        if parity and p_reason is None:
            todo_p.append(v)
        if timing and t_reason is None:
            todo_t.append(v)
        if v not in todo_p and v not in todo_t:
            skipped.append(v)
    if todo_t:  # re-time every timable variant together (interleaved, paired speed-ups)
        todo_t = [v for v in variants if timing_reasons.get(v) is None and v not in hold]
    return ShapeWork(tuple(kept), tuple(todo_p), tuple(todo_t), tuple(skipped))


__all__ = ["ResumeConflict", "check_resume", "ShapeWork", "shape_work"]
