#!/usr/bin/env python3
"""Where v3's time goes: the kernel timed with one part of its work knocked out at a time.

    python3 experiments/v3_knockouts.py [--shapes 32Kx1024,2.1Kx256] [--out DIR]

Each knock-out is a copy of kernels/ built with one part of the work left out: v3's knock-out hooks
(kernels/v3_hooks.cuh, ``PA_V3_KNOCKED(PART)`` in v3.cu and v3_pairs.cuh) switched on by
``#define PA_V3_KO_PART 1`` lines put before the copy's hook defaults (``KNOCKOUTS``: a name's
parts); the copy is timed with ``pa-bench time
--variant v3`` (PA_BENCH_KERNELS points at it), the real v3 first. A shape runs the build its launch
takes (own or shared tiles, 64- or 128-key steps: ``pa-bench time`` prints it in the launch), and a
knock-out edits every path that does its work, so it means the same on each: ``no-softmax`` and
``no-pingpong`` edit both consumer steps, ``no-copy`` and ``no-convert`` each producer. The outputs of a knock-out are wrong by design: only its time means
anything, and only as "how much faster without this", an upper bound on what making that part
free could give; one that changes the values the tensor cores see can also move the GPU's clock,
so each time is printed with the SM clock pa-bench measured over its samples and the SM cycles
they make (the producer knock-outs' stale images ran 12 % faster clocks than v3 on an H100).
A knock-out part that the kernel sources no longer hook fails loudly rather than
timing the real kernel under a wrong name.

- ``no-convert``: the producer copies int8 K/V but neither converts nor stores the fp16 tiles (with
  shared tiles: no CTA converts, and the issuer copies the workspace's images without waiting for
  their flags: stale or zero bytes);
- ``no-copy``: the producer starts no bulk copies (the issuer thread only arrives on the slot's barrier;
  the producer converts stale staging bytes; with shared tiles the issuer copies no image, 64- or
  128-key steps, while the CTAs still convert and publish);
- ``no-producer``: both (the producer only waits and arrives: the consumers alone; with shared
  tiles or v3-dq's images, at 64- or 128-key steps, the issuer arms each slot with a plain arrive);
- ``no-softmax``: the consumers skip the online softmax (P is packed from raw S; no rescale; the
  128-key step still applies the V scales and releases its K slot, and takes neither its
  speculative softmax nor that one's fallback, which issues S again);
- ``gemm-only``: no-producer and no-softmax: wgmma, barriers and P packing only;
- ``no-alu``: the producer stores its int8 chunks unconverted (loads and stores stay: what the
  conversion's arithmetic alone costs);
- ``half-alu``: as no-alu for V only (K is converted): what halving that arithmetic would give;
- ``no-load``: the producer converts and stores values made from its indices instead of loading
  its int8 chunks from staging (the copies still land): what the staging loads alone cost;
- ``half-convert``: the producer loads, converts and stores only the rows of the first half of its
  rounds (half of every tile; the copies still land whole): what a producer with half the
  conversion work per CTA would give (docs/PERF_NOTES.md: it put v3 at the fp16 control's time);
- ``no-store``: the producer converts but stores no fp16 tile (the results are folded into one
  register and stored only if it takes an impossible value: what the stores alone cost);
- ``no-scales``: the consumers apply neither per-key scale: S is not multiplied by the key scales
  (k_scale * qk_scale_log2) before the softmax, nor p by the V scales (v_scale * p_scale) before
  it is packed into P, and neither array is loaded from the stage (in the 128-key step's
  speculative softmax as in its full one). ``no-k-scales`` and
  ``no-v-scales`` remove one of the two. Without the K scales S keeps its raw integer spread and P
  is nearly one-hot, so these also change what the tensor cores multiply, and with it the GPU's
  power and clock: their gain is not the scales' cost alone (docs/PERF_NOTES.md);
- ``kscale-in-q``: as ``no-k-scales``, but a typical key scale (qk_scale_log2 x 0.021, the K scale
  of normal data; qk_scale_log2 alone for the fp16 control) is folded into Q's rows once per
  CTA, so S keeps about its real spread: no per-element multiply and no key-scale loads, with the
  values the tensor cores see kept close to v3's (what separates the two readings of ``no-k-scales``);
- ``fp16-softmax``: kscale-in-q and no-v-scales: the softmax an fp16 kernel runs (no per-key
  multiply of S or of P, no scale loads) on values close to v3's: what SPEC's scale arithmetic
  costs the consumers beside an fp16 kernel's;
- ``no-pingpong``: the consumers' turns removed (no named barrier orders the two warpgroups'
  wgmma issue). Unlike the others this one still computes the right output: the turns order
  only when each warpgroup issues, so it answers "do the turns still pay?".
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

KERNELS = ("v3.cu", "v3_pairs.cuh", "v3_controls.cuh")   # the sources whose hooks the parts name
HOOKS = "v3_hooks.cuh"

# name -> the parts (PA_V3_KO_<part>) it leaves out, on every path that does that work
KNOCKOUTS = {
    "no-convert": ("CONVERT", "SHARE_CONVERT"),
    "no-copy": ("COPY", "IMAGE_COPY"),
    "no-producer": ("COPY", "CONVERT", "IMAGE_COPY", "SHARE_CONVERT"),
    "no-softmax": ("SOFTMAX",),
    "gemm-only": ("COPY", "CONVERT", "IMAGE_COPY", "SHARE_CONVERT", "SOFTMAX"),
    "no-alu": ("ALU_K", "ALU_V"),
    "half-alu": ("ALU_V",),
    "no-load": ("LOAD",),
    "half-convert": ("HALF_CONVERT",),
    "no-store": ("STORE",),
    "no-pingpong": ("PINGPONG",),
    "no-scales": ("K_SCALES", "V_SCALES"),
    "no-k-scales": ("K_SCALES",),
    "no-v-scales": ("V_SCALES",),
    "kscale-in-q": ("K_SCALES", "KSCALE_IN_Q"),
    "fp16-softmax": ("K_SCALES", "KSCALE_IN_Q", "V_SCALES"),
}


def hooked_parts(kernels: Path = ROOT / "kernels") -> set[str]:
    """The parts the kernel sources in ``kernels`` can leave out (``PA_V3_KNOCKED(PART)``)."""
    text = "".join((kernels / f).read_text() for f in KERNELS)
    return set(re.findall(r"PA_V3_KNOCKED\((\w+)\)", text))


def defines(parts) -> list[str]:
    """The -D options of a build without ``parts``; a part no source hooks any more fails loudly."""
    missing = sorted(set(parts) - hooked_parts())
    if missing:
        raise SystemExit(f"v3_knockouts: kernels/ no longer hooks {', '.join(missing)} (PA_V3_KNOCKED); update the script")
    return [f"-DPA_V3_KO_{p}=1" for p in parts]


def kernel_dir(base: Path, name: str, parts) -> Path:
    """A copy of kernels/ under ``base``/``name`` whose hooks leave ``parts`` out."""
    d = base / name
    shutil.copytree(ROOT / "kernels", d)
    lines = [f"#define {o.removeprefix('-D').replace('=', ' ')}" for o in defines(parts)]
    (d / HOOKS).write_text("\n".join(["// (experiments/v3_knockouts.py) the parts this copy leaves out", *lines, ""])
                           + (d / HOOKS).read_text())
    return d


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="32Kx1024,2.1Kx256")
    ap.add_argument("--only", default=None, help="comma list of knock-outs (default: all)")
    ap.add_argument("--max-seconds", default="3")
    ap.add_argument("--out", default=None, help="keep each run's output here")
    args = ap.parse_args()
    names = args.only.split(",") if args.only else list(KNOCKOUTS)
    with tempfile.TemporaryDirectory(prefix="v3-ko-") as tmp:
        runs = [("v3", ROOT / "kernels")] + [(n, kernel_dir(Path(tmp), n, KNOCKOUTS[n])) for n in names]
        for name, kdir in runs:
            env = dict(os.environ, PA_BENCH_KERNELS=str(kdir), COLUMNS="200")
            res = Path(args.out or tmp) / f"results-{name}"
            cmd = [sys.executable, "-m", "pa_bench", "time", "--variant", "v3", "--shapes", args.shapes,
                   "--max-seconds", args.max_seconds, "--results", str(res), "--json"]
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT)
            if args.out:
                Path(args.out, f"{name}.log").write_text(proc.stdout + proc.stderr)
            rows = _records(proc.stdout)
            if proc.returncode != 0 or not rows:
                print(f"{name:<12} failed (exit {proc.returncode}): {proc.stderr.strip()[-300:]}")
                continue
            print(f"{name:<12} " + "  ".join(_row_text(r) for r in rows))
    return 0


def _row_text(r: dict) -> str:
    """A shape's time, with the SM clock pa-bench measured over its samples and the SM cycles they
    make: a knock-out that changes what the tensor cores see can raise the clock, and then its time
    overstates what the part costs; its cycles do not (docs/PERF_NOTES.md)."""
    text = f"{r['shape']} {r['ms_median']:.4f} ms"
    mhz = r.get("sm_clock_mhz")
    if isinstance(mhz, (int, float)) and mhz == mhz and mhz > 0:
        text += f" @ {mhz:.0f} MHz = {r['ms_median'] * mhz / 1e3:.4f} M cycles"
    return text


def _records(stdout: str) -> list[dict]:
    import json

    start = stdout.find("{")
    try:
        data = json.loads(stdout[start:]).get("records", []) if start >= 0 else []
    except json.JSONDecodeError:
        return []
    return [r for r in data if r.get("variant") == "v3" and r.get("ms_median") is not None]


if __name__ == "__main__":
    sys.exit(main())
