"""Does what runs before a sample move it? One process, every cell interleaved round by round.

    python experiments/order_check.py [--config configs/pr2092.yaml] [--shapes 0x1536,2.1Kx256]
                                  [--variants v3,triton,torch-sdpa-cudnn] [--rounds 150] [--out F.json]

For each shape and variant it takes samples, with pa-bench's own sampler (the hold, the L2 flush,
GPU time only: pa_bench.measure.timing), in cells that differ in one thing each:

* ``after-other``: the sample follows another variant's kernel (the round's previous cell), as
  an unprimed interleaved run takes every sample;
* ``after-self``: it follows a sample of the same variant, as a primed run takes every sample
  (``timing.prime``) and a benchmark of one kernel alone does;
* ``placement``: a second copy of the shape's inputs (``timing.placements``);
* ``flush``: a second L2-flush buffer (a second timer);
* ``pool``: the torch peers allocate their outputs and workspaces in a second torch memory pool.

It prints, per variant, each factor's median against the variant's pooled median, and writes every
cell's median to ``--out``. Run it in several fresh processes to see what moves between processes
and what moves within one. No assertions: a measurement for docs/TIMING.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

DEFAULT_VARIANTS = "v3,triton,torch-sdpa-cudnn,torch-sdpa+dequant,torch-sdpa-flash,torch-flex"


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="configs/pr2092.yaml")
    ap.add_argument("--shapes", default="0x1536,2.1Kx256", help="comma list of the config's shapes")
    ap.add_argument("--variants", default=DEFAULT_VARIANTS)
    ap.add_argument("--rounds", type=int, default=150)
    ap.add_argument("--out", default=None, help="JSON of every cell's median")
    args = ap.parse_args(argv)
    if args.rounds < 10:
        ap.error("--rounds must be at least 10")
    return args


def cells_of(sessions, names, timers, pools):
    """{cell name: (callable, timer)}, round order: for each placement and variant, a first sample
    after the previous variant's, then one after its own for every flush buffer and pool."""
    import torch

    from pa_bench.peers import torch_util

    def in_pool(fn, pool):
        if pool is None:
            return fn

        def run():
            with torch.cuda.use_mem_pool(pool):
                fn()
        return run

    cells = {}
    for i, sess in enumerate(sessions):
        with torch_util.placement(i):
            fns, why = sess.launchers(names)
        for name, reason in why.items():
            print(f"  {name}: not timed ({reason})")
        for name, fn in fns.items():
            cells[f"{name}|p{i}|after-other"] = (fn, timers[0])
            for f, timer in enumerate(timers):
                for m, pool in enumerate(pools):
                    cells[f"{name}|p{i}|after-self|f{f}|m{m}"] = (in_pool(fn, pool), timer)
    return cells


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch

    import pa_bench
    from pa_bench.measure import timing

    cfg = pa_bench.load_config(args.config, shapes=args.shapes)
    names = [v.strip() for v in args.variants.split(",") if v.strip()]
    pools = [None, torch.cuda.MemPool()]
    out = {}
    last = None   # the previous shape's session: the next ones share its backend (and builds)
    for shape in cfg.shapes:
        pb = pa_bench.make_problem(shape, cfg)
        first = pa_bench.session(pb, config=cfg) if last is None else last.another(pb)
        sessions = [first, first.another(pb)]   # two placements of the same inputs
        last = first
        l2 = int(first.describe()["l2_bytes"])
        # the run's timer (the config's flush) and a second one with its own flush buffer
        timers = [timing.CupyTimer(l2, flush=cfg.timing.l2_flush), timing.CupyTimer(l2)]
        cells = cells_of(sessions, names, timers, pools)
        for fn, _timer in cells.values():
            fn()
        torch.cuda.synchronize()
        samples = {k: [] for k in cells}
        for _ in range(args.rounds):
            for k, (fn, timer) in cells.items():
                ms, _late, _mhz = timing._one_sample(fn, timer, None, hot=False, batch=1, deadline_s=60)
                samples[k].append(ms)
        med = {k: statistics.median(v) for k, v in samples.items()}
        out[pb.shape.label] = med
        print(f"{pb.shape.label}: {args.rounds} rounds; each factor's median against the variant's "
              f"after-self median")
        for name in names:
            own = [k for k in med if k.startswith(name + "|")]
            if not own:
                continue
            selfs = [k for k in own if "after-self" in k]
            base = statistics.median([x for k in selfs for x in samples[k]])

            def level(keys):
                return statistics.median([x for k in keys for x in samples[k]]) / base - 1

            parts = {"after-other": level([k for k in own if "after-other" in k])}
            for tag, label in (("|p1|", "placement"), ("|f1|", "flush"), ("|m1", "pool")):
                other = [k for k in selfs if tag in k]
                parts[label] = level(other) - level([k for k in selfs if k not in other])
            print(f"  {name:20s} {base:.5f} ms  " + "  ".join(f"{k} {v:+.2%}" for k, v in parts.items()),
                  flush=True)
        for sess in sessions:
            sess.close()
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(out, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
