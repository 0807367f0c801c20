"""v3 on one GPU in several launches of the same chunk, CTA rows x key segments x shared tiles,
timed in turns: the measurements behind pa_bench.numerics.fill's constants.

    python3 scripts/fill_pairs.py 32Kx1024=128/1,192/3 2.1Kx256=128/2,192/2 [--rounds 2]
    python3 scripts/fill_pairs.py 32Kx1024=rule:own,rule:share

Each argument is a shape and the launches to compare, ``rows/segments`` (segments 1: none; the
keys split into that many whole 64-key segments, as the fill rule splits them; ``rule``: the
launch the rule takes), each optionally ``:own`` (every CTA converts its own tiles) or ``:share``
(each tile converted once for all row blocks: fill.shares_tiles); without either, the rule's
choice for that launch. PR defaults: 32/8 heads, D=128, paged 64, normal data. For each launch the
script checks v3 against FP64 on a few sampled rows, then times the launches in turns
(``--rounds`` rounds, pa-bench's timing), and prints each launch's median per round, its ratio to
the first launch, and the ratio fill.estimate predicts. A quick A/B, not a committed run.
"""

from __future__ import annotations

import argparse

import numpy as np

from pa_bench.backends.cuda import CudaBackend
from pa_bench.numerics import fill
from pa_bench.numerics.model import SEGMENT_KEYS, cta_rows, segment_keys
from pa_bench.numerics.reference import sample_rows
from pa_bench.problem.config import TimingSettings
from pa_bench.problem.inputs import make_inputs
from pa_bench.problem.plan import Problem
from pa_bench.problem.shapes import parse_shape


def launches(spec: str, pb) -> list[tuple[str, int, int, bool | None]]:
    """(label, rows, keys per segment, shared tiles: None for the rule's) of each launch in
    ``spec`` ("128/1,192/3", "rule", "rule:own", "192/3:share")."""
    keys = pb.context + pb.queries
    out = []
    for entry in spec.split(","):
        item, _, how = entry.partition(":")
        if how not in ("", "own", "share"):
            raise SystemExit(f"{entry!r}: the suffix is :own or :share")
        share = None if not how else how == "share"
        if item == "rule":
            r = cta_rows("v3", pb.context, pb.queries, pb.heads_q, pb.heads_kv)
            s = segment_keys(pb.context, "v3", pb.queries, pb.heads_q, pb.heads_kv)
        else:
            r_text, n_text = item.split("/")
            r, n = int(r_text), int(n_text)
            s = SEGMENT_KEYS if pb.context > SEGMENT_KEYS else fill.segment_size(keys, n)
        n = -(-keys // s) if s else 1
        out.append((("rule:" if item == "rule" else "") + f"{r}/{n}" + (f":{how}" if how else ""), r, s, share))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pairs", nargs="+", metavar="SHAPE=R/N,R/N")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--check-rows", type=int, default=4, help="query rows checked against FP64")
    args = ap.parse_args()

    backend = CudaBackend()
    settings = TimingSettings(warmup=3, min_seconds=0.3, max_seconds=1.5, max_noise=0.01, min_samples=15)
    for pair in args.pairs:
        shape, spec = pair.split("=")
        pb = Problem(parse_shape(shape))
        inputs = make_inputs(pb)
        prep = backend.prepare(inputs)
        rows = sample_rows(pb.queries, args.check_rows, 1)
        ref = np.asarray(backend.reference(inputs, rows))
        todo = launches(spec, pb)
        times: dict[str, list[float]] = {label: [] for label, *_ in todo}
        bits = {}
        for label, r, s, share in todo:
            backend.rows, backend.segments, backend.share = r, (s or False), share
            out = backend.compute(prep, "v3", rows)
            err = float(np.abs(out.out - ref).max())
            bits[label] = out.out.tobytes()
            print(f"{shape} v3 {label}: err vs FP64 {err:.3e}, deterministic {out.deterministic}, "
                  f"grid {backend.geometry('v3', pb).grid}, shared tiles {backend.shares_tiles('v3', pb)}", flush=True)
        for label, r, s, share in todo:   # shared tiles change no bit (segments do)
            twin = next(lb for lb, r2, s2, _ in todo if (r2, s2) == (r, s))
            if bits[label] != bits[twin]:
                print(f"{shape} v3 {label}: its output differs from {twin}'s", flush=True)
        for _ in range(args.rounds):
            for label, r, s, share in todo:
                backend.rows, backend.segments, backend.share = r, (s or False), share
                res = backend.time(prep, ["v3"], settings)["v3"]
                times[label].append(float(np.median(res.samples_ms)) if not isinstance(res, str) else float("nan"))
        first = todo[0]
        est0 = fill.estimate(first[1], first[2], pb.context, pb.queries, pb.heads_q, pb.heads_kv)
        base = float(np.median(times[first[0]]))
        for label, r, s, _ in todo:
            ms = float(np.median(times[label]))
            est = fill.estimate(r, s, pb.context, pb.queries, pb.heads_q, pb.heads_kv)
            rounds = " ".join(f"{t:.4f}" for t in times[label])
            print(f"{shape} v3 {label}: {ms:.4f} ms (rounds {rounds}); x{ms / base:.3f} of {first[0]}, "
                  f"estimate x{est / est0:.3f}", flush=True)
        backend.rows, backend.segments, backend.share = None, None, None
        backend.release(prep)


if __name__ == "__main__":
    main()
