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

from pa_bench.errors import PaBenchError
from pa_bench.launch import Launch, Pins
from pa_bench.problem.config import Config
from pa_bench.problem.config import load_config as _load_config_file
from pa_bench.problem.plan import Problem
from pa_bench.problem.shapes import Shape, parse_shape

__all__ = [
    "Config", "Launch", "PaBenchError", "Pins", "Problem", "Shape", "Session", "bench", "check",
    "launch_for", "load_config", "make_problem", "parity_verdict", "parse_shape", "pins_of", "read_run",
    "session",
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
    from pa_bench.problem.plan import make_plan

    config = _load_config_file(DEFAULT_CONFIG if path is None else path)
    shapes, variants = overrides.pop("shapes", None), overrides.pop("variants", None)
    if overrides:
        config = config.with_overrides(**overrides)
    if shapes is not None or variants is not None:  # a shape of the file keeps its label
        config = make_plan(config, shapes=shapes, variants=variants).config
    return config


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
    processes: int | None = None,
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
        processes: ``N`` fresh worker processes, one after another on the GPU, each a whole
            timing of the shapes, merged into one run (``pa-bench time --processes N``): each
            row pools their samples and carries each process's median (``ms_proc_medians``) and
            the interval across processes (``ms_xproc_lo``/``ms_xproc_hi``, also in
            ``ms_ci_lo``/``ms_ci_hi`` with ``ci_kind`` "processes"). None or 1: this process.

    Returns:
        A pandas DataFrame with the columns of ``records.csv`` (``ms_median``, ``ms_ci_lo``,
        ``ms_ci_hi``, ``tflops``, ``speedup_vs_v1``, ``samples``, ``reason``, ...), one row
        per shape x variant; ``attrs["run_dir"]`` is the run directory.
    """
    mode = "run" if parity else "time"
    return _walk(mode, config, shapes, variants, backend, sample_rows, results, plugins, overrides,
                 processes=processes)


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
    from pa_bench.problem import plugins as plugin_loader

    for name in plugins:  # before the config: its variants may be the plug-ins'
        plugin_loader.load(name)
    if not isinstance(config, Config):
        config = load_config(config)
    if plugins:
        overrides = {**overrides, "plugins": list(dict.fromkeys(config.plugins + tuple(plugins)))}
    return config.with_overrides(**overrides) if overrides else config


def _warn(message: str) -> None:
    import warnings

    warnings.warn(message, stacklevel=5)  # the caller of check() or bench()


def _walk(mode: str, config, shapes, variants, backend: str, sample_rows, results, plugins,
          overrides: dict, processes: int | None = None):
    from pa_bench import runner
    from pa_bench.backends import make_backend
    from pa_bench.problem.inputs import check_config_data
    from pa_bench.problem.plan import make_plan

    cfg = _config(config, plugins, overrides)
    if shapes is not None or variants is not None:
        cfg = make_plan(cfg, shapes=shapes, variants=variants).config
    check_config_data(cfg)
    root = Path(tempfile.mkdtemp(prefix="pa-bench-")) if results is None else Path(results)
    if processes is not None and (isinstance(processes, bool) or not isinstance(processes, int)
                                  or processes < 1):
        raise PaBenchError(f"processes={processes!r}: give a whole number of worker processes, at least 1")
    if processes is not None and processes > 1:
        return read_run(_in_processes(mode, cfg, backend, sample_rows, root, processes))
    walk = {"parity": runner.run_parity, "time": runner.run_timing, "run": runner.run_all}[mode]
    chosen = make_backend(backend, cfg, notice=_warn)  # "auto" without a GPU: a warning says numpy
    path = walk(cfg, chosen, results_root=root, sample_rows=sample_rows,
                command=["pa_bench.api", mode])
    return read_run(path)


def _in_processes(mode: str, cfg: Config, backend: str, sample_rows, root: Path, n: int) -> Path:
    """``pa-bench run|time --processes n`` on ``cfg`` (a child that runs the workers one after
    another and merges them, pa_bench.devices.run_processes); the merged run's directory."""
    import json
    import subprocess
    import sys

    import yaml

    from pa_bench.problem.config import ALL_ROWS

    root.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", dir=root, delete=False) as fh:
        yaml.safe_dump(cfg.to_dict(), fh, sort_keys=False)
    argv = [sys.executable, "-m", "pa_bench", mode, "--config", fh.name, "--backend", backend,
            "--results", str(root), "--processes", str(n), "--json"]
    if mode == "run" and sample_rows is not None:
        argv += ["--sample-rows", "all" if sample_rows == ALL_ROWS else str(sample_rows)]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
    finally:
        Path(fh.name).unlink(missing_ok=True)
    try:
        return Path(json.loads(done.stdout)["run"])
    except (ValueError, KeyError, TypeError):
        lines = [ln for ln in (done.stderr or done.stdout).splitlines() if ln.strip()]
        raise PaBenchError(lines[-1] if lines else f"pa-bench {mode} --processes {n} failed "
                           f"(exit {done.returncode})") from None


def parity_verdict(out, reference, model, canary_ok: bool = True):
    """The parity rule on one output, as a run judges it: its error metrics against the FP64
    ``reference`` and the verdict against the numerics ``model``'s error (pass where the
    kernel's max abs error is at most twice the model's plus a floor, with no NaN/Inf and the
    canaries intact). Returns the record's parity columns: ``max_abs_err``, ``rel_l2_err``,
    ``model_max_abs_err``, ``err_ratio``, ``floor``, ``parity_pass``, ``reason``, ..."""
    from pa_bench.numerics.metrics import evaluate_parity

    return evaluate_parity(out, reference, model_out=model, canary_ok=canary_ok)


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
    _pinned: dict = field(default_factory=dict, repr=False)  # Pins -> the backend launching them

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
        be = self._backend(variant, launch)
        return be.compute(self.prepared, variant, rows, check_determinism=check_determinism)

    def model(self, variant: str, rows: np.ndarray | None = None, *, launch=None,
              **arithmetic: Any) -> np.ndarray:
        """The numerics model of ``variant``'s arithmetic on ``rows``: what its output should be.

        The launch gives the tile size, key split and segments; the variant its P.V chain and
        running maximum. ``arithmetic`` replaces any of them (``tile_keys``, ``split_keys``,
        ``segment_keys``, ``pv_chain_keys``, ``max_slack``) or sets how P.V accumulates
        (``mma="rn"``: round to nearest; default: mma.sync's truncating block FMA)."""
        from pa_bench.numerics.model import max_slack, model_arrays, model_attention, pv_chain_keys

        be = self._backend(variant, launch)
        known = {
            "tile_keys": lambda: self.launch_of(variant, launch=launch).tile_keys,
            "split_keys": lambda: self.launch_of(variant, launch=launch).split_keys,
            "segment_keys": lambda: self.launch_of(variant, launch=launch).segment_keys,
            "pv_chain_keys": lambda: pv_chain_keys(variant), "max_slack": lambda: max_slack(variant),
        }
        unknown = set(arithmetic) - set(known) - {"mma"}
        if unknown:
            raise TypeError(f"Session.model: unknown arithmetic {sorted(unknown)} (known: {sorted(known)}, mma)")
        args = {key: arithmetic[key] if key in arithmetic else value() for key, value in known.items()}
        if "mma" in arithmetic:
            args["mma"] = arithmetic["mma"]
        if be.name == "cuda" and "mma" not in args:  # on the GPU, the same bits (tests/gpu)
            tile = args.pop("tile_keys")
            return np.asarray(be.model(self.inputs, tile, rows, **args))
        arrays = model_arrays(self.inputs, be.cp) if be.name == "cuda" else self.inputs
        out = model_attention(arrays, args.pop("tile_keys"), rows, **args)
        return be.cp.asnumpy(out) if be.name == "cuda" else np.asarray(out)

    def launchers(self, variants: Iterable[str], *, launch=None) -> tuple[dict, dict]:
        """({variant: a call that enqueues one launch, as a timed sample does}, {variant: why it
        cannot run}): a kernel's launcher, or a peer's prepared call. For Nsight Compute,
        compute-sanitizer and one's own timing; follow the calls with :meth:`sync`."""
        variants = list(variants)
        if isinstance(launch, Launch):
            for variant in variants:
                self._backend(variant, launch)  # each must be the launch asked for
        be = self._backend(None, launch)
        return be.callables(self.prepared, variants)

    def launcher(self, variant: str, *, launch=None) -> Callable[[], None]:
        """One call of :meth:`launchers`; a variant that cannot run raises PaBenchError with
        the reason."""
        fns, reasons = self.launchers([variant], launch=launch)
        if variant not in fns:
            raise PaBenchError(f"{variant} cannot run {self.problem.label}: {reasons.get(variant)}")
        return fns[variant]

    def time(self, variants: Iterable[str], *, launch=None, **timing: Any) -> dict:
        """``variants`` timed interleaved as a run times them, with ``timing`` replacing the
        config's timing settings (``max_seconds=2``, ``min_samples=15``, ...): {variant: a
        result with ``samples_ms``, or the reason it was not timed}."""
        settings = replace(self.config.timing, **timing)
        variants = list(variants)
        if isinstance(launch, Launch):
            for variant in variants:
                self._backend(variant, launch)
        return self._backend(None, launch).time(self.prepared, variants, settings)

    def time_calls(self, calls: dict[str, Callable[[], None]], **timing: Any) -> dict:
        """Any calls of GPU work (``{name: call}``, e.g. from :meth:`launchers`) timed by
        pa-bench's method: interleaved, the L2 flushed before each sample, GPU time only,
        with the SM clock read beside: {name: a result with ``samples_ms``}."""
        from pa_bench.measure import timing as T

        settings = replace(self.config.timing, **timing)
        be = self._gpu("time_calls")
        return T.time_interleaved(calls, settings, timer=be.timer(), clock=T.ClockReader(be.device.id))

    def flush_l2(self) -> None:
        """The L2 flush a cold sample starts with (the config's ``timing.l2_flush``)."""
        self._gpu("flush_l2").timer().flush()

    @property
    def l2_flush_method(self) -> str:
        """How :meth:`flush_l2` empties the L2, in words."""
        return self._gpu("l2_flush_method").timer().flush_method

    def describe(self) -> dict:
        """The backend and its device as a run records them (``gpu``, ``arch``, ``sm_count``,
        driver, runtime and compiler versions, ...)."""
        return self.backend.describe()

    def kernel_info(self, variant: str, *, launch=None) -> dict:
        """How ``variant``'s CUDA kernel for this problem is built and launched: ``build``
        (its compile-time settings), ``compiler``, ``num_regs``, ``local_size_bytes`` (spills),
        ``max_dynamic_shared_size_bytes``, ``shared_size_bytes``, ``binary_version``, ``grid``,
        ``block``, ``ctas_per_sm`` (resident CTAs an SM can hold) and ``launch`` (the
        :class:`Launch`)."""
        self._gpu("kernel_info")
        be, pb = self._backend(variant, launch), self.problem
        chosen = be.launch(variant, pb)
        build = be.build(variant, pb, chosen)
        fn = be.kernel(build)
        geo = be.geometry(variant, pb, chosen)
        info = {"build": " ".join(build.defines()), "compiler": be.compilers.get(build),
                "grid": tuple(geo.grid), "block": int(geo.block), "launch": chosen}
        attributes = fn.attributes
        for key in ("num_regs", "local_size_bytes", "max_dynamic_shared_size_bytes",
                    "shared_size_bytes", "binary_version"):
            info[key] = attributes.get(key)
        info["ctas_per_sm"] = be.cp.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(
            fn.kernel.ptr, info["block"], info["max_dynamic_shared_size_bytes"] or 0)
        return info

    def module_launcher(self, variant: str, *, launch: Launch | Pins | None = None):
        """(module, launcher): ``variant``'s CUDA kernel for this problem compiled once more from
        its sources and made the one its launcher runs (with its module's pa_combine). For a
        tool whose build defines device globals (stamps) that it reads back from the module
        after a launch; a kernel source folder of its own is given by ``PA_BENCH_KERNELS``."""
        self._gpu("module_launcher")
        be, pb = self._backend(variant, launch), self.problem
        build = be.build(variant, pb, be.launch(variant, pb))
        module, fn = be._module(build)
        be.adopt(build, module, fn)
        return module, be.launcher(self.prepared, variant)

    def kernel_arrays(self) -> dict:
        """The inputs on the GPU as a kernel takes them: ``q`` (fp16), ``k``, ``v`` (int8, the
        page pool or contiguous), ``ks``, ``vs`` (their fp32 scales) and ``table`` (the page
        table; one zero when contiguous). For a tool that launches its own kernel on them."""
        self._gpu("kernel_arrays")
        p = self.prepared
        return {"q": p.q, "k": p.k, "v": p.v, "ks": p.ks, "vs": p.vs, "table": p.table}

    def another(self, problem: Problem | str) -> "Session":
        """A session of another problem on the same backend (its builds are kept) and config."""
        pb = make_problem(problem, self.config) if isinstance(problem, str) else problem
        return _open(pb, self.config, self.backend)

    def sync(self) -> None:
        """Wait until the GPU work enqueued so far has finished (nothing to wait for on numpy)."""
        if self.backend.name == "cuda":
            self.backend.cp.cuda.runtime.deviceSynchronize()

    def _gpu(self, what: str):
        if self.backend.name != "cuda":
            from pa_bench.errors import BackendUnavailable

            raise BackendUnavailable(f"{what} needs the cuda backend (this Session runs on {self.backend.name})")
        return self.backend

    def launch_of(self, variant: str, *, launch: Launch | Pins | None = None) -> Launch:
        """The whole :class:`Launch` ``variant`` runs this problem with here: the policy's, or
        the one ``launch`` pins (``Pins``) or names (a ``Launch``)."""
        return self._backend(variant, launch).launch(variant, self.problem)

    def _backend(self, variant: str | None, launch: Launch | Pins | None):
        """The backend that launches ``launch``: this one, or the same with other pins. A
        :class:`Launch` is pinned whole, and refused where the policy would make another of it."""
        if launch is None:
            return self.backend
        pins = launch if isinstance(launch, Pins) else pins_of(launch)
        if pins not in self._pinned:
            if self.backend.name == "cuda":  # the same GPU and builds, other pins
                self._pinned[pins] = self.backend.with_pins(pins)
            else:
                from pa_bench.backends import make_backend

                self._pinned[pins] = make_backend(self.backend.name, self.config, pins=pins)
        be = self._pinned[pins]
        if isinstance(launch, Launch) and variant is not None:
            made = be.launch(variant, self.problem)
            if replace(made, tile_keys=launch.tile_keys) != launch:
                raise PaBenchError(f"{variant} at {self.problem.label}: the launch {launch} cannot be "
                                   f"made here (pinned, it is {made})")
        return be


def launch_for(variant: str, problem: Problem, pins: Pins | None = None) -> Launch:
    """The launch the policy makes of ``variant`` on ``problem`` with ``pins`` fixed, without a
    GPU's facts (v2/v2t's tiles per warp and a Triton kernel's tile can differ on a GPU;
    :meth:`Session.launch_of` gives the one it runs)."""
    from pa_bench.launch import NO_PINS, choose

    return choose(variant, problem, None, pins or NO_PINS)


def pins_of(launch: Launch) -> Pins:
    """The pins that ask the policy for ``launch`` as a whole."""
    return Pins(tiles=launch.tiles, pair_heads=launch.pair_heads, split=bool(launch.split_keys),
                segments=launch.segment_keys or False, rows=launch.rows or None,
                share=launch.shares_tiles, step=launch.step_keys)


def session(problem: Problem | str, *, backend: str = "cuda", config: Config | None = None,
            force_turing: bool | None = None, plugins: Sequence[str] = ()) -> Session:
    """One problem's inputs drawn and prepared on ``backend`` (``"cuda"``, ``"numpy"`` or
    ``"auto"``), for tools that launch, check or time single variants.

    ``problem``: a :class:`Problem`, or a shape (``"32Kx1024"``) under ``config``'s parameters.
    ``config``: timing settings and the data's parameters (None: the PR's config).
    ``force_turing``: build the CUDA kernels for the Turing path on any GPU.
    """
    from pa_bench.problem import plugins as plugin_loader
    from pa_bench.backends import make_backend

    for name in plugins:
        plugin_loader.load(name)
    cfg = config if config is not None else load_config()
    if force_turing is not None:
        cfg = cfg.with_overrides(force_turing=force_turing)
    pb = make_problem(problem, cfg) if isinstance(problem, str) else problem
    return _open(pb, cfg, make_backend(backend, cfg))


def _open(problem: Problem, config: Config, backend) -> Session:
    from pa_bench.problem.inputs import make_inputs

    inputs = make_inputs(problem)
    return Session(problem=problem, config=config, backend=backend, inputs=inputs,
                   prepared=backend.prepare(inputs))
