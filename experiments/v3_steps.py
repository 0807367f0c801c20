#!/usr/bin/env python3
"""Where one v3 step's time goes: SM-clock stamps at each wait of a window of steps of one CTA.

    python3 experiments/v3_steps.py [--shapes 32Kx1024] [--window 64:192] [--kernels DIR] [--out DIR]
    python3 experiments/v3_steps.py --stamps DIR/steps_32Kx1024.npy     # a kept record again, no GPU

A copy of kernels/ (or of ``--kernels DIR``) whose v3 records (its stamp hooks, kernels/v3_hooks.cuh) clock64() in the first CTA of the
grid (KV head 0, the longest row block, key segment 0) at every wait of steps [a, b) of the window:
lane 0 of warp 0 of each consumer warpgroup at the top of its step, after the full barrier, after
its turn (the pingpong barrier), after wgmma.fence, after issuing S, after issuing P.V, after the
wait for S, after the softmax, and after the wait for P.V; producer thread 0 at the top of its tile, after the tile's copies
have landed, after the wait for a free stage, after its stores, after its arrive on full, and
after the producer's barrier (``EVENTS``). It is launched through the cuda backend a few times warm
and once with the stamps read back.

It prints, per role, the median cycles of each stretch of a step and of a whole step (the step's
period), and for the consumers how long a warpgroup waited for the other's turn and for its own S
(S queues behind the other warpgroup's wgmma in the tensor pipe). With both warpgroups issuing
back to back, a step's period is about max(the tensor pipe's time for both warpgroups' tiles,
S's latency + the softmax + the wait for P.V + the next issue): this says which one it is. The
stamps cost a few instructions per step in one CTA; the cycles are within-run comparisons.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

MAX_STEPS = 1024                       # stamped steps at most (the window's length)
ROLES = ("wg0", "wg1", "producer")
# role -> its events, in the order they happen in a step (the slot is the index)
EVENTS = {
    "wg0": ("top", "full", "turn", "fenced", "s_issued", "issued", "s_done", "softmax", "pv_done"),
    "wg1": ("top", "full", "turn", "fenced", "s_issued", "issued", "s_done", "softmax", "pv_done"),
    "producer": ("top", "landed", "empty", "stored", "arrived", "barrier"),
}
SLOTS = 10                             # u64 slots per (role, step)

HEADER = r'''// (experiments/v3_steps.py) clock64 stamps of a window of steps of the grid's first CTA
__device__ unsigned long long pa_v3_steps[3 * 1024 * 10];
__device__ __forceinline__ bool pa_st_cta() { return blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0; }
__device__ __forceinline__ void pa_st(int role, int n, int k) {
    const int i = n - PA_ST_FIRST;
    if (i >= 0 && i < PA_ST_COUNT) pa_v3_steps[(role * 1024 + i) * 10 + k] = clock64();
}
'''
# each role's events -> v3's stamp points (kernels/v3_hooks.cuh). Consumer stamps: lane 0 of warp
# 0 of the warpgroup (tid == 0), role = wg; producer stamps: thread 0, role 2.
POINTS = {
    "wg0": ("turn_top", "turn_full", "turn_open", "fenced", "s_issued", "issued", "s_done", "softmax", "pv_done"),
    "producer": ("top", "landed", "empty", "stored", "arrived", "barrier"),
}
POINTS["wg1"] = POINTS["wg0"]


def stamp_hooks(first: int, count: int) -> str:
    """The hook definitions that stamp steps [first, first + count)."""
    import v3_stamping as V

    bodies = {p: f"if (pa_st_on) pa_st(wg, n, {k})" for k, p in enumerate(POINTS["wg0"])}
    bodies.update({p: f"if (pa_st_on) pa_st(2, n, {k})" for k, p in enumerate(POINTS["producer"])})
    # the predicate, once per role (the stamps' lambdas capture it)
    bodies["consumer_start"] = "const bool pa_st_on = pa_st_cta() && tid == 0"
    bodies["producer_start"] = "const bool pa_st_on = pa_st_cta() && threadIdx.x == 0"
    return f"#define PA_ST_FIRST {first}\n#define PA_ST_COUNT {count}\n" + HEADER + V.stamp_hooks("pa_st", bodies)


def summarize(t: np.ndarray) -> dict:
    """Median cycles of each stretch, per role, from stamps shaped (3 roles, steps, SLOTS); steps
    whose stamps are missing (0) are left out."""
    t = t.astype(np.int64)
    out = {}
    for r, role in enumerate(ROLES):
        ev = EVENTS[role]
        x = t[r, :, :len(ev)]
        ok = (x > 0).all(axis=1)
        ok[:-1] &= ok[1:]                      # a step's period needs the next step's top
        ok[-1] = False
        idx = np.where(ok)[0]
        if not len(idx):
            continue
        stretches = {f"{a}->{b}": float(np.median(x[idx, j + 1] - x[idx, j])) for j, (a, b) in enumerate(zip(ev, ev[1:]))}
        stretches[f"{ev[-1]}->next top"] = float(np.median(x[idx + 1, 0] - x[idx, -1]))
        out[role] = {"steps": int(len(idx)), "period": float(np.median(x[idx + 1, 0] - x[idx, 0])), "stretches": stretches}
    # the turn: warpgroup w's turn begins after the other's issue of the step before (wg1) or of
    # the same step (wg0 -> wg1)
    if "wg0" in out and "wg1" in out:
        e = EVENTS["wg0"]
        i_iss, i_turn, i_s = e.index("issued"), e.index("turn"), e.index("s_done")
        w0, w1 = t[0], t[1]
        n = min(len(w0), len(w1))
        sel = np.where((w0[:n, :len(e)] > 0).all(1) & (w1[:n, :len(e)] > 0).all(1))[0]
        if len(sel):
            out["turns"] = {
                "wg1 turn after wg0 issued": float(np.median(w1[sel, i_turn] - w0[sel, i_iss])),
                "wg0 issue to wg1 issue": float(np.median(w1[sel, i_iss] - w0[sel, i_iss])),
                "wg1 S done after wg0 S done": float(np.median(w1[sel, i_s] - w0[sel, i_s])),
            }
    return out


def report(shape: str, s: dict, event_us: float | None = None) -> str:
    lines = [f"== {shape}" + (f": launch {event_us:.1f} us between events" if event_us is not None else "")]
    for role in ROLES:
        if role not in s:
            continue
        r = s[role]
        lines.append(f"  {role}: {r['steps']} steps, a step {r['period']:.0f} cycles (median); "
                     + ", ".join(f"{k} {v:.0f}" for k, v in r["stretches"].items()))
    if "turns" in s:
        lines.append("  turns: " + ", ".join(f"{k} {v:.0f}" for k, v in s["turns"].items()))
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="32Kx1024")
    ap.add_argument("--window", default="64:192", help="steps a:b of the stamped CTA (b - a <= %d)" % MAX_STEPS)
    ap.add_argument("--kernels", type=Path, default=ROOT / "kernels", help="the kernels directory to stamp a copy of")
    ap.add_argument("--out", type=Path, help="keep each shape's stamps and summary here")
    ap.add_argument("--stamps", type=Path, action="append", help="summarise kept stamps (.npy) instead; no GPU")
    args = ap.parse_args(argv)
    if args.stamps:
        for f in args.stamps:
            print(report(f.stem.removeprefix("steps_"), summarize(np.load(f))))
        return 0
    a, b = (int(x) for x in args.window.split(":"))
    if not 0 <= a < b or b - a > MAX_STEPS:
        raise SystemExit(f"v3_steps: --window {args.window}: need 0 <= a < b and b - a <= {MAX_STEPS}")
    sys.path.insert(0, str(ROOT))
    import v3_stamping as V

    kd = V.hooked_kernels(args.kernels, "pa-v3-steps-", stamp_hooks(a, b - a))
    os.environ["PA_BENCH_KERNELS"] = str(kd)
    import cupy as cp

    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
    pins = V.stamp_pins()
    shapes = args.shapes.split(",")
    for shape, s in zip(shapes, V.sm90_sessions(shapes)):
        mod, launch = V.module_launch(s, pins)
        stamps = cp.ndarray((3, MAX_STEPS, SLOTS), dtype=cp.uint64, memptr=mod.get_global("pa_v3_steps"))
        times = V.event_times_us(cp, launch, warm=20, n=30)
        t = V.stamped_launch(cp, stamps, launch)[:, : b - a]
        text = report(shape, summarize(t), float(np.median(times)))
        print(text, flush=True)
        V.keep(args.out, f"steps_{shape}", t, text)
        s.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
