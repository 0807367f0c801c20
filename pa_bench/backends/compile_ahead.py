"""Compile ahead: warm the on-disk compile caches of a run's slowest builds in a child process.

On a fresh machine most of a first run is compiling, one variant after another: the CUDA kernels
(NVRTC), CuPy's own kernels, the numerics model, the Triton kernel's configurations and
``torch.compile`` of flex_attention, one graph per shape. The last two are cached on disk (Triton's
cache, Inductor's) and need the most time. So while the run builds the CUDA variants, the
reference and the model of its first shape, a child process walks the plan's shapes building the
variants that compile into such a cache (the Triton kernels and the peers that say
``compiles_ahead``), and when the run reaches them their compiles are cache hits. Before those the
child compiles the CUDA variants too (CuPy's kernel cache), last first: the run builds the first
ones itself; where the run's compile pool is on (the default, below) the pool builds them instead.

The compile pool (:func:`start_pool`, :class:`CompilePool`): when a run on the GPU starts, every
build of pa-bench's own CUDA kernels it will need (each variant on each shape) is compiled in a
process pool, one worker per core, exactly as the run compiles it (CuPy's RawModule: NVRTC into
CuPy's on-disk kernel cache; nvcc for an arch-specific build NVRTC cannot take). When the run
reaches a build it waits for that build's worker and then compiles it itself, a cache hit; a
build the worker could not make fails on the run's own compile, on its row, as it would without
the pool. The workers end before the run's first timing phase (each holds a CUDA context).
``PA_BENCH_COMPILE_POOL=0`` turns it off, ``=N`` caps the workers; meta.json's
``backend_meta.compile_pool`` says how many workers built how many builds in how long, and each
build's entry in ``backend_meta.builds`` its worker's ``pool_seconds``.

The child never tunes the Triton kernel (a tune times candidates, and the run's own GPU work would
disturb it): a problem class that the tuned table lacks gets its default configuration built
ahead, and the run tunes it itself. The child's builds launch kernels (a compile's first call).
None of that may meet a measurement, so the run stops the child (SIGSTOP) for each of its timing
phases and lets it go on (SIGCONT) after: a stopped process launches nothing, and what it
launched just before is done within the variants' warm-up launches. Where no signal can stop a
process, the run waits for the child to finish (at most ``WAIT_S``) before its first timing. A
child that fails or is slow costs nothing: the run compiles what it needs itself, as it would
without it. ``PA_BENCH_COMPILE_AHEAD=0`` turns it off; meta.json's ``compile_ahead`` says what the
child built, how long it took and how long it was stopped.

Once a child has built everything of a plan it leaves a mark in pa-bench's cache directory
(``$XDG_CACHE_HOME/pa-bench/compile-ahead``, keyed on ``plan_key``): a later run of the same plan
starts no child while Triton's and Inductor's caches are there.

    python -m pa_bench.backends.compile_ahead SPEC.json     (the child; the spec is written by ``start``)
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ENV = "PA_BENCH_COMPILE_AHEAD"
PARENT_ENV = "PA_BENCH_AHEAD_PARENT"   # the run's pid, which the child checks it is still under
WAIT_S = 120.0          # where no signal can stop the child: the longest the run waits for it


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "pa-bench" / "compile-ahead"


def compile_caches() -> list[Path]:
    """Where the builds of the child land: Triton's cache and Inductor's (their defaults, or the
    directories their environment variables name)."""
    import getpass

    triton = os.environ.get("TRITON_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".triton", "cache")
    try:
        user = getpass.getuser()
    except Exception:
        user = "unknown"
    inductor = os.environ.get("TORCHINDUCTOR_CACHE_DIR") or os.path.join(tempfile.gettempdir(),
                                                                         f"torchinductor_{user}")
    return [Path(triton), Path(inductor)]


def plan_key(config, variants) -> str:
    """What the child's builds depend on: the shapes and problem settings of the plan, the variants,
    the kernel sources, pa-bench's, torch's and Triton's versions."""
    import hashlib
    from importlib import metadata

    from pa_bench.backends.kernels import kernel_dir

    def version(dist: str) -> str:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return "-"

    raw = config.to_dict()
    what = {k: raw.get(k) for k in ("shapes", "heads_q", "heads_kv", "head_dim", "layout", "page", "out_dtype",
                                    "softmax_scale", "force_turing")}
    h = hashlib.sha256(json.dumps([what, sorted(variants)], sort_keys=True, default=str).encode())
    for f in sorted(kernel_dir().iterdir()):
        if f.is_file():
            h.update(f.name.encode() + f.read_bytes())
    for dist in ("pa-bench", "torch", "triton", "cupy-cuda12x", "cupy-cuda13x", "cupy"):
        h.update(f"{dist}={version(dist)};".encode())
    return h.hexdigest()[:20]


def built_before(key: str) -> bool:
    """Whether a child built this plan's compiles before and their caches are still there (a
    cleared Triton or Inductor cache means they are gone: the child runs again)."""
    return (cache_root() / key).is_file() and all(d.is_dir() for d in compile_caches())


def mark_built(key: str) -> None:
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    (root / key).write_text(json.dumps({"caches": [str(d) for d in compile_caches()]}) + "\n")


def enabled() -> bool:
    return os.environ.get(ENV, "1").strip().lower() not in ("0", "off", "no", "false")


def cuda_builds(variants) -> list[str]:
    """pa-bench's own CUDA kernels among ``variants``, last first: the child compiles them before
    anything else (the run compiles the first ones itself before the child could)."""
    from pa_bench import variants as registry

    return [n for n in reversed(list(variants))
            if registry.get(n).kind == registry.CUDA_KERNEL and registry.get(n).geometry is None]


def ahead_variants(variants) -> list[str]:
    """The variants worth building ahead: Triton kernels and peers whose construction compiles
    into an on-disk cache (``compiles_ahead``); in the run's order."""
    from pa_bench import variants as registry

    out = []
    for name in variants:
        v = registry.get(name)
        if v.kind == registry.TRITON_KERNEL:
            out.append(name)
        elif v.kind == registry.PEER:
            try:
                cls = v.resolve_runner()
            except Exception:
                continue
            if getattr(cls, "compiles_ahead", False):
                out.append(name)
    return out


# --------------------------------------------------------------------------- the compile pool

POOL_ENV = "PA_BENCH_COMPILE_POOL"     # 0: no pool; N: at most N workers (default: the cores)


def pool_enabled() -> bool:
    return os.environ.get(POOL_ENV, "1").strip().lower() not in ("0", "off", "no", "false")


def pool_size(n_builds: int) -> int:
    """Workers for ``n_builds`` builds: one per core (``PA_BENCH_COMPILE_POOL=N`` caps it), never
    more than the builds; 0 for fewer than two builds (nothing to do side by side)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    raw = os.environ.get(POOL_ENV, "").strip()
    cap = int(raw) if raw.isdigit() and int(raw) > 1 else cores
    n = min(cores, cap, n_builds)
    return n if n >= 2 else 0


def needed_builds(backend, problems, variants) -> list:
    """Every kernel build of pa-bench's own CUDA kernels the run will compile (each variant on each
    shape it supports, ``backend.build``), each once, in the order the run reaches them."""
    from pa_bench import variants as registry

    out: dict = {}
    for problem in problems:
        for v in variants:
            try:
                entry = registry.get(v)
                if entry.kind != registry.CUDA_KERNEL or entry.geometry is not None:
                    continue
                if backend.unsupported(v, problem) is not None:
                    continue
                out.setdefault(backend.build(v, problem), None)
            except Exception:     # the run meets it and reports it on the row
                continue
    return list(out)


def compile_build(build, cc: int, include_options: tuple) -> dict:
    """A pool worker's job: ``build`` compiled exactly as the run's CudaBackend._module compiles it
    (CuPy's RawModule on the same source and options: NVRTC, into CuPy's on-disk kernel cache;
    for an arch-specific build NVRTC cannot take, nvcc to the cubin pa_bench.backends.kernels
    names), so the run's own compile of it is a cache hit. Returns its compiler, seconds and
    error (None when it built)."""
    import shutil

    from pa_bench import fmt
    from pa_bench import variants as registry
    from pa_bench.backends import kernels as K

    t0 = time.perf_counter()
    arch = K.arch_options(build.variant, cc)
    try:
        import cupy as cp

        mod = cp.RawModule(code=K.kernel_source(build.variant),
                           options=build.options() + tuple(include_options) + arch)
        mod.get_function(build.function)
        compiler, error = "nvrtc", None
    except Exception as exc:
        compiler, error = None, fmt.error_line(exc)
        if arch and shutil.which("nvcc") is not None:
            try:
                K.nvcc_cubin(build, registry.get(build.variant).nvcc_arch(cc))
                compiler, error = "nvcc", None
            except Exception as exc2:
                error = fmt.error_line(exc2)
    return {"compiler": compiler, "seconds": round(time.perf_counter() - t0, 3), "error": error}


class CompilePool:
    """The run's kernel builds compiled side by side in worker processes (one per core), started
    when the run starts. ``wait_for(build)`` blocks until that build's worker is done (the run
    then compiles it itself: a cache hit when the worker built it; the same error, on the same
    row, as without the pool when it did not); ``close()`` waits for the rest and ends the
    workers, which the run does before its first timing (a worker holds a CUDA context).
    ``compile_fn(build, *args)`` is the job (tests swap it)."""

    def __init__(self, builds, workers: int, args: tuple = (), compile_fn=compile_build):
        import concurrent.futures as cf
        import multiprocessing as mp

        self.started = time.monotonic()
        self.workers = workers
        self.outcomes: dict = {}
        self.seconds: float | None = None
        self._pool = cf.ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn"))
        self._futures = {b: self._pool.submit(compile_fn, b, *args) for b in builds}

    def wait_for(self, build) -> dict | None:
        """The outcome of ``build``'s compile (None: not the pool's, or its worker died)."""
        fut = self._futures.get(build)
        if fut is None:
            return None
        if build not in self.outcomes:
            try:
                self.outcomes[build] = fut.result()
            except Exception as exc:
                self.outcomes[build] = {"compiler": None, "seconds": None,
                                        "error": f"{type(exc).__name__}: {exc}"[:200]}
        return self.outcomes[build]

    def close(self) -> None:
        """Wait for every build, then end the workers (once)."""
        if self.seconds is not None:
            return
        for build in self._futures:
            self.wait_for(build)
        self._pool.shutdown(wait=True)
        self.seconds = round(time.monotonic() - self.started, 3)

    def meta(self) -> dict:
        """meta.json's ``backend_meta.compile_pool``: workers, builds, seconds until all were done
        (None while running), and each failed build's error."""
        from pa_bench.backends import kernels as K

        failed = [{"variant": b.variant if isinstance(b, K.KernelBuild) else None,
                   "build": b.function if isinstance(b, K.KernelBuild) else str(b),
                   "error": o["error"]}
                  for b, o in self.outcomes.items() if o.get("error")]
        return {"workers": self.workers, "builds": len(self._futures),
                "done": len(self.outcomes), "seconds": self.seconds, "failed": failed}


def start_pool(backend, problems, variants, compile_fn=compile_build) -> CompilePool | None:
    """A :class:`CompilePool` for the run's builds (None where turned off, where CuPy keeps no disk
    cache for the run to hit, or for fewer than two builds); ``backend.compile_pool`` is set to it,
    so that the backend's ``kernel()`` waits for a build's worker before compiling it."""
    from pa_bench.backends import kernels as K

    if not pool_enabled() or K.kernel_cache_dir() is None:
        return None
    builds = needed_builds(backend, problems, variants)
    n = pool_size(len(builds))
    if not n:
        return None
    args = (backend.cc, tuple(backend._include_options())) if compile_fn is compile_build else ()
    pool = CompilePool(builds, n, args, compile_fn)
    backend.compile_pool = pool
    return pool


# --------------------------------------------------------------------------- the child


@dataclass
class CompileAhead:
    """The child process of one run (or none), and what became of it."""

    variants: list[str]
    proc: subprocess.Popen | None = None
    log_path: Path | None = None
    started: float = field(default_factory=time.monotonic)
    status: str = "not started"
    seconds: float | None = None
    waited: float = 0.0

    paused: float = 0.0
    _paused_at: float | None = None

    def pause(self) -> None:
        """Stop the child while the run measures (``resume`` lets it go on); where no signal can
        stop a process, wait for it to finish instead."""
        if self.proc is None or self.proc.poll() is not None:
            self._finished()
            return
        if not hasattr(signal, "SIGSTOP"):
            self.wait()
            return
        self.proc.send_signal(signal.SIGSTOP)
        self._paused_at = time.monotonic()

    def resume(self) -> None:
        if self._paused_at is None:
            return
        self.paused = round(self.paused + time.monotonic() - self._paused_at, 3)
        self._paused_at = None
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)

    def _finished(self) -> None:
        """Record how the child ended, once it has."""
        if self.proc is not None and self.seconds is None and self.proc.poll() is not None:
            rc = self.proc.returncode
            self.status = "ok" if rc == 0 else f"failed (exit {rc}; {self.last_line()})"
            self.seconds = round(time.monotonic() - self.started, 3)

    def wait(self, timeout_s: float = WAIT_S) -> None:
        """Until the child has finished (stopped past ``timeout_s``); the first call only."""
        if self.proc is None or self.seconds is not None:
            return
        t0 = time.monotonic()
        try:
            rc = self.proc.wait(timeout=max(timeout_s, 0.0))
            self.status = "ok" if rc == 0 else f"failed (exit {rc}; {self.last_line()})"
        except subprocess.TimeoutExpired:
            self.stop()
            self.status = f"stopped after {timeout_s:g} s"
        self.waited = round(time.monotonic() - t0, 3)
        self.seconds = round(time.monotonic() - self.started, 3)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def close(self) -> None:
        """Stop the child if it still runs and remove its files."""
        self._finished()
        if self.proc is not None and self.seconds is None:
            running = self.proc.poll() is None
            self.stop()
            self.seconds = round(time.monotonic() - self.started, 3)
            self.status = "stopped (the run ended first)" if running else self.status
        if self.log_path is not None:
            for p in (self.log_path, self.log_path.with_suffix(".json")):
                try:
                    p.unlink()
                except OSError:
                    pass

    def last_line(self) -> str:
        try:
            lines = [ln for ln in self.log_path.read_text(errors="replace").splitlines() if ln.strip()]
        except (OSError, AttributeError):
            return "no log"
        return lines[-1][:200] if lines else "no output"

    def meta(self) -> dict:
        self._finished()
        return {"variants": self.variants, "status": self.status, "seconds": self.seconds,
                "waited_seconds": self.waited, "paused_seconds": self.paused}


def start(config, backend_name: str, variants) -> CompileAhead | None:
    """The child for ``config``'s plan (None where nothing is worth building ahead, on a backend
    other than cuda, or when turned off)."""
    if backend_name != "cuda" or not enabled():
        return None
    names = ahead_variants(variants)
    if not names:
        return None
    builds = cuda_builds(variants)
    key = plan_key(config, names + builds)
    if pool_enabled():
        builds = []      # the run's compile pool builds them, side by side (start_pool)
    if built_before(key):
        ahead = CompileAhead(names)
        ahead.status = "skipped: built before and the caches are there"
        return ahead
    raw = config.to_dict()
    raw["variants"] = names + builds  # built-in variants only: the child loads no plug-ins
    raw.pop("plugins", None)
    fd, spec_path = tempfile.mkstemp(prefix="pa-bench-ahead-", suffix=".json")
    with os.fdopen(fd, "w") as fh:
        json.dump({"config": raw, "path": config.path, "variants": names, "builds": builds, "key": key}, fh)
    log = Path(spec_path).with_suffix(".log")
    # no tuning in the child: a tune times candidates, and the run's own GPU work would disturb it
    env = {**os.environ, "PA_BENCH_TRITON_TUNE": "0", PARENT_ENV: str(os.getpid())}
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "pa_bench.backends.compile_ahead", spec_path], stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
    ahead = CompileAhead(names, proc, log)
    ahead.status = "running"
    return ahead


def build_ahead(config, variants: list[str], backend=None, say=print, builds=()) -> bool:
    """The child's work: first the CUDA kernels ``builds`` of every shape compiled (no inputs
    needed), then every shape's inputs and each of ``variants`` built and called once (a Triton
    kernel: its configuration compiled and launched; a peer: constructed, which compiles it).
    True if everything built."""
    from pa_bench.problem.inputs import make_inputs
    from pa_bench.problem.plan import make_plan

    if backend is None:
        from pa_bench.backends.cuda import CudaBackend

        backend = CudaBackend(config)
    problems = make_plan(config).problems
    ok = True
    for v in builds:
        for problem in problems:
            if backend.unsupported(v, problem) is None:
                try:
                    backend.kernel(backend.build(v, problem))
                except Exception as exc:
                    ok = False
                    say(f"{problem.shape.label} {v}: {type(exc).__name__}: {str(exc)[:160]}")
    for problem in problems:
        todo = [v for v in variants if backend.unsupported(v, problem) is None]
        if not todo:
            continue
        prep = backend.prepare(make_inputs(problem))
        try:
            for v in todo:
                t0 = time.monotonic()
                try:
                    backend.build_ahead(prep, v)
                    say(f"{problem.shape.label} {v}: {time.monotonic() - t0:.1f} s")
                except Exception as exc:   # the run builds it itself and reports what goes wrong
                    ok = False
                    say(f"{problem.shape.label} {v}: {type(exc).__name__}: {str(exc)[:160]}")
        finally:
            backend.release(prep)
    return ok


def _die_with_parent() -> None:
    """Linux: the kernel kills this child when the run's process ends, however it ends (a run
    killed while the child is stopped would otherwise leave it stopped, holding GPU memory)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)     # PR_SET_PDEATHSIG
    except Exception:
        pass
    parent = os.environ.get(PARENT_ENV)
    if parent and os.getppid() != int(parent):   # the run ended before the line above
        sys.exit(0)


def main(argv: list[str]) -> int:
    from pa_bench.problem.config import config_from_dict

    _die_with_parent()

    spec = json.loads(Path(argv[0]).read_text())
    config = config_from_dict(spec["config"], "compile-ahead spec", spec.get("path"))
    if build_ahead(config, spec["variants"], say=lambda s: print(s, flush=True), builds=spec.get("builds", ())):
        mark_built(spec["key"])   # the next run of this plan finds its compiles in the caches
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
