"""The pure parity judge (pa_bench.numerics.judge) built on metrics.evaluate_parity."""

from __future__ import annotations

import numpy as np

from pa_bench.measure.outcome import TimingOutcome
from pa_bench.numerics.judge import judge, twin_note


def _pair(err=1e-6, rows=8):
    ref = np.linspace(-1, 1, 2 * rows * 4).reshape(2, rows, 4)
    return (ref + err).astype(np.float32), ref


def test_judge_passes_within_twice_the_model_error_and_fails_beyond():
    out, ref = _pair(1e-6)
    ok = judge(out, ref, model_err=1e-6)
    assert ok.passed and ok.notes == () and 0.9 < ok.metrics.err_ratio < 1.1
    bad = judge(out, ref, model_err=1e-8)
    assert not bad.passed and bad.notes[0].startswith("parity: max err")


def test_judge_on_model_rows_still_fails_on_a_nan_elsewhere():
    out, ref = _pair(1e-6)
    out[0, 5, 0] = np.nan
    j = judge(out, ref, model_err=1e-6, model_rows=np.array([0, 7]))
    assert not j.passed and j.metrics.nan_inf == 1
    assert j.notes[0] == "parity judged on the 2 of 8 rows the numerics model ran on"
    assert "NaN/Inf" in j.notes[1]


def test_judge_fails_an_overwritten_guard():
    out, ref = _pair(0.0)
    assert not judge(out, ref, model_err=0.0, canary_ok=False).passed


def test_twin_note():
    assert twin_note("v2t", "v2", True, 0.0) is None
    assert twin_note("v2t", "v2", False, 2e-7) == (
        "parity: v2t is not bitwise identical to v2 on the same MMA path (max difference 2e-07)")


def test_timing_outcome_of_a_backends_answer():
    assert TimingOutcome.of("no GPU").skipped == "no GPU"
    assert TimingOutcome.of(None).skipped == "not timed by the backend"
    assert not TimingOutcome(failed="CUDA error").timed
