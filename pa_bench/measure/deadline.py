"""Deadlines on GPU waits: a kernel that never finishes is reported, not waited for forever.

Every place pa-bench waits for the GPU (a parity launch, a timed sample, the FP64 reference, the
numerics model's kernel) polls a completion query with :func:`wait` instead of blocking in the
driver. Past its deadline the wait raises :class:`KernelHung`, whose text is the one line the
user sees: ``v3 at 32Kx1024: no result within 60 s (the kernel may be hung)``.

A hung kernel leaves its CUDA context unusable: nothing later in the process can run on that GPU,
and even freeing memory at exit may wait on it. So :class:`KernelHung` is not an ``Exception``
(the handlers that turn a row's error into a failed row and go on must not catch it): the runner
writes the row as failed and re-raises it, and the command line prints the line and leaves with
:func:`hard_exit` (exit code 3) without running the CUDA clean-up.

How long a wait may take scales with the work behind it (:func:`deadline_for`): a fixed margin
plus the work at a floor rate far below any supported GPU's, so a slow GPU or a long context is
not mistaken for a hang; ``--deadline S`` (config ``deadline``) sets a fixed number instead.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Callable

#: Seconds every wait may take whatever its work (module load and first-launch costs included).
BASE_SECONDS = 30.0
#: The rate below which no supported GPU runs a launch (FLOP/s): v1 on an RTX 2080 Ti does ~40 T.
FLOOR_FLOPS = 5e12
#: Exit code of a command stopped by a hung kernel.
EXIT_HUNG = 3


class KernelHung(BaseException):
    """A GPU wait passed its deadline. ``what`` names the work (``v3 at 32Kx1024``)."""

    def __init__(self, what: str, seconds: float, variant: str | None = None):
        super().__init__(what, seconds, variant)
        self.what = what
        self.seconds = float(seconds)
        self.variant = variant          # the variant whose call hung, where one did
        self.shape: str | None = None   # the shape it hung on, where the runner knows it
        self.phase: str | None = None   # the run's phase (pa_bench.notes) it hung in
        self.run_dir = None             # the run directory that keeps the rows before it

    def at(self, what: str, variant: str | None = None) -> "KernelHung":
        """The same deadline, naming the work more precisely (a variant, a shape)."""
        return KernelHung(what, self.seconds, variant or self.variant)

    def __str__(self) -> str:
        shown = f"{self.seconds:.0f}" if self.seconds >= 1 else f"{self.seconds:.2g}"
        return f"{self.what}: no result within {shown} s (the kernel may be hung)"


def deadline_for(flops: float | None, fixed: float | None = None, launches: int = 1) -> float:
    """Seconds a wait for ``launches`` launches of ``flops`` floating-point operations may take:
    ``fixed`` where given (``--deadline``), else BASE_SECONDS + the work at FLOOR_FLOPS."""
    if fixed is not None:
        return float(fixed)
    return BASE_SECONDS + max(float(flops or 0.0), 0.0) * max(launches, 1) / FLOOR_FLOPS


def wait(done: Callable[[], bool], seconds: float, what: str) -> None:
    """Return once ``done()`` is true; raise :class:`KernelHung` after ``seconds``. Polls fast at
    first (a short kernel is not slowed by the poll) and then every millisecond."""
    if done():
        return
    start = time.monotonic()
    pause = 0.0
    while not done():
        if time.monotonic() - start > seconds:
            raise KernelHung(what, seconds)
        time.sleep(pause)
        pause = min(0.001, pause + 2e-5)


def wait_stream(cp, seconds: float, what: str, stream=None) -> None:
    """Wait, under a deadline, for everything enqueued so far on a CuPy stream (the current one
    by default): an event recorded now, polled with :func:`wait`."""
    event = cp.cuda.Event(disable_timing=True)
    event.record(stream if stream is not None else cp.cuda.get_current_stream())
    wait(lambda: event.done, seconds, what)


def hard_exit(code: int = EXIT_HUNG) -> None:
    """Leave the process at once (after flushing stdout and stderr), skipping the interpreter's
    clean-up, which would wait on the hung GPU."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(code)


__all__ = ["KernelHung", "deadline_for", "wait", "wait_stream", "hard_exit", "EXIT_HUNG",
           "BASE_SECONDS", "FLOOR_FLOPS"]
