#!/usr/bin/env python3
"""Where a kernel's warps wait, per stretch of machine code: a summary of Nsight Compute's source page.

    ncu --set full --import-source yes -k regex:pa_v3$ -c 1 -o v3 python3 scripts/launch_target.py --variant v3
    ncu --import v3.ncu-rep --page source --csv --print-source sass > v3_source.csv
    python3 experiments/ncu_source_summary.py v3_source.csv [--top 12] [--min-share 0.5]

The source page gives, per SASS instruction, how often it executed and how many warp-state samples
(and of which stall reason) landed on it. This prints:

- the stall reasons over the whole kernel, as shares of all samples;
- *stretches*: runs of consecutive instructions that executed about equally often (within
  ``--tolerance``), which is how a loop body shows up; each with its share of the samples and its
  top stall reasons. A spin loop (an ``mbarrier`` try-wait and its branch) is a stretch of its
  own, but its samples land on the branch *into* it, in the stretch that waits;
- the instructions holding the most samples, with their two top reasons.

No GPU is needed: it reads the CSV only.
"""

from __future__ import annotations

import argparse
import csv
import sys
from dataclasses import dataclass, field

SAMPLES = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"


@dataclass
class Instr:
    address: str
    source: str
    executed: float
    samples: float
    stalls: dict[str, float] = field(default_factory=dict)


def _num(text: str) -> float:
    text = (text or "").replace(",", "").strip()
    return float(text) if text else 0.0


def read(lines) -> list[Instr]:
    """The instructions of the first kernel in the CSV (the header row names ``Address``)."""
    rows = list(csv.reader(lines))
    start = next((i for i, r in enumerate(rows) if r and r[0] == "Address"), None)
    if start is None:
        raise ValueError("no 'Address' header: not the CSV of ncu --page source --print-source sass")
    header = rows[start]
    col = {h: i for i, h in enumerate(header)}
    for need in ("Source", SAMPLES, EXECUTED):
        if need not in col:
            raise ValueError(f"column {need!r} missing from the source page")
    reasons = [h for h in header if h.startswith("stall_") and "(Not Issued)" not in h]
    out = []
    for r in rows[start + 1:]:
        if len(r) != len(header):
            if out:
                break            # the next kernel's block, or the end
            continue
        out.append(Instr(r[col["Address"]], r[col["Source"]].strip(), _num(r[col[EXECUTED]]),
                         _num(r[col[SAMPLES]]), {h[len("stall_"):]: _num(r[col[h]]) for h in reasons}))
    return out


def stretches(instrs: list[Instr], tolerance: float = 0.2) -> list[tuple[int, int]]:
    """[start, end) index ranges of consecutive instructions whose execution counts stay within
    ``tolerance`` (relative) of the stretch's first."""
    out, start = [], 0
    for i in range(1, len(instrs) + 1):
        if i == len(instrs) or abs(instrs[i].executed - instrs[start].executed) > tolerance * max(instrs[start].executed, 1.0):
            out.append((start, i))
            start = i
    return out


def _top(stalls: dict[str, float], total: float, n: int) -> str:
    best = sorted(stalls.items(), key=lambda kv: -kv[1])[:n]
    return ", ".join(f"{k} {100 * v / total:.1f}" for k, v in best if v > 0)


def summary(instrs: list[Instr], top: int = 12, min_share: float = 0.5, tolerance: float = 0.2) -> str:
    total = sum(i.samples for i in instrs)
    if total <= 0:
        return "no warp-state samples (was the SourceCounters section collected?)"
    lines = [f"{len(instrs)} instructions, {total:,.0f} warp-state samples"]
    reasons: dict[str, float] = {}
    for i in instrs:
        for k, v in i.stalls.items():
            reasons[k] = reasons.get(k, 0.0) + v
    lines.append("stall reasons, % of all samples: " + _top(reasons, total, 10))
    lines.append("")
    lines.append(f"stretches holding at least {min_share} % of the samples (executed: per instruction):")
    for a, b in stretches(instrs, tolerance):
        part = instrs[a:b]
        share = sum(i.samples for i in part)
        if 100 * share / total < min_share:
            continue
        st: dict[str, float] = {}
        for i in part:
            for k, v in i.stalls.items():
                st[k] = st.get(k, 0.0) + v
        lines.append(f"  {part[0].address[-6:]}-{part[-1].address[-6:]} ({b - a:4d} instr, executed "
                     f"{part[0].executed:,.0f}): {100 * share / total:5.1f} %  [{_top(st, total, 5)}]")
    lines.append("")
    lines.append(f"the {top} instructions with the most samples:")
    for i in sorted(instrs, key=lambda x: -x.samples)[:top]:
        lines.append(f"  {i.address[-6:]} {100 * i.samples / total:5.1f} %  {i.source[:64]:64}  [{_top(i.stalls, total, 2)}]")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv", help="ncu --page source --csv --print-source sass output")
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--min-share", type=float, default=0.5, help="smallest stretch shown, %% of all samples")
    ap.add_argument("--tolerance", type=float, default=0.2)
    args = ap.parse_args(argv)
    try:
        with open(args.csv, newline="") as f:
            instrs = read(f)
    except (OSError, ValueError) as e:
        print(f"ncu_source_summary: {e}", file=sys.stderr)
        return 2
    print(summary(instrs, args.top, args.min_share, args.tolerance))
    return 0


if __name__ == "__main__":
    sys.exit(main())
