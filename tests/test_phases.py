"""Phases of a run: timed (meta.json's wall_seconds and phase_seconds) and shown as progress."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pa_bench import runner
from pa_bench.backends.numpy import NumpyBackend
from pa_bench.measure.timing import TimingResult
from pa_bench.phases import PHASES, PhaseClock
from pa_bench.problem.config import load_config
from pa_bench.problem.plan import make_plan

REPO = Path(__file__).resolve().parents[1]


class Recorder:
    """A progress sink that keeps every call."""

    def __init__(self):
        self.calls: list[tuple[str, object]] = []

    def start(self, total, description, work=0.0):
        self.calls.append(("start", total))
        self.work = work

    def update(self, description):
        self.calls.append(("update", description))

    def variant(self, name):
        self.calls.append(("variant", name))

    def advance(self, n=1, work=0.0, ran=True):
        self.calls.append(("advance", n))
        self.done = getattr(self, "done", 0.0) + (work if ran else 0.0)

    def phase(self, name):
        self.calls.append(("phase", name))

    def log(self, message):
        self.calls.append(("log", message))

    def stop(self):
        self.calls.append(("stop", None))

    def phases(self) -> list[str]:
        return [arg for call, arg in self.calls if call == "phase"]


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_phase_clock_sums_exclusive_seconds_and_tells_the_progress():
    clock, seen = FakeClock(), Recorder()
    phases = PhaseClock(seen, clock=clock)
    for _ in range(2):                      # two shapes: seconds are summed
        with phases.phase("inputs"):
            clock.now += 1.0
        with phases.phase("kernels"):
            clock.now += 2.0
            with phases.phase("model"):     # nested: pauses the outer phase
                clock.now += 4.0
            clock.now += 0.5
    assert phases.seconds == {"inputs": 2.0, "kernels": 5.0, "model": 8.0}
    assert list(phases.rounded()) == ["inputs", "model", "kernels"]  # PHASES order
    assert seen.phases() == ["inputs", "kernels", "model", "kernels"] * 2
    assert phases.current is None
    with pytest.raises(ValueError, match="unknown phase 'compile'"):
        with phases.phase("compile"):
            pass


def _smoke(path, shapes="256x64", variants=("v1", "v2t")):
    return make_plan(load_config(path), shapes=shapes, variants=list(variants)).config


def test_a_numpy_run_records_wall_and_phase_seconds(smoke_yaml, tmp_path):
    seen = Recorder()
    path = runner.run_all(_smoke(smoke_yaml, "256x64,0x96"), NumpyBackend(), results_root=tmp_path,
                          progress=seen)
    meta = json.loads((path / "meta.json").read_text())
    phases = meta["phase_seconds"]
    # numpy: the "kernels" are the model itself, and nothing is timed
    assert set(phases) == {"inputs", "reference", "kernels", "report"}
    assert all(s >= 0 for s in phases.values())
    assert 0 < sum(phases.values()) <= meta["wall_seconds"]
    # each shape shows its phases in order, after its name; the report comes last
    names = seen.phases()
    assert names == ["inputs", "reference", "kernels", "kernels"] * 2 + ["report"]
    shape_updates = [i for i, (call, _) in enumerate(seen.calls) if call == "update"]
    first_phase = [i for i, (call, _) in enumerate(seen.calls) if call == "phase"][0]
    assert shape_updates[0] < first_phase
    assert seen.calls[-1] == ("stop", None)


class TimedNumpy(NumpyBackend):
    """The numpy model posing as a GPU backend (the model then runs apart) with fixed samples."""

    name = "cuda"
    kernels_are_model = False

    def describe(self):
        return {"backend": "cuda", "gpu": "Fake GPU", "arch": "sm_90", "mma": "m16n8k16"}

    def unsupported_timing(self, variant, problem):
        return None

    def time(self, prepared, variants, settings):
        return {v: TimingResult(samples_ms=[1.0 + 0.01 * (k % 3) for k in range(12)],
                                clocks_mhz=[1980.0] * 12, nominal_mhz=1980.0,
                                throttled=[False] * 12, stop_reason="noise", hot=False)
                for v in variants}


def test_every_phase_is_recorded_beside_a_gpu_backend(smoke_yaml, tmp_path):
    seen = Recorder()
    path = runner.run_all(_smoke(smoke_yaml), TimedNumpy(), results_root=tmp_path, progress=seen)
    meta = json.loads((path / "meta.json").read_text())
    assert set(meta["phase_seconds"]) == set(PHASES)
    assert set(seen.phases()) == set(PHASES)
    assert seen.phases()[:2] == ["inputs", "reference"] and seen.phases()[-2:] == ["timing", "report"]


def test_time_and_parity_write_reports_without_matplotlib(smoke_yaml, tmp_path):
    """matplotlib's first import builds its font cache (~13 s on a fresh machine): only
    'pa-bench run' and 'pa-bench report' draw plots."""
    script = f"""
import sys
sys.path.insert(0, {str(Path(__file__).parent)!r})
from test_phases import TimedNumpy, _smoke
from pa_bench import runner
for fn in (runner.run_timing, runner.run_parity):
    print(fn(_smoke({smoke_yaml!r}), TimedNumpy(), results_root={str(tmp_path)!r}))
print("matplotlib" in sys.modules)
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=REPO, check=True)
    *paths, imported = proc.stdout.split()
    assert imported == "False", proc.stdout
    timed = (Path(paths[0]) / "report.md").read_text()
    assert f"`pa-bench report {paths[0]}` draws them" in timed
    assert not list(Path(paths[0]).glob("*.png"))


def test_the_cli_progress_names_the_shape_and_phase_in_a_log(capsys):
    from pa_bench.present.console import RichProgress

    progress = RichProgress()  # stderr is not a terminal here: heartbeat lines, no bar
    progress.start(2, "parity long on cuda")
    progress.update("4000Kx64 (4096000x64)")
    assert capsys.readouterr().err == ""  # nothing until a phase has run HEARTBEAT_S
    progress.phase("reference")
    assert progress.phase_text().startswith("reference ")
    progress.heartbeat()  # what the timer calls once the phase has run HEARTBEAT_S
    progress.stop()
    err = capsys.readouterr().err
    assert err.startswith("parity long on cuda: 4000Kx64 (4096000x64): reference ")
    assert progress.phase_text() == "" and progress._timer is None


@pytest.mark.parametrize("how", ["flag", "env-file"])
def test_profile_writes_a_cprofile_and_prints_the_phase_seconds(invoke, numpy_args, smoke_yaml,
                                                                tmp_path, monkeypatch, how):
    import pstats

    from pa_bench.profiling import PROFILE_ENV

    args = ["parity", "--config", smoke_yaml, *numpy_args, "--shapes", "0x96",
            "--variant", "v1", "--results", str(tmp_path / "runs")]
    monkeypatch.delenv(PROFILE_ENV, raising=False)
    if how == "flag":
        args.append("--profile")
    else:
        monkeypatch.setenv(PROFILE_ENV, str(tmp_path / "p" / "run.prof"))
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    (run_dir,) = (tmp_path / "runs").iterdir()
    written = run_dir / "profile.pstats" if how == "flag" else tmp_path / "p" / "run.prof"
    stats = pstats.Stats(str(written))
    assert any(fn[2] == "_run" and fn[0].endswith("runner.py") for fn in stats.stats)
    assert f"profile: {written}" in result.stderr
    assert "wall " in result.stderr and "kernels " in result.stderr


def test_phase_summary_line():
    from pa_bench.phases import phase_summary

    meta = {"wall_seconds": 10.0, "phase_seconds": {"timing": 3.0, "inputs": 1.25}}
    assert phase_summary(meta) == "wall 10.0 s: inputs 1.2 s, timing 3.0 s, other 5.8 s"
    assert phase_summary({}) is None


def test_the_kernels_phase_is_summed_per_variant_and_its_largest_are_named():
    from pa_bench.phases import PhaseClock, phase_summary

    now = [0.0]
    clock = PhaseClock(clock=lambda: now[0])
    for variant, took in (("v1", 1.0), ("torch-flex", 6.0), ("v1", 0.5), ("triton", 3.0), ("v3", 2.0)):
        with clock.phase("kernels", variant):
            now[0] += took
            with clock.phase("model"):     # a nested phase is not the variant's
                now[0] += 10.0
    assert clock.rounded() == {"model": 50.0, "kernels": 12.5}
    assert clock.rounded_parts("kernels") == {"torch-flex": 6.0, "triton": 3.0, "v3": 2.0, "v1": 1.5}
    assert list(clock.rounded_parts("kernels")) == ["torch-flex", "triton", "v3", "v1"]   # slowest first
    meta = {"wall_seconds": 70.0, "phase_seconds": clock.rounded(), "kernel_seconds": clock.rounded_parts("kernels")}
    assert phase_summary(meta) == ("wall 70.0 s: model 50.0 s, kernels 12.5 s (torch-flex 6.0, triton 3.0, "
                                   "v3 2.0), other 7.5 s")
