"""pa-bench's GPU timer on a real GPU (`pytest -m gpu`): the cold flush loses no data, and a
timed call's samples come back through the blocking path with a stop reason."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.gpu

from gpu_env import require_cupy_gpu  # noqa: E402  (tests/gpu/gpu_env.py)

cp = require_cupy_gpu()

from pa_bench.measure import timing  # noqa: E402


def _l2_bytes() -> int:
    return int(cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["l2CacheSize"])


@pytest.mark.parametrize("flush", ["read", "discard"])
def test_flush_keeps_every_other_buffer(flush):
    """The discard pass drops lines without writing them back: it must touch the flush buffer's
    lines only. Data written just before (dirty in L2) survives either flush."""
    timer = timing.CupyTimer(_l2_bytes(), flush=flush)
    cc = int(cp.cuda.Device().compute_capability)
    assert timer.flush_method == (flush if cc >= 80 else "read")
    x = cp.arange(4 << 20, dtype=cp.int32)          # 16 MB, written by a kernel: dirty in L2
    y = x * 3 + 1
    timer.flush()
    timer.synchronize()
    assert bool((x == cp.arange(4 << 20, dtype=cp.int32)).all())
    assert bool((y == cp.arange(4 << 20, dtype=cp.int32) * 3 + 1).all())


def test_bad_flush_is_refused():
    with pytest.raises(ValueError, match="flush"):
        timing.CupyTimer(_l2_bytes(), flush="memset")


def test_a_timed_call_goes_through_the_hold():
    """time_interleaved on the real timer: samples, a stop reason, no late sample on an idle host."""
    timer = timing.CupyTimer(_l2_bytes())
    a = cp.ones(1 << 20, dtype=cp.float32)
    from pa_bench.problem.config import TimingSettings

    settings = TimingSettings(warmup=2, min_seconds=0.0, max_seconds=2.0, max_noise=1.0, min_samples=5,
                              max_samples=20)
    res = timing.time_interleaved({"scale": lambda: cp.multiply(a, 2.0, out=a)}, settings, timer=timer)
    r = res["scale"]
    assert len(r.samples_ms) >= 5 and all(ms > 0 for ms in r.samples_ms)
    assert r.stop_reason in ("noise", "timeout", "max_samples")
    assert r.late_samples == 0


_SPIN = r"""
extern "C" __global__ void spin_cycles(long long cycles, long long* sink) {
    const long long t0 = clock64();
    while (clock64() - t0 < cycles) {}
    if (threadIdx.x == 0 && blockIdx.x == 0) *sink = clock64() - t0;
}
"""


def test_the_stamped_clock_is_the_clock_the_sample_ran_at():
    """A kernel that spins a known number of SM cycles: cycles / event time is its clock, which
    the stamps must give (within 3 %: the stamps' span holds the events' and a few us more)."""
    spin = cp.RawModule(code=_SPIN).get_function("spin_cycles")
    sink = cp.zeros(1, dtype=cp.int64)
    sms = int(cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["multiProcessorCount"])
    cycles = 4_000_000                                     # about 2 ms at 2 GHz

    def call():
        spin((sms,), (128,), (cp.int64(cycles), sink))

    from pa_bench.problem.config import TimingSettings

    settings = TimingSettings(warmup=2, min_seconds=0.0, max_seconds=3.0, max_noise=1.0, min_samples=10,
                              max_samples=10)
    timer = timing.CupyTimer(_l2_bytes())
    r = timing.time_interleaved({"spin": call}, settings, timer=timer, clock=timing.ClockReader())["spin"]
    assert r.clock_source == "sm-cycles"
    assert len(r.clocks_mhz) == len(r.samples_ms) >= 10 and all(c is not None for c in r.clocks_mhz)
    for ms, mhz in zip(r.samples_ms, r.clocks_mhz):
        ran_at = cycles / (ms * 1e-3) / 1e6               # MHz, from the event time
        assert mhz == pytest.approx(ran_at, rel=0.03)
    assert r.nominal_mhz is None or max(r.clocks_mhz) <= 1.02 * r.nominal_mhz
