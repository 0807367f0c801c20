"""Make the inputs of the shapes ahead while the current one runs.

Generating a shape's Q/K/V is CPU work (NumPy's random streams, one per shape, drawn in order):
at 1M keys of context it takes about a minute, while the shape's GPU work takes seconds. NumPy's
generators release the GIL while they fill an array, so the inputs of later shapes can be drawn on
threads, each from its own stream, while the current shape runs: the bytes a seed gives do not
change (tests/test_prefetch.py).

:class:`InputsPrefetch` hands out the inputs of a list of problems in their order. When a problem
is taken it starts the next ones on threads, as many as ``workers`` and as fit in ``budget_bytes``
(an estimate of what a shape's inputs hold, the current shape's included): by default a third of
the machine's memory, ``PA_BENCH_PREFETCH_BYTES`` to set it (0 turns prefetching off).

The threads are daemon threads: an interrupted run (Ctrl-C) or a failed one exits at once
instead of waiting for a shape that is being drawn (a pool's threads are joined at exit, which
took up to a minute at 1M keys).
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import Future
from typing import Callable, Sequence

from pa_bench.problem.inputs import Inputs, make_inputs
from pa_bench.problem.plan import Problem

DEFAULT_WORKERS = 3


def input_bytes(problem: Problem) -> int:
    """About what ``make_inputs(problem)`` holds: float32 and int8 K/V, the page pool (up to
    twice the int8 K/V), fp32 scales, Q in float32 and fp16."""
    kv = problem.heads_kv * problem.keys * problem.head_dim
    q = problem.heads_q * problem.queries * problem.head_dim
    return 2 * kv * (4 + 1 + 2) + 16 * problem.heads_kv * problem.keys + 6 * q


def default_budget() -> int:
    """PA_BENCH_PREFETCH_BYTES, else a third of the physical memory (0 where unknown)."""
    env = os.environ.get("PA_BENCH_PREFETCH_BYTES")
    if env is not None and env.strip():
        return max(0, int(float(env)))
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 3
    except (ValueError, OSError, AttributeError):
        return 0


class InputsPrefetch:
    """The inputs of ``problems``, taken in order (a problem may be passed over: its inputs, if
    made, are dropped)."""

    def __init__(self, problems: Sequence[Problem], *, budget_bytes: int | None = None,
                 workers: int = DEFAULT_WORKERS, make: Callable[[Problem], Inputs] = make_inputs,
                 size: Callable[[Problem], int] = input_bytes):
        self._ahead: list[Problem] = list(problems)
        self._budget = default_budget() if budget_bytes is None else int(budget_bytes)
        self._workers = max(0, int(workers))
        self._make, self._size = make, size
        self._started: dict[int, Future] = {}   # position in the list -> its inputs
        self._next = 0                          # position of the next problem to hand out

    @property
    def enabled(self) -> bool:
        return self._budget > 0 and self._workers > 0

    def take(self, problem: Problem) -> Inputs:
        """``problem``'s inputs (made here if they were not started ahead), then start the next
        problems' inputs. Errors of making them are raised here, for this problem only."""
        pos = self._position(problem)
        fut = self._started.pop(pos, None) if pos is not None else None
        if pos is not None:
            for skipped in [p for p in self._started if p < pos]:   # passed over
                self._started.pop(skipped).cancel()
            self._next = pos + 1
        self._start_ahead(self._size(problem))
        return fut.result() if fut is not None else self._make(problem)

    def close(self) -> None:
        """Drop what was started ahead (a thread that is drawing finishes its shape first)."""
        for fut in self._started.values():
            fut.cancel()
        self._started.clear()

    def __enter__(self) -> "InputsPrefetch":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ internals
    def _position(self, problem: Problem) -> int | None:
        for i in range(self._next, len(self._ahead)):
            if self._ahead[i] is problem or self._ahead[i] == problem:
                return i
        return None

    def _start_ahead(self, current_bytes: int) -> None:
        if not self.enabled:
            return
        held = current_bytes + sum(self._size(self._ahead[i]) for i in self._started)
        i = self._next
        while i < len(self._ahead) and len(self._started) < self._workers:
            if i not in self._started:
                need = self._size(self._ahead[i])
                if held + need > self._budget:
                    break
                self._started[i] = self._submit(self._ahead[i])
                held += need
            i += 1

    def _submit(self, problem: Problem) -> Future:
        """``make(problem)`` on a daemon thread of its own (at most ``workers`` are started ahead)."""
        fut: Future = Future()

        def run() -> None:
            if not fut.set_running_or_notify_cancel():   # cancelled before it started
                return
            try:
                fut.set_result(self._make(problem))
            except BaseException as exc:  # noqa: BLE001 - handed to take(), for this problem only
                fut.set_exception(exc)

        threading.Thread(target=run, name="pa-inputs", daemon=True).start()
        return fut


__all__ = ["InputsPrefetch", "input_bytes", "default_budget", "DEFAULT_WORKERS"]
