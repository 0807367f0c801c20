"""``pa-bench run --devices 0,1,...|all``: one run over the GPUs of one host.

One worker *process* per GPU, each pinned with ``CUDA_VISIBLE_DEVICES`` (the GPU's UUID, so CUDA's
and NVML's numbering cannot disagree) and each running shard ``k`` of ``N`` (``pa-bench run
--shard k/N``, pa_bench.shard): N devices, N shards, dealt by expected cost. Static shards rather
than a work-stealing queue: the deal is the same as a SLURM array's, a worker is an ordinary
shard run (resumable, mergeable, testable on the CPU), and nothing is shared between workers
while they time. A worker's timing path is its own process and its own GPU: no host thread of
the parent or of another worker is in it, and its SM clock is read from its own GPU (NVML by
the PCI bus id of the CUDA device, pa_bench.measure.timing.ClockReader).

The parent only watches: it polls the workers' records.csv for one progress display, and when
they are done merges their runs (pa_bench.store.merge) into one run directory; each row gets
its device's NVML index and UUID (``device_index``, ``device_uuid``). The workers' own runs stay
under ``<run>/parts/gpu<k>/`` with their logs (``gpu<k>.log``).

``pa-bench run|time --processes N`` (:func:`run_processes`) uses the same workers another way:
N fresh processes on the one GPU, one after another (never two at once: each times alone), each
a whole run of the plan with its own allocation of the inputs, flush buffer and memory pools.
The first worker runs the command (``run``: parity and timing); the others only time
(``time``), since parity does not depend on the process. Their runs stay under
``<run>/parts/proc<k>/`` with their logs, and are merged by
:func:`pa_bench.store.merge.merge_processes`: every row pools the workers' samples and gets each
worker's median and the interval across processes (pa_bench.measure.xproc).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from pa_bench.errors import PaBenchError
from pa_bench.problem.config import ALL_ROWS
from pa_bench.shard import Shard
from pa_bench.store import results as R
from pa_bench.store.merge import merge_processes, merge_runs

PARTS_DIR = "parts"
POLL_S = 0.5


class DeviceError(PaBenchError):
    """``--devices`` names no usable GPU (none on the machine, an unknown index)."""


@dataclass(frozen=True)
class Device:
    """One GPU of this host: its NVML (nvidia-smi) index, name and UUID."""

    index: int
    name: str
    uuid: str | None = None

    @property
    def visible(self) -> str:
        """The ``CUDA_VISIBLE_DEVICES`` value that selects this GPU and only it."""
        return self.uuid if self.uuid and self.uuid.startswith(("GPU-", "MIG-")) else str(self.index)


def discover() -> list[Device]:
    """The host's GPUs (NVML, else ``nvidia-smi``); [] where there are none."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            out = []
            for i in range(pynvml.nvmlDeviceGetCount()):
                h = pynvml.nvmlDeviceGetHandleByIndex(i)
                out.append(Device(i, _text(pynvml.nvmlDeviceGetName(h)),
                                  _text(pynvml.nvmlDeviceGetUUID(h))))
            return out
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        pass
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        text = subprocess.run([smi, "--query-gpu=index,name,uuid", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=20, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    found = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 3 and parts[0].isdigit():
            found.append(Device(int(parts[0]), ", ".join(parts[1:-1]), parts[-1]))
    return found


def _text(x) -> str:
    return x.decode() if isinstance(x, bytes) else str(x)


def select(spec: str, found: Sequence[Device]) -> list[Device]:
    """The devices ``--devices`` names: ``all`` or a comma list of NVML indices."""
    if not found:
        raise DeviceError("--devices: no NVIDIA GPU on this machine (NVML and nvidia-smi see none)")
    text = str(spec).strip().lower()
    if text == "all":
        return list(found)
    by_index = {d.index: d for d in found}
    picked: list[Device] = []
    for item in (t.strip() for t in text.split(",")):
        if not item.isdigit():
            raise DeviceError(f"--devices {spec!r}: {item!r} is not a GPU index (use 0,1,... or all)")
        dev = by_index.get(int(item))
        if dev is None:
            raise DeviceError(f"--devices {spec!r}: no GPU {item} on this machine (it has "
                              f"{', '.join(str(d.index) for d in found)})")
        if dev in picked:
            raise DeviceError(f"--devices {spec!r}: GPU {item} is named twice")
        picked.append(dev)
    return picked


def resolve(spec: str) -> list[Device]:
    """``--devices`` on this host (one-line :class:`DeviceError` where it names none)."""
    return select(spec, discover())


def worker_argv(config_file: Path, shard: Shard, *, backend: str, results_root: Path,
                sample_rows: int | None) -> list[str]:
    """The command one worker runs: an ordinary shard run of the same config."""
    argv = [sys.executable, "-m", "pa_bench", "run", str(config_file), "--shard", str(shard),
            "--backend", backend, "--results", str(results_root), "--json"]
    if sample_rows is not None:
        argv += ["--sample-rows", "all" if sample_rows == ALL_ROWS else str(sample_rows)]
    return argv


def worker_env(device: Device, n_workers: int, base: dict | None = None) -> dict[str, str]:
    """The worker's environment: pinned to its GPU, and a fair share of the host's CPU threads
    for the FP64 reference and the model, and of the memory for inputs drawn ahead
    (pa_bench.problem.prefetch), unless the user set them."""
    from pa_bench.problem.prefetch import default_budget

    env = dict(os.environ if base is None else base)
    env["CUDA_VISIBLE_DEVICES"] = device.visible
    env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    n = max(n_workers, 1)
    threads = str(max(1, (os.cpu_count() or 1) // n))
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env.setdefault(name, threads)
    env.setdefault("PA_BENCH_PREFETCH_BYTES", str(default_budget() // n))
    return env


class ProcessesError(PaBenchError):
    """A bad ``--processes`` value."""


def check_processes(n: int | None) -> int | None:
    """``--processes``: None (one process, in this one) or a whole number of at least 1."""
    if n is None:
        return None
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ProcessesError(f"--processes {n!r}: give a whole number of worker processes, at least 1")
    return n


def process_argv(config_file: Path, worker: int, *, mode: str, backend: str, results_root: Path,
                 sample_rows: int | None) -> list[str]:
    """The command ``--processes`` worker ``worker`` runs: the first runs ``mode``, the others
    ``time`` (parity is the same in every process)."""
    own = mode if worker == 0 else "time"
    argv = [sys.executable, "-m", "pa_bench", own, "--config", str(config_file),
            "--backend", backend, "--results", str(results_root), "--json"]
    if own == "run" and sample_rows is not None:
        argv += ["--sample-rows", "all" if sample_rows == ALL_ROWS else str(sample_rows)]
    return argv


def process_env(worker: int, base: dict | None = None) -> dict[str, str]:
    """A ``--processes`` worker's environment: the parent's, with the worker's index in
    ``PA_BENCH_WORKER`` (for the worker's log and a plug-in that wants it; the measurement does
    not read it). The workers run one at a time, so each gets the host's CPU threads."""
    env = dict(os.environ if base is None else base)
    env["PA_BENCH_WORKER"] = str(worker)
    return env


@dataclass
class _Worker:
    device: Device | None
    shard: Shard
    root: Path
    log: Path
    proc: subprocess.Popen | None = None
    counted: int = 0

    def run_dir(self) -> R.RunDir | None:
        runs = [p for p in self.root.iterdir() if p.is_dir()] if self.root.is_dir() else []
        return R.RunDir(runs[0]) if len(runs) == 1 else None

    def rows(self) -> int:
        run = self.run_dir()
        try:
            return len(run.records()) if run is not None else 0
        except PaBenchError:  # caught mid-write by another filesystem: next poll
            return self.counted

    def last_log_line(self) -> str:
        try:
            lines = [ln.strip() for ln in self.log.read_text(errors="replace").splitlines() if ln.strip()]
        except OSError:
            return "no log"
        errors = [ln for ln in lines if ln.startswith("error:")]
        return (errors or lines or ["no output"])[-1]


def run_on_devices(config, devices: Sequence[Device], *, backend: str = "auto",
                   results_root: str | Path = "results", sample_rows: int | None = None,
                   progress=None, command: list[str] | None = None,
                   argv_for: Callable[..., list[str]] = worker_argv,
                   write_report: bool = True) -> Path:
    """Run ``config`` as one shard per device, a worker process each; merge into one run.

    Returns the merged run directory. ``argv_for(config_file, shard, backend=, results_root=,
    sample_rows=)`` builds a worker's command (tests swap it)."""
    import yaml

    from pa_bench.problem.plan import make_plan
    from pa_bench.runner import NullProgress, RunInterrupted

    if not devices:
        raise DeviceError("--devices: no device to run on")
    progress = progress or NullProgress()
    command = list(sys.argv if command is None else command)
    plan = make_plan(config)
    started = time.time()
    run = R.new_run_dir(results_root, config.name, backend if backend != "auto" else "cuda")
    dev_meta = [{"index": d.index, "name": d.name, "uuid": d.uuid} for d in devices]
    run.write_meta({"mode": "run", "status": "running", "created": R.now_utc_iso(),
                    "command": command, "config": config.to_dict(), "config_path": config.path,
                    "seed": config.seed, "sample_rows": sample_rows, "devices": dev_meta})
    parts = run.path / PARTS_DIR
    parts.mkdir()
    config_file = parts / "config.yaml"
    config_file.write_text(yaml.safe_dump(config.to_dict(), sort_keys=False), encoding="utf-8")

    n = len(devices)
    workers = [_Worker(d, Shard(k, n), parts / f"gpu{d.index}", parts / f"gpu{d.index}.log")
               for k, d in enumerate(devices)]
    progress.start(len(plan), f"run {config.name} on {n} GPU{'s' if n > 1 else ''}")
    interrupted = False
    try:
        for w in workers:
            w.root.mkdir()
            argv = argv_for(config_file, w.shard, backend=backend, results_root=w.root,
                            sample_rows=sample_rows)
            with open(w.log, "wb") as log:
                w.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, env=worker_env(w.device, n))
        _watch(workers, progress)
    except KeyboardInterrupt:
        interrupted = True
        _stop(workers)
    progress.stop()

    done = [(w, w.run_dir()) for w in workers]
    for w, part in done:
        if part is None:
            progress.log(f"GPU {w.device.index}: no run ({w.last_log_line()}); log: {w.log}")
        elif w.proc is not None and w.proc.returncode not in (0, 1):
            progress.log(f"GPU {w.device.index}: worker exited with {w.proc.returncode} "
                         f"({w.last_log_line()}); log: {w.log}")
    made = [(w, part) for w, part in done if part is not None and part.records_path.exists()]
    if not made:
        first = workers[0]
        raise PaBenchError(f"no worker wrote a run: GPU {first.device.index}: {first.last_log_line()} "
                           f"(logs under {parts})")
    for w, part in made:
        stamp_device(part, w.device)
    merged_meta = {"devices": dev_meta, "config_path": config.path, "mode": "run",
                   "wall_seconds": round(time.time() - started, 3)}
    merge_runs([part for _w, part in made], run, command=command, extra_meta=merged_meta)
    if interrupted:
        run.update_meta(status="interrupted", finished=R.now_utc_iso())
        raise RunInterrupted(run.path)
    if len(made) < len(workers):
        run.update_meta(status="incomplete")
    if write_report:
        from pa_bench.present.report import write_report_or_note

        write_report_or_note(run.path, progress.log)
    return run.path


def run_processes(config, n: int, *, mode: str = "run", backend: str = "auto",
                  results_root: str | Path = "results", sample_rows: int | None = None,
                  progress=None, command: list[str] | None = None,
                  argv_for: Callable[..., list[str]] = process_argv,
                  write_report: bool = True) -> Path:
    """Run ``config`` ``n`` times, one fresh worker process after another, and merge the runs
    into one (pa_bench.store.merge.merge_processes); returns the merged run directory.

    ``argv_for(config_file, worker, mode=, backend=, results_root=, sample_rows=)`` builds a
    worker's command (tests swap it)."""
    import yaml

    from pa_bench.problem.plan import make_plan
    from pa_bench.runner import NullProgress, RunInterrupted

    n = check_processes(n)
    progress = progress or NullProgress()
    command = list(sys.argv if command is None else command)
    plan = make_plan(config)
    started = time.time()
    run = R.new_run_dir(results_root, config.name, backend if backend != "auto" else "cuda")
    run.write_meta({"mode": mode, "status": "running", "created": R.now_utc_iso(),
                    "command": command, "config": config.to_dict(), "config_path": config.path,
                    "seed": config.seed, "sample_rows": sample_rows,
                    "processes": {"count": n}})
    parts = run.path / PARTS_DIR
    parts.mkdir()
    config_file = parts / "config.yaml"
    config_file.write_text(yaml.safe_dump(config.to_dict(), sort_keys=False), encoding="utf-8")

    workers = [_Worker(None, Shard(0, 1), parts / f"proc{k}", parts / f"proc{k}.log")
               for k in range(n)]
    progress.start(len(plan) * n, f"run {config.name} in {n} process{'es' if n > 1 else ''}")
    interrupted = False
    try:
        for k, w in enumerate(workers):
            w.root.mkdir()
            argv = argv_for(config_file, k, mode=mode, backend=backend, results_root=w.root,
                            sample_rows=sample_rows)
            with open(w.log, "wb") as log:
                w.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, env=process_env(k))
            _watch([w], progress, f"process {k + 1} of {n}")
    except KeyboardInterrupt:
        interrupted = True
        _stop(workers)
    progress.stop()

    made = []
    for k, w in enumerate(workers):
        part = w.run_dir()
        if part is None or not part.records_path.exists():
            if w.proc is not None:
                progress.log(f"process {k}: no run ({w.last_log_line()}); log: {w.log}")
            continue
        if w.proc is not None and w.proc.returncode not in (0, 1):
            progress.log(f"process {k}: worker exited with {w.proc.returncode} "
                         f"({w.last_log_line()}); log: {w.log}")
        made.append(part)
    if not made:
        raise PaBenchError(f"no worker wrote a run: process 0: {workers[0].last_log_line()} "
                           f"(logs under {parts})")
    merge_processes(made, run, command=command,
                    extra_meta={"config_path": config.path,
                                "wall_seconds": round(time.time() - started, 3)})
    meta = run.read_meta()
    meta["processes"]["requested"] = n
    run.update_meta(processes=meta["processes"])
    if interrupted:
        run.update_meta(status="interrupted", finished=R.now_utc_iso())
        raise RunInterrupted(run.path)
    if len(made) < n:
        run.update_meta(status="incomplete")
    if write_report:
        from pa_bench.present.report import write_report_or_note

        write_report_or_note(run.path, progress.log)
    return run.path


def _watch(workers: Sequence[_Worker], progress, what: str | None = None) -> None:
    """Poll until every worker has exited; one progress display for all of them."""
    while True:
        alive = [w for w in workers if w.proc is not None and w.proc.poll() is None]
        for w in workers:
            rows = w.rows()
            if rows > w.counted:
                progress.advance(rows - w.counted)
                w.counted = rows
        if not alive:
            return
        progress.update(what or f"{len(alive)} of {len(workers)} GPU workers running")
        time.sleep(POLL_S)


def _stop(workers: Sequence[_Worker], grace_s: float = 30.0) -> None:
    """SIGTERM to every running worker (each marks its run interrupted), then wait; kill late ones."""
    for w in workers:
        if w.proc is not None and w.proc.poll() is None:
            try:
                w.proc.send_signal(signal.SIGTERM)
            except OSError:
                pass
    deadline = time.monotonic() + grace_s
    for w in workers:
        if w.proc is None:
            continue
        try:
            w.proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            w.proc.kill()
            w.proc.wait()


def stamp_device(run: R.RunDir, device: Device) -> None:
    """Give every row of a worker's run its device's NVML index and UUID (``gpu`` stays the
    name the backend recorded)."""
    records = run.records()
    for rec in records:
        if rec.device_index is None:
            rec.device_index = device.index
        if rec.device_uuid is None:
            rec.device_uuid = device.uuid
    run.write_records(records)


__all__ = ["Device", "DeviceError", "discover", "select", "resolve", "worker_argv", "worker_env",
           "run_on_devices", "stamp_device", "ProcessesError", "check_processes", "process_argv",
           "process_env", "run_processes"]
