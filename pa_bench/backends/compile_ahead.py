"""Compile ahead: warm the on-disk compile caches of a run's slowest builds in a child process.

On a fresh machine most of a first run is compiling, one variant after another: the CUDA kernels
(NVRTC), CuPy's own kernels, the numerics model, the Triton kernel's configurations and
``torch.compile`` of flex_attention, one graph per shape. The last two are cached on disk (Triton's
cache, Inductor's) and need the most time. So while the run builds the CUDA variants, the
reference and the model of its first shape, a child process walks the plan's shapes building the
variants that compile into such a cache (the Triton kernels and the peers that say
``compiles_ahead``), and when the run reaches them their compiles are cache hits. Before those the
child compiles the CUDA variants too (CuPy's kernel cache), last first: the run builds the first
ones itself.

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
