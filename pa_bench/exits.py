"""How a ``pa-bench`` command ends: its exit code, and every error as one line on stderr.

:class:`PaBenchGroup` is the click group of pa_bench.cli. Every
:class:`~pa_bench.errors.PaBenchError`, usage error or unreadable file becomes one line
``error: <message>`` and a non-zero exit (2 for bad input, 1 for a failed run), never a
traceback; Ctrl-C (exit 130) and SIGTERM (143) say where the finished rows are kept and how to
carry on; a GPU wait past its deadline (:class:`~pa_bench.measure.deadline.KernelHung`) says so in
one line and leaves at once (exit 3); :class:`CliFailure` is a command's own failed verdict (exit 1).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from pathlib import Path

import click

from pa_bench import fmt
from pa_bench.errors import PaBenchError
from pa_bench.measure.deadline import EXIT_HUNG, KernelHung, hard_exit
from pa_bench.present.console import note

EXIT_INTERRUPTED = 130  # Ctrl-C (SIGINT)
EXIT_TERMINATED = 143  # SIGTERM: 128 + 15, as a shell reports it
DEBUG_ENV = "PA_BENCH_DEBUG"  # set to 1 to see the traceback of an unexpected error
RESUMABLE = ("run", "parity", "time")  # the commands that take --resume (prompt starts over)


class Interrupted(Exception):
    """Ctrl-C inside a command, as an ordinary exception: click would print 'Aborted!'."""

    def __init__(self, run_dir: Path | None):
        super().__init__(str(run_dir))
        self.run_dir = run_dir


def run_dir_of(exc: BaseException) -> Path | None:
    """The run directory a Ctrl-C carries where a run raised it (pa_bench.runner.RunInterrupted,
    :class:`Interrupted`); None for a bare KeyboardInterrupt."""
    return getattr(exc, "run_dir", None)


class CliFailure(Exception):
    """A command finished but its verdict is a failure (parity failed, a slowdown): exit 1."""

    def __init__(self, message: str, exit_code: int = 1):
        super().__init__(message)
        self.exit_code = exit_code


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C would be, so that a run stops the same way."""


# --------------------------------------------------------------------------- the group


class PaBenchGroup(click.Group):
    """A click group whose errors are one line on stderr and an exit code, never a traceback."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        argv = list(sys.argv[1:] if args is None else args)
        obj = extra.setdefault("obj", {})
        if isinstance(obj, dict):
            obj.setdefault("argv", ["pa-bench", *map(str, argv)])  # recorded in meta.json
        with _sigterm_as_interrupt():
            code = self._main(args if argv else ["--help"], prog_name or "pa-bench", complete_var,
                              **extra)
        if standalone_mode:
            sys.exit(code)
        return code

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt as exc:  # before click turns it into Abort and loses the run
            raise Interrupted(run_dir_of(exc)) from None

    def _main(self, args, prog_name, complete_var, **extra) -> int:
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
        except KernelHung as exc:        # the GPU is lost: say so on one line and leave at once
            _hung(exc, args)
        except (Interrupted, KeyboardInterrupt) as exc:
            return _interrupted(run_dir_of(exc), _resumable(args))
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
    note(f"error: {message}")
    return code


def _hung(exc: KernelHung, args) -> None:
    """One line (the hung call, where the run is kept and how to carry on), then exit code 3
    without the interpreter's clean-up, which would wait on the hung kernel."""
    run_dir = exc.run_dir
    where = ""
    if run_dir is not None:
        words = [a for a in (args or sys.argv[1:]) if not str(a).startswith("-")]
        how = f" (pa-bench {words[0]} --resume {run_dir} carries on after it)" if _resumable(args) else ""
        where = f"; the run is kept in {run_dir}{how}"
    _fail(f"{exc}{where}", EXIT_HUNG)
    hard_exit(EXIT_HUNG)


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


def _resumable(args) -> bool:
    """Whether the command in ``args`` (the argv after the program) takes --resume."""
    words = [a for a in (args or sys.argv[1:]) if not str(a).startswith("-")]
    return bool(words) and words[0] in RESUMABLE


def _interrupted(run_dir: Path | None, resumable: bool = True) -> int:
    what, code = ("terminated (SIGTERM)", EXIT_TERMINATED) if _signals["term"] else \
        ("interrupted", EXIT_INTERRUPTED)
    if run_dir is None:
        note(what)
    else:
        again = f"resume with --resume {run_dir}" if resumable else "run the command again to start over"
        note(f"{what}: finished rows kept in {run_dir}; {again}")
    return code


__all__ = ["PaBenchGroup", "CliFailure", "Interrupted", "run_dir_of", "Terminated", "RESUMABLE", "EXIT_INTERRUPTED",
           "EXIT_TERMINATED", "EXIT_HUNG", "DEBUG_ENV"]
