"""pa_bench.backends.compile_ahead: which variants are built ahead, the child's walk, and the run's wait."""

from __future__ import annotations

import sys
import time

import pytest

from pa_bench.backends import compile_ahead
from pa_bench.problem.config import CONFIG_DIR, load_config


def test_the_triton_kernel_and_the_compiled_peer_are_built_ahead_and_nothing_else():
    pr = load_config(CONFIG_DIR / "pr2092.yaml")
    assert compile_ahead.ahead_variants(pr.variants) == ["triton", "torch-flex"]
    assert compile_ahead.ahead_variants(["v1", "v3", "torch-sdpa"]) == []


def test_no_child_off_cuda_when_turned_off_or_with_nothing_to_build(monkeypatch):
    pr = load_config(CONFIG_DIR / "pr2092.yaml")
    monkeypatch.setenv(compile_ahead.ENV, "1")
    assert compile_ahead.start(pr, "numpy", pr.variants) is None
    assert compile_ahead.start(pr, "cuda", ["v1", "v2"]) is None
    monkeypatch.setenv(compile_ahead.ENV, "0")
    assert compile_ahead.start(pr, "cuda", pr.variants) is None


def _child(code: str, tmp_path) -> compile_ahead.CompileAhead:
    import subprocess

    log = tmp_path / "ahead.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-c", code], stdout=out, stderr=subprocess.STDOUT)
    return compile_ahead.CompileAhead(["triton"], proc, log, status="running")


def test_waiting_for_a_child_that_finishes_fails_or_runs_too_long(tmp_path):
    ok = _child("print('32Kx1024 triton: 1.2 s')", tmp_path)
    ok.wait(30)
    assert ok.meta()["status"] == "ok" and ok.seconds is not None and ok.waited <= ok.seconds
    bad = _child("import sys; print('no GPU here'); sys.exit(3)", tmp_path)
    bad.wait(30)
    assert bad.status == "failed (exit 3; no GPU here)"
    slow = _child("import time; time.sleep(60)", tmp_path)
    t0 = time.monotonic()
    slow.wait(0.3)
    assert slow.status == "stopped after 0.3 s" and slow.proc.poll() is not None   # killed
    assert time.monotonic() - t0 < 10
    slow.wait(30)                                  # a second wait returns at once
    assert slow.status == "stopped after 0.3 s"


def test_closing_stops_a_running_child_and_removes_its_files(tmp_path):
    slow = _child("import time; time.sleep(60)", tmp_path)
    slow.close()
    assert slow.proc.poll() is not None and slow.status == "stopped (the run ended first)"
    assert not (tmp_path / "ahead.log").exists()


class _Backend:
    """Records what the child's walk asks of a backend."""

    def __init__(self, refuse=(), fail=()):
        self.refuse, self.fail, self.calls = set(refuse), set(fail), []

    def build(self, variant, problem):
        return (variant, problem.shape.label)

    def kernel(self, build):
        self.calls.append(("compile",) + build)

    def unsupported(self, variant, problem):
        return "refused" if variant in self.refuse else None

    def prepare(self, inputs):
        self.calls.append(("prepare", inputs.problem.shape.label))
        return inputs.problem.shape.label

    def build_ahead(self, prep, variant):
        self.calls.append(("build", prep, variant))
        if variant in self.fail:
            raise RuntimeError("ptxas died")

    def release(self, prep):
        self.calls.append(("release", prep))


def test_the_childs_walk_builds_every_shape_and_carries_on_past_a_failure(smoke_yaml):
    smoke = load_config(smoke_yaml)
    labels = [s.label for s in smoke.shapes]
    be = _Backend(refuse={"v2"}, fail={"triton"})
    said = []
    ok = compile_ahead.build_ahead(smoke, ["triton", "v2", "torch-flex"], backend=be, say=said.append,
                                   builds=["v2t", "v1"])
    assert ok is False                                   # triton failed: no mark for this plan
    compiles = [c for c in be.calls if c[0] == "compile"]
    assert compiles == [("compile", v, s) for v in ("v2t", "v1") for s in labels]
    assert be.calls[:len(compiles)] == compiles          # before any shape's inputs
    builds = [c for c in be.calls if c[0] == "build"]
    assert builds == [("build", s, v) for s in labels for v in ("triton", "torch-flex")]   # v2 refused
    assert [c for c in be.calls if c[0] == "release"] == [("release", s) for s in labels]
    assert sum("RuntimeError: ptxas died" in line for line in said) == len(labels)


def test_a_run_waits_for_the_child_before_its_first_timing(monkeypatch, tmp_path, smoke_yaml):
    import json

    from pa_bench import runner
    from pa_bench.backends.numpy import NumpyBackend
    from pa_bench.measure.timing import TimingResult

    events = []

    class Fake:
        def pause(self):
            events.append("pause")

        def resume(self):
            events.append("resume")

        def close(self):
            events.append("close")

        def meta(self):
            return {"variants": ["triton"], "status": "ok", "seconds": 1.0, "waited_seconds": 0.5}

    class Gpu(NumpyBackend):   # the numpy model posing as a GPU backend that times
        name = "cuda"
        kernels_are_model = False

        def unsupported_timing(self, variant, problem):
            return None

        def time(self, prepared, variants, settings):
            events.append("time")
            return {v: TimingResult(samples_ms=[1.0] * 20, clocks_mhz=[1980.0] * 20, nominal_mhz=1980.0,
                                    throttled=[False] * 20, stop_reason="noise", hot=False,
                                    clock_source="nvml", host_bound=False, late_samples=0) for v in variants}

    started = []
    monkeypatch.setattr(compile_ahead, "start", lambda config, backend, variants: started.append(backend) or Fake())
    run_dir = runner.run_all(load_config(smoke_yaml), Gpu(), results_root=tmp_path, sample_rows=4)
    assert started == ["cuda"]
    assert events == ["pause", "time", "resume"] * 3 + ["close"]   # stopped for every timing phase
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["compile_ahead"]["status"] == "ok"


def test_the_cuda_kernels_are_compiled_last_first_and_plug_ins_left_out():
    pr = load_config(CONFIG_DIR / "pr2092.yaml")
    assert compile_ahead.cuda_builds(pr.variants) == ["v3", "v2t", "v2", "v1"]


def test_a_plan_built_before_starts_no_child_while_the_caches_are_there(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    monkeypatch.setenv(compile_ahead.ENV, "1")
    pr = load_config(CONFIG_DIR / "pr2092.yaml")
    key = compile_ahead.plan_key(pr, ["triton", "torch-flex"])
    assert key == compile_ahead.plan_key(pr, ["torch-flex", "triton"])
    assert key != compile_ahead.plan_key(pr.with_overrides(shapes="32Kx1024"), ["triton", "torch-flex"])
    assert key != compile_ahead.plan_key(pr.with_overrides(head_dim=64), ["triton", "torch-flex"])
    assert not compile_ahead.built_before(key)
    compile_ahead.mark_built(key)
    assert not compile_ahead.built_before(key)           # no Triton or Inductor cache: build again
    (tmp_path / "triton").mkdir()
    (tmp_path / "inductor").mkdir()
    assert compile_ahead.built_before(key)
    builds = compile_ahead.cuda_builds(pr.variants)
    full = compile_ahead.plan_key(pr, compile_ahead.ahead_variants(pr.variants) + builds)
    compile_ahead.mark_built(full)
    ahead = compile_ahead.start(pr, "cuda", pr.variants)
    assert ahead.proc is None and ahead.status.startswith("skipped")
    ahead.wait()
    assert ahead.meta()["status"].startswith("skipped")


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().rsplit(")", 1)[1].split()[0]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the process state from /proc")
def test_the_child_is_stopped_while_the_run_measures_and_goes_on_after(tmp_path):
    child = _child("import time\nfor _ in range(3000): time.sleep(0.01)", tmp_path)
    try:
        child.pause()
        deadline = time.monotonic() + 5
        while _state(child.proc.pid) != "T" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _state(child.proc.pid) == "T"              # stopped: it launches nothing
        time.sleep(0.05)
        child.resume()
        deadline = time.monotonic() + 5
        while _state(child.proc.pid) == "T" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _state(child.proc.pid) != "T" and child.proc.poll() is None
        assert child.meta()["paused_seconds"] >= 0.05 and child.meta()["status"] == "running"
        child.pause()                                     # a run that ends while it is stopped
    finally:
        child.close()
    assert child.proc.poll() is not None and child.status == "stopped (the run ended first)"
    done = _child("print('built')", tmp_path)
    done.proc.wait()
    done.pause()                                          # finished before: nothing to stop
    done.resume()
    assert done.meta()["status"] == "ok" and done.meta()["paused_seconds"] == 0.0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_the_child_dies_with_the_run_even_when_stopped(tmp_path):
    import os
    import signal
    import subprocess

    # a "run" that starts a child which asks to die with its parent, stops it, then is killed
    code = (
        "import subprocess, sys, time, signal\n"
        "child = subprocess.Popen([sys.executable, '-c', 'from pa_bench.backends import compile_ahead as c; "
        "c._die_with_parent(); import time; time.sleep(60)'])\n"
        "time.sleep(1.0)\n"
        "child.send_signal(signal.SIGSTOP)\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(60)\n")
    run = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    pid = int(run.stdout.readline())
    run.kill()
    run.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
            if _state(pid) == "Z":
                break
        except (ProcessLookupError, FileNotFoundError):
            break
        time.sleep(0.05)
    else:
        os.kill(pid, signal.SIGKILL)
        pytest.fail("the stopped child outlived its parent")
