"""v3 on one GPU in several launches of the same chunk, CTA rows x key segments x shared tiles,
timed in turns: the measurements behind pa_bench.launch.fill's constants.

    python3 experiments/fill_pairs.py 32Kx1024=128/1,192/3 2.1Kx256=128/2,192/2 [--rounds 2]
    python3 experiments/fill_pairs.py 32Kx1024=rule:own,rule:share

Each argument is a shape and the launches to compare, ``rows/segments`` (segments 1: none; the
keys split into that many whole 64-key segments, as the fill rule splits them; ``rule``: the
launch the rule takes, its consumer step too), each optionally ``:own`` (every CTA converts its
own tiles) or ``:share`` (each tile converted once for all row blocks: fill.shares_tiles), without
either the rule's choice for that launch; ``:s128``: 128-key consumer steps (two tiles, K and V staged apart; a
shared-tile launch at 128 rows). PR defaults: 32/8 heads, D=128, paged 64, normal
data. For each launch the script checks v3 against FP64 and against the numerics model of its
tile size and segments on a few sampled rows, then times the launches in turns (``--rounds``
rounds, pa-bench's timing), and prints each launch's median per round, its ratio to the first
launch, and the ratio fill.estimate predicts. A quick A/B, not a committed run.
"""

from __future__ import annotations

import argparse
from typing import NamedTuple

import numpy as np

import pa_bench
from pa_bench.launch import fill          # the schedule estimate these measurements are set beside
from pa_bench.variants import SEGMENT_KEYS

TIMING = dict(warmup=3, min_seconds=0.3, max_seconds=1.5, max_noise=0.01, min_samples=15)


class Choice(NamedTuple):
    label: str
    rows: int
    seg: int                  # keys per segment (0: none)
    share: bool | None        # shared tiles (None: the rule's)
    step: int                 # keys a consumer step


FLAGS = ("own", "share", "s128")


def launches(spec: str, pb) -> list[Choice]:
    """The launches in ``spec`` ("128/1,192/3", "rule", "rule:own", "192/3:share", "128/2:share:s128")."""
    keys = pb.context + pb.queries
    out = []
    for entry in spec.split(","):
        item, *flags = entry.split(":")
        if not set(flags) <= set(FLAGS) or {"own", "share"} <= set(flags):
            raise SystemExit(f"{entry!r}: the suffixes are :own or :share, and :s128")
        how = ":".join(flags)
        share = True if "share" in flags else False if "own" in flags else None
        step = 128 if "s128" in flags else 64
        if item == "rule":
            rule = pa_bench.launch_for("v3", pb)
            r, s = rule.rows, rule.segment_keys
            if share is None and "s128" not in flags:   # the rule's own launch: its step too
                step = rule.step_keys
                how = "s128" if step == 128 else how
        else:
            r_text, n_text = item.split("/")
            r, n = int(r_text), int(n_text)
            s = SEGMENT_KEYS if pb.context > SEGMENT_KEYS else fill.segment_size(keys, n)
        n = -(-keys // s) if s else 1
        out.append(Choice(("rule:" if item == "rule" else "") + f"{r}/{n}" + (f":{how}" if how else ""), r, s, share,
                          step))
    return out


def pins(choice: Choice) -> pa_bench.Pins:
    """The launch ``choice`` names, as pins: its rows, segments, shared tiles (None: the rule's) and step."""
    return pa_bench.Pins(rows=choice.rows, segments=choice.seg or False, share=choice.share, step=choice.step)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pairs", nargs="+", metavar="SHAPE=R/N,R/N")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--check-rows", type=int, default=4, help="query rows checked against FP64")
    args = ap.parse_args()

    last = None   # one backend for every shape: each build compiles once
    for pair in args.pairs:
        shape, spec = pair.split("=")
        pb = pa_bench.make_problem(shape)
        s = pa_bench.session(pb) if last is None else last.another(pb)
        last = s
        with s:
            compare(s, shape, launches(spec, pb), args)


def compare(s: pa_bench.Session, shape: str, todo: list[Choice], args) -> None:
    pb = s.problem
    rows = s.sample_rows(args.check_rows, seed=1)
    ref = s.reference(rows)
    times: dict[str, list[float]] = {lc.label: [] for lc in todo}
    bits = {}
    for lc in todo:
        out = s.compute("v3", rows, launch=pins(lc))
        err = float(np.abs(out.out - ref).max())
        made = s.launch_of("v3", launch=pins(lc))
        model = s.model("v3", rows, launch=pins(lc), split_keys=0, pv_chain_keys=0)
        model_err = float(np.abs(model - ref).max())
        bits[lc.label] = out.out.tobytes()
        print(f"{shape} v3 {lc.label}: err vs FP64 {err:.3e}, model ({made.tile_keys}-key tiles) {model_err:.3e} "
              f"(x{err / model_err:.2f}), deterministic {out.deterministic}, canaries {out.canary_ok}, "
              f"grid {s.kernel_info('v3', launch=pins(lc))['grid']}, shared tiles {made.shares_tiles}, "
              f"step {made.step_keys} keys", flush=True)
    for lc in todo:   # shared tiles change no bit (segments and steps do)
        twin = next(o.label for o in todo if (o.rows, o.seg, o.step) == (lc.rows, lc.seg, lc.step))
        if bits[lc.label] != bits[twin]:
            print(f"{shape} v3 {lc.label}: its output differs from {twin}'s", flush=True)
    for _ in range(args.rounds):
        for lc in todo:
            res = s.time(["v3"], launch=pins(lc), **TIMING)["v3"]
            times[lc.label].append(float(np.median(res.samples_ms)) if not isinstance(res, str) else float("nan"))
    first = todo[0]
    est0 = fill.estimate(first.rows, first.seg, pb.context, pb.queries, pb.heads_q, pb.heads_kv, first.step == 128)
    base = float(np.median(times[first.label]))
    for lc in todo:
        ms = float(np.median(times[lc.label]))
        est = fill.estimate(lc.rows, lc.seg, pb.context, pb.queries, pb.heads_q, pb.heads_kv, lc.step == 128)
        rounds = " ".join(f"{t:.4f}" for t in times[lc.label])
        print(f"{shape} v3 {lc.label}: {ms:.4f} ms (rounds {rounds}); x{ms / base:.3f} of {first.label}, "
              f"estimate x{est / est0:.3f}", flush=True)


if __name__ == "__main__":
    main()
