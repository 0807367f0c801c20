#!/usr/bin/env python3
"""Where a v3 launch's time goes between its CTAs: a per-CTA timeline from stamps in the kernel.

    python3 experiments/v3_timeline.py [--shapes 0x1536,2.1Kx256] [--out DIR]
    python3 experiments/v3_timeline.py --stamps DIR/timeline_0x1536.npy     # a kept timeline again, no GPU
    python3 experiments/v3_timeline.py --shapes 32Kx1024 --knockout no-k-scales   # a knock-out's SM clock

A copy of kernels/ whose v3 records (its stamp hooks, kernels/v3_hooks.cuh), per CTA, the global timer and the SM's clock at its start,
when warpgroup 0's Q is in shared memory, when tile 0's copies have landed, when warpgroup 0 has
its first softmax, begins its last turn and has its last P.V, and when the producer and each
consumer warpgroup end (``STAMPS``), with the SM and the CTA's tile count. The copy is launched
through the cuda backend (PA_BENCH_KERNELS points at it) a few times warm, then once more with the
stamps read back. Per shape it prints the launch's median time between CUDA events, the span of
its CTAs, the SM clock across them and the SM cycles each SM was busy (the clock-free measure to
compare builds by), the fit "CTA time = fixed + per tile x tiles", the stamps' medians from a CTA's start,
the gaps between one CTA's end and the next's start on an SM, and the idle tail of the SMs; and
the fit list-scheduled on the SMs in launch order (longest first: how the hardware hands out a grid
of one CTA an SM), which should give the measured span back, beside the span of a persistent grid
that pays the fixed cost once an SM and 0, 0.5 or 1 us an item (what such a design can give). The
stamps cost a few instructions per CTA, outside the key loop; the times they give are
within-run comparisons, not the kernel's figures (``pa-bench run`` gives those).

``--knockout NAMES`` stamps v3 with knock-outs of ``experiments/v3_knockouts.py`` applied: a knock-out
that changes the values the tensor cores see can change the GPU's power and so its clock during the
launch, which pa-bench's clock (read between samples) does not see; the SM clock printed here is
measured across the launch (the CTAs' clock64 against the global timer).

``--out DIR`` keeps each shape's stamps (``timeline_<shape>.npy``, one row per CTA, columns as in
``COLUMNS``) and its summary. A stamp point kernels/v3_hooks.cuh no longer has fails loudly.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import heapq

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

SLOTS = 24   # u64 slots per CTA: pairs (global timer ns, SM clock) and the two plain fields below
# slot -> what was stamped there (the pair's first slot; the clock is the next one)
STAMPS = {
    "start": 0,         # thread 0, once the CTA has work
    "producer_end": 4,  # producer thread 0 after its last tile
    "first_softmax": 6,  # warpgroup 0 thread 0 after tile 0's softmax
    "wg0_end": 8,       # each consumer warpgroup's thread 0 after its stores
    "wg1_end": 10,
    "q_ready": 12,      # warpgroup 0's Q stored in shared memory
    "landed": 14,       # tile 0's copies have landed (producer thread 0)
    "last_pv": 16,      # warpgroup 0's last P.V waited for
    "last_turn": 18,    # warpgroup 0 begins its last turn
}
SM_SLOT, TILES_SLOT = 2, 3
COLUMNS = {**STAMPS, "smid": SM_SLOT, "tiles": TILES_SLOT}

HEADER = r'''// (experiments/v3_timeline.py) per-CTA stamps: global timer and SM clock pairs
__device__ unsigned long long pa_v3_timeline[8192 * 24];
__device__ __forceinline__ unsigned long long* pa_tl_row() {
    return pa_v3_timeline + 24 * (blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z));
}
__device__ __forceinline__ void pa_tl_stamp(int k) {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    unsigned long long* row = pa_tl_row();
    row[k] = t;
    row[k + 1] = clock64();
}
'''
MAX_CTAS = 8192
WG0 = "if (tid == 0 && wg == 0) pa_tl_stamp({k})"
# v3's stamp points (kernels/v3_hooks.cuh) -> what each records (the slots of STAMPS)
BODIES = {
    "cta_start": "if (threadIdx.x == 0) { pa_tl_stamp(0); unsigned smid; asm volatile(\"mov.u32 %0, %%smid;\" : \"=r\"(smid)); "
                 "pa_tl_row()[2] = smid; pa_tl_row()[3] = n; }",
    "producer_end": "if (threadIdx.x == 0) pa_tl_stamp(4)",
    "consumer_end": "if ((threadIdx.x & 127) == 0) pa_tl_stamp(threadIdx.x < 256 ? 8 : 10)",
    "first_softmax": WG0.format(k=6),
    "q_ready": WG0.format(k=12),
    "landed": "if (n == 0 && threadIdx.x == 0) pa_tl_stamp(14)",
    "last_turn": WG0.format(k=18),
    "last_pv": WG0.format(k=16),
}


def stamp_hooks() -> str:
    """The hook definitions of the stamps (before the defaults of kernels/v3_hooks.cuh)."""
    import v3_stamping as V

    return HEADER + V.stamp_hooks("pa_tl", BODIES)


def knockout_kernels(names: str | None) -> Path:
    """A stamped copy of kernels/ with the named knock-outs of experiments/v3_knockouts.py (comma
    list) switched on."""
    import v3_knockouts as K
    import v3_stamping as V

    parts = sorted({p for n in (names.split(",") if names else []) for p in K.KNOCKOUTS[n]})
    ko = "".join(f"#define {o.removeprefix('-D').replace('=', ' ')}\n" for o in K.defines(parts))
    return V.hooked_kernels(ROOT / "kernels", "pa-v3-timeline-", ko + stamp_hooks())


def list_schedule(durations, sms: int, gap: float = 0.0) -> float:
    """The span of CTAs handed out in this order to whichever of ``sms`` SMs frees first (as the
    hardware hands out a grid, one CTA an SM), each next CTA on an SM ``gap`` us after one ends."""
    free = [0.0] * sms
    heapq.heapify(free)
    span = 0.0
    for d in durations:
        f = heapq.heappop(free)
        e = f + (gap if f > 0 else 0.0) + d
        span = max(span, e)
        heapq.heappush(free, e)
    return span


def summarize(t: np.ndarray) -> dict:
    """The timeline of one launch from its stamps (one row per CTA that ran, SLOTS columns)."""
    t = t.astype(np.int64)
    g0 = t[:, STAMPS["start"]].min()
    ends = np.maximum(t[:, STAMPS["wg0_end"]], t[:, STAMPS["wg1_end"]])
    start_us = (t[:, STAMPS["start"]] - g0) / 1e3
    end_us = (ends - g0) / 1e3
    dur_us = end_us - start_us
    clk = np.maximum(t[:, STAMPS["wg0_end"] + 1], t[:, STAMPS["wg1_end"] + 1]) - t[:, STAMPS["start"] + 1]
    mhz = float(np.median(clk / np.maximum(dur_us, 1e-9)))
    tiles = t[:, TILES_SLOT]
    if tiles.max() >= 2 * tiles.min():       # lengths far enough apart for a fixed part to show
        fixed, per_tile = np.linalg.lstsq(np.stack([np.ones_like(dur_us), tiles], 1), dur_us, rcond=None)[0]
    else:
        fixed, per_tile = float("nan"), float(np.median(dur_us / tiles))

    def since_start(name):   # us from the CTA's start, by the SM's clock; NaN where never stamped
        us = (t[:, STAMPS[name] + 1] - t[:, STAMPS["start"] + 1]) / mhz
        return np.where(t[:, STAMPS[name]] == 0, np.nan, us)

    stages = {}
    for k in sorted(set(tiles.tolist()) & {1, 2, 4, 8, 12, 16, 24, 32}) or [int(np.median(tiles))]:
        sel = tiles == k
        if sel.any():
            stages[int(k)] = {name: float(np.median(since_start(name)[sel]))
                              for name in ("q_ready", "landed", "first_softmax", "last_turn", "last_pv", "wg0_end")}
            stages[int(k)]["n"] = int(sel.sum())
    span = float(end_us.max())
    gaps, tail = [], []
    sms = t[:, SM_SLOT]
    per_sm = []
    for s in np.unique(sms):
        idx = np.where(sms == s)[0]
        idx = idx[np.argsort(start_us[idx])]
        per_sm.append(len(idx))
        gaps += [start_us[j] - end_us[i] for i, j in zip(idx[:-1], idx[1:])]
        tail.append(span - end_us[idx[-1]])
    # The fitted CTA cost, list-scheduled in launch order (longest first), against the measured span;
    # and a persistent grid that pays the fixed cost once an SM and `x` us an item.
    order = np.argsort(-tiles, kind="stable")
    model = {}
    if np.isfinite(fixed):
        model["list_us"] = list_schedule([fixed + per_tile * k for k in tiles[order]], len(per_sm),
                                         float(np.median(gaps)) if gaps else 0.0)
        model["persistent_us"] = {x: fixed + list_schedule([x + per_tile * k for k in tiles[order]], len(per_sm))
                                  for x in (0.0, 0.5, 1.0)}
    return {
        "ctas": int(len(t)), "sms": int(len(per_sm)), "ctas_per_sm": (min(per_sm), max(per_sm)),
        "span_us": span, "mhz": mhz, "fixed_us": float(fixed), "per_tile_us": float(per_tile),
        "tiles": (int(tiles.min()), int(tiles.max()), int(tiles.sum())),
        "busy_per_sm_us": float(dur_us.sum() / len(per_sm)),
        "busy_per_sm_mcycles": float(clk.sum() / len(per_sm) / 1e6),
        "gap_us": float(np.median(gaps)) if gaps else 0.0,
        "tail_us": (float(np.median(tail)), float(np.mean(tail))),
        "producer_lead_us": float(np.median((ends - t[:, STAMPS["producer_end"]]) / 1e3)),
        "stages": stages,
        "model": model,
    }


def report(shape: str, s: dict, event_us: float | None) -> str:
    launch = f"launch {event_us:.1f} us between events, " if event_us is not None else ""
    lines = [f"== {shape}: {s['ctas']} CTAs on {s['sms']} SMs ({s['ctas_per_sm'][0]}-{s['ctas_per_sm'][1]} each), "
             f"{launch}CTAs span {s['span_us']:.1f} us, SM clock ~{s['mhz']:.0f} MHz",
             (f"  CTA time = {s['fixed_us']:.2f} us + {s['per_tile_us']:.3f} us x tiles" if np.isfinite(s["fixed_us"]) else
              f"  CTA time / tiles = {s['per_tile_us']:.3f} us (lengths too alike to fit a fixed part)") +
             f" (tiles {s['tiles'][0]}-{s['tiles'][1]}, "
             f"{s['tiles'][2]} in all); busy per SM {s['busy_per_sm_us']:.1f} us, "
             f"{s['busy_per_sm_mcycles']:.4f} M cycles",
             f"  next CTA on an SM starts {s['gap_us']:.2f} us after one ends; SMs idle at the end {s['tail_us'][0]:.1f} us "
             f"(median), {s['tail_us'][1]:.1f} (mean); consumers end {s['producer_lead_us']:.2f} us after the producer"]
    if s["model"]:
        m = s["model"]
        lines.append(f"  the fit list-scheduled on {s['sms']} SMs: span {m['list_us']:.1f} us (measured {s['span_us']:.1f}); "
                     "a persistent grid (fixed cost once an SM, x us an item): "
                     + ", ".join(f"x={x:.1f}: {v:.1f} us" for x, v in m["persistent_us"].items()))
    def at(v):   # a stamp the build does not write (the 128-key step has none in its loop): "-"
        return "-" if np.isnan(v) else f"{v:.2f}"

    for k, st in s["stages"].items():
        lines.append(f"  {k:>3} tiles ({st['n']} CTAs), us from start: Q {at(st['q_ready'])}, tile 0 landed {at(st['landed'])}, "
                     f"first softmax {at(st['first_softmax'])}, last turn {at(st['last_turn'])}, last P.V {at(st['last_pv'])}, "
                     f"end {at(st['wg0_end'])}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="0x1536,2.1Kx256,32Kx1024")
    ap.add_argument("--out", type=Path, help="keep each shape's stamps and summary here")
    ap.add_argument("--stamps", type=Path, action="append", help="summarise kept stamps (.npy) instead; no GPU")
    ap.add_argument("--knockout", default=None,
                    help="stamp v3 with these experiments/v3_knockouts.py knock-outs applied (comma list): the SM clock "
                         "during a knock-out's launch beside the real kernel's")
    args = ap.parse_args(argv)
    if args.stamps:
        for f in args.stamps:
            print(report(f.stem.removeprefix("timeline_"), summarize(np.load(f)), None))
        return 0
    sys.path.insert(0, str(ROOT))
    import v3_stamping as V

    os.environ["PA_BENCH_KERNELS"] = str(knockout_kernels(args.knockout))
    import cupy as cp

    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
    pins = V.stamp_pins()
    shapes = args.shapes.split(",")
    for shape, s in zip(shapes, V.sm90_sessions(shapes)):
        mod, launch = V.module_launch(s, pins)
        n_cta = int(np.prod(s.kernel_info("v3", launch=pins)["grid"]))
        if n_cta > MAX_CTAS:
            raise SystemExit(f"v3_timeline: {shape} has {n_cta} CTAs, more than the {MAX_CTAS} stamped")
        stamps = cp.ndarray((MAX_CTAS, SLOTS), dtype=cp.uint64, memptr=mod.get_global("pa_v3_timeline"))
        times = V.event_times_us(cp, launch, warm=20, n=50)
        t = V.stamped_launch(cp, stamps, launch)[:n_cta]
        t = t[t[:, 0] > 0]
        text = report(shape, summarize(t), float(np.median(times)))
        print(text, flush=True)
        V.keep(args.out, f"timeline_{shape}", t, text)
        s.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
