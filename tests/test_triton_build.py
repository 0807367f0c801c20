"""scripts/triton_build.py: the Triton kernel's table launches built for sm_90a on a host without a
GPU. Triton's interpreter (the other CPU tests) compiles nothing, so this is where a change that
breaks the kernel's GPU build, drops wgmma, or grows its shared memory past what its launch is for
shows before any GPU time. Registers and spills are not asserted: they depend on the Triton
version (the H200 runs 3.6; the figures in docs/PERF_NOTES.md are its)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import triton_build as B  # noqa: E402

from pa_bench.backends import triton_runner  # noqa: E402

_reason = triton_runner.unavailable_reason(need_gpu=False)
if _reason:
    pytest.skip(_reason, allow_module_level=True)
pytest.importorskip("triton.backends.nvidia", reason="this Triton has no NVIDIA backend to build with")


@pytest.fixture(autouse=True)
def _compiled(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.delenv(triton_runner.CONFIG_ENV, raising=False)


def _problems(shapes):
    from pa_bench.problem.config import load_config
    from pa_bench.problem.plan import make_plan

    return {pb.shape.label: pb for pb in make_plan(load_config(ROOT / "configs" / "pr2092.yaml"), shapes=shapes).problems}


def test_the_table_launches_build_with_wgmma_and_fit_their_programs():
    """Each PR shape's H200 table entry: both GEMMs on wgmma (P.V with P from registers), no
    mma.sync, and the programs an SM its shared memory allows: one for the Gluon loop's 128-row
    program (the long shapes), three for the first chunk's (which TUNED chose for it)."""
    pbs = _problems(None)
    want_programs = {"32Kx1024": 1, "64Kx512": 1, "1.5K": 3, "2.1Kx256": 1}
    assert set(pbs) == set(want_programs)
    for label, pb in pbs.items():
        cfg, where = triton_runner.planned_config(pb, B.GPU)
        assert where == "table", label
        row = B.build(pb, cfg)
        assert row["hgmma"] > 0 and row["hmma"] == 0, (label, row)
        assert any(f.endswith("-rs") for f in row["wgmma"]), (label, row["wgmma"])
        assert row["shared_bytes"] + B.RESERVED_SMEM <= 232448, (label, row["shared_bytes"])   # the opt-in limit
        assert row["programs_by_shared"] >= want_programs[label], (label, row)


def test_d_halves_changes_the_loads_not_the_buffers_or_the_stores():
    """The switch reshapes the K/V pointer loads only: the same shared memory, the same number of
    operand stores and of wgmma as the same launch without it."""
    pb = _problems("32Kx1024")["32Kx1024"]
    mod = triton_runner.kernel_module()
    plain, split = (B.build(pb, mod.Config.parse(n)) for n in ("m64-w4-s3-asm-tile-n128", "m64-w4-s3-asm-tile-n128-dh"))
    for key in ("shared_bytes", "sts", "hgmma", "wgmma"):
        assert plain[key] == split[key], key
    assert plain["registers"] <= 255 and split["registers"] <= 255


def test_the_gluon_loop_keeps_its_buffers_and_its_wgmma_in_flight():
    """The Gluon launch (kernels/gluon_pa.py): Q, two int8 K and V slots with their scales and two
    fp16 K and V operands in shared memory, nothing else; wgmma not serialised: ptxas waits after
    every wgmma when it cannot keep one in flight (C7513/C7514), which would give as many warpgroup
    waits as wgmma instructions; and no branch between a step's wait for S and its wait for P.V
    (Triton 3.6's ptxas would wait for P.V at the first block after one). Built with the Triton at hand (CI's 3.9
    and the H200's 3.6 both build it)."""
    pb = _problems("32Kx1024")["32Kx1024"]
    mod = triton_runner.kernel_module()
    row = B.build(pb, mod.GLUON)
    d, n, m = 128, 64, 128
    want = m * d * 2 + 4 * n * d + 2 * 2 * n * 4 + 4 * n * d * 2   # Q; int8 K, V slots; scales; fp16 K, V
    assert row["shared_bytes"] == want, row
    assert row["programs_by_shared"] == 1 and row["registers"] <= 255, row
    # the prologue's S; four steps (two a turn, each with its mask or without) of S and P.V, two waits each
    assert row["hgmma"] == 8 + 4 * (8 + 4) and row["warpgroup_depbar"] == 1 + 4 * 2, row
    assert len(row["exp2_under_pv"]) == 4 and row["branches_under_pv"] == 0, row
    assert row["wgmma"] == ["m64n128k16-rs", "m64n64k16-ss"], row
    assert row["stack_bytes"] == 0, row


def test_programs_per_sm_counts_whole_warps_of_registers():
    assert B.programs_per_sm(90, 255, 128, 83968) == (2, 2)
    assert B.programs_per_sm(90, 168, 128, 49668) == (3, 4)
    assert B.programs_per_sm(90, 180, 256, 66560) == (1, 3)
    assert B.programs_per_sm(75, 255, 128, 0) == (None, None)


def test_a_configuration_that_fails_is_a_row_and_exit_1(capsys):
    assert B.main(["--shapes", "2.1Kx256", "--configs", "m64-w4-s3-asm-tma-n128"]) == 1
    out = capsys.readouterr().out
    assert "error:" in out and "multiple of 128" in out
