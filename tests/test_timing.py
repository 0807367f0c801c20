"""The sampling loop of pa_bench.measure.timing, on the CPU with a fake timer and launchers.

The fake timer keeps a log of what was enqueued, in stream order, and hands back GPU times from
a script; so these tests can assert the order of operations of every sample (nothing but the
launch between the two events, the hold first and the release last), the stop reasons and
the flags — what the real CuPy timer relies on.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import pytest

from pa_bench.measure import timing


@dataclass
class Settings:
    hot: bool = False
    warmup: int = 2
    min_samples: int = 5
    min_seconds: float = 0.0
    max_seconds: float = 60.0
    max_noise: float = 0.005
    max_samples: int = 1000


class FakeTimer:
    """Logs enqueued steps; ``times`` yields (ms, late) for each elapsed() call."""

    def __init__(self, times):
        self.log: list[str] = []
        self._times = iter(times)
        self.held = False

    def hold(self):
        assert not self.held, "a hold was enqueued while the previous one was still held"
        self.held = True
        self.log.append("hold")

    def flush(self):
        self.log.append("flush")

    def start(self):
        self.log.append("start")

    def stop(self):
        self.log.append("stop")

    def release(self):
        assert self.held
        self.held = False
        self.log.append("release")

    def elapsed(self):
        assert not self.held, "waited for the end event while the stream was still held (deadlock)"
        self.log.append("wait")
        return next(self._times)

    def synchronize(self):
        self.log.append("sync")


class FakeClock:
    source = "fake"

    def __init__(self, log, mhz=1980.0, nominal=1980.0):
        self.log, self.mhz, self._nominal = log, mhz, nominal
        self.started = self.closed = False

    def start(self):
        self.started = True

    def close(self):
        self.closed = True

    def read(self):
        self.log.append("clock")
        return self.mhz

    def nominal(self):
        return self._nominal


def launcher(log, name):
    def run():
        log.append(f"launch:{name}")
    return run


def samples(log):
    """The log split into samples (from a hold to the wait that ends it), warm-up dropped."""
    out, cur = [], None
    for op in log:
        if op == "hold":
            cur = []
        if cur is not None:
            cur.append(op)
            if op == "wait":
                out.append(cur)
                cur = None
    return out


def test_cold_sample_order_nothing_but_the_launch_between_the_events():
    timer = FakeTimer(itertools.repeat((1.0, False)))
    clock = FakeClock(timer.log)
    res = timing.time_interleaved({"a": launcher(timer.log, "a"), "b": launcher(timer.log, "b")},
                                  Settings(), timer=timer, clock=clock)
    smp = samples(timer.log)
    assert len(smp) == 2 * res["a"].samples_ms.__len__()
    for i, s in enumerate(smp):
        name = "a" if i % 2 == 0 else "b"           # interleaved: a, b, a, b ...
        assert s == ["hold", "flush", "start", f"launch:{name}", "stop", "release", "clock", "wait"]
    # warm-up launches come before any sample, then one synchronize
    first_hold = timer.log.index("hold")
    assert timer.log[:first_hold] == ["launch:a", "launch:a", "launch:b", "launch:b", "sync"]
    assert clock.started and clock.closed


def test_hot_samples_batch_launches_without_flush():
    # the batch probe reads 0.25 ms per launch: 1 ms / 0.25 ms = 4 launches per sample
    timer = FakeTimer(itertools.chain([(0.25, False)], itertools.repeat((1.0, False))))
    res = timing.time_interleaved({"a": launcher(timer.log, "a")}, Settings(hot=True),
                                  timer=timer, clock=None)["a"]
    assert res.hot and res.batch == 4
    smp = samples(timer.log)
    assert smp[0] == ["hold", "start", "launch:a", "stop", "release", "wait"]          # the probe
    for s in smp[1:]:
        assert s == ["hold", "start"] + ["launch:a"] * 4 + ["stop", "release", "wait"]
    assert res.samples_ms[0] == pytest.approx(0.25)    # ms per launch
    assert "flush" not in timer.log


def test_stop_reason_noise_when_every_variant_converges():
    timer = FakeTimer(itertools.repeat((2.0, False)))
    res = timing.time_interleaved({"a": launcher(timer.log, "a"), "b": launcher(timer.log, "b")},
                                  Settings(), timer=timer)
    for r in res.values():
        assert r.stop_reason == "noise"
        assert len(r.samples_ms) == 5                  # min_samples, every sample identical
        assert r.host_bound is False and r.late_samples == 0
        assert r.method == "hold" and r.clock_source is None


def test_stop_reason_max_samples_marks_the_noisy_variant_and_keeps_the_converged_one():
    # a: constant (converges at 5 samples); b: alternates 1 and 2 ms (never under 0.5 %)
    seq = itertools.cycle([(1.0, False), (1.0, False), (1.0, False), (2.0, False)])
    timer = FakeTimer(seq)
    res = timing.time_interleaved({"a": launcher(timer.log, "a"), "b": launcher(timer.log, "b")},
                                  Settings(max_samples=12), timer=timer)
    assert res["a"].stop_reason == "noise"
    assert res["b"].stop_reason == "max_samples"
    assert len(res["a"].samples_ms) == len(res["b"].samples_ms) == 12


def test_stop_reason_timeout(monkeypatch):
    clock_values = iter(range(0, 10_000, 10))          # every monotonic() call: +10 s
    monkeypatch.setattr(timing.time, "monotonic", lambda: float(next(clock_values)))
    seq = itertools.cycle([(1.0, False), (3.0, False)])
    timer = FakeTimer(seq)
    res = timing.time_interleaved({"a": launcher(timer.log, "a")}, Settings(max_seconds=25.0),
                                  timer=timer)["a"]
    assert res.stop_reason == "timeout"
    assert len(res.samples_ms) == 3


def test_late_hold_marks_host_bound_and_counts_samples():
    seq = itertools.chain([(1.0, False), (1.0, True)], itertools.repeat((1.0, False)))
    timer = FakeTimer(seq)
    res = timing.time_interleaved({"a": launcher(timer.log, "a")}, Settings(), timer=timer)["a"]
    assert res.host_bound is True and res.late_samples == 1


def test_throttled_samples_are_flagged_from_the_clock():
    timer = FakeTimer(itertools.repeat((1.0, False)))
    clock = FakeClock(timer.log, mhz=1000.0, nominal=1980.0)
    res = timing.time_interleaved({"a": launcher(timer.log, "a")}, Settings(), timer=timer, clock=clock)["a"]
    assert res.clock_source == "fake" and res.nominal_mhz == 1980.0
    assert all(res.throttled) and res.clocks_mhz == [1000.0] * len(res.samples_ms)


def test_the_backend_times_through_the_hold_timer():
    """The cuda backend's time() passes its CupyTimer (the blocking path) to the loop."""
    import inspect

    from pa_bench.backends import cuda

    src = inspect.getsource(cuda.CudaBackend.time)
    assert "timer=self.timer()" in src
    assert "timing.CupyTimer" in inspect.getsource(cuda.CudaBackend.timer)
