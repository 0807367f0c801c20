"""GPU time only: nvbench's blocking-kernel method, an L2 flush before every cold sample,
interleaved variants.

One sample of one variant, as the stream sees it::

    [hold] -> [flush L2] -> (start event) -> [launch ... launch] -> (end event)
       ^ host releases the hold here, after everything above is enqueued

A tiny *hold* kernel spins on a flag in pinned host memory (mapped into the device's address
space) while the host enqueues the flush, the start event, the launch(es) and the end event;
then the host sets the flag. So whatever the host does between enqueuing the two events —
Python's launch overhead, a framework's dispatch, a context manager, a clock read — happens
while the GPU is still held, and never enters the interval between the events. The SM clock of
a sample is the one it ran at: a one-warp kernel on every SM stamps each SM's cycle counter and
the global timer right before the start event and right after the end event (nvbench's
method), and the sample's clock is the median over the SMs of cycles / nanoseconds. NVML's or
``nvidia-smi``'s reading, taken after the release, is the fallback for a timer without stamps;
on the H200 it reads 1,980 MHz while v3 runs at about 1,800 (docs/TIMING.md).
If the host has not released the hold within ``HOLD_TIMEOUT_S`` the hold gives up by itself and
says so; such a sample may contain host time: it is counted (``late_samples``) and the result is
marked ``host_bound`` (nvbench warns in that case).

Cold samples (the default) flush L2 before the start event by *reading* a buffer of twice the
device's L2 size: every line the last sample left dirty is written back then, outside the
interval. (A memset, nvbench's flush, leaves L2 full of dirty lines whose write-back the timed
kernel then pays for: on the H200 that read 2.5-7 % above Nsight Compute.) With
``timing.l2_flush: discard`` (sm_80+; the default is ``read``) a second pass then drops the buffer's lines
(``discard.global.L2``), so the kernel starts on an empty L2, as after Nsight Compute's
``--cache-control all``, instead of one full of clean lines (``read``). docs/TIMING.md has the
measurements behind the choice.
Hot samples (``hot``) time a batch of back-to-back launches with no flush and
divide by the batch size (the batch is sized from the warm-up to about ``HOT_BATCH_MS``).

One *round* takes ``round_samples`` samples of every variant, in a fixed order, so that clock or
thermal drift hits all alike and per-round ratios give paired speed-ups. With ``prime`` (the
default for cold samples) a variant's samples in a round follow one untimed call of it, enqueued
before the hold: every sample then follows the variant's own kernel, as in a benchmark of that
kernel alone (nvbench's), whatever runs beside it. Without it a sample follows another variant's
kernel, and what that leaves behind survives the L2 flush: on the H200 a first chunk through
cuDNN took up to 1.9 % longer after another variant than after itself, flash up to 3.3 % less
(docs/TIMING.md, experiments/order_check.py), so a variant's time depended on its neighbour in the
variant list. Sampling stops by the rule of :class:`pa_bench.measure.settings.TimingSettings`:
every variant's median is known to ``max_noise`` (the 95 %
interval of the median within that of it, with ``min_samples``) and the shape's samples hold
``min_seconds`` of GPU time, or a ceiling is reached (``max_seconds`` of wall time,
``max_samples`` rounds); the reason is kept per variant. Every wait for the GPU has a deadline
(:mod:`pa_bench.measure.deadline`): a call that never finishes raises ``KernelHung`` naming it.

The loop itself (:func:`time_interleaved`) only talks to a :class:`Timer`, so it is tested on the
CPU with a fake one; :class:`CupyTimer` is the real one.
"""

from __future__ import annotations

import math
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import Callable, Protocol

from pa_bench.measure import stats
from pa_bench.measure.deadline import KernelHung, wait
from pa_bench.measure.settings import TimingSettings, slow_spec

HOLD_TIMEOUT_S = 2.0      # the hold kernel's own limit: past it, the sample is "late"
HOT_BATCH_MS = 1.0        # hot mode: launches per sample chosen to fill about this much GPU time
HOT_MAX_BATCH = 64


@dataclass
class TimingResult:
    samples_ms: list[float]
    clocks_mhz: list[float | None]
    nominal_mhz: float | None
    throttled: list[bool]
    stop_reason: str
    hot: bool
    warmup: int = 0
    clock_source: str | None = None  # sm-cycles (the timer's stamps), nvml or nvidia-smi
    host_bound: bool = False        # some hold timed out before the host had enqueued the sample
    late_samples: int = 0           # how many
    batch: int = 1                  # launches per sample (hot mode)
    placements: list[int] | None = None  # the placement of the inputs each sample was taken on


def placed_name(variant: str, placement: int) -> str:
    """The timing loop's name for ``variant`` on placement ``placement`` of the inputs."""
    return f"{variant}@{placement}"


def unplaced_name(name: str) -> str:
    """``placed_name``'s variant (a name without a placement: itself)."""
    head, sep, tail = name.rpartition("@")
    return head if sep and tail.isdigit() else name


def merge_placements(results: dict[str, "TimingResult"], variants, n: int) -> dict[str, "TimingResult"]:
    """One result per variant from the results of its ``n`` placements (``placed_name``): the
    samples round by round, placement 0 to n - 1 within a round, so that two variants' k-th
    samples come from the same round and placement (paired speed-ups); each sample's placement
    kept (``placements``, for :func:`pa_bench.measure.stats.placed_interval`). Stopped for noise
    when every placement was; else for the first other reason."""
    out = {}
    for v in variants:
        parts = [results[placed_name(v, i)] for i in range(n) if placed_name(v, i) in results]
        if not parts:
            continue
        rounds = min(len(r.samples_ms) for r in parts)
        order = [(k, i) for k in range(rounds) for i in range(len(parts))]
        reasons = [r.stop_reason for r in parts]
        first = parts[0]
        out[v] = TimingResult(
            samples_ms=[parts[i].samples_ms[k] for k, i in order],
            clocks_mhz=[parts[i].clocks_mhz[k] if k < len(parts[i].clocks_mhz) else None for k, i in order],
            nominal_mhz=first.nominal_mhz,
            throttled=[bool(parts[i].throttled[k]) if k < len(parts[i].throttled) else False for k, i in order],
            stop_reason=next((r for r in reasons if r != stats.STOP_NOISE), stats.STOP_NOISE),
            hot=first.hot, warmup=first.warmup, clock_source=first.clock_source,
            host_bound=any(r.host_bound for r in parts), late_samples=sum(r.late_samples for r in parts),
            batch=first.batch, placements=[i for _k, i in order])
    return out


class Timer(Protocol):
    """The device-side steps of one sample, in stream order (see the module docstring)."""

    def hold(self) -> None: ...                  # enqueue the hold kernel
    def flush(self) -> None: ...                 # enqueue the L2 flush
    def start(self) -> None: ...                 # record the start event
    def stop(self) -> None: ...                  # record the end event
    def release(self) -> None: ...               # let the hold kernel finish
    # wait for the end event: (ms, hold timed out); past deadline_s seconds raise KernelHung
    def elapsed(self, deadline_s: float | None = None) -> tuple[float, bool]: ...
    def synchronize(self, deadline_s: float | None = None) -> None: ...


class StampingTimer(Timer, Protocol):
    """A timer that stamps the SM clock of each sample (:class:`CupyTimer`). The loop tells one
    by its ``sample_clock_mhz``; a timer without it has the ClockReader read after each release."""

    clock_source: str                            # "sm-cycles"
    def sample_clock_mhz(self) -> float | None: ...  # the last sample's clock, read after elapsed()
    def nominal_mhz(self) -> float | None: ...   # where the ClockReader knows none


# --------------------------------------------------------------------------- the clock


class ClockReader:
    """The SM clock in MHz as NVML or ``nvidia-smi`` report it, read outside the timed interval:
    the nominal clock of the throttle flags, and a sample's clock where the timer has no stamps
    (NVML gives the clock the GPU is set to, not the lower one it runs at under load).

    NVML (``nvidia-ml-py``, in the cuda12/cuda13 extras) when importable: one cheap call per
    sample, made after the hold is released. Otherwise ``nvidia-smi`` in a background thread
    that samples about twice a second (started by :meth:`start`), so no subprocess ever runs in
    the sampling loop itself. ``source`` says which (None: no clock).

    ``device_index`` is the CUDA ordinal. NVML and nvidia-smi number the host's GPUs and ignore
    ``CUDA_VISIBLE_DEVICES``, so the GPU is found by the CUDA device's PCI bus id where CuPy
    gives it: a worker pinned to one GPU (``--devices``) reads that GPU's clock, not GPU 0's.
    """

    def __init__(self, device_index: int = 0, *, use_nvml: bool = True):
        self.source: str | None = None
        self.device_index = device_index
        self.bus_id = _pci_bus_id(device_index)
        self._nvml = None
        self._handle = None
        self._latest: float | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        if use_nvml:
            try:
                import pynvml

                pynvml.nvmlInit()
                self._handle = (_nvml_by_bus_id(pynvml, self.bus_id) if self.bus_id
                                else pynvml.nvmlDeviceGetHandleByIndex(device_index))
                self._nvml = pynvml
                self.source = "nvml"
            except Exception:
                self._nvml = None
        if self._nvml is None and shutil.which("nvidia-smi"):
            self.source = "nvidia-smi"

    def start(self) -> None:
        if self.source == "nvidia-smi" and self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._poll, name="pa-bench-clock", daemon=True)
            self._thread.start()

    def close(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=15)
            self._thread = None

    def nominal(self) -> float | None:
        """The clock a sample is compared with: the GPU's maximum SM clock."""
        if self._nvml is not None:
            try:
                return float(self._nvml.nvmlDeviceGetMaxClockInfo(self._handle, self._nvml.NVML_CLOCK_SM))
            except Exception:
                return None
        if self.source == "nvidia-smi":
            return self._smi("clocks.max.sm")
        return None

    def read(self) -> float | None:
        if self._nvml is not None:
            try:
                return float(self._nvml.nvmlDeviceGetClockInfo(self._handle, self._nvml.NVML_CLOCK_SM))
            except Exception:
                return None
        return self._latest

    def _poll(self) -> None:
        while not self._stop.is_set():
            value = self._smi("clocks.sm")
            if value is not None:
                self._latest = value
            self._stop.wait(0.5)

    def _smi(self, query: str) -> float | None:
        try:
            out = subprocess.run(
                ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits", f"-i={self.bus_id or self.device_index}"],
                capture_output=True, text=True, timeout=10,
            ).stdout.strip().splitlines()
            return float(out[0]) if out else None
        except Exception:
            return None


def _pci_bus_id(cuda_ordinal: int) -> str | None:
    """The PCI bus id of CUDA device ``cuda_ordinal`` (None without CuPy or a GPU)."""
    try:
        import cupy as cp

        return str(cp.cuda.Device(cuda_ordinal).pci_bus_id)
    except Exception:
        return None


def _nvml_by_bus_id(pynvml, bus_id: str):
    """NVML's handle of the GPU at ``bus_id`` (older nvidia-ml-py takes bytes only)."""
    try:
        return pynvml.nvmlDeviceGetHandleByPciBusId(bus_id)
    except TypeError:
        return pynvml.nvmlDeviceGetHandleByPciBusId(bus_id.encode())


def device_identity(cuda_ordinal: int = 0) -> dict:
    """``{"device_index": NVML index on the host, "device_uuid": "GPU-..."}`` of CUDA device
    ``cuda_ordinal`` (found by PCI bus id, so right under ``CUDA_VISIBLE_DEVICES``); {} if unknown."""
    bus_id = _pci_bus_id(cuda_ordinal)
    if bus_id is None:
        return {}
    try:
        import pynvml

        pynvml.nvmlInit()
        h = _nvml_by_bus_id(pynvml, bus_id)
        uuid = pynvml.nvmlDeviceGetUUID(h)
        return {"device_index": int(pynvml.nvmlDeviceGetIndex(h)),
                "device_uuid": uuid.decode() if isinstance(uuid, bytes) else str(uuid)}
    except Exception:
        pass
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=index,uuid", "--format=csv,noheader",
                              f"-i={bus_id}"], capture_output=True, text=True, timeout=10).stdout
        index, uuid = [x.strip() for x in out.strip().splitlines()[0].split(",")]
        return {"device_index": int(index), "device_uuid": uuid}
    except Exception:
        return {}


def stamped_mhz(begin, end) -> float | None:
    """The SM clock over one sample, in MHz, from two stamp arrays taken before and after it:
    row i is SM i's (global timer ns, cycle counter), zeros where no stamp block ran on SM i.
    Each SM stamped both times gives cycles / ns over the same span; the clock is their median
    (every SM of a GPU runs on one clock; the median ignores an SM a block reached late).
    None when no SM was stamped twice."""
    import numpy as np

    b = np.asarray(begin).reshape(-1, 2)
    e = np.asarray(end).reshape(-1, 2)
    n = min(len(b), len(e))
    b, e = b[:n], e[:n]
    ok = np.flatnonzero((b[:, 0] > 0) & (e[:, 0] > b[:, 0]) & (b[:, 1] > 0) & (e[:, 1] > b[:, 1]))
    if not ok.size:
        return None
    d = (e[ok] - b[ok]).astype(np.float64)     # exact in the stamps' own integer type first
    return float(np.median(d[:, 1] / d[:, 0])) * 1e3


# --------------------------------------------------------------------------- the loop


def time_interleaved(
    fns: dict[str, Callable[[], None]],
    settings: TimingSettings,
    *,
    timer: Timer,
    clock: ClockReader | None = None,
    deadlines: dict[str, float] | None = None,
) -> dict[str, TimingResult]:
    """Time every callable in ``fns`` (each enqueues one call's GPU work) interleaved, round by
    round, GPU time only (see the module docstring), until ``settings``' stopping rule
    (:class:`~pa_bench.measure.settings.TimingSettings`) says the shape has been sampled enough.
    ``deadlines``: seconds one call of each variant may take before the wait for it raises
    :class:`~pa_bench.measure.deadline.KernelHung` naming it (None: no deadline)."""
    hot = settings.hot
    warmup = max(settings.warmup, 1)
    prime = settings.prime and not hot
    per_round = max(settings.round_samples, 1)
    names = list(fns)
    limit_s = {n: (deadlines or {}).get(n) for n in names}
    for name in names:                       # module load, lazy allocations, clocks up
        for _ in range(warmup):
            fns[name]()
        try:
            timer.synchronize(None if limit_s[name] is None else limit_s[name] * warmup)
        except KernelHung as exc:
            raise exc.at(name, name) from None
    batch = {name: _hot_batch(fns[name], timer, limit_s[name]) if hot else 1 for name in names}
    fns = slowed_on_purpose(fns, timer, slow_spec(settings.slow))

    samples: dict[str, list[float]] = {n: [] for n in names}
    clocks: dict[str, list[float | None]] = {n: [] for n in names}
    tracked = {n: stats.MedianTracker() for n in names}
    late = {n: 0 for n in names}
    reason = {n: "" for n in names}
    gpu_ms = 0.0
    rounds = 0
    stamps = _stamps(timer)
    stamped = stamps is not None
    reader = None if stamped else clock       # the timer's stamps make the reader's reads moot
    if reader is not None:
        reader.start()
    t0 = time.monotonic()
    try:
        while True:
            for name in names:
                wait_s = None if limit_s[name] is None else limit_s[name] * batch[name]
                if prime:
                    fns[name]()              # untimed: the samples below follow this kernel
                for j in range(per_round):
                    try:                     # the first wait covers the prime too
                        ms, was_late, mhz = _one_sample(
                            fns[name], timer, reader, stamps, hot=hot, batch=batch[name],
                            deadline_s=None if wait_s is None else wait_s * (2 if prime and j == 0 else 1))
                    except KernelHung as exc:
                        raise exc.at(name, name) from None
                    samples[name].append(ms)
                    clocks[name].append(mhz)
                    tracked[name].add(ms)
                    late[name] += was_late
                    gpu_ms += ms * batch[name]
            rounds += 1
            enough_time = gpu_ms >= settings.min_seconds * 1e3
            for name in names:
                if not reason[name] and enough_time and tracked[name].converged(settings):
                    reason[name] = stats.STOP_NOISE
            limit = stats.ceiling(settings, rounds, time.monotonic() - t0)
            if limit or all(reason.values()):
                for name in names:           # a variant still short of its precision stopped
                    if not reason[name]:     # for the same reason as the round
                        reason[name] = limit
                break
    finally:
        if reader is not None:
            reader.close()

    nominal = clock.nominal() if clock is not None else None
    if nominal is None and stamped:
        nominal = timer.nominal_mhz()
    source = timer.clock_source if stamped else (clock.source if clock is not None else None)
    return {
        name: TimingResult(
            samples_ms=samples[name],
            clocks_mhz=clocks[name],
            nominal_mhz=nominal,
            throttled=stats.flag_throttled(clocks[name], nominal),
            stop_reason=reason[name],
            hot=hot,
            warmup=warmup,
            clock_source=source,
            host_bound=late[name] > 0,
            late_samples=late[name],
            batch=batch[name],
        )
        for name in names
    }


#: ``timing.slow = "VARIANT=FRACTION[,...]"`` (TimingSettings.slow): a test instrument, never a
#: measurement. Each named variant's every call is followed, inside the timed interval, by a
#: one-thread kernel that spins for FRACTION of the variant's own time, so the variant really runs
#: about that much slower on the GPU (``compare`` must call it slower). Off unless set; the config
#: in meta.json records it, and a run with it says so on stderr.
_SPIN_SOURCE = r"""
extern "C" __global__ void pa_spin(long long cycles) {
    long long t0 = clock64();
    while (clock64() - t0 < cycles) { }
}
"""


def spin_cycles(plain_ms: float, padded_ms: float, mhz: float | None, fraction: float) -> int:
    """Cycles the spin kernel must add so that a call of ``plain_ms`` takes ``fraction`` longer,
    given that a call followed by a spin of 0 cycles took ``padded_ms`` (the spin's launch is not
    free) and the SM runs at ``mhz``; 0 where that launch alone adds the fraction or more."""
    if mhz is None or not mhz > 0:
        return 0
    want_ms = fraction * plain_ms - max(padded_ms - plain_ms, 0.0)
    return max(int(round(want_ms * mhz * 1e3)), 0)


def slowed_on_purpose(fns: dict[str, Callable[[], None]], timer: Timer,
                      spec: dict[str, float]) -> dict[str, Callable[[], None]]:
    """``fns`` with each variant of ``spec`` followed by a spin of its fraction of the variant's
    time (``timing.slow``); calibrated on five cold samples without and with an empty spin."""
    todo = [n for n in fns if n in spec]
    if not todo:
        return fns
    import sys

    import cupy as cp

    spin = cp.RawKernel(_SPIN_SOURCE, "pa_spin")
    stamps = _stamps(timer)
    out = dict(fns)
    def padded_call(fn: Callable[[], None], cycles: list[int]) -> Callable[[], None]:
        def padded() -> None:
            fn()
            spin((1,), (1,), (cp.int64(cycles[0]),))
        return padded

    for name in todo:
        fn, cycles = fns[name], [0]
        padded = padded_call(fn, cycles)

        def median_of(call) -> tuple[float, float | None]:
            got = [_one_sample(call, timer, None, stamps, hot=False, batch=1) for _ in range(5)]
            mhz = [g[2] for g in got if g[2] is not None]
            return stats.summarize([g[0] for g in got]).median, (sorted(mhz)[len(mhz) // 2] if mhz else None)

        plain, mhz = median_of(fn)
        empty, _ = median_of(padded)
        cycles[0] = spin_cycles(plain, empty, mhz or timer.nominal_mhz(), spec[name])
        sys.stderr.write(f"timing: {name} slowed on purpose by {100 * spec[name]:g} % "
                         f"(timing.slow; a spin of {cycles[0]} cycles after each call)\n")
        out[name] = padded
    return out


def _stamps(timer: Timer) -> Callable[[], float | None] | None:
    """The timer's ``sample_clock_mhz`` where it stamps its samples' clock (an optional member of
    the protocol: a :class:`StampingTimer`), else None."""
    return getattr(timer, "sample_clock_mhz", None)


def _one_sample(fn: Callable[[], None], timer: Timer, clock: ClockReader | None,
                stamps: Callable[[], float | None] | None, *, hot: bool,
                batch: int, deadline_s: float | None = None) -> tuple[float, bool, float | None]:
    """One sample: (ms per launch, the hold timed out, SM clock). The clock is the timer's
    (``stamps``: what the sample ran at) where it has one, else ``clock``'s reading."""
    timer.hold()
    if not hot:
        timer.flush()
    timer.start()
    for _ in range(batch):
        fn()
    timer.stop()
    timer.release()
    mhz = clock.read() if clock is not None else None   # the GPU is working; outside the interval
    ms, late = timer.elapsed(deadline_s)
    if stamps is not None:
        mhz = stamps()
    return ms / batch, late, mhz


def _hot_batch(fn: Callable[[], None], timer: Timer, deadline_s: float | None = None) -> int:
    """Launches per hot sample: about HOT_BATCH_MS of GPU time, from one held launch."""
    timer.hold()
    timer.start()
    fn()
    timer.stop()
    timer.release()
    ms, _late = timer.elapsed(deadline_s)
    if not ms > 0:
        return HOT_MAX_BATCH
    return max(1, min(HOT_MAX_BATCH, math.ceil(HOT_BATCH_MS / ms)))


# --------------------------------------------------------------------------- CuPy


_HOLD_SOURCE = r"""
// Holds its stream until the host sets *release (pinned host memory, read over the bus each
// time: volatile), or until timeout_ns have passed on the GPU's global timer, in which case it
// sets *timed_out. CUDA C++ has no intrinsic for %globaltimer, hence the PTX.
extern "C" __global__ void pa_hold_stream(const volatile int* release, volatile int* timed_out,
                                          unsigned long long timeout_ns) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    while (*release == 0) {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
        if (t - t0 > timeout_ns) {
            *timed_out = 1;
            break;
        }
    }
}

// Stamps the SM each block runs on: out[2*smid] = %globaltimer (ns), out[2*smid+1] = that SM's
// cycle counter, both read back to back; launched with a block per SM right before the start
// event and right after the end event of a sample (the interval's clock, as nvbench takes it).
// CUDA C++ has no intrinsic for %smid or %globaltimer, hence the PTX.
extern "C" __global__ void pa_sm_stamp(unsigned long long* out, unsigned capacity) {
    unsigned smid;
    unsigned long long t;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    const long long c = clock64();
    if (threadIdx.x == 0 && smid < capacity) {
        out[2 * smid] = t;
        out[2 * smid + 1] = (unsigned long long)c;
    }
}

// Reads n 16-byte words (the L2 flush); writes only if their XOR is a value zeros never give,
// so the reads cannot be dropped and nothing is written.
extern "C" __global__ void pa_l2_scrub(const uint4* buf, unsigned long long n, unsigned* sink) {
    unsigned acc = 0;
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        const uint4 w = buf[i];
        acc ^= w.x ^ w.y ^ w.z ^ w.w;
    }
    if (acc == 0x9e3779b9u) *sink = acc;
}

// After pa_l2_scrub: drops the buffer's lines from L2 without writing them back (discard.global.L2,
// one 128-byte line per thread), so L2 is left empty rather than full of clean lines.
extern "C" __global__ void pa_l2_discard(const char* buf, unsigned long long lines) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < lines;
         i += (unsigned long long)gridDim.x * blockDim.x)
#if __CUDA_ARCH__ >= 800
        asm volatile("discard.global.L2 [%0], 128;\n" ::"l"(buf + 128 * i) : "memory");
#else
        ;   // no discard before sm_80: the timer does not launch this there
#endif
}
"""


STAMP_CAPACITY = 1024      # SM ids a stamp array holds (%smid < %nsmid; 132 on the H200)


class CupyTimer:
    """:class:`Timer` on CuPy's current stream; ``flush_bytes``: the device's L2 size. Each
    sample's SM clock comes from its stamps (``sample_clock_mhz``, source ``sm-cycles``): the
    stamp kernels write into pinned host memory, cleared by the host before each sample."""

    clock_source = "sm-cycles"

    def __init__(self, flush_bytes: int, hold_timeout_s: float = HOLD_TIMEOUT_S, flush: str = "read"):
        import cupy as cp
        import numpy as np

        self.cp, self.np = cp, np
        self.stream = cp.cuda.get_current_stream()
        mod = cp.RawModule(code=_HOLD_SOURCE)
        self._hold_fn = mod.get_function("pa_hold_stream")
        self._scrub_fn = mod.get_function("pa_l2_scrub")
        self._pinned = cp.cuda.alloc_pinned_memory(8)             # [release, timed_out]
        self._flags = np.frombuffer(self._pinned, dtype=np.int32, count=2)
        self._flags[:] = 0
        ptr = self._pinned.ptr                                     # unified addressing: also
        self._args = (np.uint64(ptr), np.uint64(ptr + 4),          # the device's pointer
                      np.uint64(int(hold_timeout_s * 1e9)))
        self._flush = cp.zeros(2 * max(int(flush_bytes), 1 << 20) // 128 * 128, dtype=cp.uint8)
        self._sink = cp.zeros(1, dtype=cp.uint32)
        sms = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["multiProcessorCount"]
        self._scrub_args = (self._flush, np.uint64(self._flush.nbytes // 16), self._sink)
        self._scrub_grid = (4 * int(sms),)
        if flush not in ("read", "discard"):
            raise ValueError(f"flush must be 'read' or 'discard', not {flush!r}")
        dev = cp.cuda.Device()
        if flush == "discard" and int(dev.compute_capability) < 80:
            flush = "read"                 # discard.global.L2 is sm_80+
        self.flush_method = flush
        self._discard_fn = mod.get_function("pa_l2_discard") if flush == "discard" else None
        self._discard_args = (self._flush, np.uint64(self._flush.nbytes // 128))
        self._start, self._end = cp.cuda.Event(), cp.cuda.Event()
        self._done = cp.cuda.Event(disable_timing=True)   # after the end stamp
        self._stamp_fn = mod.get_function("pa_sm_stamp")
        self._stamp_mem = cp.cuda.alloc_pinned_memory(2 * STAMP_CAPACITY * 2 * 8)
        self._stamps = np.frombuffer(self._stamp_mem, dtype=np.uint64,
                                     count=2 * STAMP_CAPACITY * 2).reshape(2, STAMP_CAPACITY, 2)
        self._stamps[:] = 0
        sptr = self._stamp_mem.ptr
        self._stamp_args = [(np.uint64(sptr + i * STAMP_CAPACITY * 16), np.uint32(STAMP_CAPACITY))
                            for i in (0, 1)]
        self._stamp_grid = (int(sms),)
        rate_khz = cp.cuda.runtime.getDeviceProperties(dev.id).get("clockRate") or 0   # (gone in CUDA 13)
        self._nominal = float(rate_khz) / 1e3 or None

    def hold(self) -> None:
        self._flags[0] = 0
        self._flags[1] = 0
        self._hold_fn((1,), (1,), self._args, stream=self.stream)

    def flush(self) -> None:
        self._scrub_fn(self._scrub_grid, (512,), self._scrub_args, stream=self.stream)
        if self._discard_fn is not None:
            self._discard_fn(self._scrub_grid, (512,), self._discard_args, stream=self.stream)

    def start(self) -> None:
        self._stamps[:] = 0                # the last sample is done: elapsed() waited for its stamps
        self._stamp_fn(self._stamp_grid, (32,), self._stamp_args[0], stream=self.stream)
        self._start.record(self.stream)

    def stop(self) -> None:
        self._end.record(self.stream)
        self._stamp_fn(self._stamp_grid, (32,), self._stamp_args[1], stream=self.stream)
        self._done.record(self.stream)

    def sample_clock_mhz(self) -> float | None:
        """The SM clock the last sample ran at (its two stamps), MHz; None if not stamped."""
        return stamped_mhz(self._stamps[0], self._stamps[1])

    def nominal_mhz(self) -> float | None:
        """The device's rated SM clock (its ``clockRate`` property), MHz."""
        return self._nominal

    def release(self) -> None:
        self._flags[0] = 1

    def elapsed(self, deadline_s: float | None = None) -> tuple[float, bool]:
        if deadline_s is None:
            self._done.synchronize()
        else:
            done = self._done
            wait(lambda: done.done, deadline_s, "a timed call")
        return float(self.cp.cuda.get_elapsed_time(self._start, self._end)), bool(self._flags[1])

    def synchronize(self, deadline_s: float | None = None) -> None:
        if deadline_s is None:
            self.stream.synchronize()
            return
        event = self.cp.cuda.Event(disable_timing=True)
        event.record(self.stream)
        wait(lambda: event.done, deadline_s, "the warm-up calls")
