"""The ``pa-bench`` command line (click): parse options, build objects, call the library.

Commands: ``parity``, ``time``, ``run``, ``report``, ``compare``, ``merge``, ``kernels``,
``env``, ``prompt``.
Tables go to stdout (rich), progress bars and notes to stderr; ``--json`` prints machine
output on stdout instead of tables. Every :class:`~pa_bench.errors.PaBenchError`, usage error
or unreadable file is one line ``error: <message>`` on stderr and a non-zero exit (2 for bad
input), never a traceback; Ctrl-C says where the finished rows are kept and exits 130.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import signal
import sys
from pathlib import Path
from typing import Any, Callable

import click

from pa_bench import __version__
from pa_bench.errors import BackendUnavailable, PaBenchError
from pa_bench.measure.deadline import KernelHung, hard_exit
from pa_bench import fmt
from pa_bench.variants import names as variant_names

EXIT_INTERRUPTED = 130  # Ctrl-C (SIGINT)
EXIT_TERMINATED = 143  # SIGTERM: 128 + 15, as a shell reports it
DEFAULT_RESULTS = "results"
DEBUG_ENV = "PA_BENCH_DEBUG"  # set to 1 to see the traceback of an unexpected error
EXIT_HUNG = 3  # a GPU wait passed its deadline (pa_bench.measure.deadline)


class Interrupted(Exception):
    """Ctrl-C, converted so that click does not print its own 'Aborted!'."""

    def __init__(self, run_dir: Path | None):
        super().__init__(str(run_dir))
        self.run_dir = run_dir


class CliFailure(Exception):
    """A command finished but its verdict is a failure (parity failed, a slowdown): exit 1."""

    def __init__(self, message: str, exit_code: int = 1):
        super().__init__(message)
        self.exit_code = exit_code


# --------------------------------------------------------------------------- the group


class PaBenchGroup(click.Group):
    """A click group whose errors are one line on stderr and an exit code, never a traceback."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True,
             **extra):
        code = self._main(args, prog_name or "pa-bench", complete_var, **extra)
        if standalone_mode:
            sys.exit(code)
        return code

    def _main(self, args, prog_name, complete_var, **extra) -> int:
        argv = list(sys.argv[1:] if args is None else args)
        if not argv:  # plain `pa-bench`: the help, not an error
            args = ["--help"]
        obj = extra.setdefault("obj", {})
        if isinstance(obj, dict):
            obj.setdefault("argv", ["pa-bench", *map(str, argv)])  # recorded in meta.json
        with _sigterm_as_interrupt():
            return self._invoke(args, prog_name, complete_var, **extra)

    def _invoke(self, args, prog_name, complete_var, **extra) -> int:
        try:
            rv = super().main(args=args, prog_name=prog_name, complete_var=complete_var,
                              standalone_mode=False, **extra)
            return rv if isinstance(rv, int) else 0
        except click.exceptions.Exit as exc:
            return exc.exit_code
        except click.ClickException as exc:
            hint = ""
            if isinstance(exc, click.UsageError) and exc.ctx is not None:
                hint = f" (see '{exc.ctx.command_path} --help')"
            return _fail(fmt.one_line(exc.format_message()) + hint, exc.exit_code)
        except click.exceptions.Abort:
            return _interrupted(None)
        except KernelHung as exc:     # the GPU is lost: say so on one line and leave at once
            _hung(exc, args)
        except Interrupted as exc:
            return _interrupted(exc.run_dir, _resumable(args))
        except KeyboardInterrupt as exc:
            return _interrupted(getattr(exc, "run_dir", None), _resumable(args))
        except CliFailure as exc:
            return _fail(str(exc), exc.exit_code)
        except PaBenchError as exc:
            return _fail(fmt.one_line(str(exc)), exc.exit_code)
        except FileNotFoundError as exc:
            return _fail(f"no such file: {exc.filename or fmt.one_line(str(exc))}", 2)
        except OSError as exc:
            where = f"{exc.filename}: " if exc.filename else ""
            return _fail(f"{where}{exc.strerror or fmt.one_line(str(exc))}", 1)
        except Exception as exc:  # a bug: still one line, with a way to get the traceback
            if os.environ.get(DEBUG_ENV):
                raise
            return _fail(f"internal error: {type(exc).__name__}: {fmt.one_line(str(exc))} "
                         f"(set {DEBUG_ENV}=1 for the traceback)", 1)


def _fail(message: str, code: int) -> int:
    click.echo(f"error: {message}", err=True)
    return code


def _hung(exc: KernelHung, args) -> None:
    """A GPU wait passed its deadline: one line (where the run is kept and how to carry on), then
    exit code 3 without the interpreter's clean-up, which would wait on the hung kernel."""
    run_dir = getattr(exc, "run_dir", None)
    where = ""
    if run_dir is not None:
        words = [a for a in (args or sys.argv[1:]) if not str(a).startswith("-")]
        how = f" (pa-bench {words[0]} --resume {run_dir} carries on after it)" if _resumable(args) else ""
        where = f"; the run is kept in {run_dir}{how}"
    _fail(f"{exc}{where}", EXIT_HUNG)
    hard_exit(EXIT_HUNG)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C would be, so that a run stops the same way."""


_signals = {"term": False}


@contextlib.contextmanager
def _sigterm_as_interrupt():
    """While a command runs, SIGTERM raises :class:`Terminated` (a KeyboardInterrupt): the
    runner marks the run interrupted and the CLI says where its rows are, as for Ctrl-C."""
    def on_term(signum, frame):
        _signals["term"] = True
        raise Terminated()

    _signals["term"] = False
    try:
        previous = signal.signal(signal.SIGTERM, on_term)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


# Commands that take --resume (`prompt` writes a run too, but starts over)
RESUMABLE = ("run", "parity", "time")


def _resumable(args) -> bool:
    """Whether the command in ``args`` (the argv after the program) takes --resume."""
    words = [a for a in (args or sys.argv[1:]) if not str(a).startswith("-")]
    return bool(words) and words[0] in RESUMABLE


def _interrupted(run_dir: Path | None, resumable: bool = True) -> int:
    what, code = ("terminated (SIGTERM)", EXIT_TERMINATED) if _signals["term"] else \
        ("interrupted", EXIT_INTERRUPTED)
    if run_dir is not None:
        again = f"resume with --resume {run_dir}" if resumable else "run the command again to start over"
        click.echo(f"{what}: finished rows kept in {run_dir}; {again}", err=True)
    else:
        click.echo(what, err=True)
    return code


def _no_interrupt_traceback(fn: Callable) -> Callable:
    """Turn Ctrl-C inside a command into :class:`Interrupted` (click would print 'Aborted!')."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except KeyboardInterrupt as exc:
            raise Interrupted(getattr(exc, "run_dir", None)) from None

    return wrapper


@click.group(cls=PaBenchGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="pa-bench")
def cli() -> None:
    """Build, check and time int8-KV prompt-attention kernels (v1, v2, v2t, v3, triton) and their PyTorch peers.

    \b
    pa-bench run                  parity + timing of configs/pr2092.yaml
    pa-bench parity --shapes 32Kx1024
    pa-bench time --variant v2t
    pa-bench report               markdown report of the newest run
    """


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point (``pa-bench``)."""
    cli.main(args=argv, prog_name="pa-bench")


# --------------------------------------------------------------------------- output helpers


def _stdout_console():
    from rich.console import Console

    console = Console(highlight=False, soft_wrap=False)
    if not console.is_terminal:
        console = Console(highlight=False, width=200, soft_wrap=False)
    return console


def _stderr_console():
    from rich.console import Console

    return Console(stderr=True, highlight=False)


def _note(message: str) -> None:
    click.echo(message, err=True)


class RichProgress:
    """The runner's progress sink on stderr: a rich bar naming the shape, its phase and the
    phase's seconds when stderr is a terminal; otherwise (a log file, CI) one line whenever a
    phase has run HEARTBEAT_S seconds, and every HEARTBEAT_S after, so no minute is silent."""

    HEARTBEAT_S = 30.0

    def __init__(self) -> None:
        import threading

        self.console = _stderr_console()
        self.bar = None
        self.task = None
        self._base = ""
        self._shape = ""
        self._phase: tuple[str, float] | None = None  # (name, monotonic start)
        self._lock = threading.Lock()
        self._timer = None

    def start(self, total: int, description: str) -> None:
        self._base = description
        if not self.console.is_terminal:
            return
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                   TimeElapsedColumn)

        self.bar = Progress(TextColumn("{task.description}"), _PhaseColumn(self), BarColumn(),
                            MofNCompleteColumn(), TimeElapsedColumn(), console=self.console,
                            transient=True)
        self.bar.start()
        self.task = self.bar.add_task(description, total=total)

    def update(self, description: str) -> None:
        self._shape = description
        if self.bar is not None:
            self.bar.update(self.task, description=f"{self._base}: {description}")

    def phase(self, name: str) -> None:
        import time

        with self._lock:
            self._phase = (name, time.monotonic())
        if self.bar is None and not self.console.is_terminal:
            self._schedule(self.HEARTBEAT_S)

    def phase_text(self) -> str:
        """``reference 37s``: the phase now running and how long it has run."""
        import time

        with self._lock:
            if self._phase is None:
                return ""
            name, since = self._phase
        return f"{name} {time.monotonic() - since:.0f}s"

    def heartbeat(self) -> None:
        """One line on stderr: the shape and the phase still running (the timer calls it)."""
        text = self.phase_text()
        if text:
            _note(f"{self._base}: {self._shape}: {text}")
            self._schedule(self.HEARTBEAT_S)

    def _schedule(self, seconds: float) -> None:
        import threading

        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = threading.Timer(seconds, self.heartbeat)
            self._timer.daemon = True
            self._timer.start()

    def advance(self, n: int = 1) -> None:
        if self.bar is not None:
            self.bar.advance(self.task, n)

    def log(self, message: str) -> None:
        if self.bar is not None:
            self.bar.console.print(message, markup=False)
        else:
            _note(message)

    def stop(self) -> None:
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            self._phase = None
        if self.bar is not None:
            self.bar.stop()
            self.bar = None


class _PhaseColumn:
    """A rich progress column: the phase now running and its seconds (redrawn live)."""

    def __init__(self, progress: RichProgress) -> None:
        self.progress = progress
        self.max_refresh = None

    def __call__(self, task):
        from rich.text import Text

        return Text(self.progress.phase_text(), style="cyan")

    def get_table_column(self):
        from rich.table import Column

        return Column(no_wrap=True, min_width=14)


def _print_json(data: Any) -> None:
    click.echo(json.dumps(_jsonable(data), indent=2, allow_nan=False))


def _jsonable(x: Any) -> Any:
    """Plain JSON values: NaN/inf become null, NumPy scalars become Python numbers."""
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if hasattr(x, "item") and not isinstance(x, (str, bytes)):
        try:
            x = x.item()
        except (TypeError, ValueError):
            pass
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, (str, int, float, bool)) or x is None:
        return x
    if type(x).__name__ in ("NAType", "NaTType"):
        return None
    return str(x)


# --------------------------------------------------------------------------- shared options


def _comma_list(value: str | None) -> list[str] | None:
    if value is None:
        return None
    items = [v.strip() for v in value.split(",") if v.strip()]
    return items or None


def _validate_variants(value: str | None) -> list[str] | None:
    from pa_bench import variants as registry

    if value is None:
        return None
    known = ", ".join(registry.names())
    items = _comma_list(value)
    if items is None:
        raise click.BadParameter(f"is empty; name one or more variants ({known})",
                                 param_hint="'--variant'")
    for v in items:
        if registry.find(v) is None:
            raise click.BadParameter(f"unknown variant {v!r} (choose from {known})",
                                     param_hint="'--variant'")
    return items


def _parse_heads(value: str | None) -> tuple[int | None, int | None]:
    """``--heads 32/8`` (query heads / KV heads) or ``--heads 16`` (16 and 16: no GQA)."""
    if value is None:
        return None, None
    text = value.replace(":", "/").replace(",", "/")
    parts = [p.strip() for p in text.split("/")]
    try:
        nums = [int(p) for p in parts]
    except ValueError:
        nums = []
    if len(nums) not in (1, 2):
        raise click.BadParameter(f"{value!r} is not HQ or HQ/HKV (e.g. 32/8)",
                                 param_hint="'--heads'")
    if any(n < 1 for n in nums):
        raise click.BadParameter(f"{value!r}: query and KV heads must be at least 1",
                                 param_hint="'--heads'")
    return nums[0], nums[-1]


def _parse_sample_rows(value: str | int | None) -> int | None:
    """``--sample-rows N`` (N >= 1) or ``all`` (0: every row); parsed as the options are."""
    if value is None or isinstance(value, int):
        return value
    if value.strip().lower() == "all":
        return 0
    try:
        n = int(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a number of rows (or 'all')",
                                 param_hint="'--sample-rows'") from None
    if n < 1:
        raise click.BadParameter(f"{value!r}: compare at least 1 row per shape (or 'all' for "
                                 "every row)", param_hint="'--sample-rows'")
    return n


def _profile_flag(ctx: click.Context, _param, value: bool) -> None:
    if value:
        ctx.meta["pa_bench.profile"] = True


def config_options(fn: Callable) -> Callable:
    """Options shared by parity, time and run: what to run and where results go."""
    options = [
        click.option("--shapes", metavar="LIST",
                     help="Comma list of CTXxQ shapes (32Kx1024,2.1Kx256,0x1536); beats the config."),
        click.option("--variant", "variants", metavar="LIST",
                     help="Comma list of variants: " + ", ".join(variant_names()) + "."),
        click.option("--backend", type=click.Choice(["auto", "cuda", "numpy"]), default="auto",
                     show_default=True,
                     help="cuda needs CuPy and an NVIDIA GPU; numpy runs the numerics model on the CPU."),
        click.option("--layout", type=click.Choice(["paged", "contiguous"]), help="KV cache layout."),
        click.option("--page", type=int, help="Keys per page (power of two >= 16)."),
        click.option("--heads", metavar="HQ/HKV", help="Query heads / KV heads, e.g. 32/8."),
        click.option("--head-dim", type=int, help="Head dimension (64 or 128)."),
        click.option("--data", metavar="KIND|FILE.npz",
                     help="normal, realistic, or an .npz of captured Q/K/V."),
        click.option("--seed", type=int, help="Seed of the generated data and sampled rows."),
        click.option("--force-turing", is_flag=True, default=None,
                     help="Run v1/v2t on the sm_75 path (m16n8k8 MMAs) on any GPU."),
        click.option("--results", "results_root", type=click.Path(file_okay=False),
                     default=DEFAULT_RESULTS, show_default=True, help="Where run directories go."),
        click.option("--resume", metavar="RUN",
                     help="Carry on an interrupted run (a run directory or id); finished rows are kept."),
        click.option("--json", "as_json", is_flag=True, help="Print the records as JSON."),
        click.option("--profile", is_flag=True, expose_value=False, callback=_profile_flag,
                     help="Write a cProfile of the run to <run dir>/profile.pstats and print the "
                          "wall and phase seconds (or set PA_BENCH_PROFILE=1 or =FILE)."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def config_file_option(fn: Callable) -> Callable:
    return click.option("--config", "config_path", type=click.Path(dir_okay=False),
                        help="Config YAML (default: configs/pr2092.yaml).")(fn)


def sample_rows_option(fn: Callable) -> Callable:
    return click.option(
        "--sample-rows", metavar="N|all", callback=lambda _ctx, _param, v: _parse_sample_rows(v),
        help="Query rows compared with FP64 per shape, seeded (default: all on cuda, "
             "parity.numpy_sample_rows on numpy).")(fn)


def timing_options(fn: Callable) -> Callable:
    fn = click.option("--max-seconds", type=float, metavar="S",
                      help="Timing budget per shape (all variants together).")(fn)
    fn = click.option("--hot", is_flag=True, default=None,
                      help="Time back-to-back launches (no L2 flush).")(fn)
    return fn


# --------------------------------------------------------------------------- building objects


def load_run_config(config_path: str | None, *, resume: str | None, results_root: str,
                    shapes: str | None, variants: str | None, layout: str | None,
                    page: int | None, heads: str | None, head_dim: int | None, data: str | None,
                    seed: int | None, force_turing: bool | None, hot: bool | None = None,
                    max_seconds: float | None = None):
    """The config file (or the resumed run's) with the command line's overrides applied."""
    from pa_bench.problem.config import DEFAULT_CONFIG, load_config
    from pa_bench.problem.plan import make_plan

    variant_list = _validate_variants(variants)
    heads_q, heads_kv = _parse_heads(heads)
    if config_path is None and resume is not None:
        config = _resumed_config(resume, results_root)  # the run's own settings (#14 defect 3)
    else:
        config = load_config(config_path or DEFAULT_CONFIG)
    notice = None
    overrides: dict[str, Any] = dict(layout=layout, page=page, heads_q=heads_q, heads_kv=heads_kv,
                                     head_dim=head_dim, seed=seed, force_turing=force_turing,
                                     hot=hot, max_seconds=max_seconds)
    if data is not None:
        if data.endswith(".npz") or os.sep in data:
            from pa_bench.problem.inputs import capture_overrides

            taken, shapes, notice = capture_overrides(config, data, shapes=shapes, heads_given=heads
                                                      is not None, head_dim_given=head_dim is not None)
            overrides.update(taken)  # what the capture holds fixes what was not given
        else:
            overrides["data"] = data
    config = config.with_overrides(**overrides)
    if shapes is not None or variant_list is not None:
        config = make_plan(config, shapes=shapes, variants=variant_list).config
    from pa_bench.problem.inputs import check_config_data

    check_config_data(config)  # unusable data stops here, before any row runs
    if notice:
        _note(notice)
    return config


def _resumed_config(resume: str, results_root: str):
    """The config a resumed run was made with, as its meta.json stores it (so --resume alone
    carries on with the same settings, even where the YAML file has changed since)."""
    from pa_bench.problem.config import config_from_dict
    from pa_bench.store.results import open_run

    run = open_run(resume, root=results_root)
    meta = run.read_meta()
    return config_from_dict(meta.get("config") or {}, where=f"{run.path}/meta.json",
                            path=meta.get("config_path"))


def build_backend(name: str, config, *, needs_timing: bool = False):
    """The backend for ``--backend``; ``auto`` falls back to numpy with a one-line notice,
    except for a command that only times (it needs the GPU)."""
    from pa_bench.backends import cuda_problem, cuda_unavailable_message, make_backend

    if needs_timing and name == "auto":
        problem = cuda_problem()
        if problem is not None:
            raise BackendUnavailable("timing " + cuda_unavailable_message(problem)
                                     .replace("the cuda backend needs", "needs", 1))
    return make_backend(name, config, notice=_note)


def _run_devices(config, spec: str, *, backend: str, results_root: str,
                 sample_rows: int | None) -> Path:
    """``run --devices``: one worker process per GPU (pa_bench.devices), one merged run."""
    from pa_bench import devices as devices_mod

    chosen = devices_mod.resolve(spec)
    progress = RichProgress()
    try:
        return devices_mod.run_on_devices(config, chosen, backend=backend, results_root=results_root,
                                          sample_rows=sample_rows, progress=progress,
                                          command=_command_line())
    finally:
        progress.stop()


def _run_command(mode: str, *, config, backend, results_root: str, resume: str | None,
                 sample_rows: int | None, save_outputs: str | None = None, shard=None) -> Path:
    from pa_bench import runner

    from pa_bench.profiling import RunProfile, profile_target

    fn = {"parity": runner.run_parity, "time": runner.run_timing, "run": runner.run_all}[mode]
    progress = RichProgress()
    ctx = click.get_current_context(silent=True)
    profile = RunProfile(profile_target(bool(ctx is not None and ctx.meta.get("pa_bench.profile"))))
    path = None
    try:
        with profile:
            path = fn(config, backend, results_root=results_root, sample_rows=sample_rows,
                      resume_run=resume, save_outputs=save_outputs, progress=progress,
                      command=_command_line(), shard=shard)
        return path
    except KeyboardInterrupt as exc:
        path = getattr(exc, "run_dir", None)
        raise
    finally:
        progress.stop()
        if profile.target is not None:
            _write_profile(profile, path)


def _write_profile(profile, run_dir: Path | None) -> None:
    """The cProfile file and the run's wall and phase seconds, on stderr."""
    from pa_bench.phases import phase_summary
    from pa_bench.store.results import open_run

    written = profile.write(run_dir)
    if written is not None:
        _note(f"profile: {written} (python -m pstats {written})")
    if run_dir is not None:
        summary = phase_summary(open_run(run_dir).read_meta())
        if summary:
            _note(summary)


def _command_line() -> list[str]:
    """The command as typed (``pa-bench ...``), for meta.json."""
    ctx = click.get_current_context(silent=True)
    obj = ctx.find_root().obj if ctx is not None else None
    if isinstance(obj, dict) and obj.get("argv"):
        return list(obj["argv"])
    return ["pa-bench", *sys.argv[1:]]


# --------------------------------------------------------------------------- tables


def _fmt(x: Any, kind: str = "g") -> str:
    """A terminal table cell ('-' when missing), formatted by pa_bench.fmt."""
    if isinstance(x, bool):
        return "yes" if x else "NO"
    if kind == "err":
        return fmt.err(x, "-")
    if kind == "ms":
        return fmt.ms(x, "-")
    if kind == "x":
        return fmt.ratio(x, "-", "x")
    if kind == "pct":
        return fmt.pct(x, ".2f", "-")
    if kind in ("0", "1"):
        return fmt.fixed(x, int(kind), "-")
    return "-" if fmt.number(x) is None and not isinstance(x, str) else str(x)


def _shape_cell(rec) -> str:
    exact = f"{rec.context}x{rec.queries}"
    shown = rec.label or rec.shape
    return shown if shown == exact else f"{shown} ({exact})"


def _params_line(config, backend_desc: dict, records) -> str:
    rows = {r.sampled_rows for r in records if r.max_abs_err is not None}
    if not rows:
        compared = ""
    elif rows == {None}:
        compared = ", FP64 on every row"
    else:
        compared = ", FP64 on " + "/".join(str(r) for r in sorted(x for x in rows if x)) + \
            " sampled rows per shape"
    scale = config.resolved_softmax_scale
    return (f"{config.name}: heads {config.heads_q}/{config.heads_kv} (q/kv), head_dim "
            f"{config.head_dim}, {config.layout}"
            f"{f' page {config.page}' if config.layout == 'paged' else ''}, data {config.data}, "
            f"seed {config.seed}, out {config.out_dtype}, softmax scale {scale:.6g}{compared}; "
            f"backend {backend_desc.get('backend', '?')} on {backend_desc.get('gpu', '?')} "
            f"({backend_desc.get('arch', '?')})")


def _table(title: str, columns: list[str], rows: list[list[str]]):
    from rich.table import Table

    table = Table(title=title, title_justify="left", show_lines=False)
    for c in columns:
        table.add_column(c, overflow="fold")
    for r in rows:
        table.add_row(*r)
    return table


def _notes(rec) -> list[str]:
    return [n for n in (rec.reason or "").split("; ") if n]


def _common_notes(records) -> list[str]:
    """Notes every row shares (printed once, not in every row)."""
    if len(records) < 2:
        return []
    common = set(_notes(records[0]))
    for r in records[1:]:
        common &= set(_notes(r))
    return [n for n in _notes(records[0]) if n in common]


def _reason(rec, common: list[str]) -> str:
    return "; ".join(n for n in _notes(rec) if n not in common)


def _parity_rows(records, common: list[str] = ()) -> list[list[str]]:
    out = []
    for r in records:
        out.append([
            _shape_cell(r), r.variant, r.status, _fmt(r.max_abs_err, "err"),
            _fmt(r.model_max_abs_err, "err"), _fmt(r.err_ratio, "x"),
            "-" if r.parity_pass is None else ("pass" if r.parity_pass else "FAIL"),
            _fmt(r.quant_max_abs_err, "err"), _fmt(r.diff_vs_v1, "err"), _fmt(r.diff_vs_v2, "err"),
            _fmt(r.deterministic), "all" if r.sampled_rows is None and r.max_abs_err is not None
            else _fmt(r.sampled_rows), _fmt(r.ref_err, "err"), _reason(r, common),
        ])
    return out


PARITY_COLUMNS = ["shape", "variant", "status", "max err vs FP64", "model err", "ratio", "parity",
                  "quant err", "diff v1", "diff v2", "determ.", "rows", "PR err", "reason"]
TIME_COLUMNS = ["shape", "variant", "status", "ms median", "ms q1-q3", "spread", "samples", "stop",
                "TFLOP/s", "KV GB/s", "SM MHz", "throttled", "vs v1", "PR ms", "reason"]


def _time_rows(records, common: list[str] = ()) -> list[list[str]]:
    out = []
    for r in records:
        timing_common = list(common) + [n for n in _notes(r) if "timing-only" in n]
        quart = "-" if r.ms_q1 is None else f"{_fmt(r.ms_q1, 'ms')}-{_fmt(r.ms_q3, 'ms')}"
        speed = _fmt(r.speedup_vs_v1, "x") if r.variant == "v1" else \
            fmt.speedup(r.speedup_vs_v1, r.speedup_lo, r.speedup_hi, missing="-", dash="-")
        out.append([
            _shape_cell(r), r.variant, r.status, _fmt(r.ms_median, "ms"), quart,
            _fmt(r.ms_rel_spread, "pct"), _fmt(r.samples), _stop_cell(r), _fmt(r.tflops, "1"),
            _fmt(r.kv_gbps, "0"), _fmt(r.sm_clock_mhz, "0"), _fmt(r.throttled), speed,
            _fmt(r.ref_ms, "ms"), _reason(r, timing_common),
        ])
    return out


def _stop_cell(r) -> str:
    """Why sampling stopped; a row that stopped short of the noise limit is marked '!'; a row
    whose hold timed out (host time may be in it) says 'host-bound'."""
    if r.stop_reason is None:
        return "-"
    cell = r.stop_reason if r.stop_reason == "noise" else f"{r.stop_reason}!"
    return cell + (" host-bound" if r.host_bound else "")


def _show_run(mode: str, run_path: Path, config, as_json: bool) -> list:
    from pa_bench.store.results import open_run

    run = open_run(run_path)
    records = run.records()
    if as_json:
        _print_json({"run": str(run_path), "records": [r.to_dict() for r in records]})
        return records
    meta = run.read_meta()
    console = _stdout_console()
    console.print(_params_line(config, meta.get("backend") or {}, records), markup=False)
    common = _common_notes(records)
    for note in common:
        console.print(f"all rows: {note}", markup=False)
    if mode in ("parity", "run"):
        console.print(_table("parity against FP64 (max abs error)", PARITY_COLUMNS,
                             _parity_rows(records, common)))
    if mode == "time" or (mode == "run" and any(r.ms_median is not None for r in records)):
        console.print(_table("time per chunk", TIME_COLUMNS, _time_rows(records, common)))
    return records


def _verdict(mode: str, run_path: Path, records) -> None:
    """Where the results are, and exit 1 if a row failed parity or failed to run."""
    _note(f"run directory: {run_path} (report: {run_path / 'report.md'})")
    failed = [r for r in records if r.status == "failed"]
    bad_parity = [r for r in records if r.parity_pass is False]
    nondet = [r for r in records if r.deterministic is False]
    problems = []
    if bad_parity:
        problems.append("parity failed for " + ", ".join(f"{r.display_shape} {r.variant}"
                                                         for r in bad_parity))
    if nondet:
        problems.append("not deterministic: " + ", ".join(f"{r.display_shape} {r.variant}"
                                                          for r in nondet))
    if failed:
        problems.append(f"{len(failed)} row(s) failed to run: " + ", ".join(
            f"{r.display_shape} {r.variant}" for r in failed))
    if problems:
        raise CliFailure("; ".join(problems))


# --------------------------------------------------------------------------- commands


@cli.command()
@config_file_option
@config_options
@sample_rows_option
@click.option("--save-outputs", type=click.Path(file_okay=False), metavar="DIR",
              help="Write each variant's output rows, the FP64 reference rows and rows.npy per shape.")
@_no_interrupt_traceback
def parity(config_path, shapes, variants, backend, layout, page, heads, head_dim, data, seed,
           force_turing, results_root, resume, as_json, sample_rows, save_outputs):
    """Error of every variant against an FP64 reference, judged against the numerics model."""
    config = load_run_config(config_path, resume=resume, results_root=results_root, shapes=shapes,
                             variants=variants, layout=layout, page=page, heads=heads,
                             head_dim=head_dim, data=data, seed=seed, force_turing=force_turing)
    be = build_backend(backend, config)
    path = _run_command("parity", config=config, backend=be, results_root=results_root,
                        resume=resume, sample_rows=_parse_sample_rows(sample_rows),
                        save_outputs=save_outputs)
    records = _show_run("parity", path, config, as_json)
    if save_outputs:
        _note(f"outputs written under {save_outputs}")
    _verdict("parity", path, records)


@cli.command("time")
@config_file_option
@config_options
@timing_options
@_no_interrupt_traceback
def time_cmd(config_path, shapes, variants, backend, layout, page, heads, head_dim, data, seed,
             force_turing, results_root, resume, as_json, hot, max_seconds):
    """Time per chunk (CUDA events, L2 flushed before each launch; variants interleaved)."""
    config = load_run_config(config_path, resume=resume, results_root=results_root, shapes=shapes,
                             variants=variants, layout=layout, page=page, heads=heads,
                             head_dim=head_dim, data=data, seed=seed, force_turing=force_turing,
                             hot=hot, max_seconds=max_seconds)
    be = build_backend(backend, config, needs_timing=True)
    path = _run_command("time", config=config, backend=be, results_root=results_root,
                        resume=resume, sample_rows=None)
    records = _show_run("time", path, config, as_json)
    _verdict("time", path, records)


@cli.command()
@click.argument("config_arg", metavar="[CONFIG]", required=False, type=click.Path(dir_okay=False))
@config_file_option
@config_options
@sample_rows_option
@timing_options
@click.option("--shard", metavar="I/N",
              help="Run only shard I of N (I is 0-based, 0..N-1: "
                   "--shard $SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT under --array=0-(N-1)); "
                   "shapes are dealt by cost; join the shards with 'pa-bench merge'.")
@click.option("--devices", metavar="LIST|all",
              help="One worker process per GPU of this host (0,1,... or all), each pinned with "
                   "CUDA_VISIBLE_DEVICES and running one shard; one merged run directory.")
@_no_interrupt_traceback
def run(config_arg, config_path, shapes, variants, backend, layout, page, heads, head_dim, data,
        seed, force_turing, results_root, resume, as_json, sample_rows, hot, max_seconds, shard,
        devices):
    """Parity and timing of every shape x variant of CONFIG (default configs/pr2092.yaml).

    Without a GPU it falls back to the numpy backend: parity on sampled rows, timing rows
    skipped with the reason.
    """
    from pa_bench.shard import parse_shard

    shard = parse_shard(shard) if shard is not None else None
    if devices is not None and (shard is not None or resume is not None):
        raise click.UsageError("--devices runs every shard itself: give it without "
                               f"{'--shard' if shard is not None else '--resume'}")
    if config_arg and config_path and Path(config_arg) != Path(config_path):
        raise click.UsageError("give the config either as CONFIG or with --config, not both")
    config = load_run_config(config_arg or config_path, resume=resume, results_root=results_root,
                             shapes=shapes, variants=variants, layout=layout, page=page,
                             heads=heads, head_dim=head_dim, data=data, seed=seed,
                             force_turing=force_turing, hot=hot, max_seconds=max_seconds)
    if devices is not None:
        path = _run_devices(config, devices, backend=backend, results_root=results_root,
                            sample_rows=_parse_sample_rows(sample_rows))
    else:
        be = build_backend(backend, config)
        path = _run_command("run", config=config, backend=be, results_root=results_root,
                            resume=resume, sample_rows=_parse_sample_rows(sample_rows), shard=shard)
    records = _show_run("run", path, config, as_json)
    _verdict("run", path, records)


def _resolve_runs(runs: tuple[str, ...], results_root: str, n: int) -> list:
    """Runs named on the command line (paths or ids under --results), else the n newest."""
    from pa_bench.store.results import pick_runs

    return pick_runs(runs, results_root, n, "report" if n == 1 else "compare")


@cli.command()
@click.argument("runs", nargs=-1, metavar="[RUN]...")
@click.option("-o", "--output", type=click.Path(dir_okay=False),
              help="Write the markdown here (default: report.md inside the run).")
@click.option("--results", "results_root", type=click.Path(file_okay=False),
              default=DEFAULT_RESULTS, show_default=True, help="Where runs are looked up.")
@click.option("--no-plots", is_flag=True, help="Do not draw the PNG plots.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the written paths (report and PNG plots) as JSON.")
@_no_interrupt_traceback
def report(runs, output, results_root, no_plots, as_json):
    """Markdown report of stored runs (default: the newest under results/); no GPU needed.

    The report is written into the run (or -o FILE) and printed on stdout; a committed
    reference run (results/reference/...) is only printed, unless -o names a file.
    """
    from pa_bench.present import report as report_mod

    found = _resolve_runs(runs, results_root, 1)
    if output and len(found) > 1:
        raise click.UsageError("-o takes one run; without -o each run gets its own report.md")
    written = []
    for run in found:
        done = report_mod.render_report(run, output, plots=not no_plots)
        written.append({"run": str(run.path), "report": done.path and str(done.path),
                        "plots": [str(p) for p in done.plots]})
        if not as_json:
            click.echo(done.text)
        _note(done.note)
    if as_json:
        _print_json(written)


@cli.command()
@click.argument("runs", nargs=-1, required=True, metavar="RUN...")
@click.option("-o", "--output", type=click.Path(file_okay=False), metavar="RUN",
              help="The merged run's directory (new or empty; default: a new run under --results).")
@click.option("--results", "results_root", type=click.Path(file_okay=False),
              default=DEFAULT_RESULTS, show_default=True, help="Where runs are looked up and made.")
@click.option("--no-report", is_flag=True, help="Do not write report.md into the merged run.")
@_no_interrupt_traceback
def merge(runs, output, results_root, no_report):
    """One run from shard runs (--shard I/N): same config, seed and kernel sources, or refused.

    Every row keeps its own GPU, arch and device; a row held by two runs must be identical.
    """
    from pa_bench.store import merge as merge_mod
    from pa_bench.store.results import new_run_dir, open_run

    parts = [open_run(r, root=results_root) for r in runs]
    if output is not None:
        out = merge_mod.prepare_output(output)
    else:
        meta = parts[0].read_meta()
        name = (meta.get("config") or {}).get("name") or "run"
        out = new_run_dir(results_root, name, "merged")
    try:
        merge_mod.merge_runs(parts, out, command=_command_line())
    except BaseException:
        if out.path.is_dir() and not any(out.path.iterdir()):
            out.path.rmdir()  # a refused merge leaves no empty run behind
        raise
    records = out.records()
    _note(f"merged {len(parts)} runs, {len(records)} rows: {out.path}")
    if not no_report:
        from pa_bench.present import report as report_mod

        report_mod.write_report(out)
        _note(f"report: {out.path / 'report.md'}")


@cli.command()
@click.argument("runs", nargs=-1, metavar="[RUN_A RUN_B]")
@click.option("--results", "results_root", type=click.Path(file_okay=False),
              default=DEFAULT_RESULTS, show_default=True, help="Where runs are looked up.")
@click.option("--min-change", type=float, default=0.01, show_default=True,
              help="Smallest relative change that can count as faster/slower.")
@click.option("--fail-on-slowdown", is_flag=True,
              help="Exit 1 if a row is slower beyond noise or its parity went from pass to fail.")
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON.")
@_no_interrupt_traceback
def compare(runs, results_root, min_change, fail_on_slowdown, as_json):
    """A/B of two runs: change per shape x variant with a 95% interval (default: the two newest)."""
    from pa_bench.present import compare as compare_mod

    if len(runs) not in (0, 2):
        raise click.UsageError("compare takes two runs (A then B), or none for the two newest")
    run_a, run_b = _resolve_runs(runs, results_root, 2)
    df = compare_mod.compare_runs(run_a, run_b, min_change=min_change)
    warnings = list(df.attrs.get("warnings", []))
    if as_json:
        _print_json({"a": str(run_a.path), "b": str(run_b.path), "warnings": warnings,
                     "rows": df.to_dict(orient="records")})
    else:
        click.echo(f"A: {run_a.path}\nB: {run_b.path}")
        click.echo(compare_mod.format_compare(df, names=False))
    for w in warnings:
        _note(f"warning: {w}")
    if fail_on_slowdown:
        problems = []
        if compare_mod.has_slowdown(df):
            problems.append("B is slower than A beyond noise on " + ", ".join(
                f"{r['shape']} {r['variant']}" for r in df.to_dict(orient="records")
                if r["verdict"] == "slower"))
        if compare_mod.has_parity_regression(df):
            problems.append("parity regressed (pass -> fail)")
        if problems:
            raise CliFailure("; ".join(problems))


@cli.command()
@click.option("--arch", "archs", multiple=True, metavar="SM_XX[,..]",
              help="Archs to compile for (default sm_75, sm_80, sm_86, sm_89, sm_90).")
@click.option("--head-dim", type=int, default=128, show_default=True)
@click.option("--force-turing", is_flag=True, help="The forced sm_75 path (m16n8k8) builds.")
@click.option("--json", "as_json", is_flag=True, help="Print the table as JSON.")
@_no_interrupt_traceback
def kernels(archs, head_dim, force_turing, as_json):
    """Variants x archs: CTA shape, registers, shared memory and spills (needs nvcc, no GPU)."""
    from pa_bench.backends import kernel_info

    arch_list = [a for item in archs for a in _comma_list(item) or []] or None
    rows = kernel_info.kernel_table(arch_list, head_dim=head_dim, force_turing=force_turing)
    if as_json:
        _print_json(rows)
    else:
        click.echo(kernel_info.format_table(rows))
    if rows and not any(r.get("compiled") for r in rows):
        raise CliFailure(f"no kernel built ({len(rows)} tried); the first: {rows[0]['variant']} "
                         f"{rows[0]['arch']}: {fmt.one_line(rows[0].get('reason') or 'no reason')}")


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print the environment as JSON.")
@_no_interrupt_traceback
def env(as_json):
    """GPU, driver, CUDA, CuPy, compiler: what a bug report needs."""
    from pa_bench.present import envinfo

    d = envinfo.environment()
    if as_json:
        _print_json(d)
    else:
        click.echo(envinfo.format_environment(d))


# --------------------------------------------------------------------------- prompt (issue #16)


@cli.command()
@click.option("--config", "config_path", type=click.Path(dir_okay=False),
              help="Prompt config YAML (default: configs/prompt98k.yaml).")
@click.option("--tokens", metavar="N", help="Prompt length: 98K (K = 1024) or a number; beats the config.")
@click.option("--chunk", metavar="N", help="Tokens per chunk (the last chunk takes what is left).")
@click.option("--measure", metavar="N|all",
              help="Chunks to time (at least); the others are interpolated along context.")
@click.option("--variant", "variants", metavar="LIST", help="Comma list of variants.")
@click.option("--backend", type=click.Choice(["auto", "cuda", "numpy"]), default="auto",
              show_default=True, help="numpy: parity only, timing rows skipped with the reason.")
@click.option("--layout", type=click.Choice(["paged", "contiguous"]), help="KV cache layout.")
@click.option("--page", type=int, help="Keys per page (power of two >= 16).")
@click.option("--heads", metavar="HQ/HKV", help="Query heads / KV heads, e.g. 32/8.")
@click.option("--head-dim", type=int, help="Head dimension (64 or 128).")
@click.option("--data", type=click.Choice(["normal", "realistic"]), help="Generated data kind.")
@click.option("--seed", type=int, help="Seed of the generated data and sampled rows.")
@click.option("--force-turing", is_flag=True, default=None,
              help="Run v1/v2t on the sm_75 path (m16n8k8 MMAs) on any GPU.")
@click.option("--results", "results_root", type=click.Path(file_okay=False),
              default=DEFAULT_RESULTS, show_default=True, help="Where run directories go.")
@click.option("--json", "as_json", is_flag=True, help="Print the prompt's totals and records as JSON.")
@sample_rows_option
@timing_options
@_no_interrupt_traceback
def prompt(config_path, tokens, chunk, measure, variants, backend, layout, page, heads, head_dim,
           data, seed, force_turing, results_root, as_json, sample_rows, hot, max_seconds):
    """Attention of a whole prompt read in chunks: total time, tok/s, speed-up vs v1.

    Times some chunks (the others interpolated along context, the interpolation's error
    reported) and checks parity on the first, middle and last chunks. Default config:
    configs/prompt98k.yaml (the PR's 98K-token prompt in 1024-token chunks).
    """
    from pa_bench import prompt as prompt_mod
    from pa_bench.present import prompt_report
    from pa_bench.store.results import open_run

    heads_q, heads_kv = _parse_heads(heads)
    pc = prompt_mod.load_prompt_config(
        config_path, tokens=tokens, chunk=chunk, measure=measure,
        variants=_validate_variants(variants), layout=layout, page=page, heads_q=heads_q,
        heads_kv=heads_kv, head_dim=head_dim, data=data, seed=seed, force_turing=force_turing,
        hot=hot, max_seconds=max_seconds)
    be = build_backend(backend, pc.config)
    progress = RichProgress()
    try:
        path = prompt_mod.run_prompt(pc, be, results_root=results_root,
                                     sample_rows=_parse_sample_rows(sample_rows),
                                     progress=progress, command=_command_line())
    finally:
        progress.stop()
    run = open_run(path)
    summary = run.read_meta().get("prompt") or {}
    if as_json:
        records = run.records()
        _print_json({"run": str(path), "prompt": summary,
                     "records": [r.to_dict() for r in records]})
    else:
        records = _show_run("parity", path, pc.config, False)
        console = _stdout_console()
        for line in prompt_report.describe(summary):
            console.print(line, markup=False)
        console.print(_table(f"prompt read: {summary.get('tokens')} tokens, attention only",
                             prompt_report.HEADER, prompt_report.totals_rows(summary)))
        beside = prompt_report.beside_pr(summary, be.describe().get("gpu"))
        if beside:
            console.print(_table("beside the PR's prompt read",
                                 ["who", "what", "v1 tok/s", "v2T tok/s", "v2T gain"], beside))
            console.print(prompt_report.ENGINE_NOTE, markup=False)
    failed = [t["variant"] for t in summary.get("totals") or [] if t.get("failed")]
    _verdict("parity", path, records)
    if failed:
        raise CliFailure("timing failed on a chunk for " + ", ".join(failed) + " (see prompt.csv)")


__all__ = ["cli", "main"]
