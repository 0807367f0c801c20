"""The sampling loop of pa_bench.measure.timing, on the CPU with a fake timer and launchers.

The fake timer keeps a log of what was enqueued, in stream order, and hands back GPU times from
a script; so these tests can assert the order of operations of every sample (nothing but the
launch between the two events, the hold first and the release last), the stop reasons and
the flags — what the real CuPy timer relies on.
"""

from __future__ import annotations

import itertools
import time

import numpy as np
import pytest

from pa_bench.measure import deadline, stats, timing
from pa_bench.measure.settings import TimingSettings


def Settings(**given) -> TimingSettings:
    """Short, unprimed timing (one sample a round) unless a test says otherwise."""
    return TimingSettings(**{"warmup": 2, "min_samples": 5, "min_seconds": 0.0, "max_seconds": 60.0,
                             "max_samples": 1000, "prime": False, "round_samples": 1, **given})


class FakeTimer:
    """Logs enqueued steps; ``times`` yields (ms, late) for each elapsed() call."""

    def __init__(self, times):
        self.log: list[str] = []
        self._times = iter(times)
        self.held = False
        self.deadlines: list = []

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

    def elapsed(self, deadline_s=None):
        assert not self.held, "waited for the end event while the stream was still held (deadlock)"
        self.log.append("wait")
        self.deadlines.append(deadline_s)
        return next(self._times)

    def synchronize(self, deadline_s=None):
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
    # warm-up launches come before any sample, each variant's awaited on its own (a hang names it)
    first_hold = timer.log.index("hold")
    assert timer.log[:first_hold] == ["launch:a", "launch:a", "sync", "launch:b", "launch:b", "sync"]
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
        assert r.clock_source is None


def test_stop_reason_max_samples_marks_the_noisy_variant_and_keeps_the_converged_one():
    # a: constant (converges at 5 samples); b: 1 and 2 ms in turn, so its median's interval
    # spans [1, 2] however many samples there are
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


class StampingTimer(FakeTimer):
    """A FakeTimer with stamps: each sample's clock from ``mhz`` (as CupyTimer's stamp kernels give)."""

    clock_source = "sm-cycles"

    def __init__(self, times, mhz, nominal=None):
        super().__init__(times)
        self._mhz = iter(mhz)
        self._nominal = nominal

    def sample_clock_mhz(self):
        assert self.log[-1] == "wait", "a sample's stamps are read only once it is done"
        return next(self._mhz)

    def nominal_mhz(self):
        return self._nominal


def test_a_stamping_timer_is_the_clock_and_the_reader_is_not_read():
    """With stamps, each sample's clock is what it ran at (the timer's), not NVML's reading:
    the reader is never read or started, and only gives the nominal clock for the flags."""
    timer = StampingTimer(itertools.repeat((1.0, False)), itertools.cycle([1750.0, 1400.0]))
    clock = FakeClock(timer.log, mhz=1980.0, nominal=1980.0)
    res = timing.time_interleaved({"a": launcher(timer.log, "a")}, Settings(), timer=timer, clock=clock)["a"]
    assert "clock" not in timer.log and not clock.started
    assert res.clock_source == "sm-cycles" and res.nominal_mhz == 1980.0
    assert res.clocks_mhz[:4] == [1750.0, 1400.0, 1750.0, 1400.0]
    assert res.throttled[:4] == [False, True, False, True]          # 1400 < 0.75 * 1980
    for s in samples(timer.log):
        assert s == ["hold", "flush", "start", "launch:a", "stop", "release", "wait"]


def test_a_stamping_timer_without_a_reader_gives_its_own_nominal_clock():
    timer = StampingTimer(itertools.repeat((1.0, False)), itertools.repeat(1000.0), nominal=1980.0)
    res = timing.time_interleaved({"a": launcher(timer.log, "a")}, Settings(), timer=timer)["a"]
    assert res.nominal_mhz == 1980.0 and all(res.throttled)


def _stamps(rows):
    """A stamp array of 8 SMs: ``rows`` {sm: (ns, cycles)}, zeros elsewhere."""
    a = np.zeros((8, 2), dtype=np.uint64)
    for sm, (ns, cyc) in rows.items():
        a[sm] = (ns, cyc)
    return a


def test_stamped_clock_is_cycles_over_nanoseconds_on_the_sms_stamped_twice():
    t0, c0 = 10**15, 5 * 10**12                 # large counters: no float64 trouble at these sizes
    begin = _stamps({0: (t0, c0), 1: (t0 + 40, c0 + 777), 2: (t0, c0), 5: (t0, c0)})
    end = _stamps({0: (t0 + 1_000_000, c0 + 1_750_000),     # 1 ms at 1750 MHz
                   1: (t0 + 1_000_040, c0 + 777 + 1_750_000),
                   2: (t0 + 1_000_000, c0 + 1_760_000),     # another SM, slightly off
                   3: (t0 + 1_000_000, c0 + 9)})            # stamped once only: ignored
    mhz = timing.stamped_mhz(begin, end)                    # SMs 0, 1, 2 (5 has no end stamp)
    assert mhz == pytest.approx(1750.0)


def test_stamped_clock_is_unknown_without_two_stamps_of_one_sm():
    assert timing.stamped_mhz(_stamps({}), _stamps({})) is None
    assert timing.stamped_mhz(_stamps({0: (100, 100)}), _stamps({1: (200, 300)})) is None
    # an end stamp not after the begin stamp (a counter that did not move) is not a clock
    assert timing.stamped_mhz(_stamps({0: (100, 100)}), _stamps({0: (100, 300)})) is None


def test_the_backend_times_through_the_hold_timer():
    """The cuda backend's time() passes its CupyTimer (the blocking path) to the loop."""
    import inspect

    from pa_bench.backends import cuda

    src = inspect.getsource(cuda.CudaBackend.time)
    assert "timer=self.timer()" in src
    assert "timing.CupyTimer" in inspect.getsource(cuda.CudaBackend.timer)


class ScriptTimer(FakeTimer):
    """A FakeTimer whose times come from a function of the variant's sample index."""

    def __init__(self, by_name, order):
        super().__init__(iter(()))
        self.by_name, self.order, self.count = by_name, order, 0

    def elapsed(self, deadline_s=None):
        assert not self.held
        name = self.order[self.count % len(self.order)]
        self.count += 1
        self.deadlines.append(deadline_s)
        return self.by_name[name](), False


def test_a_spread_sample_stops_once_its_median_is_known_not_when_its_spread_is_small():
    """3 % spread: the old rule (relative stdev under 0.5 %) never stops; the interval of the
    median is within 0.5 % after a few hundred samples, and the median is right to that."""
    rng = np.random.default_rng(7)
    timer = ScriptTimer({"a": lambda: 0.04 * (1 + 0.03 * rng.standard_normal())}, ["a"])
    res = timing.time_interleaved({"a": lambda: None}, Settings(min_samples=20, max_samples=5000),
                                  timer=timer)["a"]
    assert res.stop_reason == "noise"
    n = len(res.samples_ms)
    assert 100 < n < 1500
    lo, hi = stats.median_interval(res.samples_ms)
    med = float(np.median(res.samples_ms))
    assert max(med - lo, hi - med) <= 0.005 * med
    assert abs(med / 0.04 - 1) < 0.005
    assert np.std(res.samples_ms) / np.mean(res.samples_ms) > 0.02     # still spread


def test_min_seconds_counts_the_gpu_time_of_the_whole_shape():
    """Two variants of 1 ms and 3 ms, constant: they converge at once but sample until the
    shape holds min_seconds of GPU time (0.1 s = 25 rounds of 4 ms)."""
    timer = ScriptTimer({"a": lambda: 1.0, "b": lambda: 3.0}, ["a", "b"])
    res = timing.time_interleaved({"a": lambda: None, "b": lambda: None},
                                  Settings(min_samples=5, min_seconds=0.1), timer=timer)
    assert len(res["a"].samples_ms) == len(res["b"].samples_ms) == 25
    assert res["a"].stop_reason == res["b"].stop_reason == "noise"


def test_every_wait_carries_the_variants_deadline():
    timer = FakeTimer(itertools.repeat((1.0, False)))
    timing.time_interleaved({"a": lambda: None, "b": lambda: None}, Settings(hot=False), timer=timer,
                            deadlines={"a": 7.0, "b": 9.0})
    assert timer.deadlines[:4] == [7.0, 9.0, 7.0, 9.0]


class HungTimer(FakeTimer):
    """The end event of variant ``hung``'s samples never completes."""

    def __init__(self, hung, order):
        super().__init__(itertools.repeat((1.0, False)))
        self.hung, self.order, self.count = hung, order, 0

    def elapsed(self, deadline_s=None):
        name = self.order[self.count % len(self.order)]
        self.count += 1
        if name == self.hung:
            deadline.wait(lambda: False, deadline_s, "a timed call")
        return 1.0, False


def test_a_hung_sample_raises_naming_the_variant_within_its_deadline():
    timer = HungTimer("b", ["a", "b"])
    t0 = time.monotonic()
    with pytest.raises(deadline.KernelHung) as info:
        timing.time_interleaved({"a": lambda: None, "b": lambda: None}, Settings(), timer=timer,
                                deadlines={"a": 5.0, "b": 0.05})
    assert time.monotonic() - t0 < 2.0
    assert str(info.value) == "b: no result within 0.05 s (the kernel may be hung)"
    assert not isinstance(info.value, Exception)     # the row handlers that go on must not catch it


def test_a_hung_warm_up_names_the_variant():
    class SyncHangs(FakeTimer):
        def synchronize(self, deadline_s=None):
            deadline.wait(lambda: False, deadline_s, "the warm-up calls")

    with pytest.raises(deadline.KernelHung, match=r"^v9: no result within"):
        timing.time_interleaved({"v9": lambda: None}, Settings(), timer=SyncHangs(iter(())),
                                deadlines={"v9": 0.01})


def PrimedSettings(**given) -> TimingSettings:
    return Settings(**{"prime": True, "round_samples": 2, **given})


def test_primed_rounds_call_each_variant_once_untimed_before_its_samples():
    timer = FakeTimer(itertools.repeat((1.0, False)))
    res = timing.time_interleaved({"a": launcher(timer.log, "a"), "b": launcher(timer.log, "b")},
                                  PrimedSettings(min_samples=4), timer=timer)
    body = timer.log[timer.log.index("hold") - 1:]           # from the first round's first prime
    one = ["hold", "flush", "start", None, "stop", "release", "wait"]
    round_ = []
    for name in ("a", "b"):
        sample = [f"launch:{name}" if op is None else op for op in one]
        round_ += [f"launch:{name}"] + sample + sample       # the prime, outside any sample, then two
    rounds = len(res["a"].samples_ms) // 2
    assert len(res["a"].samples_ms) == len(res["b"].samples_ms) == 2 * rounds >= 4
    assert body == round_ * rounds


class PredecessorTimer(FakeTimer):
    """Times a sample by what ran before it: 1.0 ms after the same variant's kernel, 1.1 ms after
    another's (the state one kernel leaves for the next, which an L2 flush does not clear)."""

    def __init__(self):
        super().__init__(iter(()))

    def elapsed(self, deadline_s=None):
        assert not self.held
        launches = [op for op in self.log if op.startswith("launch:")]
        self.log.append("wait")
        return (1.0 if len(launches) < 2 or launches[-1] == launches[-2] else 1.1), False


def test_with_the_prime_every_sample_follows_its_own_kernel_whatever_runs_beside_it():
    for prime, expect in ((False, 1.1), (True, 1.0)):
        timer = PredecessorTimer()
        res = timing.time_interleaved(
            {"a": launcher(timer.log, "a"), "b": launcher(timer.log, "b")},
            PrimedSettings(prime=prime, round_samples=1, min_samples=10), timer=timer)
        for name in ("a", "b"):
            assert float(np.median(res[name].samples_ms)) == expect, (prime, name)


def test_the_first_wait_of_a_primed_variant_covers_the_prime_too():
    timer = FakeTimer(itertools.repeat((1.0, False)))
    timing.time_interleaved({"a": lambda: None, "b": lambda: None}, PrimedSettings(), timer=timer,
                            deadlines={"a": 7.0, "b": 9.0})
    assert timer.deadlines[:8] == [14.0, 7.0, 18.0, 9.0, 14.0, 7.0, 18.0, 9.0]


def test_hot_samples_are_not_primed():
    timer = FakeTimer(itertools.chain([(0.25, False)], itertools.repeat((1.0, False))))
    timing.time_interleaved({"a": launcher(timer.log, "a")}, PrimedSettings(hot=True, round_samples=1),
                            timer=timer)
    for s in samples(timer.log):
        assert s[:2] == ["hold", "start"]
    first = timer.log.index("hold", timer.log.index("wait"))    # after the batch probe
    between = timer.log[first:]
    waits = [i for i, op in enumerate(between) if op == "wait"]
    for w, nxt in zip(waits, waits[1:]):
        assert between[w + 1] == "hold"                          # no untimed launch between samples


def test_prime_and_round_samples_are_timing_settings_checked_at_load(tmp_path, smoke_yaml):
    import re

    from pa_bench.errors import ConfigError
    from pa_bench.problem.config import load_config

    t = load_config(smoke_yaml).timing
    assert (t.prime, t.round_samples) == (True, 2)
    text = open(smoke_yaml).read()
    for line, key, says in (("prime: 1", "timing.prime", "expected true or false"),
                            ("round_samples: 0", "timing.round_samples", "must be at least 1"),
                            ("round_samples: 17", "timing.round_samples", "(17) must be at most 16")):
        p = tmp_path / "c.yaml"
        p.write_text(text.replace("timing:", f"timing:\n  {line}", 1))
        with pytest.raises(ConfigError, match=re.escape(f"{key}: {says}")):
            load_config(p)
    p.write_text(text.replace("timing:", "timing:\n  prime: false\n  round_samples: 1", 1))
    t = load_config(p).timing
    assert (t.prime, t.round_samples) == (False, 1)


def test_the_loops_defaults_are_the_configs(tmp_path, smoke_yaml):
    """One set of defaults: a config with no timing section times primed rounds of two samples,
    and so does the loop given TimingSettings() itself."""
    from pa_bench.problem.config import load_config

    assert load_config(smoke_yaml).timing.prime is TimingSettings().prime is True
    timer = FakeTimer(itertools.repeat((1.0, False)))
    res = timing.time_interleaved({"a": launcher(timer.log, "a")},
                                  TimingSettings(warmup=1, min_samples=4, min_seconds=0.0), timer=timer)
    body = timer.log[timer.log.index("hold") - 1:]
    assert body[:2] == ["launch:a", "hold"]                     # the prime, then the first sample
    assert len(res["a"].samples_ms) % 2 == 0                    # two samples a round
