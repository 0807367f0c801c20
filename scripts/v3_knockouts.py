#!/usr/bin/env python3
"""Where v3's time goes: the kernel timed with one part of its work knocked out at a time.

    python3 scripts/v3_knockouts.py [--shapes 32Kx1024,2.1Kx256] [--out DIR]

Each knock-out is a copy of kernels/ whose v3.cu (and v3_pairs.cuh, the 128-key consumer step) has
one block of work removed by text edits (``KNOCKOUTS``); the copy is timed with ``pa-bench time
--variant v3`` (PA_BENCH_KERNELS points at it), the real v3 first. A shape runs the build its launch
takes (own or shared tiles, 64- or 128-key steps: ``pa-bench time`` prints it in the launch), and a
knock-out edits every path that does its work, so it means the same on each: ``no-softmax`` and
``no-pingpong`` edit both consumer steps, ``no-copy`` and ``no-convert`` each producer. The outputs of a knock-out are wrong by design: only its time means
anything, and only as "how much faster without this", an upper bound on what making that part
free could give; one that changes the values the tensor cores see can also move the GPU's clock,
so each time is printed with the SM clock pa-bench measured over its samples and the SM cycles
they make (the producer knock-outs' stale images ran 12 % faster clocks than v3 on an H100).
A knock-out whose edit no longer matches the source fails loudly rather than
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

_CONVERT = re.compile(r"\n#pragma unroll\n        for \(int i = 0; i < NI; \+\+i\) \{\n            const int r = prod_row\(pw, lane, i\);\n"
                      r"            uint4 lo, hi;.*?\n        \}\n", re.S)
_COPY = re.compile(r"    mbar_arrive_expect_tx\(bar, .*?\n    \}\n(?=\}\n)", re.S)
_CONVERT_K = re.compile(r"i8x16_to_f16\(kx\[i\], lo, hi\);")
_CONVERT_V = re.compile(r"i8x16_to_f16\(vx\[i\], lo, hi\);")
_LOAD = re.compile(r"(\n            )([kv])x\[i\] = \*reinterpret_cast<const uint4\*>\(st \+ I8_[KV] \+ stage_off\(r, ch\)\);")
_STORE = re.compile(r"(\n            )\*reinterpret_cast<uint4\*>\(f \+ F16_([KV]) \+ sw128\(r, 2 \* ch( \+ 1)?, KV_BLOCK\)\) = (lo|hi);")
_ROUNDS = re.compile(r"(\n#pragma unroll\n        for \(int i = 0; i < )NI(; \+\+i\) \{\n            const int r = prod_row\(pw, lane, i\);)")
_STORES_DONE = re.compile(r"(\n        if \(pw == 0\) \{   // lanes 0-15: K scales)")
_TURN_SYNC = re.compile(r"\n        named_barrier_sync\(PP_BAR \+ wg, 256\);")
_TURN_ARRIVE = re.compile(r"\n        if \(wg != NCWG - 1 \|\| n < n_(?:tiles|steps)\) named_barrier_arrive\(PP_BAR \+ \(wg \+ 1\) % NCWG, 256\);")
_TURN_OPEN = re.compile(r"\n    if \(wg == NCWG - 1\) named_barrier_arrive\(PP_BAR, 256\);")
# the key scales' loads and their multiplies (fused with t's subtraction of the reference), each in
# softmax_tile and in the 128-key step's speculative softmax_tile_kept
_K_LOAD = re.compile(r"        const float2 k2 = \*reinterpret_cast<const float2\*>\(kq \+ sc_index\(j\) \+ 2 \* t\);\n")
_K_SCALE = re.compile(r"(\n            (?:const )?float v = )__fmaf_rn\(s\[4 \* j \+ e\], \(e & 1\) \? k2\.y : k2\.x, "
                      r"(nref\[e >> 1\])\);")
_V_SCALE = re.compile(r"        const float2 v2 = \*reinterpret_cast<const float2\*>\(vs \+ sc_index\(j\) \+ 2 \* t\);\n"
                      r"(?:        s\[4 \* j( \+ \d)?\] = __fmul_rn\(s\[4 \* j( \+ \d)?\], v2\.[xy]\);\n){4}")
_SOFTMAX = re.compile(r"(    auto softmax = \[&\]\(int n, float \(&al\)\[2\]\) \{\n).*?(\n    \};\n)", re.S)
# the 128-key step loop's softmax: the speculative softmax_tile_kept, and where it fails, S issued
# again and the softmax lambda (the whole block, from the tile it needs to its closing brace)
_KEPT = re.compile(r"\n            const bool unmasked = [^\n]*\n            if \(!\(unmasked && softmax_tile_kept<.*?"
                   r"\n                softmax\(n, alpha_next\);\n            \}\n", re.S)
# the same at 64-key steps (v3.cu), whose fallback also applies V's scales after the softmax
_KEPT64 = re.compile(r"\n            const bool unmasked = [^\n]*\n            if \(!\(unmasked && softmax_tile_kept<.*?"
                     r"\n                softmax\(n, alpha_next\);\n                scale_by_vs\(f16_stage\(n\), s\);\n            \}\n", re.S)
# the image producers (shared tiles, v3-dq): the 64-key issuers' copy of a stage, the pairs issuer's
# arms and copies, the shared tiles' flag polls and converters
_IMAGE_COPY = re.compile(r"(\n +)mbar_arrive_expect_tx\(bar_full \+ 8 \* s, IMG_BYTES\);\n +bulk_g2s\([^;]*\);")
_PAIR_ARM = re.compile(r"mbar_arrive_expect_tx\((f[kv]), [^;]*\);")
_PAIR_COPY = re.compile(r"bulk_g2s\((?:ks|vs) [^;]*\);")
_FLAG_POLL = re.compile(r"\n +while \(ld_acquire_gpu\(flags \+ (?:t0|t1|n)\) != epoch\) \{\n +\}")
_CONVERTERS = re.compile(r"\n    if \(tid >= 64\) return;\n")


def _sub(pattern: re.Pattern, repl: str, text: str, what: str, count: int = 1, file: str = "v3.cu") -> str:
    """Every match edited, and exactly ``count`` of them: a new copy of the work (another path
    through the kernel that does it) fails as loudly as a stale edit."""
    out, n = pattern.subn(repl, text)
    if n != count:
        raise SystemExit(f"v3_knockouts: the {what} edit no longer matches kernels/{file}; update the script")
    return out


def on(file: str):
    """An edit of kernels/``file`` (an edit without this mark edits kernels/v3.cu)."""
    def mark(edit):
        edit.file = file
        return edit
    return mark


PAIRS = "v3_pairs.cuh"


def no_convert(src: str) -> str:
    return _sub(_CONVERT, "\n", src, "no-convert")


def no_copy(src: str) -> str:
    return _sub(_COPY, "    mbar_arrive(bar);   // knock-out: no copies, the slot's stale bytes converted\n", src, "no-copy")


def no_alu_k(src: str) -> str:
    return _sub(_CONVERT_K, "lo = kx[i]; hi = kx[i];   // knock-out: not converted", src, "no-alu (K)")


def no_alu_v(src: str) -> str:
    return _sub(_CONVERT_V, "lo = vx[i]; hi = vx[i];   // knock-out: not converted", src, "no-alu (V)")


def no_load(src: str) -> str:
    return _sub(_LOAD, r"\1\2x[i] = make_uint4(r, ch, n, i);   // knock-out: not loaded", src, "no-load", count=2)


def half_convert(src: str) -> str:
    return _sub(_ROUNDS, r"\1NI / 2\2", src, "half-convert", count=2)


def no_store(src: str) -> str:
    out = _sub(_STORE, r"\1fold ^= \4.x ^ \4.y ^ \4.z ^ \4.w;   // knock-out: not stored", src, "no-store", count=4)
    out = _sub(re.compile(r"(\n        uint4 kx\[NI\], vx\[NI\];)"), r"\1\n        u32 fold = 0;", out, "no-store (fold)")
    return _sub(_STORES_DONE, r"\n        if (fold == 0x9e3779b9u) *reinterpret_cast<u32*>(f) = fold;   // keeps the conversion alive\1",
                out, "no-store (guard)")


def no_softmax(src: str, file: str = "v3.cu") -> str:
    """The 64-key step's softmax lambda emptied, and its loop's speculative softmax (with the
    fallback's second S) replaced by that lambda and V's scales."""
    src = _sub(_SOFTMAX, r"\1        (void)n; al[0] = al[1] = 1.f;\2", src, f"no-softmax ({file})", file=file)
    return _sub(_KEPT64, "\n            softmax(n, alpha_next);   // knock-out: no speculative softmax, no second S\n"
                "            scale_by_vs(f16_stage(n), s);\n", src, f"no-softmax (speculative, {file})", file=file)


@on(PAIRS)
def no_softmax_pairs(src: str) -> str:
    """The 128-key step's softmax (which also applies P's V scales) replaced by the V scales alone,
    and the step loop's speculative softmax (with its fallback's second S) by that plain call."""
    src = _sub(_SOFTMAX, r"\1        (void)n; al[0] = al[1] = 1.f;\n        scale_by_vs<2 * BN / 8>(scales(n), s);\2",
               src, f"no-softmax ({PAIRS})", file=PAIRS)
    return _sub(_KEPT, "\n            softmax(n, alpha_next);   // knock-out: no speculative softmax, no second S\n",
                src, f"no-softmax (speculative, {PAIRS})", file=PAIRS)


def no_image_copy(src: str) -> str:
    """The image issuers arm each slot's barrier with a plain arrive and copy nothing."""
    src = _sub(_IMAGE_COPY, r"\1mbar_arrive(bar_full + 8 * s);   // knock-out: no copy", src, "no-copy (images)", count=2)
    src = _sub(_PAIR_ARM, r"mbar_arrive(\1);   // knock-out: no copies", src, "no-copy (pair arms)", count=2)
    return _sub(_PAIR_COPY, "(void)0;   // knock-out: no copy", src, "no-copy (pair copies)", count=3)


def no_share_convert(src: str) -> str:
    """No CTA converts a shared tile, and the issuers copy the images without waiting for their flags."""
    src = _sub(_FLAG_POLL, "", src, "no-convert (flag polls)", count=3)
    return _sub(_CONVERTERS, "\n    return;   // knock-out: no conversions\n", src, "no-convert (converters)")


def no_k_scales(src: str) -> str:
    """The key scales neither loaded nor multiplied, in softmax_tile and the speculative
    softmax_tile_kept: t = s - m alone."""
    src = _sub(_K_LOAD, "", src, "no-k-scales (loads)", count=2)
    return _sub(_K_SCALE, r"\1__fadd_rn(s[4 * j + e], \2);   // knock-out: no key-scale multiply", src, "no-k-scales", count=2)


_Q_STORE = re.compile(r"(\n#pragma unroll\n    for \(int i = 0; i < Q_CHUNKS; \+\+i\) \{\n        const int idx = tid \+ 128 \* i;\n"
                      r"        \*reinterpret_cast<uint4\*>\(sm \+ SM_Q \+ sw128\()")


def kscale_in_q(src: str) -> str:
    """Q's rows scaled once before they are stored (so both of S's Q operands, registers or shared
    memory, carry it)."""
    src = no_k_scales(src)
    fold = ("\n    {   // knock-out: a typical key scale folded into Q once (no per-element K-scale multiply)\n"
            "        const __half2 c2 = __float2half2_rn(PA_KV_F16 ? a.qk_scale_log2 : a.qk_scale_log2 * 0.021f);\n"
            "#pragma unroll\n        for (int i = 0; i < Q_CHUNKS; ++i) {\n"
            "            u32* w = reinterpret_cast<u32*>(&qv[i]);\n"
            "#pragma unroll\n            for (int e = 0; e < 4; ++e) w[e] = pa::half2_as_u32(__hmul2(pa::u32_as_half2(w[e]), c2));\n"
            "        }\n    }")
    return _sub(_Q_STORE, lambda m: fold + m.group(1), src, "kscale-in-q")


# the V scales of the 128-key step's softmax (WITH_VS), in softmax_tile and softmax_tile_kept
_V_LOAD_FUSED = re.compile(r"        float2 v2 = \{1\.f, 1\.f\};\n        if \(WITH_VS\) v2 = [^\n]*\n")
_V_SCALE_FUSED = re.compile(r"s\[4 \* j \+ e\] = WITH_VS \? __fmul_rn\(p, \(e & 1\) \? v2\.y : v2\.x\) : p;")


def no_v_scales(src: str) -> str:
    """Every place P meets the V scales: scale_by_vs (64-key steps) and the exponential loops of
    both 128-key softmax paths (WITH_VS: softmax_tile and the speculative softmax_tile_kept)."""
    src = _sub(_V_SCALE, "        (void)j, (void)t;   // knock-out: no V-scale multiply\n", src, "no-v-scales")
    src = _sub(_V_LOAD_FUSED, "", src, "no-v-scales (softmax loads)", count=2)
    src = _sub(_V_SCALE_FUSED, "s[4 * j + e] = p;   // knock-out: no V-scale multiply", src, "no-v-scales (softmax)", count=2)
    return src.replace("    const float* vs = kq + BN;",
                       "    [[maybe_unused]] const float* vs = kq + BN;", 1)


def no_pingpong(src: str, file: str = "v3.cu") -> str:
    src = _sub(_TURN_SYNC, "", src, f"no-pingpong (turn sync, {file})", file=file)
    src = _sub(_TURN_ARRIVE, "", src, f"no-pingpong (turn arrive, {file})", file=file)
    return _sub(_TURN_OPEN, "", src, f"no-pingpong (first turn, {file})", file=file)


@on(PAIRS)
def no_pingpong_pairs(src: str) -> str:
    return no_pingpong(src, PAIRS)


KNOCKOUTS = {
    "no-convert": [no_convert, no_share_convert],
    "no-copy": [no_copy, no_image_copy],
    "no-producer": [no_copy, no_convert, no_image_copy, no_share_convert],
    "no-softmax": [no_softmax, no_softmax_pairs],
    "gemm-only": [no_copy, no_convert, no_image_copy, no_share_convert, no_softmax, no_softmax_pairs],
    "no-alu": [no_alu_k, no_alu_v],
    "half-alu": [no_alu_v],
    "no-load": [no_load],
    "half-convert": [half_convert],
    "no-store": [no_store],
    "no-pingpong": [no_pingpong, no_pingpong_pairs],
    "no-scales": [no_k_scales, no_v_scales],
    "no-k-scales": [no_k_scales],
    "no-v-scales": [no_v_scales],
    "kscale-in-q": [kscale_in_q],
    "fp16-softmax": [kscale_in_q, no_v_scales],
}


def edit_sources(sources: dict[str, str], edits) -> dict[str, str]:
    """``sources`` (file name -> text) with each edit applied to its file (``on``)."""
    out = dict(sources)
    for edit in edits:
        file = getattr(edit, "file", "v3.cu")
        out[file] = edit(out[file])
    return out


def kernel_dir(base: Path, name: str, edits) -> Path:
    d = base / name
    shutil.copytree(ROOT / "kernels", d)
    files = {getattr(edit, "file", "v3.cu") for edit in edits}
    for file, text in edit_sources({f: (d / f).read_text() for f in files}, edits).items():
        (d / file).write_text(text)
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
