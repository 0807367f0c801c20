"""Every kernel compiled for every arch with nvcc (no GPU): resources and instruction choices."""

from __future__ import annotations

import re

import pytest

from pa_bench import variants as registry
from pa_bench.backends import kernel_info as ki
from pa_bench.present.kernel_rows import format_table
from pa_bench.backends import kernels as K

pytestmark = [
    pytest.mark.nvcc,
    pytest.mark.skipif(ki.nvcc_path() is None, reason="nvcc (the CUDA compiler) is not on PATH"),
]

# The portable mma.sync kernels (v1, v2, v2t); an arch-specific one (v3, sm_90a) has its own
# checks in tests/test_v3_nvcc.py.
PORTABLE = [v.name for v in registry.cuda_kernels() if not v.arch_suffix]
TURING_SMEM_LIMIT = 64 * 1024     # per CTA on sm_75
STATIC_SMEM_LIMIT = 48 * 1024     # static __shared__ without an opt-in


@pytest.fixture(scope="module", params=[128, 64], ids=["d128", "d64"])
def table(request):
    return ki.kernel_table(head_dim=request.param, variants=PORTABLE)


@pytest.fixture(scope="module")
def turing_table():
    return ki.kernel_table(head_dim=128, force_turing=True, variants=PORTABLE)


def _row(rows, variant, arch):
    return next(r for r in rows if r["variant"] == variant and r["arch"] == arch)


def test_every_variant_builds_where_it_should(table):
    for r in table:
        cc = int(r["arch"][3:])
        if r["variant"] == "v2" and cc < 80:
            assert not r["compiled"] and "cp.async" in r["reason"]
        else:
            assert r["compiled"], f"{r['variant']} {r['arch']}: {r['reason']}"


def test_no_spills_no_stack_and_register_cap(table):
    for r in (r for r in table if r["compiled"]):
        assert r["spill_bytes"] == 0, f"{r['variant']} {r['arch']} spills {r['spill_bytes']} bytes"
        assert r["stack_bytes"] == 0, f"{r['variant']} {r['arch']} uses a {r['stack_bytes']}-byte stack frame"
        assert 32 <= r["registers"] <= 255


def test_shared_memory_fits_turing_and_static_limit(table):
    for r in (r for r in table if r["compiled"]):
        assert 0 < r["smem_bytes"] <= STATIC_SMEM_LIMIT
        if r["arch"] == "sm_75":
            assert r["smem_bytes"] <= TURING_SMEM_LIMIT


def test_only_v2_uses_cp_async(table):
    for r in (r for r in table if r["compiled"]):
        assert r["cp_async"] == (r["variant"] == "v2"), f"{r['variant']} {r['arch']}"
        assert not r["bulk_copy"], f"{r['variant']} {r['arch']}"


def test_the_copy_column_tells_ldgsts_from_bulk_copies():
    assert ki._parse_ptx("cp.async.cg.shared.global [%r1], [%rd2], 16, %r3;\ncp.async.commit_group;")["cp_async"]
    bulk = ki._parse_ptx("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%r1], [%rd1], %r2, [%r3];")
    assert bulk["bulk_copy"] and not bulk["cp_async"]
    assert not any(ki._parse_ptx("ld.shared.v4.u32 {%r1, %r2, %r3, %r4}, [%r5];")[k] for k in ("cp_async", "bulk_copy"))
    row = {"variant": "v3", "arch": "sm_90", "compiled": True, "registers": 168, "spill_bytes": 0, "smem_bytes": 0,
           "cp_async": False, "bulk_copy": True, "mma": "wgmma.m64n64k16", "cta": "384 threads"}
    assert "bulk" in format_table([row]) and "cp.async" not in format_table([row])


def test_mma_shape_per_arch(table):
    for r in (r for r in table if r["compiled"]):
        expected = "m16n8k8" if r["arch"] == "sm_75" else "m16n8k16"
        assert r["mma"] == expected, f"{r['variant']} {r['arch']}: {r['mma']}"


def test_forced_turing_path_uses_k8_everywhere_and_drops_v2(turing_table):
    for r in turing_table:
        if r["variant"] == "v2":
            assert not r["compiled"]
        else:
            assert r["compiled"] and r["mma"] == "m16n8k8" and not r["cp_async"]


def test_v1_smem_is_one_stage_and_v2_two_per_warp(table):
    d = table[0]["head_dim"]
    v1 = _row(table, "v1", "sm_90")["smem_bytes"]
    v2 = _row(table, "v2", "sm_90")["smem_bytes"]
    v2t = _row(table, "v2t", "sm_90")["smem_bytes"]
    slice_bytes = 2 * 16 * d + 2 * 16 * 4            # 16 keys of K and V, their K and V scales
    assert v1 == 4 * slice_bytes                       # one 4-slice tile for the CTA
    q_tile = 16 * d * 2                                # one m16 tile of fp16 Q
    assert v2 == v2t == 2 * (2 * slice_bytes + K.DEFAULT_TILES * q_tile)   # 2 warps x (2 stages + Q)


def test_variant_files_open_with_a_design_comment():
    for v in K.kernel_variants():
        lines = K.kernel_path(v).read_text().splitlines()
        assert lines[0].startswith("//")
        head = [ln for ln in lines[: next(i for i, ln in enumerate(lines) if not ln.startswith("//"))]]
        text = " ".join(head).lower()
        for word in ("tiling", "pipeline", "barrier"):
            assert word in text, f"{v}.cu's opening comment does not explain its {word}"


def test_inline_ptx_only_where_cuda_has_no_intrinsic():
    """Inline PTX only for mma.sync, the L1-allocating 16-byte cp.async (.ca) (CUDA C++'s
    __pipeline_memcpy_async issues 16-byte copies as .cg) and the flush-to-zero ex2, in the
    header and the portable kernels (an arch-specific one, v3 on sm_90a, is written in Hopper PTX:
    wgmma, mbarrier, setmaxnreg; tests/test_v3_nvcc.py checks it)."""
    from pa_bench import variants as registry

    portable = [v for v in K.kernel_variants() if not registry.get(v).arch_suffix]
    seen = 0
    for name in (K.HEADER,) + tuple(K.kernel_path(v).name for v in portable):
        src = (K.KERNEL_DIR / name).read_text()
        for asm in re.findall(r'\basm(?:\s+volatile)?\s*\(\s*"([^"]+)', src):
            seen += 1
            assert asm.startswith(("mma.sync", "cp.async.ca.shared.global", "ex2.approx.ftz.f32")), \
                f"{name}: inline PTX {asm!r}"
    assert seen >= 3


def test_format_table_lists_every_row(table):
    text = format_table(table)
    assert len(text.splitlines()) == 2 + len(table) + 1          # and the key-segment note
    assert "not built" in text and "pa_combine" in text.splitlines()[-1]


def test_every_module_carries_the_segment_combine(table):
    """pa_combine (pa_common.cuh) is in every variant's module, small, and without spills (those
    count in the row's spill_bytes); the row's own registers are the kernel's, not the combine's."""
    for r in (r for r in table if r["compiled"]):
        assert r["combine_registers"] is not None, f"{r['variant']} {r['arch']}: no pa_combine"
        assert r["combine_registers"] <= 64 < r["registers"]


def test_parse_ptxas_separates_the_entry_functions():
    log = (
        "ptxas info    : Compiling entry function 'pa_v2' for 'sm_90'\n"
        "ptxas info    : Function properties for pa_v2\n"
        "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
        "ptxas info    : Used 250 registers, used 1 barriers, 33280 bytes smem\n"
        "ptxas info    : Compiling entry function 'pa_combine' for 'sm_90'\n"
        "ptxas info    : Function properties for pa_combine\n"
        "    0 bytes stack frame, 8 bytes spill stores, 8 bytes spill loads\n"
        "ptxas info    : Used 40 registers, used 0 barriers\n")
    got = ki._parse_ptxas(log, "pa_v2")
    assert (got["registers"], got["combine_registers"], got["smem_bytes"], got["spill_bytes"]) == (250, 40, 33280, 16)


def test_parse_ptxas_reports_serialised_wgmma():
    """ptxas's remark that a kernel's warpgroup MMAs were serialised (they then run one at a time:
    v3's overlap is gone) is kept with its reason; a log without it gives None."""
    remark = ("ptxas info    : (C7513) Potential Performance Loss: wgmma.mma_async instructions are serialized "
              "due to non wgmma instructions defining input registers of a wgmma between start and end of the "
              "pipeline stage in the function 'pa_v3'\n")
    clean = "ptxas info    : Compiling entry function 'pa_v3' for 'sm_90a'\nptxas info    : Used 168 registers\n"
    assert ki._parse_ptxas(remark + clean, "pa_v3")["wgmma_serialized"] == (
        "non wgmma instructions defining input registers of a wgmma between start and end of the pipeline stage")
    assert ki._parse_ptxas(clean, "pa_v3")["wgmma_serialized"] is None


def test_the_table_shows_a_serialised_wgmma():
    row = {"variant": "v3", "arch": "sm_90", "compiled": True, "registers": 168, "spill_bytes": 0,
           "smem_bytes": 0, "cp_async": True, "mma": "wgmma.m64n64k16", "combine_registers": 40,
           "cta": "384 threads", "wgmma_serialized": "non wgmma instructions defining input registers"}
    assert "WGMMA SERIALISED by ptxas: non wgmma instructions" in format_table([row])
    assert "SERIALISED" not in format_table([dict(row, wgmma_serialized=None)])
