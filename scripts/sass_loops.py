"""The machine code of a kernel's loops, counted without a GPU: instructions per iteration and
their mix, per loop (a conditional branch back over at least ``--min-body`` instructions).

    python scripts/sass_loops.py [--variant v3] [--arch sm_90a] [--head-dim 128] [--min-body 100] [--kv-f16]

Where a loop waits for one wgmma group with another still in flight (v3: S waited for, P.V
running), it also counts what ptxas placed between that wait and the full one: the softmax's
exponentials and the branches (both paths of a branch are counted).

It builds the variant with nvcc (pa_bench.backends.kernels.nvcc_cubin) and disassembles it with
``cuobjdump -sass``, which needs ``nvdisasm`` on PATH (both ship with the CUDA toolkit, and as the
wheels ``nvidia-cuda-cuobjdump`` and ``nvidia-cuda-nvdisasm``). A loop's count is the static
length of its body: where the body holds two paths (v3's masked and unmasked softmax) both are
counted, so compare like with like, or build a flavour with one path.

What it is for: the instruction budget of a step, known here before any device time is spent.
On the H200 v3's time per key tile followed its instruction count in its early changes, and not
in its later ones (docs/PERF_NOTES.md, "v3").
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass

_INSTR = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
_TARGET = re.compile(r"0x([0-9a-f]+)")


@dataclass(frozen=True)
class Loop:
    start: int                          # address of the first instruction of the body
    end: int                            # address of the branch back
    mix: collections.Counter            # opcode (without modifiers or predicate) -> count

    @property
    def length(self) -> int:
        return sum(self.mix.values())


def function_instructions(sass: str, function: str) -> list[tuple[int, str]]:
    """(address, instruction text) of ``function`` in ``cuobjdump -sass`` output."""
    out: list[tuple[int, str]] = []
    inside = False
    for line in sass.splitlines():
        if "Function :" in line:
            inside = line.split("Function :", 1)[1].strip() == function
            continue
        if inside:
            m = _INSTR.match(line)
            if m:
                out.append((int(m.group(1), 16), m.group(2)))
    return out


def opcode(text: str) -> str:
    """``@!P0 IMAD.WIDE.U32 R2, ...`` -> ``IMAD``."""
    words = text.split()
    if words and words[0].startswith("@"):
        words = words[1:]
    return words[0].split(".")[0] if words else ""


def loops(instructions: list[tuple[int, str]], min_body: int = 100) -> list[Loop]:
    """Every conditional backward branch over at least ``min_body`` instructions, outermost
    last; an unconditional one (a retry path jumping back) is not a loop of the program."""
    found = []
    for addr, text in instructions:
        if not text.startswith("@") or opcode(text) != "BRA":
            continue
        m = _TARGET.search(text.split("BRA", 1)[1])
        if not m:
            continue
        target = int(m.group(1), 16)
        body = [t for a, t in instructions if target <= a <= addr]
        if target < addr and len(body) >= min_body:
            found.append(Loop(target, addr, collections.Counter(opcode(t) for t in body)))
    return sorted(found, key=lambda lp: lp.end - lp.start)


_REG = re.compile(r"(?<![\w.])R(\d+)(\.64)?\b")
_SETMAXREG = re.compile(r"USETMAXREG\.(\w+)(?:\.\w+)*\s+(?:\w+,\s*)?(0x[0-9a-f]+|\d+)")


def reachable(instructions: list[tuple[int, str]], start: int) -> list[tuple[int, str]]:
    """The instructions control can reach from address ``start``: fall-through, branch and call
    targets, up to an unconditional branch, EXIT or RET (a return goes back past its call)."""
    index = {a: i for i, (a, _) in enumerate(instructions)}
    seen: set[int] = set()
    todo = [index[start]]
    while todo:
        i = todo.pop()
        while i < len(instructions) and i not in seen:
            seen.add(i)
            text = instructions[i][1]
            op = opcode(text)
            if op in ("BRA", "CALL"):
                m = _TARGET.search(text.split(op, 1)[1])
                if m and int(m.group(1), 16) in index:
                    todo.append(index[int(m.group(1), 16)])
            guarded = text.startswith("@") or (op == "BRA" and re.search(r"BRA\S*\s+!?U?P\d", text))
            if op in ("BRA", "EXIT", "RET") and not guarded:
                break
            i += 1
    return [instructions[i] for i in sorted(seen)]


def registers_used(instructions: list[tuple[int, str]]) -> int:
    """Registers the instructions need, counted from R0: the highest register named plus one, with
    a 64-bit pair (``R8.64``) two and a 128-bit operation's data registers four (an upper bound;
    an address in brackets is one register or a pair, and an LDGSTS moves no register data, its
    .128 is the copy's size)."""
    top = -1
    for _, text in instructions:
        op_word = text.split()[1 if text.startswith("@") else 0]
        wide = 4 if ".128" in op_word and opcode(text) != "LDGSTS" else 1
        data = re.sub(r"\[[^\]]*\]", " ", text)
        for m in _REG.finditer(text):
            top = max(top, int(m.group(1)) + (2 if m.group(2) else 1) - 1)
        for m in _REG.finditer(data):
            top = max(top, int(m.group(1)) + max(wide, 2 if m.group(2) else 1) - 1)
    return top + 1


def setmaxnreg_regions(instructions: list[tuple[int, str]]) -> list[tuple[int, str, int, int]]:
    """(address, kind, the count it sets, registers the code reachable after it needs) of each
    setmaxnreg (USETMAXREG) in the function: a region needing more than its count is broken."""
    out = []
    for addr, text in instructions:
        m = _SETMAXREG.search(text)
        if m:
            after = [(a, t) for a, t in reachable(instructions, addr) if a != addr]
            out.append((addr, m.group(1), int(m.group(2), 0), registers_used(after)))
    return out


def between_waits(lines) -> list[dict]:
    """In SASS lines (or instruction texts), for each wait that leaves one wgmma group in flight (``WARPGROUP.DEPBAR.LE gsb0, 0x1``: S waited
    for, P.V still running), what lies before the next full wait: its softmax exponentials (MUFU.EX2),
    the part of the softmax ptxas left under P.V, and its branches (Triton 3.6's ptxas waits for P.V
    at the first block after one)."""
    steps, cur = [], None
    for line in lines:
        if "WARPGROUP.DEPBAR.LE gsb0, 0x1" in line:
            cur = {"exp2": 0, "branches": 0}
        elif cur is not None and "WARPGROUP.DEPBAR.LE gsb0, 0x0" in line:
            steps.append(cur)
            cur = None
        elif cur is not None and "MUFU.EX2" in line:
            cur["exp2"] += 1
        elif cur is not None and re.search(r"\bBRA\b", line):
            cur["branches"] += 1
    return steps


def _tool(name: str) -> str | None:
    return os.environ.get(name.upper()) or shutil.which(name)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variant", default="v3")
    ap.add_argument("--arch", default=None, help="default: sm_90a for v3, else sm_90")
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--min-body", type=int, default=100)
    ap.add_argument("--top", type=int, default=12, help="opcodes shown per loop")
    ap.add_argument("--kv-f16", action="store_true", help="v3's fp16-K/V control build (-DPA_KV_F16=1)")
    args = ap.parse_args(argv)

    from pa_bench import variants as registry
    from pa_bench.backends import kernels as K

    cuobjdump = _tool("cuobjdump")
    if cuobjdump is None or (_tool("nvdisasm") is None and not os.environ.get("NVDISASM_PATH")):
        print("error: cuobjdump and nvdisasm must be on PATH (the CUDA toolkit, or the wheels "
              "nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm)", file=sys.stderr)
        return 2
    entry = registry.find(args.variant)
    if entry is None or entry.kind != registry.CUDA_KERNEL:
        print(f"error: {args.variant!r} is not a CUDA kernel variant ({', '.join(K.kernel_variants())})",
              file=sys.stderr)
        return 2
    arch = args.arch or f"sm_90{entry.arch_suffix}"
    build = K.KernelBuild(args.variant, head_dim=args.head_dim, kv_f16=args.kv_f16)
    cubin = K.nvcc_cubin(build, arch)
    sass = subprocess.run([cuobjdump, "-sass", str(cubin)], capture_output=True, text=True, check=True).stdout
    ins = function_instructions(sass, build.function)
    if not ins:
        print(f"error: no function {build.function} in the disassembly of {cubin}", file=sys.stderr)
        return 2
    flavour = ", fp16 K/V" if args.kv_f16 else ""
    print(f"{build.function} ({arch}, D={args.head_dim}{flavour}): {len(ins)} instructions")
    for lp in loops(ins, args.min_body):
        mix = ", ".join(f"{op} {n}" for op, n in lp.mix.most_common(args.top))
        print(f"  loop {lp.start:#06x}-{lp.end:#06x}: {lp.length} per iteration: {mix}")
        waits = between_waits(t for a, t in ins if lp.start <= a <= lp.end)
        if waits:
            print("    between the wait for S and the wait for P.V: " + "; ".join(
                f"exp2 {w['exp2']}, branches {w['branches']}" for w in waits))
    for addr, kind, count, need in setmaxnreg_regions(ins):
        print(f"  setmaxnreg {kind.lower()} {count} at {addr:#06x}: the code after it needs {need} registers")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
