"""One command's walk through the chain: plan -> inputs -> backend -> metrics -> records -> run dir.

``run_parity``, ``run_timing`` and ``run_all`` take a validated :class:`~pa_bench.problem.config.Config`
(command-line overrides already applied) and a backend, and write a run directory
``<results_root>/<run-id>/`` whose path they return. Per shape the inputs are made once and
uploaded once; every variant of the shape is then checked against the FP64 reference and
timed (all variants of a shape interleaved). ``records.csv`` is saved after every finished
row, so an interrupted run keeps its rows and ``resume_run`` carries on where it stopped.

A variant the backend cannot run becomes a row with status ``skipped`` and the reason; an
error in one row (a CUDA error, out of memory) becomes status ``failed`` with a one-line
reason, and the sweep goes on.

Parity of one row (docs/DESIGN.md, "Metrics"): the kernel's max abs error against FP64 on the compared
rows must be at most ``2 * model_err + floor``, where ``model_err`` is the numerics model's
error (same tile size as the kernel) against the same FP64 reference on the same rows. The
model runs on the CPU: beside a GPU backend it covers every compared row up to
``MODEL_WORK_BUDGET`` score elements per shape, and past that a seeded sample of them (first
and last row included), on which parity is then judged (the row's reason says so). On the
numpy backend the "kernel" *is* the model, so its ratio is 1 by construction.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from pa_bench import variants as registry
from pa_bench.errors import PaBenchError
from pa_bench.measure.deadline import KernelHung
from pa_bench.notes import INPUTS, PARITY, TIMING, Note
from pa_bench import notes as N
from pa_bench.measure.outcome import TimingOutcome
from pa_bench.measure.timing import TimingResult
from pa_bench.problem.config import ALL_ROWS
from pa_bench.numerics.judge import judge, twin_note, with_budget
from pa_bench.phases import PhaseClock
from pa_bench.resume import check_resume, shape_work
from pa_bench.shard import Shard, resume_shard, shard_meta, shard_problems
from pa_bench.store import results as R
from pa_bench.store.records import STATUS_FAILED, STATUS_OK, STATUS_SKIPPED, Record
from pa_bench.fmt import first_line

MODE_PARITY = "parity"
MODE_TIME = "time"
MODE_ALL = "run"

#: Score elements (query heads x rows x visible keys) the CPU numerics model may take per
#: shape beside a GPU backend before it runs on sampled rows (about a minute on 2 cores).
MODEL_WORK_BUDGET = 1 << 31
#: The same beside a backend that runs the model itself on the GPU (``backend.model``): every
#: sampled row of configs/long.yaml (1M keys x 16 rows x 32 heads is 2^29) and more.
GPU_MODEL_WORK_BUDGET = 1 << 34


# --------------------------------------------------------------------------- progress


class Progress(Protocol):
    """What the runner reports while it works (pa_bench.present.console draws it).

    ``work`` counts FLOPs (``Problem.flops`` per row), so an ETA can weigh the rows left by the
    work they hold; a sink given no work counts rows."""

    def start(self, total: int, description: str, work: float = 0.0) -> None: ...  # rows, their work
    def update(self, description: str) -> None: ...  # the shape now running
    def variant(self, name: str | None) -> None: ...  # the variant now running; None: all at once
    # rows finished and their work; ran=False: they needed none (kept by --resume, skipped), so
    # their work leaves the ETA's total instead of counting as done
    def advance(self, n: int = 1, work: float = 0.0, ran: bool = True) -> None: ...
    def phase(self, name: str) -> None: ...  # the work now running (pa_bench.phases.PHASES)
    def log(self, message: str) -> None: ...
    def stop(self) -> None: ...


class NullProgress:
    """A progress sink that ignores everything (library use, tests)."""

    def start(self, total: int, description: str, work: float = 0.0) -> None:
        pass

    def update(self, description: str) -> None:
        pass

    def variant(self, name: str | None) -> None:
        pass

    def advance(self, n: int = 1, work: float = 0.0, ran: bool = True) -> None:
        pass

    def phase(self, name: str) -> None:
        pass

    def log(self, message: str) -> None:
        pass

    def stop(self) -> None:
        pass


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C during a run: the finished rows are kept in ``run_dir``."""

    def __init__(self, run_dir: Path):
        super().__init__(str(run_dir))
        self.run_dir = Path(run_dir)


# --------------------------------------------------------------------------- entry points


def run_parity(config, backend, **kwargs) -> Path:
    """Parity of every shape x variant of ``config``; returns the run directory."""
    return _run(MODE_PARITY, config, backend, **kwargs)


def run_timing(config, backend, **kwargs) -> Path:
    """Time per chunk of every shape x variant of ``config``; returns the run directory."""
    return _run(MODE_TIME, config, backend, **kwargs)


def run_all(config, backend, **kwargs) -> Path:
    """Parity and timing of every shape x variant of ``config``; returns the run directory."""
    return _run(MODE_ALL, config, backend, **kwargs)


@dataclass
class _Job:
    """Everything one run needs while walking its shapes."""

    mode: str
    config: Any
    backend: Any
    run: R.RunDir
    progress: Progress
    sample_rows: int | None
    save_outputs: Path | None
    describe: dict = field(default_factory=dict)
    previous: dict = field(default_factory=dict)  # (shape, variant) -> Record from a resumed run
    last_phase: dict = field(default_factory=dict)  # variant -> the phase that finishes its row
    kept: set = field(default_factory=set)  # finished rows of a resumed run (only re-timed)
    phases: PhaseClock = field(default_factory=PhaseClock)  # seconds per phase: meta.json
    work: float = 0.0  # FLOPs of one row of the shape now running (the progress ETA's weight)
    prefetch: Any = None  # pa_bench.problem.prefetch.InputsPrefetch: the next shapes' inputs
    hung_before: set = field(default_factory=set)  # (shape, variant) of a resumed run that hung
    retry_failed: bool = False  # --retry-failed: run those rows again
    ahead: Any = None  # pa_bench.backends.compile_ahead.CompileAhead: the child building slow compiles ahead
    rows_run: int = 0  # rows this walk ran a phase of (0 on resuming a finished run)

    @property
    def parity(self) -> bool:
        return self.mode in (MODE_PARITY, MODE_ALL)

    @property
    def timing(self) -> bool:
        return self.mode in (MODE_TIME, MODE_ALL)

    def seconds(self) -> dict:
        """meta.json's ``phase_seconds``, ``kernel_seconds`` (the kernels phase per variant) and
        ``compile_ahead``."""
        out = {"phase_seconds": self.phases.rounded(), "kernel_seconds": self.phases.rounded_parts("kernels")}
        if self.ahead is not None:
            out["compile_ahead"] = self.ahead.meta()
        return out


def _run(
    mode: str,
    config,
    backend,
    *,
    results_root: str | Path = "results",
    sample_rows: int | None = None,
    resume_run: str | Path | None = None,
    save_outputs: str | Path | None = None,
    progress: Progress | None = None,
    command: list[str] | None = None,
    write_report: bool = True,
    shard: Shard | None = None,
    retry_failed: bool = False,
) -> Path:
    """Walk every shape of ``config`` for ``mode`` and write a run directory.

    ``sample_rows``: ``--sample-rows``, query rows compared with FP64 per shape (None: the
    config's for this backend, ``ParitySettings.rows_for``; ``ALL_ROWS``: every row). ``resume_run``: a run directory (or run id under
    ``results_root``) to carry on; its rows that finished ok are kept, and so are rows whose
    kernel hung unless ``retry_failed``. ``shard``: run only the shapes of this shard
    (pa_bench.shard); meta.json keeps the whole config and the shard.

    A GPU wait past its deadline (:class:`~pa_bench.measure.deadline.KernelHung`) writes its row
    as failed, marks the run ``hung`` in meta.json and is raised again: the CUDA context is lost,
    so the caller must leave the process (the CLI: one line, exit code 3).
    """
    from pa_bench.problem.plan import make_plan

    progress = progress or NullProgress()
    plan = make_plan(config)
    command = list(sys.argv if command is None else command)
    started = time.time()
    describe = backend.describe()
    if resume_run is not None:
        run = R.open_run_to_resume(resume_run, root=results_root)
        stored = run.read_meta()
        shard = resume_shard(str(resume_run), stored, shard)
        sample_rows = check_resume(str(resume_run), stored, mode=mode, config=plan.config.to_dict(),
                                   backend=backend.name, sample_rows=sample_rows)
        previous = {r.key(): r for r in run.records()}
        hung_before = {(h.get("shape"), h.get("variant")) for h in stored.get("hung") or []}
        run.update_meta(resumes=stored.get("resumes", []) + [
            {"command": command, "started": R.now_utc_iso()}], status="running")
    else:
        run = R.new_run_dir(results_root, config.name, backend.name)
        previous = {}
        hung_before = set()
        run.write_meta(_meta(mode, config, backend, describe, command, sample_rows))
        if shard is not None:
            run.update_meta(shard=shard_meta(plan.problems, shard, lambda p: p.shape.written))
    if shard is not None:
        plan.problems = shard_problems(plan.problems, shard)
    job = _Job(mode, config, backend, run, progress, sample_rows,
               Path(save_outputs) if save_outputs is not None else None, describe, previous,
               hung_before=hung_before, retry_failed=retry_failed)

    job.phases = PhaseClock(progress)
    # the next shapes' inputs are drawn on threads while a shape runs (not when resuming: most
    # shapes of a resumed run are finished and need none)
    from pa_bench.problem.prefetch import InputsPrefetch

    job.prefetch = InputsPrefetch([] if previous else plan.problems)
    if not previous:
        from pa_bench.backends import compile_ahead
        from pa_bench.backends import announce_plan

        # the slowest compiles, built ahead in a child process (pa_bench.backends.compile_ahead); then what
        # the run is about to do, and roughly how long it will take
        job.ahead = compile_ahead.start(config, backend.name, plan.variants)
        backend.compile_builds(plan.problems, plan.variants)   # every kernel build, side by side
        announce_plan(mode, plan, backend, lambda pb: _rows_for(job, pb.queries, pb.seed), progress.log)
    progress.start(len(plan), f"{mode} {config.name} on {backend.name}",
                   work=sum(p.flops for p in plan.problems) * len(plan.variants))
    try:
        for problem in plan.problems:
            _run_shape(job, problem, plan.variants)
            _sort_records(run, plan)
    except KeyboardInterrupt:
        progress.stop()
        run.finish_meta(resumed=resume_run is not None, status="interrupted",
                        finished=R.now_utc_iso(), wall_seconds=round(time.time() - started, 3),
                        **job.seconds(), backend_meta=backend.meta())
        raise RunInterrupted(run.path) from None
    except KernelHung as exc:   # the row is saved as failed; the GPU is lost: nothing more runs
        progress.stop()
        stored = run.read_meta().get("hung") or []
        run.update_meta(status="hung", finished=R.now_utc_iso(),
                        wall_seconds=round(time.time() - started, 3), **job.seconds(),
                        hung=stored + [{"shape": exc.shape, "variant": exc.variant,
                                        "what": exc.what, "seconds": exc.seconds}])
        exc.run_dir = run.path
        raise
    finally:
        job.prefetch.close()   # drop inputs drawn ahead, whatever ended the walk
        if job.ahead is not None:
            job.ahead.close()
        backend.close()
    if resume_run is not None and job.rows_run == 0:
        progress.log(f"nothing to resume: {run.path.name} has no row left to run"
                     + (" (--retry-failed runs the rows whose kernel hung)" if hung_before and not retry_failed else ""))
    # backend_meta again: the builds and launches are known only once the kernels have run
    run.finish_meta(resumed=resume_run is not None, status="complete", finished=R.now_utc_iso(),
                    wall_seconds=round(time.time() - started, 3),
                    **job.seconds(), backend_meta=backend.meta())
    if write_report:  # after every record is saved; shown as the last phase
        with job.phases.phase("report"):
            # plots only where a run times and checks (matplotlib's first import is slow)
            from pa_bench.present.report import write_report_or_note

            write_report_or_note(run.path, progress.log, plots=mode == MODE_ALL)
        run.finish_meta(resumed=resume_run is not None, wall_seconds=round(time.time() - started, 3),
                        **job.seconds())
    progress.stop()
    return run.path


def _sort_records(run: R.RunDir, plan) -> None:
    """Keep records.csv in the plan's order (shape-major, variants as listed)."""
    shapes = {p.shape.written: i for i, p in enumerate(plan.problems)}
    variants = {v: i for i, v in enumerate(plan.variants)}
    records = run.records()
    ordered = sorted(records, key=lambda r: (shapes.get(r.shape, len(shapes)),
                                             variants.get(r.variant, len(variants))))
    if [r.key() for r in ordered] != [r.key() for r in records]:
        run.write_records(ordered)


# --------------------------------------------------------------------------- meta


def _meta(mode: str, config, backend, describe: dict, command: list[str],
          sample_rows: int | None) -> dict:
    from pa_bench.present import envinfo

    repo = Path(__file__).resolve().parent.parent
    return {
        "mode": mode,
        "status": "running",
        "created": R.now_utc_iso(),
        "started": R.now_utc_iso(),
        "command": command,
        "config": config.to_dict(),
        "config_path": config.path,
        "seed": config.seed,
        "sample_rows": sample_rows,
        "backend": describe,
        "backend_meta": backend.meta(),
        "environment": envinfo.environment(),
        "git_commit": R.git_commit(repo),
        "git_dirty": R.git_dirty(repo),
    }


# --------------------------------------------------------------------------- one shape


def base_record(job: _Job, problem, variant: str) -> Record:
    """A record with every "what ran / who ran it" column and the reference figures filled."""
    cfg = job.config
    fig = cfg.ref_figure(problem.shape, variant)
    return Record(
        config=cfg.name, shape=problem.shape.written, label=problem.shape.label,
        context=problem.context, queries=problem.queries, heads_q=problem.heads_q,
        heads_kv=problem.heads_kv, head_dim=problem.head_dim, layout=problem.layout,
        page=problem.page, data=problem.data, variant=variant, backend=job.backend.name,
        gpu=job.describe.get("gpu"), arch=job.describe.get("arch"), status=STATUS_OK,
        device_index=job.describe.get("device_index"), device_uuid=job.describe.get("device_uuid"),
        out_dtype=problem.out_dtype, softmax_scale=problem.softmax_scale, seed=problem.seed,
        mma=job.describe.get("mma"), force_turing=bool(cfg.force_turing),
        ref_ms=None if fig is None else fig.ms, ref_err=None if fig is None else fig.err,
    )


@dataclass
class _Row:
    """A record being built, with the outcome of each phase."""

    record: Record
    parity_reason: str | None = None   # why parity cannot run (None: it can)
    timing_reason: str | None = None
    notes: list[Note] = field(default_factory=list)  # joined into the record's reason by finish()
    failed: bool = False
    ran: bool = False                  # some phase ran ok

    def finish(self) -> Record:
        rec = self.record
        if self.failed:
            rec.status = STATUS_FAILED
        elif self.ran:
            rec.status = STATUS_OK
        else:
            rec.status = STATUS_SKIPPED
        rec.reason = N.join(self.notes)
        return rec


def _run_shape(job: _Job, problem, variants: list[str]) -> None:
    backend = job.backend
    key = problem.shape.written
    job.progress.update(f"{problem.shape.label} ({problem.context}x{problem.queries})")
    job.progress.variant(None)
    job.work = float(problem.flops)
    rows: dict[str, _Row] = {}
    for v in variants:
        row = _Row(base_record(job, problem, v))
        if job.parity:
            row.parity_reason = _safe_reason(backend.unsupported_parity, v, problem)
        if job.timing:
            row.timing_reason = _safe_reason(backend.unsupported_timing, v, problem)
        row.notes += [Note(phase, r) for phase, r in ((PARITY, row.parity_reason),
                                                      (TIMING, row.timing_reason)) if r]
        rows[v] = row

    # Rows a resumed run already finished are kept as they are.
    work = shape_work(variants, parity=job.parity, timing=job.timing,
                      parity_reasons={v: r.parity_reason for v, r in rows.items()},
                      timing_reasons={v: r.timing_reason for v, r in rows.items()},
                      previous={v: p for v in variants if (p := job.previous.get((key, v))) is not None},
                      hold=set() if job.retry_failed else {v for v in variants if (key, v) in job.hung_before})
    for v in work.kept:
        job.progress.advance(work=job.work, ran=False)
    for v in work.skipped:  # nothing it can run
        job.run.save_record(rows[v].finish())
        job.progress.advance(work=job.work, ran=False)
    todo_parity, todo_timing, active = list(work.parity), list(work.timing), list(work.active)
    if not active:
        return
    job.rows_run += len(active)
    job.last_phase = work.last_phase(MODE_PARITY, MODE_TIME)  # each row counts one progress step
    job.kept = set(work.kept)

    try:
        from pa_bench.problem.inputs import make_inputs

        with job.phases.phase("inputs"):
            inputs = job.prefetch.take(problem) if job.prefetch is not None else make_inputs(problem)
            prepared = backend.prepare(inputs)
    except PaBenchError as exc:  # e.g. "will not fit", a bad .npz: skip the shape's rows
        return _give_up(job, rows, active, first_line(exc), failed=False)
    except Exception as exc:
        return _give_up(job, rows, active, _failure(exc), failed=True)

    try:
        if todo_parity:
            _parity_phase(job, problem, inputs, prepared, rows, todo_parity, variants)
        if todo_timing:
            _timing_phase(job, problem, prepared, rows, todo_timing, todo_parity)
    except KernelHung as exc:   # no release: freeing GPU memory would wait on the hung kernel
        _record_hung(job, rows, exc, key)
        raise
    try:
        backend.release(prepared)
    except Exception:  # releasing must not hide an earlier row's outcome
        pass


def _record_hung(job: _Job, rows: dict[str, "_Row"], exc: KernelHung, key: str) -> None:
    """Write the row whose call hung as failed with the one-line reason (every row of the shape
    not yet saved, where the wait was not one variant's: the reference, the model)."""
    exc.shape = key
    hung = [exc.variant] if exc.variant in rows else [v for v in rows if v not in job.kept]
    for v in hung:
        rows[v].failed = True
        rows[v].notes.append(Note(exc.phase or PARITY, str(exc)))
        job.run.save_record(rows[v].finish())


def _save(job: _Job, row: _Row, phase: str) -> None:
    """Save a row after one of its phases, and count it when that phase was its last."""
    job.run.save_record(row.finish())
    if job.last_phase.get(row.record.variant) == phase:
        job.progress.advance(work=job.work)


def _give_up(job: _Job, rows: dict[str, _Row], variants: list[str], reason: str,
             failed: bool, phase: str | None = None) -> None:
    """Mark rows skipped (or failed) with one reason; phase None: the whole shape."""
    for v in variants:
        if v in job.kept:  # a finished row is only replaced by a better one
            continue
        rows[v].notes.append(Note(INPUTS if phase is None else PARITY, reason))
        rows[v].failed = rows[v].failed or failed
        if phase is None:
            job.run.save_record(rows[v].finish())
            job.progress.advance(work=job.work, ran=False)
        else:
            _save(job, rows[v], phase)


def _safe_reason(fn, variant: str, problem) -> str | None:
    try:
        return fn(variant, problem)
    except PaBenchError as exc:
        return first_line(exc)


# --------------------------------------------------------------------------- parity


def _rows_for(job: _Job, nq: int, seed: int) -> np.ndarray | None:
    """Query rows compared with FP64 (sorted), or None for every row."""
    from pa_bench.numerics.reference import sample_rows

    n = job.config.parity.rows_for(job.backend.kernels_are_model, job.sample_rows)
    if n == ALL_ROWS or n >= nq:
        return None
    return sample_rows(nq, n, seed)


def _model_positions(job: _Job, problem, compared: np.ndarray, seed: int) -> np.ndarray | None:
    """Positions (within the compared rows) the numerics model runs on; None: all of them.

    Beside a GPU backend the model runs on every compared row only while that is at most
    GPU_MODEL_WORK_BUDGET score elements where the backend runs it on the GPU (``model_on_gpu``),
    MODEL_WORK_BUDGET where it runs on the CPU; past that on a seeded sample (first and last row
    included), and parity is judged on those rows alone.
    """
    from pa_bench.numerics.reference import sample_rows

    if job.backend.kernels_are_model:
        return None  # the kernel is the model: it already ran on every compared row
    work = problem.heads_q * int(np.sum(problem.context + compared + 1))
    budget = GPU_MODEL_WORK_BUDGET if job.backend.model_on_gpu else MODEL_WORK_BUDGET
    if work <= budget:
        return None
    n = max(2, int(len(compared) * budget / work))
    return sample_rows(len(compared), n, seed)


def _parity_phase(job: _Job, problem, inputs, prepared, rows: dict[str, _Row],
                  todo: list[str], variants: list[str]) -> None:
    from pa_bench.numerics import metrics
    from pa_bench.numerics.model import input_rounding, max_slack, pv_chain_keys

    backend, cfg = job.backend, job.config
    sel = _rows_for(job, problem.queries, problem.seed)
    all_rows = np.arange(problem.queries) if sel is None else sel
    try:
        with job.phases.phase("reference"):
            ref = np.asarray(backend.reference(inputs, sel, quantised=True), dtype=np.float64)
            ref_float = backend.reference(inputs, sel, quantised=False)
    except PaBenchError as exc:
        return _give_up(job, rows, todo, first_line(exc), failed=False, phase=MODE_PARITY)
    except Exception as exc:
        return _give_up(job, rows, todo, "FP64 reference: " + _failure(exc), failed=True,
                        phase=MODE_PARITY)
    quant_err = None if ref_float is None else float(np.max(np.abs(np.asarray(ref_float) - ref)))
    del ref_float
    model_pos = _model_positions(job, problem, all_rows, problem.seed)
    model_rows = all_rows if model_pos is None else all_rows[model_pos]
    ref_model = ref if model_pos is None else ref[:, model_pos]
    model_errs: dict[tuple, float] = {}
    round_errs: dict[str, float] = {}

    def round_err(kind: str) -> float:
        # what the rounding alone costs: FP64 with the rounded input against FP64 without (ref),
        # on the same int8 K/V and rows; once per shape and rounding
        if kind not in round_errs:
            with job.phases.phase("reference"):
                rounded = backend.reference(_rounded_inputs(inputs, kind), sel, quantised=True)
            round_errs[kind] = float(np.max(np.abs(np.asarray(rounded, dtype=np.float64) - ref), initial=0.0))
        return round_errs[kind]

    def model_err(variant: str, kernel_out: np.ndarray | None) -> float:
        # the arithmetic the backend's kernel does: its launch's tile size (a Triton kernel's: its
        # configuration's on this shape), where it splits the keys and its key segments; how long
        # one P.V accumulator chain runs and its running maximum (the variant's)
        launch = backend.launch(variant, problem)
        key = (launch.tile_keys, launch.split_keys, pv_chain_keys(variant), launch.segment_keys, max_slack(variant),
               input_rounding(variant))
        if key not in model_errs:
            if backend.kernels_are_model and kernel_out is not None:
                out = kernel_out  # the kernel's output is the model's
            else:
                with job.phases.phase("model"):
                    rounding = {} if key[5] is None else {"input_rounding": key[5]}  # only where declared
                    out = backend.model(inputs, key[0], model_rows, split_keys=key[1], pv_chain_keys=key[2],
                                        segment_keys=key[3], max_slack=key[4], **rounding)
            model_errs[key] = float(metrics.error_metrics(out, ref_model)["max_abs_err"])
        return model_errs[key]

    # Partners of the cross-variant diffs are computed too (not re-recorded) when resuming.
    held = set() if job.retry_failed else {v for (shape, v) in job.hung_before
                                            if shape == problem.shape.written}
    partners = [v for v in registry.DIFF_PARTNERS if v in variants and v not in todo
                and rows[v].parity_reason is None and v not in held]   # a hung one would hang again
    order = registry.in_order(todo + partners)  # partners of the cross-variant diffs come first
    outputs: dict[str, Any] = {}
    for v in order:
        row, record = rows[v], rows[v].record
        recorded = v in todo
        job.progress.variant(v)
        try:
            with job.phases.phase("kernels", v):
                ko = backend.compute(prepared, v, sel, check_determinism=cfg.parity.determinism)
            out = np.asarray(ko.out)
            outputs[v] = (ko, out)
            if not recorded:
                continue
            if registry.is_peer(v):         # informational: a peer has no numerics model
                _fill_peer_errors(record, out, ref, ko, sel)
                record.impl = _impl(job, prepared, v)
                row.ran = True
                _save(job, row, MODE_PARITY)
                continue
            verdict = judge(out, ref, model_err(v, out), bool(ko.canary_ok), model_pos)
            if (rounding := input_rounding(v)) is not None:   # also held to the accuracy budget
                verdict = with_budget(verdict, quant_err)
                record.input_round_err, record.budget_pass = round_err(rounding), verdict.budget_pass
            pm = verdict.metrics
            record.max_abs_err, record.rel_l2_err, record.nmse = pm.max_abs_err, pm.rel_l2_err, pm.nmse
            record.cosine, record.nan_inf, record.canary_ok = pm.cosine, pm.nan_inf, bool(ko.canary_ok)
            record.model_max_abs_err, record.err_ratio = pm.model_max_abs_err, pm.err_ratio
            record.parity_pass = verdict.passed
            record.sampled_rows = None if sel is None else len(sel)
            record.quant_max_abs_err = quant_err
            record.deterministic = ko.deterministic
            row.notes += [Note(PARITY, n) for n in verdict.notes]
            row.ran = True
        except KeyboardInterrupt:
            raise
        except KernelHung as exc:       # the variant being computed is the one that hung
            hung = exc.at(exc.what, exc.variant or v)
            hung.phase = PARITY
            raise hung from None
        except PaBenchError as exc:
            if not recorded:
                continue
            row.notes.append(Note(PARITY, first_line(exc)))
        except Exception as exc:
            if not recorded:
                continue
            row.failed = True
            row.notes.append(Note(PARITY, _failure(exc)))
        _fill_diffs(job, prepared, rows, outputs, v)
        _save(job, row, MODE_PARITY)
        _refresh_partner_diffs(job, prepared, rows, outputs, v, todo)
    if job.save_outputs is not None:
        _save_outputs(job, problem, sel, ref, outputs)


def _rounded_inputs(inputs, kind: str):
    """``inputs`` with Q as a kernel with input rounding ``kind`` sees it (float64, exact), for
    the FP64 reference of what the rounding costs."""
    from dataclasses import replace

    from pa_bench.numerics.rounding import rounded_q

    return replace(inputs, q=rounded_q(inputs.q, kind))


def _fill_peer_errors(record: Record, out: np.ndarray, ref: np.ndarray, ko, sel) -> None:
    """A peer's error columns against the same FP64 reference on the same rows; no verdict."""
    from pa_bench.numerics import metrics

    m = metrics.error_metrics(out, ref)
    record.max_abs_err, record.rel_l2_err, record.nmse = m["max_abs_err"], m["rel_l2_err"], m["nmse"]
    record.cosine, record.nan_inf = m["cosine"], m["nan_inf"]
    record.sampled_rows = None if sel is None else len(sel)
    record.deterministic = ko.deterministic
    record.parity_pass = None


def _diff(job: _Job, prepared, outputs: dict, a: str, b: str) -> float | None:
    """Max abs difference of two variants' outputs: full outputs where the backend keeps
    them (``max_diff``), else on the compared rows."""
    if a not in outputs or b not in outputs:
        return None
    try:
        d = job.backend.max_diff(prepared, a, b)
        if d is not None:
            return float(d)
    except Exception:
        pass
    return float(np.max(np.abs(outputs[a][1] - outputs[b][1]), initial=0.0))


def _fill_diffs(job: _Job, prepared, rows: dict[str, _Row], outputs: dict, v: str) -> None:
    rec = rows[v].record
    if v not in outputs:
        return
    rec.diff_vs_v1 = _diff(job, prepared, outputs, v, "v1")
    rec.diff_vs_v2 = _diff(job, prepared, outputs, v, "v2")
    twin = registry.get(v).bitwise_twin if registry.find(v) else None
    if twin is None or twin not in outputs or rec.parity_pass is None:
        return
    ko, ko_twin = outputs[v][0], outputs[twin][0]  # v2t must match v2 bit for bit (same MMA path)
    diff = _diff(job, prepared, outputs, v, twin)
    same = ko.full_hash == ko_twin.full_hash if ko.full_hash and ko_twin.full_hash else diff == 0.0
    note = twin_note(v, twin, same, diff)
    if note:
        rec.parity_pass = False
        rows[v].notes.append(Note(PARITY, note))


def _refresh_partner_diffs(job: _Job, prepared, rows, outputs, v: str, todo: list[str]) -> None:
    """A new output gives earlier rows of this shape their diff against it."""
    if v not in registry.DIFF_PARTNERS:
        return
    for other in todo:
        if other == v or other not in outputs:
            continue
        rec = rows[other].record
        if rec.parity_pass is None:
            continue
        before = (rec.diff_vs_v1, rec.diff_vs_v2)
        _fill_diffs_quiet(job, prepared, rows, outputs, other)
        if (rec.diff_vs_v1, rec.diff_vs_v2) != before:
            job.run.save_record(rows[other].finish())


def _fill_diffs_quiet(job, prepared, rows, outputs, v: str) -> None:
    rec = rows[v].record
    rec.diff_vs_v1 = _diff(job, prepared, outputs, v, "v1")
    rec.diff_vs_v2 = _diff(job, prepared, outputs, v, "v2")


def _save_outputs(job: _Job, problem, sel, ref, outputs: dict) -> None:
    """``<dir>/<shape>/{<variant>,reference,rows}.npy`` for checking with other tools."""
    import re

    name = re.sub(r"[^A-Za-z0-9._+-]+", "_", problem.shape.written)
    out_dir = job.save_outputs / name
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = np.arange(problem.queries) if sel is None else np.asarray(sel)
    np.save(out_dir / "rows.npy", rows.astype(np.int64))
    np.save(out_dir / "reference.npy", ref)
    for v, (_ko, out) in outputs.items():
        np.save(out_dir / f"{v}.npy", np.asarray(out, dtype=np.float32))


# --------------------------------------------------------------------------- timing


def _timing_phase(job: _Job, problem, prepared, rows: dict[str, _Row], todo: list[str],
                  parity_todo: list[str]) -> None:
    from pa_bench.measure import stats

    key = problem.shape.written
    job.progress.variant(None)  # every variant of the shape is timed at once, interleaved
    if job.ahead is not None:   # no other process's GPU work may meet a measurement
        job.ahead.pause()
    try:
        with job.phases.phase("timing"):
            timed = job.backend.time(prepared, list(todo), job.config.timing)
        results = {v: TimingOutcome.of(r) for v, r in timed.items()}
    except KeyboardInterrupt:
        raise
    except KernelHung as exc:
        exc.phase = TIMING
        raise
    except PaBenchError as exc:
        results = {v: TimingOutcome(skipped=first_line(exc)) for v in todo}
    except Exception as exc:
        results = {v: TimingOutcome(failed=_failure(exc)) for v in todo}
    finally:
        if job.ahead is not None:
            job.ahead.resume()
    base = results.get(registry.BASELINE)
    base_samples = base.result.samples_ms if base is not None and base.timed else None
    for v in todo:
        row, rec = rows[v], rows[v].record
        outcome = results.get(v) or TimingOutcome.of(None)
        if v in job.kept and not outcome.timed:
            continue  # re-timing a finished row failed: keep the row it had
        if v not in parity_todo and (prev := job.previous.get((key, v))) is not None:
            _copy_parity(prev, rec, row)  # a resumed row keeps its parity columns
        if outcome.failed:
            row.failed = True
            row.notes.append(Note(TIMING, outcome.failed))
        elif outcome.skipped:
            row.notes.append(Note(TIMING, outcome.skipped))
        else:
            res = outcome.result
            try:
                _fill_timing(rec, res, problem, base_samples if v != registry.BASELINE else None, stats)
                rec.impl = rec.impl or _impl(job, prepared, v)
                job.run.save_samples(key, v, res.samples_ms, res.clocks_mhz)
                row.ran = True
            except Exception as exc:
                row.failed = True
                row.notes.append(Note(TIMING, _failure(exc)))
        _save(job, row, MODE_TIME)


def _impl(job: _Job, prepared, variant: str) -> str | None:
    """What the backend says ran ``variant`` (a peer's kernel), where it says."""
    try:
        return job.backend.impl(prepared, variant)
    except Exception:
        return None


def _copy_parity(prev: Record, rec: Record, row: _Row) -> None:
    for name in ("max_abs_err", "rel_l2_err", "nmse", "cosine", "nan_inf", "canary_ok",
                 "model_max_abs_err", "err_ratio", "parity_pass", "sampled_rows",
                 "quant_max_abs_err", "deterministic", "diff_vs_v1", "diff_vs_v2", "input_round_err",
                 "budget_pass"):
        setattr(rec, name, prev.value(name))
    if prev.parity_pass is not None:
        row.ran = True
    row.notes += [n for n in N.parse(prev.reason) if n.phase == PARITY]


def _fill_timing(rec: Record, res: TimingResult, problem, base_samples, stats) -> None:
    st = stats.summarize(res.samples_ms)
    rec.ms_median, rec.ms_min, rec.ms_max = st.median, st.min, st.max
    rec.ms_ci_lo, rec.ms_ci_hi = stats.placed_interval(res.samples_ms, res.placements)
    rec.ci_kind = "placements" if res.placements and len(set(res.placements)) > 1 else "samples"
    rec.ms_q1, rec.ms_q3 = st.q1, st.q3
    rec.ms_rel_spread = st.rel_stdev
    rec.samples = st.count
    rec.tflops = stats.tflops(problem.flops, st.median)
    rec.kv_gbps = stats.gbps(problem.kv_bytes, st.median)
    clocks = [float(c) for c in (res.clocks_mhz or []) if c is not None and math.isfinite(float(c))]
    rec.sm_clock_mhz = float(np.median(clocks)) if clocks else None
    rec.throttled = int(sum(bool(t) for t in (res.throttled or [])))
    rec.stop_reason = res.stop_reason or None
    rec.clock_source = res.clock_source
    rec.host_bound = res.host_bound
    if rec.variant == registry.BASELINE:
        rec.speedup_vs_v1, rec.speedup_lo, rec.speedup_hi = 1.0, 1.0, 1.0
    elif base_samples:
        rec.speedup_vs_v1, rec.speedup_lo, rec.speedup_hi = stats.paired_speedup(
            base_samples, res.samples_ms)


# --------------------------------------------------------------------------- helpers


def _failure(exc: BaseException) -> str:
    """One line naming an unexpected error (a CUDA error, out of memory ...)."""
    return f"{type(exc).__name__}: {first_line(exc)}"


__all__ = ["run_parity", "run_timing", "run_all", "RunInterrupted", "NullProgress", "Progress",
           "base_record"]
