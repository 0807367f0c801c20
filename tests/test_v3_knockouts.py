"""scripts/v3_knockouts.py: every knock-out edit still matches kernels/v3.cu and removes what it
names (a stale edit would time the real kernel under a knock-out's name)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import v3_knockouts as K  # noqa: E402

SRC = (ROOT / "kernels" / "v3.cu").read_text()


@pytest.mark.parametrize("name", sorted(K.KNOCKOUTS))
def test_each_knockout_edits_the_kernel(name):
    out = SRC
    for edit in K.KNOCKOUTS[name]:
        out = edit(out)
    assert out != SRC
    if "no-copy" in name or name in ("no-producer", "gemm-only"):
        assert out.count("bulk_g2s(") == SRC.count("bulk_g2s(") - 4   # the tile's four bulk copies
        assert "mbar_arrive_expect_tx(bar," in SRC and "mbar_arrive_expect_tx(bar," not in out
    if name in ("no-convert", "no-producer", "gemm-only"):
        assert "i8x16_to_f16(kx[i]" in SRC and "i8x16_to_f16(kx[i]" not in out and "i8x16_to_f16(vx[i]" not in out
    if name in ("no-softmax", "gemm-only"):
        assert "softmax_tile<true>(f16_stage" not in out
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
        assert "__fmul_rn(s[4 * j + e], (e & 1) ? kj.y : kj.x)" in SRC and "kj.y" not in out
        assert "knock-out: no key-scale multiply" in out
    if name in ("no-scales", "no-v-scales"):
        assert "__fmul_rn(s[4 * j], v2.x)" in SRC and "v2.x" not in out and "knock-out: no V-scale multiply" in out
    if name == "no-k-scales":
        assert "v2.x" in out
    if name == "no-v-scales":
        assert "kj.y" in out
    if name == "kscale-in-q":
        assert "kj.y" not in out and "v2.x" in out
        assert out.count("knock-out: a typical key scale folded into Q once") == 1
        # scaled in registers after Q's loads, before its store to shared memory
        fold = out.index("w[e] = pa::half2_as_u32(__hmul2(")
        assert out.index("uint4 qv[Q_CHUNKS];") < fold < out.index("sm + SM_Q + sw128(r0 + idx / (D / 8)")
    if name == "no-pingpong":
        assert "PP_BAR" in SRC and "named_barrier_sync(PP_BAR" not in out
        assert "named_barrier_arrive(PP_BAR" not in out
        assert "named_barrier_sync(1 + wg, 128)" in out          # Q's own barrier stays


def test_every_knockout_still_compiles_for_sm90a(tmp_path):
    import shutil
    import subprocess

    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not on PATH")
    for name, edits in sorted(K.KNOCKOUTS.items()):
        d = K.kernel_dir(tmp_path, name, edits)
        proc = subprocess.run([nvcc, "-cubin", "-arch=sm_90a", "-DPA_HEAD_DIM=128", "-DPA_PAGED=1",
                               f"-I{d}", "-o", str(tmp_path / f"{name}.cubin"), str(d / "v3.cu")],
                              capture_output=True, text=True)
        assert proc.returncode == 0, f"{name}: {proc.stderr[-500:]}"


def test_a_stale_edit_fails_loudly():
    with pytest.raises(SystemExit, match="no longer matches"):
        K.no_softmax("nothing to edit here")


def test_records_are_read_from_the_json_output():
    out = 'noise\n{"run": "x", "records": [{"variant": "v3", "shape": "2.1Kx256", "ms_median": 0.05},' \
          ' {"variant": "v3", "shape": "a", "ms_median": null}]}'
    assert K._records(out) == [{"variant": "v3", "shape": "2.1Kx256", "ms_median": 0.05}]
