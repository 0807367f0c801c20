"""The timing loop: CUDA events, an L2 flush before every cold sample, interleaved variants.

One *round* launches every variant once, in a fixed order (v1, v2, v2t, peers...), so that
clock or thermal drift hits all variants alike and per-round ratios give paired speed-ups.
Each sample is one launch between two CUDA events; in cold mode (the default, as nvbench's
cold measurements) the L2 cache is flushed before it by a memset over an L2-sized buffer that
is allocated once. The SM clock is read (NVML, else ``nvidia-smi``) while the launch runs.
Sampling stops by :func:`pa_bench.measure.stats.should_stop` applied to every variant: all have
converged (relative stdev under ``max_noise`` with ``min_seconds`` of GPU time and
``min_samples``), or the shape's ``max_seconds`` wall-clock budget or ``max_samples`` is hit.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from dataclasses import dataclass, field
from typing import Callable

from pa_bench.measure import stats


@dataclass
class TimingResult:
    samples_ms: list[float]
    clocks_mhz: list[float | None]
    nominal_mhz: float | None
    throttled: list[bool]
    stop_reason: str
    hot: bool
    warmup: int = 0
    clock_source: str | None = None
    extra: dict = field(default_factory=dict)


class ClockReader:
    """Reads the current SM clock in MHz: NVML when importable, else nvidia-smi (cached 1 s)."""

    def __init__(self, device_index: int = 0):
        self.source = None
        self._nvml = None
        self._handle = None
        self._last = (0.0, None)
        try:
            import pynvml

            pynvml.nvmlInit()
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(device_index)
            self._nvml = pynvml
            self.source = "nvml"
        except Exception:
            if shutil.which("nvidia-smi"):
                self.source = "nvidia-smi"
        self.device_index = device_index

    def nominal(self) -> float | None:
        """The clock a sample is compared with: the GPU's maximum SM clock."""
        if self._nvml is not None:
            try:
                return float(self._nvml.nvmlDeviceGetMaxClockInfo(self._handle, self._nvml.NVML_CLOCK_SM))
            except Exception:
                return None
        return self._smi("clocks.max.sm")

    def read(self) -> float | None:
        if self._nvml is not None:
            try:
                return float(self._nvml.nvmlDeviceGetClockInfo(self._handle, self._nvml.NVML_CLOCK_SM))
            except Exception:
                return None
        if self.source == "nvidia-smi":
            now = time.monotonic()
            if now - self._last[0] > 1.0:
                self._last = (now, self._smi("clocks.sm"))
            return self._last[1]
        return None

    def _smi(self, query: str) -> float | None:
        try:
            out = subprocess.run(
                ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits", f"-i={self.device_index}"],
                capture_output=True, text=True, timeout=10,
            ).stdout.strip().splitlines()
            return float(out[0]) if out else None
        except Exception:
            return None


def time_interleaved(
    fns: dict[str, Callable[[], None]],
    settings,
    *,
    flush: Callable[[], None],
    clock: ClockReader | None = None,
) -> dict[str, TimingResult]:
    """Time every callable in ``fns`` (each launches one kernel) interleaved, round by round."""
    import cupy as cp

    hot = bool(getattr(settings, "hot", False))
    warmup = int(getattr(settings, "warmup", 5))          # the time budget is stats.should_stop's
    names = list(fns)
    for name in names:                       # warm-up: module load, clocks up, caches
        for _ in range(max(warmup, 1)):
            fns[name]()
    cp.cuda.runtime.deviceSynchronize()

    start, end = cp.cuda.Event(), cp.cuda.Event()
    samples: dict[str, list[float]] = {n: [] for n in names}
    clocks: dict[str, list[float | None]] = {n: [] for n in names}
    done = {n: False for n in names}
    reason = {n: "" for n in names}
    t0 = time.monotonic()
    while True:
        for name in names:
            if not hot:
                flush()
            start.record()
            fns[name]()
            mhz = clock.read() if clock is not None else None   # while the launch runs
            end.record()
            end.synchronize()
            samples[name].append(float(cp.cuda.get_elapsed_time(start, end)))
            clocks[name].append(mhz)
        wall = time.monotonic() - t0
        for name in names:
            stop, why = stats.should_stop(samples[name], None, wall, settings)
            if stop and not done[name]:
                done[name], reason[name] = True, why
        if all(done.values()) or any(r in ("timeout", "max_samples") for r in reason.values()):
            final = next((r for r in reason.values() if r in ("timeout", "max_samples")), "noise")
            for name in names:
                if reason[name] != "noise":
                    reason[name] = final
            break

    nominal = clock.nominal() if clock is not None else None
    out = {}
    for name in names:
        out[name] = TimingResult(
            samples_ms=samples[name],
            clocks_mhz=clocks[name],
            nominal_mhz=nominal,
            throttled=stats.flag_throttled(clocks[name], nominal),
            stop_reason=reason[name],
            hot=hot,
            warmup=warmup,
            clock_source=clock.source if clock is not None else None,
        )
    return out
