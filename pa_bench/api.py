"""pa-bench's public names: check and time the kernels from Python, and one problem's kernels
prepared for a tool (Nsight Compute, compute-sanitizer, an A/B of launches).

``check`` and ``bench`` walk a config as ``pa-bench parity`` / ``pa-bench time`` do and return
the run's records as a pandas DataFrame, one row per shape x variant, with the columns of the
run's ``records.csv``. Each still writes its run directory: under ``results`` where given, else
in a fresh temporary folder; the frame's ``attrs["run_dir"]`` says where.

``session`` prepares one :class:`Problem`'s inputs on a backend and hands out what a tool needs:
outputs, the FP64 reference, the numerics model, launchers (one call = one launch, for a
profiler), timings. Scripts reach pa-bench through these names only; nothing in the package
below this module imports it.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from pa_bench.problem.config import Config
from pa_bench.problem.config import load_config as _load_config_file
from pa_bench.problem.plan import Problem
from pa_bench.problem.shapes import Shape, parse_shape

__all__ = [
    "Config", "Problem", "Shape", "Session", "bench", "check", "load_config", "make_problem",
    "parse_shape", "read_run", "session",
]


def load_config(path: str | Path | None = None, **overrides: Any) -> Config:
    """A validated :class:`Config`: the YAML file at ``path`` (None: ``configs/pr2092.yaml``),
    a packaged config's name (``"smoke"``), with ``overrides`` applied.

    Overrides are Config fields (``shapes="0x64,1Kx128"``, ``variants=["v1", "v2"]``,
    ``heads_q=8``, ``layout="contiguous"``, ...) or the fields of its timing and parity
    settings (``max_seconds=2``, ``hot=True``, ``sample_rows=16``); None keeps the file's value.
    An unknown key is refused with the list of known ones.
    """
    from pa_bench.problem.config import DEFAULT_CONFIG

    config = _load_config_file(DEFAULT_CONFIG if path is None else path)
    return config.with_overrides(**overrides) if overrides else config


def make_problem(shape: str | Shape, config: Config | None = None, **fields: Any) -> Problem:
    """The :class:`Problem` of one shape (``"32Kx1024"``) under ``config``'s heads, head
    dimension, layout, page, data and seed (None: :class:`Problem`'s defaults, the PR's 32/8
    heads at D = 128 on 64-key pages), with ``fields`` replacing any of them."""
    from pa_bench.problem.plan import problem_for

    parsed = parse_shape(shape) if isinstance(shape, str) else shape
    base = Problem(parsed) if config is None else problem_for(config, parsed)
    return replace(base, **fields) if fields else base


# --------------------------------------------------------------------------- whole runs


def check(
    config: str | Path | Config | None = None,
    *,
    shapes: str | Sequence[str] | None = None,
    variants: str | Sequence[str] | None = None,
    backend: str = "auto",
    sample_rows: int | None = None,
    results: str | Path | None = None,
    plugins: Sequence[str] = (),
    **overrides: Any,
):
    """Parity of every shape x variant: each output against an FP64 reference, judged against
    the numerics model of the same arithmetic (``pa-bench parity``).

    Args:
        config: a :class:`Config`, a YAML path or a packaged config's name (None: the PR's).
        shapes: replace the config's shapes (``"0x64,1Kx128"`` or a list).
        variants: replace the config's variants (``"v1,v2"`` or a list).
        backend: ``"auto"`` (CUDA if a GPU and CuPy are there, else NumPy), ``"cuda"`` or
            ``"numpy"`` (the numerics model on the CPU: parity on sampled rows).
        sample_rows: query rows compared per shape (None: the config's choice for the backend;
            0: every row).
        results: the folder the run directory is made in (None: a fresh temporary folder).
        plugins: modules or ``.py`` files that register variants, loaded first.
        **overrides: any :func:`load_config` override (``heads_q=8``, ``seed=3``, ...).

    Returns:
        A pandas DataFrame with the columns of ``records.csv`` (``shape``, ``variant``,
        ``parity_pass``, ``max_abs_err``, ``model_max_abs_err``, ``err_ratio``, ``reason``, ...),
        one row per shape x variant in the plan's order; ``attrs["run_dir"]`` is the run
        directory (records.csv, meta.json, report.md).
    """
    return _walk("parity", config, shapes, variants, backend, sample_rows, results, plugins, overrides)


def bench(
    config: str | Path | Config | None = None,
    *,
    shapes: str | Sequence[str] | None = None,
    variants: str | Sequence[str] | None = None,
    backend: str = "auto",
    parity: bool = False,
    sample_rows: int | None = None,
    results: str | Path | None = None,
    plugins: Sequence[str] = (),
    **overrides: Any,
):
    """Time per chunk of every shape x variant (``pa-bench time``; with ``parity=True`` also
    checked first, as ``pa-bench run``): CUDA events around each launch, the L2 flushed before
    it, the variants of a shape interleaved, sampled until the median's 95 % interval is within
    ``max_noise`` of it or ``max_seconds`` have passed.

    Args:
        config, shapes, variants, sample_rows, results, plugins, **overrides: as :func:`check`
            (timing overrides: ``max_seconds=2``, ``hot=True``, ``min_samples=50``, ...).
        backend: ``"auto"`` or ``"cuda"`` time on the GPU; on ``"numpy"`` every timing row is
            skipped with its reason (there is nothing to time on the CPU).
        parity: check each variant's output before timing it.

    Returns:
        A pandas DataFrame with the columns of ``records.csv`` (``ms_median``, ``ms_ci_low``,
        ``ms_ci_high``, ``tflops``, ``speedup``, ``samples``, ``timing_verdict``, ...), one row
        per shape x variant; ``attrs["run_dir"]`` is the run directory.
    """
    mode = "run" if parity else "time"
    return _walk(mode, config, shapes, variants, backend, sample_rows, results, plugins, overrides)


def read_run(run_dir: str | Path):
    """A stored run's records as the DataFrame :func:`check` and :func:`bench` return
    (``attrs["run_dir"]`` set), from its ``records.csv``; an older run is migrated on read."""
    from pa_bench.store.records import records_to_frame
    from pa_bench.store.results import open_run

    run = open_run(run_dir)
    frame = records_to_frame(run.records())
    frame.attrs["run_dir"] = str(run.path)
    return frame


def _config(config: str | Path | Config | None, plugins: Sequence[str], overrides: dict) -> Config:
    from pa_bench import plugins as plugin_loader

    for name in plugins:  # before the config: its variants may be the plug-ins'
        plugin_loader.load(name)
    if not isinstance(config, Config):
        config = load_config(config)
    if plugins:
        overrides = {**overrides, "plugins": list(dict.fromkeys(config.plugins + tuple(plugins)))}
    return config.with_overrides(**overrides) if overrides else config


def _walk(mode: str, config, shapes, variants, backend: str, sample_rows, results, plugins,
          overrides: dict):
    from pa_bench import runner
    from pa_bench.backends import make_backend
    from pa_bench.problem.inputs import check_config_data
    from pa_bench.problem.plan import make_plan

    cfg = _config(config, plugins, overrides)
    if shapes is not None or variants is not None:
        cfg = make_plan(cfg, shapes=shapes, variants=variants).config
    check_config_data(cfg)
    root = Path(tempfile.mkdtemp(prefix="pa-bench-")) if results is None else Path(results)
    walk = {"parity": runner.run_parity, "time": runner.run_timing, "run": runner.run_all}[mode]
    chosen = make_backend(backend, cfg)
    path = walk(cfg, chosen, results_root=root, sample_rows=sample_rows,
                command=["pa_bench.api", mode])
    return read_run(path)


# --------------------------------------------------------------------------- one problem


@dataclass
class Session:
    """One problem's inputs prepared on a backend: what a tool asks of the kernels.

    Made by :func:`session`; use it as a context manager (or call :meth:`close`) so that the
    GPU buffers are freed. ``launch`` arguments (where given) choose the variant's launch
    instead of the launch policy's choice for this problem.
    """

    problem: Problem
    config: Config
    backend: Any
    inputs: Any
    prepared: Any
    closed: bool = field(default=False, repr=False)

    @property
    def backend_name(self) -> str:
        return self.backend.name

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Free the prepared inputs (GPU memory on the cuda backend)."""
        if not self.closed:
            self.backend.release(self.prepared)
            self.closed = True

    def unsupported(self, variant: str, timing: bool = False) -> str | None:
        """Why ``variant`` cannot run this problem here (None: it can)."""
        ask = self.backend.unsupported_timing if timing else self.backend.unsupported_parity
        return ask(variant, self.problem)

    def sample_rows(self, n: int | None, seed: int = 0) -> np.ndarray:
        """``n`` query rows chosen at random (seeded), always with the first and last; all
        rows when ``n`` is None."""
        from pa_bench.numerics.reference import sample_rows

        return sample_rows(self.problem.queries, n, seed)

    def reference(self, rows: np.ndarray | None = None, quantised: bool = True) -> np.ndarray:
        """The FP64 reference output of ``rows`` (None: every query row), as float64
        [heads_q, rows, head_dim]; ``quantised=False``: of the unquantised K/V."""
        return np.asarray(self.backend.reference(self.inputs, rows, quantised=quantised), dtype=np.float64)

    def compute(self, variant: str, rows: np.ndarray | None = None, *, launch=None,
                check_determinism: bool = True):
        """One run of ``variant``: its output rows (``.out``), canary and determinism checks
        (``.canary_ok``, ``.deterministic``) and the output's hash (``.full_hash``)."""
        with self._launch(launch):
            return self.backend.compute(self.prepared, variant, rows, check_determinism=check_determinism)

    def model(self, variant: str, rows: np.ndarray | None = None, *, launch=None) -> np.ndarray:
        """The numerics model of ``variant``'s arithmetic (its tile size, key split and
        segments, P.V chain and running maximum) on ``rows``: what its output should be."""
        from pa_bench.numerics.model import max_slack, model_attention, pv_chain_keys

        be, pb = self.backend, self.problem
        with self._launch(launch):
            args = dict(split_keys=be.split_keys(variant, pb), pv_chain_keys=pv_chain_keys(variant),
                        segment_keys=be.segment_keys(variant, pb), max_slack=max_slack(variant))
            tile = be.tile_keys(variant, pb)
        if be.name == "cuda":  # the cuda backend runs the model on the GPU, the same bits
            return np.asarray(be.model(self.inputs, tile, rows, **args))
        return np.asarray(model_attention(self.inputs, tile, rows, **args))

    def launcher(self, variant: str, *, launch=None) -> Callable[[], None]:
        """A call that enqueues one launch of ``variant`` on this problem, as a timed sample
        does (a kernel's launcher, or a peer's prepared call): for Nsight Compute and
        compute-sanitizer. Follow the launches with :meth:`sync`."""
        with self._launch(launch):
            fns, reasons = self.backend.callables(self.prepared, [variant])
        if variant not in fns:
            from pa_bench.errors import PaBenchError

            raise PaBenchError(f"{variant} cannot run {self.problem.label}: {reasons.get(variant)}")
        return fns[variant]

    def time(self, variants: Iterable[str], *, launch=None, **timing: Any) -> dict:
        """``variants`` timed interleaved as a run times them, with ``timing`` replacing the
        config's timing settings (``max_seconds=2``, ``min_samples=15``, ...): {variant: a
        result with ``samples_ms``, or the reason it was not timed}."""
        settings = replace(self.config.timing, **timing)
        with self._launch(launch):
            return self.backend.time(self.prepared, list(variants), settings)

    def sync(self) -> None:
        """Wait until the GPU work enqueued so far has finished (no-op without a GPU)."""
        if self.backend.name == "cuda":
            self.backend.cp.cuda.runtime.deviceSynchronize()

    def _launch(self, launch):
        return _LaunchScope(self.backend, launch)


class _LaunchScope:
    """Placeholder scope until backends take a launch: only the policy's launch is allowed."""

    def __init__(self, backend, launch) -> None:
        if launch is not None:
            raise NotImplementedError("launch choices need the launch module")

    def __enter__(self):
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def session(problem: Problem | str, *, backend: str = "cuda", config: Config | None = None,
            force_turing: bool | None = None, plugins: Sequence[str] = ()) -> Session:
    """One problem's inputs drawn and prepared on ``backend`` (``"cuda"``, ``"numpy"`` or
    ``"auto"``), for tools that launch, check or time single variants.

    ``problem``: a :class:`Problem`, or a shape (``"32Kx1024"``) under ``config``'s parameters.
    ``config``: timing settings and the data's parameters (None: the PR's config).
    ``force_turing``: build the CUDA kernels for the Turing path on any GPU.
    """
    from pa_bench import plugins as plugin_loader
    from pa_bench.backends import make_backend
    from pa_bench.problem.inputs import make_inputs

    for name in plugins:
        plugin_loader.load(name)
    cfg = config if config is not None else load_config()
    if force_turing is not None:
        cfg = cfg.with_overrides(force_turing=force_turing)
    pb = make_problem(problem, cfg) if isinstance(problem, str) else problem
    chosen = make_backend(backend, cfg)
    inputs = make_inputs(pb)
    return Session(problem=pb, config=cfg, backend=chosen, inputs=inputs,
                   prepared=chosen.prepare(inputs))
