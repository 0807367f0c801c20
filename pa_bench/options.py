"""The options parity, time, run and prompt share, as data (:class:`RunOptions`), and what
they select: the config (:func:`load_run_config`), the backend (:func:`build_backend`) and the
stored runs a command reads (:func:`resolve_runs`). The CLI parses them once (pa_bench.cli);
nothing here knows the command line's syntax.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable

from pa_bench.errors import BackendUnavailable

DEFAULT_RESULTS = "results"


@dataclass(frozen=True)
class RunOptions:
    """The options parity, time, run and prompt share, parsed once (None: not given)."""

    config_path: str | None = None
    shapes: str | None = None
    variants: tuple[str, ...] | None = None
    backend: str = "auto"
    layout: str | None = None
    page: int | None = None
    heads: tuple[int, int] | None = None  # (query heads, KV heads)
    head_dim: int | None = None
    data: str | None = None  # a data kind, or the path of a capture (.npz)
    seed: int | None = None
    force_turing: bool | None = None
    results_root: str = DEFAULT_RESULTS
    resume: str | None = None
    as_json: bool = False
    wide: bool = False
    sample_rows: int | None = None  # ParitySettings.rows_for's given: ALL_ROWS (0) is every row
    hot: bool | None = None
    max_seconds: float | None = None
    deadline: float | None = None  # seconds one GPU wait may take (None: the config's, or scaled)
    retry_failed: bool = False     # --resume: run again the rows whose kernel hung
    plugins: tuple[str, ...] = ()  # --plugin: modules or .py files that register variants
    processes: int | None = None   # --processes: fresh worker processes, one after another (None: this one)

    @property
    def capture(self) -> str | None:
        """``--data``'s file when it names a capture rather than a data kind."""
        data = self.data
        return data if data is not None and (data.endswith(".npz") or os.sep in data) else None

    def overrides(self) -> dict[str, Any]:
        """The given options as ``Config.with_overrides`` keys (None: keep the config's)."""
        hq, hkv = self.heads or (None, None)
        out: dict[str, Any] = dict(layout=self.layout, page=self.page, heads_q=hq, heads_kv=hkv,
                                   head_dim=self.head_dim, seed=self.seed,
                                   force_turing=self.force_turing, hot=self.hot,
                                   max_seconds=self.max_seconds, data=self.data, deadline=self.deadline)
        if self.capture is not None:
            out.pop("data")              # capture_overrides names the capture
        return out


def load_run_config(opts: RunOptions, notice: Callable[[str], None] | None = None):
    """The config file (or the resumed run's own) with the command line's overrides applied;
    ``notice`` gets the one line that says a capture (``--data FILE.npz``) replaced the config's
    shapes or heads."""
    from pa_bench.problem import plugins
    from pa_bench.problem.config import DEFAULT_CONFIG, load_config
    from pa_bench.problem.inputs import capture_overrides, check_config_data
    from pa_bench.problem.plan import make_plan

    for name in opts.plugins:       # before the config: its variants may be the plug-ins'
        plugins.load(name)
    if opts.config_path is None and opts.resume is not None:
        config = _resumed_config(opts.resume, opts.results_root)
    else:
        config = load_config(opts.config_path or DEFAULT_CONFIG)
    overrides, shapes, note = opts.overrides(), opts.shapes, None
    if opts.plugins:
        overrides["plugins"] = list(dict.fromkeys(config.plugins + tuple(opts.plugins)))
    if opts.capture is not None:  # what the capture holds fixes what the command line left open
        taken, shapes, note = capture_overrides(config, opts.capture, shapes=shapes,
                                                heads_given=opts.heads is not None,
                                                head_dim_given=opts.head_dim is not None)
        overrides.update(taken)
    config = config.with_overrides(**overrides)
    if shapes is not None or opts.variants is not None:
        variants = None if opts.variants is None else list(opts.variants)
        config = make_plan(config, shapes=shapes, variants=variants).config
    check_config_data(config)  # unusable data stops here, before any row runs
    if note and notice is not None:
        notice(note)
    return config


def _resumed_config(resume: str, results_root: str):
    """The config a resumed run was made with, as its meta.json stores it (so --resume alone
    carries on with the same settings, even where the YAML file has changed since)."""
    from pa_bench.problem.config import config_from_dict
    from pa_bench.store.results import open_run

    run = open_run(resume, root=results_root)
    meta = run.meta()
    return config_from_dict(meta.config, where=f"{run.path}/meta.json", path=meta.config_path)


def build_backend(name: str, config, notice: Callable[[str], None], *, needs_timing: bool = False):
    """The backend for ``--backend``; ``auto`` falls back to numpy with a one-line ``notice``,
    except for a command that only times (it needs the GPU)."""
    from pa_bench.backends import cuda_problem, cuda_unavailable_message, make_backend

    if needs_timing and name == "auto":
        problem = cuda_problem()
        if problem is not None:
            raise BackendUnavailable("timing " + cuda_unavailable_message(problem)
                                     .replace("the cuda backend needs", "needs", 1))
    return make_backend(name, config, notice=notice)


def resolve_runs(runs: tuple[str, ...], results_root: str, n: int) -> list:
    """Runs named on the command line (paths or ids under --results), else the n newest of a
    user's runs (never a committed reference run; pa_bench.store.results.pick_runs)."""
    from pa_bench.store.results import pick_runs

    return pick_runs(runs, results_root, n, "report" if n == 1 else "compare")


__all__ = ["RunOptions", "load_run_config", "build_backend", "resolve_runs", "DEFAULT_RESULTS"]
