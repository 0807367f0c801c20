"""experiments/v3_knockouts.py: every knock-out names parts the kernel sources hook
(PA_V3_KNOCKED, kernels/v3_hooks.cuh), its copy of kernels/ switches them on, and the build leaves
out what it names on every path that does that work (a stale part would time the real kernel under
a knock-out's name)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "experiments"))
import v3_knockouts as K  # noqa: E402


@pytest.mark.parametrize("name", sorted(K.KNOCKOUTS))
def test_each_knockout_switches_on_hooks_the_kernel_has(tmp_path, name):
    parts = K.KNOCKOUTS[name]
    assert parts and set(parts) <= K.hooked_parts()
    d = K.kernel_dir(tmp_path, name, parts)
    hooks = (d / K.HOOKS).read_text()
    for p in parts:   # defined before the defaults, which then keep them
        assert hooks.index(f"#define PA_V3_KO_{p} 1") < hooks.index(f"#ifndef PA_V3_KO_{p}")
    assert (d / "v3.cu").read_text() == (ROOT / "kernels" / "v3.cu").read_text()   # the source itself is not edited


def test_every_hooked_part_belongs_to_a_knockout_and_the_producers_and_consumers_are_covered():
    used = {p for parts in K.KNOCKOUTS.values() for p in parts}
    assert used == K.hooked_parts()
    # each hook sits where its work is: the copies and conversions in the producers, the rest in
    # the consumers (both step sizes for the softmax and the turns)
    v3, pairs = ((ROOT / "kernels" / f).read_text() for f in ("v3.cu", "v3_pairs.cuh"))
    assert {"SOFTMAX", "PINGPONG"} <= set(re_parts(pairs))
    assert {"COPY", "CONVERT", "IMAGE_COPY", "SHARE_CONVERT", "LOAD", "STORE", "K_SCALES", "V_SCALES"} <= set(re_parts(v3))


def re_parts(text: str) -> list[str]:
    import re

    return re.findall(r"PA_V3_KNOCKED\((\w+)\)", text)


def test_every_knockout_still_compiles_for_sm90a(tmp_path):
    import shutil
    import subprocess

    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not on PATH")
    # v3's own producer (every knock-out), and the image paths those that edit them touch: shared
    # tiles at 64- and 128-key steps, v3-dq's images at 128-key steps
    images = {"no-convert", "no-copy", "no-producer", "no-softmax", "gemm-only", "no-pingpong", "no-scales"}
    builds = {"own": [], "shared": ["-DPA_V3_SHARE=1"],
              "shared-128": ["-DPA_V3_SHARE=1", "-DPA_CTA_ROWS=128", "-DPA_V3_STEP_KEYS=128"],
              "images-128": ["-DPA_V3_DQ=1", "-DPA_CTA_ROWS=128", "-DPA_V3_STEP_KEYS=128"]}
    for name, parts in sorted(K.KNOCKOUTS.items()):
        d = K.kernel_dir(tmp_path, name, parts)
        for build, defines in builds.items():
            if build != "own" and name not in images:
                continue
            proc = subprocess.run([nvcc, "-cubin", "-arch=sm_90a", "-std=c++17", "-DPA_HEAD_DIM=128", "-DPA_PAGED=1",
                                   *defines, f"-I{d}", "-o", str(tmp_path / f"{name}.cubin"), str(d / "v3.cu")],
                                  capture_output=True, text=True)
            assert proc.returncode == 0, f"{name} ({build}): {proc.stderr[-500:]}"


@pytest.mark.skipif(not shutil.which("cuobjdump"), reason="cuobjdump is not on PATH")
@pytest.mark.parametrize("name,gone", [("no-producer", "UBLKCP"), ("no-softmax", "MUFU.EX2"), ("gemm-only", "MUFU.EX2")])
def test_knockouts_remove_their_work_from_the_128_key_build(tmp_path, name, gone):
    """In the machine code of the shared-tile build at 128-key steps: no bulk copy is left without
    the producer, no exponential without the softmax (the epilogue's own are not exp2), and the
    wgmma of S and P.V stay."""
    import subprocess

    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not on PATH")
    sass = {}
    for which, edits in (("real", []), (name, K.KNOCKOUTS[name])):
        d = K.kernel_dir(tmp_path, which, edits)
        cubin = tmp_path / f"{which}.cubin"
        subprocess.run([nvcc, "-cubin", "-arch=sm_90a", "-std=c++17", "-DPA_HEAD_DIM=128", "-DPA_PAGED=1",
                        "-DPA_V3_SHARE=1", "-DPA_CTA_ROWS=128", "-DPA_V3_STEP_KEYS=128", f"-I{d}", "-o", str(cubin),
                        str(d / "v3.cu")], capture_output=True, text=True, check=True)
        sass[which] = subprocess.run(["cuobjdump", "-sass", "-fun", "pa_v3", str(cubin)], capture_output=True,
                                     text=True, check=True).stdout
    assert sass["real"].count(gone) > 8 and sass[name].count(gone) == 0
    # S and P.V of the first and last steps and of the step loop (8 each), and in the loop 8 more:
    # S issued again where the speculative softmax falls back, which goes with the softmax
    gmma = 32 if gone == "MUFU.EX2" else 40
    assert sass["real"].count("HGMMA.64x128x16") == 40 and sass[name].count("HGMMA.64x128x16") == gmma


@pytest.mark.skipif(not shutil.which("cuobjdump"), reason="cuobjdump is not on PATH")
def test_no_softmax_removes_the_64_key_steps_exponentials(tmp_path):
    """The same at 64-key steps (192 rows, the first chunk's launch): no exponential left, and the
    S issued again where the speculative softmax falls back gone with it."""
    import subprocess

    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not on PATH")
    sass = {}
    for which, edits in (("real", []), ("no-softmax", K.KNOCKOUTS["no-softmax"])):
        d = K.kernel_dir(tmp_path, which, edits)
        cubin = tmp_path / f"{which}.cubin"
        subprocess.run([nvcc, "-cubin", "-arch=sm_90a", "-std=c++17", "-DPA_HEAD_DIM=128", "-DPA_PAGED=1",
                        "-DPA_CTA_ROWS=192", f"-I{d}", "-o", str(cubin), str(d / "v3.cu")],
                       capture_output=True, text=True, check=True)
        sass[which] = subprocess.run(["cuobjdump", "-sass", "-fun", "pa_v3", str(cubin)], capture_output=True,
                                     text=True, check=True).stdout
    real, knocked = sass["real"].count("HGMMA"), sass["no-softmax"].count("HGMMA")
    assert sass["real"].count("MUFU.EX2") > 8 and sass["no-softmax"].count("MUFU.EX2") == 0
    assert real - knocked == 8, (real, knocked)   # the fallback's S: 8 k-steps of m64n64k16 at D 128


def test_a_part_no_source_hooks_fails_loudly():
    with pytest.raises(SystemExit, match="no longer hooks"):
        K.defines(["NOT_A_PART"])


def test_records_are_read_from_the_json_output():
    out = 'noise\n{"run": "x", "records": [{"variant": "v3", "shape": "2.1Kx256", "ms_median": 0.05},' \
          ' {"variant": "v3", "shape": "a", "ms_median": null}]}'
    assert K._records(out) == [{"variant": "v3", "shape": "2.1Kx256", "ms_median": 0.05}]


def test_a_row_prints_its_clock_and_cycles_where_pa_bench_measured_them():
    """1 ms at 1,650 MHz is 1.65 M SM cycles; a row without a clock (NaN, missing) prints its time only."""
    assert K._row_text({"shape": "32Kx1024", "ms_median": 1.0, "sm_clock_mhz": 1650.0}) == \
        "32Kx1024 1.0000 ms @ 1650 MHz = 1.6500 M cycles"
    assert K._row_text({"shape": "0x1536", "ms_median": 0.0561, "sm_clock_mhz": float("nan")}) == "0x1536 0.0561 ms"
    assert K._row_text({"shape": "0x1536", "ms_median": 0.0561}) == "0x1536 0.0561 ms"
