"""``pa-bench prompt``: the attention of a whole prompt read in chunks.

An engine reads a prompt of ``T`` tokens in chunks of ``C``: chunk ``i`` is ``C`` new queries
after ``i*C`` tokens of context (``0 x C, C x C, 2C x C, ...``), the last one partial when ``C``
does not divide ``T``. This module times the attention of a *subset* of those chunks with the
backend's ``time`` (the same path, stop rule and interleaving as ``pa-bench time``), fills in
the others by interpolation, and sums the prompt per variant.

Why interpolation is sound here. For full chunks, the causal work of chunk ``i`` is
``C*(i*C) + C*(C+1)/2`` query/key pairs per head: exactly affine in its context. Its time is
affine too as long as the kernels do the same kind of work, so the chunks are interpolated
piecewise-linearly in context between timed neighbours. Where the kernels change how they work
(a chunk's keys split in two halves, or the softmax run in key segments: ``regime_of``), a
straight line between far-apart chunks would be wrong, so the chunks on both sides of every such
change are timed. The remaining timed chunks are spread evenly over the prompt; the first chunk,
the last full chunk and a partial last chunk (whose queries differ, so it is on no line) are
always timed. The error is *measured*, not assumed: every timed chunk whose neighbours lie in its
regime is predicted from those neighbours alone (leave-one-out, with twice the usual gap, so a
pessimistic figure) and the worst relative error is reported beside each total.

Per variant: the prompt's total attention time, attention-only tokens per second, the
speed-up against v1 (the ratio of the totals, with the interquartile range of the same ratio
computed round by round: round ``k`` of every timed chunk, v1 and the variant taken back to
back, summed with the interpolation's weights), and the share of the total spent in the slowest
quarter of the chunks. Parity is checked on the first, middle and last chunks through the
runner's parity path, which also creates the run directory; ``prompt.csv`` (one row per
chunk x variant) and ``meta.json["prompt"]`` hold the rest.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from pa_bench import variants as registry
from pa_bench.errors import ConfigError, PaBenchError, ShapeError
from pa_bench.problem.config import CONFIG_DIR, Config, resolve_config_path
from pa_bench.problem.shapes import Shape, parse_shape
from pa_bench.store import prompt_rows as P
from pa_bench.fmt import first_line

DEFAULT_PROMPT_CONFIG = CONFIG_DIR / "prompt98k.yaml"
#: The share of the total spent in this fraction of the chunks, the slowest ones, is reported.
LONGEST_FRACTION = 0.25
INTERPOLATION = ("piecewise-linear in context between timed full chunks; timed chunks on both "
                 "sides of every change of the kernels' key split or key segments")
MEASURE_ALL = "all"


# --------------------------------------------------------------------------- chunks


@dataclass(frozen=True)
class Chunk:
    """Chunk ``index`` of a prompt: ``queries`` new tokens after ``context`` earlier ones."""

    index: int
    context: int
    queries: int
    partial: bool = False   # fewer queries than the chunk size (the last chunk only)

    @property
    def end(self) -> int:
        """Tokens read once this chunk is done."""
        return self.context + self.queries

    @property
    def spec(self) -> str:
        return f"{self.context}x{self.queries}"

    def shape(self) -> Shape:
        return Shape(self.context, self.queries, self.spec)


def split_prompt(tokens: int, chunk: int) -> list[Chunk]:
    """``0 x C, C x C, 2C x C, ...``; the last chunk has ``tokens % C`` queries when that is not 0."""
    if tokens < 1 or chunk < 1:
        raise ValueError(f"a prompt needs tokens >= 1 and chunk >= 1, got {tokens} and {chunk}")
    out = []
    for i, start in enumerate(range(0, tokens, chunk)):
        q = min(chunk, tokens - start)
        out.append(Chunk(i, start, q, partial=q < chunk))
    return out


def parity_chunks(chunks: list[Chunk]) -> list[int]:
    """The chunks whose parity is checked: first, middle and last (fewer in a short prompt)."""
    return sorted({0, len(chunks) // 2, len(chunks) - 1})


def regime_breaks(chunks: list[Chunk], regimes: list[Any]) -> list[int]:
    """Full chunks on either side of a change of regime between consecutive full chunks."""
    full = [c.index for c in chunks if not c.partial]
    out: set[int] = set()
    for a, b in zip(full, full[1:]):
        if regimes[a] != regimes[b]:
            out |= {a, b}
    return sorted(out)


def choose_measured(chunks: list[Chunk], count: int, required=()) -> list[int]:
    """The chunks to time: the first, the last full and a partial last chunk, the ``required``
    ones (regime breaks), and evenly spread full chunks up to ``count`` in all (more only when
    the required ones alone are more). ``count >= len(chunks)``: every chunk."""
    n = len(chunks)
    if count >= n:
        return list(range(n))
    full = [c.index for c in chunks if not c.partial]
    must = set(required) | {c.index for c in chunks if c.partial}
    if full:
        must |= {full[0], full[-1]}
    if len(must) >= count:
        return sorted(must)
    for k in range(count, 1, -1):
        spread = {full[int(round(x))] for x in np.linspace(0, len(full) - 1, k)}
        if len(must | spread) <= count:
            return sorted(must | spread)
    return sorted(must)


def interpolation_weights(chunks: list[Chunk], measured: list[int]) -> np.ndarray:
    """``W`` [chunks, measured]: chunk ``i``'s time is ``W[i] @ t`` for the timed chunks' times
    ``t`` (a timed chunk is itself; any other full chunk is the straight line in context between
    the nearest timed full chunks before and after it)."""
    col = {j: k for k, j in enumerate(measured)}
    knots = [j for j in measured if not chunks[j].partial]
    w = np.zeros((len(chunks), len(measured)))
    for c in chunks:
        if c.index in col:
            w[c.index, col[c.index]] = 1.0
            continue
        if c.partial:
            raise ValueError(f"chunk {c.index} is partial and must be timed")
        before = [j for j in knots if j < c.index]
        after = [j for j in knots if j > c.index]
        if not before or not after:
            raise ValueError(f"chunk {c.index} has no timed full chunk on both sides")
        a, b = before[-1], after[0]
        t = (c.context - chunks[a].context) / (chunks[b].context - chunks[a].context)
        w[c.index, col[a]] = 1.0 - t
        w[c.index, col[b]] = t
    return w


@dataclass(frozen=True)
class Holdout:
    """A timed chunk predicted from its timed neighbours alone."""

    chunk: int
    predicted_ms: float
    measured_ms: float

    @property
    def rel_err(self) -> float:
        return self.predicted_ms / self.measured_ms - 1.0


def holdout_checks(chunks: list[Chunk], measured: list[int], ms: Mapping[int, float],
                   regimes: list[Any] | None = None) -> list[Holdout]:
    """Leave-one-out checks of the interpolation: each interior timed full chunk whose timed
    neighbours are in its regime, predicted on the line between those neighbours."""
    knots = [j for j in measured if not chunks[j].partial]
    out = []
    for a, j, b in zip(knots, knots[1:], knots[2:]):
        if regimes is not None and not regimes[a] == regimes[j] == regimes[b]:
            continue
        if not all(ms.get(x) for x in (a, j, b)):
            continue
        t = (chunks[j].context - chunks[a].context) / (chunks[b].context - chunks[a].context)
        out.append(Holdout(j, (1.0 - t) * ms[a] + t * ms[b], ms[j]))
    return out


# --------------------------------------------------------------------------- sums


@dataclass
class VariantTotal:
    """One variant's prompt: the figures ``pa-bench prompt`` prints."""

    variant: str
    total_ms: float | None = None
    tokens_per_s: float | None = None
    speedup_vs_v1: float | None = None     # total(v1) / total(variant)
    speedup_lo: float | None = None        # q1 and q3 of the same ratio round by round
    speedup_hi: float | None = None
    rounds: int | None = None              # rounds behind the spread
    longest_share: float | None = None     # share of the total in the slowest chunks
    longest_chunks: int | None = None
    holdout_chunk: int | None = None       # the worst leave-one-out check
    holdout_err: float | None = None
    holdout_tested: int = 0
    measured: int = 0                      # timed chunks with samples
    reason: str | None = None              # why there is no total
    failed: bool = False                   # an error (not a skip) stopped a chunk's timing


def _samples(res: Any) -> list[float] | None:
    """A backend answer's samples (None for a reason string, a failure or an empty result)."""
    if res is None or isinstance(res, (str, TimingFailure)):
        return None
    arr = [float(x) for x in res.samples_ms or []]
    return arr or None


def _median(samples: list[float]) -> float:
    arr = np.asarray(samples, dtype=np.float64)
    arr = arr[np.isfinite(arr)]
    return float(np.median(arr)) if arr.size else math.nan


@dataclass
class TimingFailure:
    """A chunk whose timing raised an error (distinct from a reason it cannot be timed)."""

    reason: str


def summarize(chunks: list[Chunk], measured: list[int], timings: Mapping[str, Mapping[int, Any]],
              tokens: int, regimes: list[Any] | None = None,
              baseline: str = registry.BASELINE) -> tuple[list[P.PromptRow], list[VariantTotal]]:
    """Rows of prompt.csv and each variant's totals from the timed chunks' answers.

    ``timings[variant][chunk]`` is what the backend's ``time`` gave for that chunk: a result
    with ``samples_ms`` (and ``stop_reason``, ``throttled``), a reason string, or a
    :class:`TimingFailure`.
    """
    from pa_bench.measure import stats

    w = interpolation_weights(chunks, measured)
    col_weight = w.sum(axis=0)   # how many chunks' worth each timed chunk stands for
    rows: list[P.PromptRow] = []
    totals: list[VariantTotal] = []
    per_chunk: dict[str, np.ndarray] = {}
    samples_of: dict[str, list[list[float]]] = {}
    for v, answers in timings.items():
        tot = VariantTotal(v)
        meds, samples, reasons = [], [], {}
        measured_rows: dict[int, P.PromptRow] = {}
        for j in measured:
            c, res = chunks[j], answers.get(j, "not timed by the backend")
            row = P.PromptRow(c.index, c.context, c.context, c.queries, v)
            s = _samples(res)
            if s is None:
                why = res.reason if isinstance(res, TimingFailure) else str(res)
                tot.failed = tot.failed or isinstance(res, TimingFailure)
                row.reason = why
                reasons.setdefault(why, j)
            else:
                st = stats.summarize(s)
                row.ms, row.source = st.median, P.MEASURED
                row.ms_q1, row.ms_q3, row.samples = st.q1, st.q3, st.count
                row.stop_reason = res.stop_reason or None
                row.throttled = int(sum(bool(t) for t in (res.throttled or [])))
                meds.append(st.median)
                samples.append(s)
            measured_rows[j] = row
        tot.measured = len(meds)
        if reasons:  # one reason for every chunk (the backend cannot time), else where it was
            why, j = next(iter(reasons.items()))
            reason = f"timing: {why}" if len(reasons) == 1 and not meds else \
                f"timing on chunk {j}: {why}"
            tot.reason = reason
            rows += [measured_rows.get(c.index) or P.PromptRow(
                c.index, c.context, c.context, c.queries, v, reason=f"not interpolated: {reason}")
                for c in chunks]
            totals.append(tot)
            continue
        ms = w @ np.asarray(meds)
        per_chunk[v], samples_of[v] = ms, samples
        for c in chunks:
            row = measured_rows.get(c.index)
            if row is None:
                row = P.PromptRow(c.index, c.context, c.context, c.queries, v,
                                  ms=float(ms[c.index]), source=P.INTERPOLATED)
            rows.append(row)
        tot.total_ms = float(ms.sum())
        tot.tokens_per_s = tokens / (tot.total_ms / 1e3) if tot.total_ms > 0 else None
        n_long = max(1, math.ceil(LONGEST_FRACTION * len(chunks)))
        tot.longest_chunks = n_long
        tot.longest_share = float(np.sort(ms)[::-1][:n_long].sum() / ms.sum()) if ms.sum() > 0 else None
        checks = holdout_checks(chunks, measured, dict(zip(measured, meds)), regimes)
        tot.holdout_tested = len(checks)
        if checks:
            worst = max(checks, key=lambda h: abs(h.rel_err))
            tot.holdout_chunk, tot.holdout_err = worst.chunk, worst.rel_err
        totals.append(tot)

    base = next((t for t in totals if t.variant == baseline and t.total_ms), None)
    for tot in totals:
        if base is None or not tot.total_ms:
            continue
        tot.speedup_vs_v1 = base.total_ms / tot.total_ms
        if tot.variant == baseline:
            tot.speedup_lo = tot.speedup_hi = 1.0
            continue
        # round k of every timed chunk, summed with the interpolation's weights
        a, b = samples_of[baseline], samples_of[tot.variant]
        k = min(min(len(x), len(y)) for x, y in zip(a, b))
        if k:
            base_rounds = col_weight @ np.asarray([x[:k] for x in a])
            var_rounds = col_weight @ np.asarray([y[:k] for y in b])
            _, tot.speedup_lo, tot.speedup_hi = stats.paired_speedup(list(base_rounds),
                                                                     list(var_rounds))
            tot.rounds = k
    order = {v: i for i, v in enumerate(timings)}
    rows.sort(key=lambda r: (r.chunk, order[r.variant]))
    return rows, totals


# --------------------------------------------------------------------------- config


@dataclass(frozen=True)
class PromptReference:
    """The PR's engine-level figure: tokens per second of a whole prompt read, per variant."""

    source: str
    tok_s: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class PromptSettings:
    tokens: int
    chunk: int
    measure: int            # chunks to time (at least; all of them when >= their number)
    reference: PromptReference | None = None

    def chunks(self) -> list[Chunk]:
        return split_prompt(self.tokens, self.chunk)


@dataclass(frozen=True)
class PromptConfig:
    """A prompt config: the prompt (``prompt:``) and the usual problem/timing/parity settings,
    as a :class:`Config` whose shapes are the chunks checked for parity."""

    config: Config
    prompt: PromptSettings

    @property
    def chunks(self) -> list[Chunk]:
        return self.prompt.chunks()

    def to_dict(self) -> dict:
        d = self.config.to_dict()
        d.pop("shapes", None)
        d["prompt"] = {"tokens": self.prompt.tokens, "chunk": self.prompt.chunk,
                       "measure": self.prompt.measure,
                       "reference": None if self.prompt.reference is None
                       else asdict(self.prompt.reference)}
        return d


_PROMPT_KEYS = {"tokens", "chunk", "measure", "reference"}
_NOT_IN_PROMPT = {"shapes": "a prompt config has no shapes: its chunks come from prompt.tokens "
                            "and prompt.chunk",
                  "reference": "put the PR's engine figure under prompt.reference "
                               "(source, tok_s: {variant: tokens per second})"}


def parse_tokens(value: Any, key: str = "tokens") -> int:
    """``98K`` (K = 1024, as in shapes) or a plain integer."""
    if isinstance(value, bool):
        raise ConfigError(f"{key}: expected a number of tokens like 98K or 100000, got {value!r}")
    try:
        n = parse_shape(f"0x{value}").queries if isinstance(value, str) else int(value)
    except (ShapeError, TypeError, ValueError):
        raise ConfigError(f"{key}: expected a number of tokens like 98K or 100000, "
                          f"got {value!r}") from None
    if n < 1 or (not isinstance(value, str) and n != value):
        raise ConfigError(f"{key}: expected a positive number of tokens, got {value!r}")
    return n


def _measure(value: Any, key: str) -> int:
    if isinstance(value, str) and value.strip().lower() == MEASURE_ALL:
        return 1 << 31
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 2:
        raise ConfigError(f"{key}: expected a number of chunks to time (at least 2) or 'all', "
                          f"got {value!r}")
    return value


def _prompt_settings(where: str, raw: Any, tokens=None, chunk=None, measure=None) -> PromptSettings:
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: prompt: expected a mapping with tokens, chunk, measure")
    unknown = sorted(set(raw) - _PROMPT_KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown key 'prompt.{unknown[0]}' "
                          f"(known: {', '.join(sorted(_PROMPT_KEYS))})")
    for name in ("tokens", "chunk"):
        if name not in raw:
            raise ConfigError(f"{where}: missing required key 'prompt.{name}'")
    try:
        n_tokens = parse_tokens(raw["tokens"] if tokens is None else tokens,
                                "prompt.tokens" if tokens is None else "--tokens")
        n_chunk = parse_tokens(raw["chunk"] if chunk is None else chunk,
                               "prompt.chunk" if chunk is None else "--chunk")
        n_measure = _measure(raw.get("measure", 8) if measure is None else measure,
                             "prompt.measure" if measure is None else "--measure")
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    ref = raw.get("reference")
    reference = None
    if ref is not None:
        if not isinstance(ref, Mapping) or set(ref) - {"source", "tok_s"}:
            raise ConfigError(f"{where}: prompt.reference: expected a mapping with source and "
                              f"tok_s: {{variant: tokens per second}}")
        tok_s = ref.get("tok_s") or {}
        if not isinstance(tok_s, Mapping) or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0
                for v in tok_s.values()):
            raise ConfigError(f"{where}: prompt.reference.tok_s: expected {{variant: positive "
                              f"tokens per second}}, got {tok_s!r}")
        reference = PromptReference(str(ref.get("source") or ""),
                                    {str(k): float(v) for k, v in tok_s.items()})
    return PromptSettings(n_tokens, n_chunk, n_measure, reference)


def _read_yaml(path: Path, shown: str) -> Any:
    from pa_bench.problem.config import read_yaml  # the same reader and errors as every config

    raw = read_yaml(path, shown)
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{shown}: expected a mapping at the top level")
    return raw


def load_prompt_config(path: str | Path | None = None, *, tokens: Any = None, chunk: Any = None,
                       measure: Any = None, **overrides: Any) -> PromptConfig:
    """Read a prompt config (default ``configs/prompt98k.yaml``; a bare name finds
    ``configs/<name>.yaml``) and apply command-line overrides: ``tokens``, ``chunk``, ``measure``
    and any :meth:`Config.with_overrides` key (``None``: not given)."""
    p = resolve_config_path(path) if path is not None else DEFAULT_PROMPT_CONFIG
    shown = str(path) if path is not None else str(DEFAULT_PROMPT_CONFIG)
    raw = dict(_read_yaml(p, shown))
    if "prompt" not in raw:
        raise ConfigError(f"{shown}: missing required key 'prompt' (tokens, chunk, measure): "
                          f"is this a prompt config? (others run with pa-bench run)")
    for key, why in _NOT_IN_PROMPT.items():
        if key in raw:
            raise ConfigError(f"{shown}: {key}: {why}")
    settings = _prompt_settings(shown, raw.pop("prompt"), tokens, chunk, measure)
    chunks = settings.chunks()
    shapes = tuple(chunks[i].shape() for i in parity_chunks(chunks))
    if "name" not in raw:
        raise ConfigError(f"{shown}: missing required key 'name'")
    known = {f.name for f in fields(Config)} - {"path", "shapes", "reference"}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ConfigError(f"{shown}: unknown key {unknown[0]!r} "
                          f"(known: {', '.join(sorted(known | {'prompt'}))})")
    given = {**raw, **{k: v for k, v in overrides.items() if v is not None}}
    config = Config(name="prompt", shapes=shapes, path=shown).with_overrides(**given)
    if config.data == "npz":
        raise ConfigError(f"{shown}: data: a prompt needs generated data (normal or realistic); "
                          f"a capture holds one chunk")
    return PromptConfig(config, settings)


# --------------------------------------------------------------------------- the run


def regime_of(backend, variants, problem) -> tuple:
    """What the kernels do on a chunk beyond its size: per kernel variant, how many key segments
    its softmax runs in (long contexts; v3 also on chunks with few CTAs) and whether it splits the
    chunk's keys in two halves (time is affine in context only while this stays the same)."""
    from pa_bench.variants import context_segment_keys

    out = []
    for v in variants:
        if not registry.is_kernel(v):
            continue
        try:
            seg = int(backend.segment_keys(v, problem))
        except Exception:  # a backend that cannot say: the rule every variant follows
            seg = context_segment_keys(problem.context)
        try:
            split = bool(backend.split_keys(v, problem))
        except Exception:  # a backend that cannot say: treat as not splitting
            split = False
        out.append((1 if not seg else -(-problem.keys // seg), split))
    return tuple(out)


def time_chunks(backend, config: Config, chunks: list[Chunk], measured: list[int], *,
                problems: list, progress=None, on_result=None) -> dict[str, dict[int, Any]]:
    """Time every variant of ``config`` on each measured chunk (variants interleaved per chunk,
    through ``backend.time``); ``timings[variant][chunk]`` is a result, a reason string, or a
    :class:`TimingFailure`. ``on_result(chunk, variant, result)`` sees every timed answer."""
    from pa_bench.problem.inputs import make_inputs

    out: dict[str, dict[int, Any]] = {v: {} for v in config.variants}
    for j in measured:
        pb = problems[j]
        if progress is not None:
            progress.update(f"chunk {j} ({chunks[j].spec})")
        todo = []
        for v in config.variants:
            try:
                why = backend.unsupported_timing(v, pb)
            except PaBenchError as exc:
                why = first_line(exc)
            if why:
                out[v][j] = why
            else:
                todo.append(v)
        if todo:
            prepared = None
            try:
                prepared = backend.prepare(make_inputs(pb))
                got = backend.time(prepared, todo, config.timing)
            except KeyboardInterrupt:
                raise
            except PaBenchError as exc:
                got = {v: first_line(exc) for v in todo}
            except Exception as exc:  # a CUDA error, out of memory: this chunk fails, the run goes on
                got = {v: TimingFailure(f"{type(exc).__name__}: {first_line(exc)}") for v in todo}
            finally:
                if prepared is not None:
                    try:
                        backend.release(prepared)
                    except Exception:
                        pass
            for v in todo:
                res = got.get(v, "not timed by the backend")
                out[v][j] = res
                if on_result is not None and _samples(res) is not None:
                    on_result(chunks[j], v, res)
        if progress is not None:
            progress.advance()
    return out


def run_prompt(pconfig: PromptConfig, backend, *, results_root: str | Path = "results",
               sample_rows: int | None = None, progress=None, command: list[str] | None = None,
               write_report: bool = True) -> Path:
    """Parity on the first, middle and last chunks (the runner, which makes the run directory),
    then the timed chunks, then prompt.csv, meta.json's ``prompt`` and report.md; returns the
    run directory."""
    from pa_bench import runner
    from pa_bench.problem.plan import problem_for
    from pa_bench.store.results import now_utc_iso, open_run

    progress = progress or runner.NullProgress()
    started = time.time()
    cfg, settings = pconfig.config, pconfig.prompt
    chunks = pconfig.chunks
    problems = [problem_for(cfg, c.shape()) for c in chunks]
    regimes = [regime_of(backend, cfg.variants, pb) for pb in problems]
    breaks = regime_breaks(chunks, regimes)
    measured = choose_measured(chunks, settings.measure, breaks)

    kernels = [v for v in cfg.variants if registry.is_kernel(v)] or list(cfg.variants)
    path = runner.run_parity(cfg.with_overrides(variants=kernels), backend,
                             results_root=results_root, sample_rows=sample_rows,
                             progress=progress, command=command, write_report=False)
    run = open_run(path)
    parity_s = time.time() - started
    meta_prompt = {
        "tokens": settings.tokens, "chunk": settings.chunk, "chunks": len(chunks),
        "partial_last": chunks[-1].partial, "measure": min(settings.measure, len(chunks)),
        "measured": measured, "parity_chunks": parity_chunks(chunks), "regime_breaks": breaks,
        "interpolation": INTERPOLATION, "longest_fraction": LONGEST_FRACTION,
        "reference": None if settings.reference is None else asdict(settings.reference),
    }
    # meta["config"] stays the parity plan (the chunks and kernels records.csv holds)
    meta_prompt["config"] = pconfig.to_dict()
    run.update_meta(mode="prompt", prompt=meta_prompt, status="running")

    t0 = time.time()
    progress.start(len(measured), f"prompt {cfg.name}: timing {len(measured)} of "
                                  f"{len(chunks)} chunks on {backend.name}")
    try:
        timings = time_chunks(backend, cfg, chunks, measured, problems=problems, progress=progress,
                              on_result=lambda c, v, res: run.save_samples(
                                  c.spec, v, res.samples_ms, res.clocks_mhz))
    except KeyboardInterrupt:
        progress.stop()
        run.update_meta(status="interrupted", finished=now_utc_iso(),
                        wall_seconds=round(time.time() - started, 3))
        raise runner.RunInterrupted(run.path) from None
    progress.stop()
    rows, totals = summarize(chunks, measured, timings, settings.tokens, regimes)
    P.write_prompt_csv(run.path, rows)
    meta_prompt["totals"] = [asdict(t) for t in totals]
    run.update_meta(prompt=meta_prompt, status="complete", finished=now_utc_iso(),
                    wall_seconds=round(time.time() - started, 3),
                    phase_seconds={"parity": round(parity_s, 3),
                                   "timing": round(time.time() - t0, 3)},
                    backend_meta=backend.meta())
    if write_report:
        from pa_bench.present.report import write_report_or_note

        write_report_or_note(run.path, progress.log)
    return run.path


__all__ = ["Chunk", "split_prompt", "parity_chunks", "regime_breaks", "choose_measured",
           "interpolation_weights", "holdout_checks", "Holdout", "VariantTotal", "TimingFailure",
           "summarize", "PromptConfig", "PromptSettings", "PromptReference", "load_prompt_config",
           "parse_tokens", "regime_of", "time_chunks", "run_prompt", "DEFAULT_PROMPT_CONFIG",
           "LONGEST_FRACTION"]
