"""scripts/v3_knockouts.py: every knock-out edit still matches kernels/v3.cu (and v3_pairs.cuh, the
128-key step) and removes what it names on every path that does that work (a stale edit would time
the real kernel under a knock-out's name)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import v3_knockouts as K  # noqa: E402

SOURCES = {f: (ROOT / "kernels" / f).read_text() for f in ("v3.cu", K.PAIRS)}
SRC, PAIRS_SRC = SOURCES["v3.cu"], SOURCES[K.PAIRS]


@pytest.mark.parametrize("name", sorted(K.KNOCKOUTS))
def test_each_knockout_edits_the_kernel(name):
    edited = K.edit_sources(SOURCES, K.KNOCKOUTS[name])
    out, pairs = edited["v3.cu"], edited[K.PAIRS]
    assert out != SRC
    if "no-copy" in name or name in ("no-producer", "gemm-only"):
        # the own producer's tile: four bulk copies; the image issuers: 64-key stages (2), pairs (3)
        assert out.count("bulk_g2s(") == SRC.count("bulk_g2s(") - 4 - 5
        assert "mbar_arrive_expect_tx(bar," in SRC and "mbar_arrive_expect_tx(bar," not in out
    if name in ("no-convert", "no-producer", "gemm-only"):
        assert "i8x16_to_f16(kx[i]" in SRC and "i8x16_to_f16(kx[i]" not in out and "i8x16_to_f16(vx[i]" not in out
    if "no-copy" in name or name in ("no-producer", "gemm-only"):   # the image issuers: 64-key steps and pairs
        issuers = out[out.index("void issue_pairs("):out.index("#elif !PA_KV_F16")]
        assert "IMG_BYTES, bar_full + 8 * s);" in SRC and "bulk_g2s(" not in issuers
        assert "mbar_arrive_expect_tx(" not in issuers and issuers.count("knock-out: no cop") == 7
    if name in ("no-convert", "no-producer", "gemm-only"):   # shared tiles: no converter, no flag poll
        assert "ld_acquire_gpu(flags" in SRC and "ld_acquire_gpu(flags" not in out
        assert "knock-out: no conversions" in out
    if name in ("no-softmax", "gemm-only"):
        assert "softmax_tile<true>(f16_stage" not in out
        # the 64-key loop's speculative softmax and its fallback's second S go too; V's scales stay
        assert "softmax_tile_kept<BN / 8, true>" in SRC and "softmax_tile_kept<BN / 8" not in out
        assert SRC.count("issue_s_tile(dk);") == 2 and out.count("issue_s_tile(dk);") == 1
        assert "knock-out: no speculative softmax" in out and out.count("scale_by_vs(f16_stage(n), s);") == 1
        assert "softmax_tile<true, 2 * BN / 8, true>" in PAIRS_SRC and "softmax_tile<" not in pairs
        # nor the step loop's speculative softmax, nor its fallback's second S
        assert "softmax_tile_kept<" in PAIRS_SRC and "softmax_tile_kept<" not in pairs
        assert PAIRS_SRC.count("issue_s2(s, dq, dk") == 3 and pairs.count("issue_s2(s, dq, dk") == 2
        assert "knock-out: no speculative softmax" in pairs
        # the 128-key softmax applied P's V scales: the knock-out keeps them, and still releases the slot
        assert "scale_by_vs<" not in PAIRS_SRC and "scale_by_vs<2 * BN / 8>(scales(n), s);" in pairs
        assert "release_k(n);" in pairs
    if name in ("no-alu", "half-alu"):
        assert "i8x16_to_f16(vx[i]" not in out
        assert ("i8x16_to_f16(kx[i]" in out) == (name == "half-alu")
    if name == "no-load":
        assert out.count("knock-out: not loaded") == 2 and "st + I8_K + stage_off" not in out
    if name == "no-store":
        assert out.count("knock-out: not stored") == 4 and "sw128(r, 2 * ch, KV_BLOCK)) = lo" not in out
        assert "i8x16_to_f16(kx[i]" in out and "i8x16_to_f16(vx[i]" in out
    if name == "half-convert":   # the load loop and the convert-and-store loop, and nothing else
        assert out.count("for (int i = 0; i < NI / 2; ++i)") == 2
        assert out.count("for (int i = 0; i < NI; ++i)") == SRC.count("for (int i = 0; i < NI; ++i)") - 2
        assert "i8x16_to_f16(kx[i]" in out and "i8x16_to_f16(vx[i]" in out
    if name in ("no-scales", "no-k-scales"):
        # in softmax_tile and the 128-key step's speculative softmax_tile_kept: no multiply, no load
        assert SRC.count("__fmaf_rn(s[4 * j + e], (e & 1) ? k2.y : k2.x, nref[e >> 1])") == 2
        assert "k2" not in out and out.count("knock-out: no key-scale multiply") == 2
    if name in ("no-scales", "no-v-scales"):
        assert "__fmul_rn(s[4 * j], v2.x)" in SRC and "v2.x" not in out
        # 64-key steps, and both 128-key softmax paths (the full one and the speculative one)
        assert out.count("knock-out: no V-scale multiply") == 3
        assert SRC.count("__fmul_rn(p, (e & 1) ? v2.y : v2.x)") == 2 and "if (WITH_VS) v2 =" not in out
    if name == "no-k-scales":
        assert "v2.x" in out
    if name == "no-v-scales":
        assert "k2.y" in out
    if name == "kscale-in-q":
        assert "k2.y" not in out and "v2.x" in out
        assert out.count("knock-out: a typical key scale folded into Q once") == 1
        # scaled in registers after Q's loads, before its store to shared memory
        fold = out.index("w[e] = pa::half2_as_u32(__hmul2(")
        assert out.index("uint4 qv[Q_CHUNKS];") < fold < out.index("sm + SM_Q + sw128(r0 + idx / (D / 8)")
    if name == "no-pingpong":
        assert "PP_BAR" in SRC and "named_barrier_sync(PP_BAR" not in out
        assert "named_barrier_arrive(PP_BAR" not in out
        assert "named_barrier_sync(1 + wg, 128)" in out          # Q's own barrier stays
        assert "named_barrier_sync(PP_BAR" in PAIRS_SRC and "named_barrier_sync(PP_BAR" not in pairs
        assert "named_barrier_arrive(PP_BAR" not in pairs
    if name not in ("no-softmax", "gemm-only", "no-pingpong"):
        assert pairs == PAIRS_SRC


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
    for name, edits in sorted(K.KNOCKOUTS.items()):
        d = K.kernel_dir(tmp_path, name, edits)
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


def test_a_stale_edit_fails_loudly():
    with pytest.raises(SystemExit, match="no longer matches"):
        K.no_softmax("nothing to edit here")


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
