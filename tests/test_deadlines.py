"""Deadlines on GPU waits, on the CPU: a backend whose wait never ends makes the run write the row
as failed with one line, mark itself hung and stop; a resume carries on after it and leaves the
hung row alone unless asked to retry it; the command line prints the line and exits 3."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from pa_bench import runner
from pa_bench.backends.numpy import NumpyBackend
from pa_bench.measure import deadline
from pa_bench.problem.config import DEFAULT_CONFIG, load_config
from pa_bench.store.results import open_run

SMOKE = DEFAULT_CONFIG.parent / "smoke.yaml"
ROOT = Path(__file__).resolve().parent.parent


class HangingBackend(NumpyBackend):
    """The numpy model, except that one (shape, variant)'s GPU wait never completes."""

    name = "cuda"
    kernels_are_model = False

    def __init__(self, hang=("1023x113", "v2"), seconds=0.05):
        super().__init__()
        self.hang, self.seconds = hang, seconds
        self.computed = []

    def describe(self):
        return {"backend": "cuda", "gpu": "Fake GPU", "arch": "sm_90", "mma": "m16n8k16"}

    def compute(self, prepared, variant, rows, check_determinism=None):
        shape = prepared.problem.shape.written
        self.computed.append((shape, variant))
        if (shape, variant) == self.hang:
            deadline.wait(lambda: False, self.seconds, f"{variant} at {shape}")   # a spinning kernel
        return super().compute(prepared, variant, rows, check_determinism)


def test_the_deadline_scales_with_the_work_or_is_fixed():
    assert deadline.deadline_for(0) == deadline.BASE_SECONDS
    assert deadline.deadline_for(5e14) == pytest.approx(deadline.BASE_SECONDS + 100.0)
    assert deadline.deadline_for(5e14, launches=3) == pytest.approx(deadline.BASE_SECONDS + 300.0)
    assert deadline.deadline_for(5e14, fixed=7) == 7.0


def test_wait_returns_at_once_when_done_and_raises_past_the_deadline():
    t0 = time.monotonic()
    deadline.wait(lambda: True, 0.0, "nothing")
    calls = iter([False] * 3 + [True])
    deadline.wait(lambda: next(calls), 5.0, "three polls")
    with pytest.raises(deadline.KernelHung) as info:
        deadline.wait(lambda: False, 0.05, "v3 at 32Kx1024")
    assert time.monotonic() - t0 < 1.0
    assert str(info.value) == "v3 at 32Kx1024: no result within 0.05 s (the kernel may be hung)"
    assert str(deadline.KernelHung("v3 at 32Kx1024", 60)) == \
        "v3 at 32Kx1024: no result within 60 s (the kernel may be hung)"


def test_a_hung_row_is_written_failed_and_the_run_stops_marked_hung(tmp_path):
    config = load_config(SMOKE)
    backend = HangingBackend()
    with pytest.raises(deadline.KernelHung):
        runner.run_parity(config, backend, results_root=tmp_path)
    run = open_run(next(tmp_path.iterdir()))
    rows = {r.key(): r for r in run.records()}
    hung = rows[("1023x113", "v2")]
    assert hung.status == "failed"
    assert hung.reason == "v2 at 1023x113: no result within 0.05 s (the kernel may be hung)"
    assert rows[("1023x113", "v1")].status == "ok"           # rows before it are kept
    assert ("1023x113", "v2t") not in rows and ("0x96", "v1") not in rows   # nothing ran after it
    meta = run.meta()
    assert meta.status == "hung"
    assert meta.hung == [{"shape": "1023x113", "variant": "v2", "what": "v2 at 1023x113",
                          "seconds": 0.05}]
    # --resume: the rows after it run; the hung row is not retried
    again = HangingBackend(hang=None)
    runner.run_parity(config, again, results_root=tmp_path, resume_run=run.path)
    assert ("1023x113", "v2") not in again.computed and ("0x96", "v1") in again.computed
    rows = {r.key(): r for r in run.records()}
    assert rows[("1023x113", "v2")].status == "failed" and rows[("0x96", "v2t")].status == "ok"
    assert run.meta().status == "complete"
    # --retry-failed runs it again
    third = HangingBackend(hang=None)
    runner.run_parity(config, third, results_root=tmp_path, resume_run=run.path, retry_failed=True)
    assert ("1023x113", "v2") in third.computed
    assert {r.key(): r for r in run.records()}[("1023x113", "v2")].status == "ok"


def test_a_hung_reference_fails_every_pending_row_of_its_shape(tmp_path):
    class HungReference(HangingBackend):
        def reference(self, inputs, rows, quantised=True):
            if inputs.problem.shape.written == "0x96":
                deadline.wait(lambda: False, 0.01, "the FP64 reference at 0x96")
            return super().reference(inputs, rows, quantised)

    with pytest.raises(deadline.KernelHung):
        runner.run_parity(load_config(SMOKE), HungReference(hang=None), results_root=tmp_path)
    rows = {r.key(): r for r in open_run(next(tmp_path.iterdir())).records()}
    for v in ("v1", "v2", "v2t"):
        assert rows[("0x96", v)].status == "failed"
        assert "the FP64 reference at 0x96: no result within" in rows[("0x96", v)].reason


def test_the_command_line_says_one_line_and_exits_3(tmp_path):
    """A real process: the CLI with a backend whose wait for v2 never ends."""
    script = textwrap.dedent(f'''
        import sys
        sys.path.insert(0, {str(ROOT / "tests")!r})
        import pa_bench.backends as backends
        from test_deadlines import HangingBackend
        backends.make_backend = lambda name, config=None, notice=None: HangingBackend()
        from pa_bench.cli import main
        main(["parity", "--config", {str(SMOKE)!r}, "--results", {str(tmp_path)!r}, "--deadline", "7"])
    ''')
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          cwd=ROOT)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert errors == ["error: v2 at 1023x113: no result within 0.05 s (the kernel may be hung); "
                      f"the run is kept in {next(tmp_path.iterdir())} (pa-bench parity --resume "
                      f"{next(tmp_path.iterdir())} carries on after it)"]
    assert "Traceback" not in proc.stderr
    meta = json.loads((next(tmp_path.iterdir()) / "meta.json").read_text())
    assert meta["status"] == "hung" and meta["config"]["deadline"] == 7.0   # --deadline reaches the config
