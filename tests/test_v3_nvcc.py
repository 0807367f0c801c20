"""v3 (sm_90a only) compiled with nvcc, no GPU: where it builds, its resources, and that its
matrix products are wgmma (HGMMA in the machine code where cuobjdump is on the machine)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from pa_bench import variants as registry
from pa_bench.backends import kernel_info as ki
from pa_bench.backends import kernels as K

pytestmark = [
    pytest.mark.nvcc,
    pytest.mark.skipif(ki.nvcc_path() is None, reason="nvcc (the CUDA compiler) is not on PATH"),
]

V3 = registry.get("v3")
REG_CAP = 65536 // V3.threads // 8 * 8        # __launch_bounds__(384, 1): 168 registers at entry


@pytest.mark.parametrize("head_dim", [128, 64])
def test_v3_builds_for_sm90a_only_without_spills(head_dim):
    rows = ki.kernel_table(head_dim=head_dim, variants=["v3"])
    for r in rows:
        if r["arch"] == "sm_90":
            assert r["compiled"], r["reason"]
            assert r["spill_bytes"] == 0 and r["stack_bytes"] == 0
            assert r["wgmma_serialized"] is None, f"ptxas serialised v3's wgmma: {r['wgmma_serialized']}"
            assert 32 <= r["registers"] <= REG_CAP
            assert r["mma"] == ("wgmma.m64n64k16" if head_dim == 64 else "wgmma.m64n128k16,wgmma.m64n64k16")
            assert r["bulk_copy"] and not r["cp_async"]   # the TMA unit's bulk copies, no LDGSTS
        else:
            assert not r["compiled"] and "sm_90a" in r["reason"]


def test_v3_has_no_turing_path():
    assert "no Turing path" in K.build_unsupported("v3", 90, True, 128)


@pytest.mark.parametrize("paged,out_f16", [(True, False), (False, True)])
def test_v3_flavours_compile(paged, out_f16):
    r = ki.compile_one("v3", "sm_90", 128, False, paged, out_f16)
    assert r["compiled"] and r["spill_bytes"] == 0, r["reason"]
    assert r["wgmma_serialized"] is None, r["wgmma_serialized"]


def test_v3_machine_code_uses_hgmma_and_setmaxnreg():
    if shutil.which("cuobjdump") is None or shutil.which("nvdisasm") is None:
        pytest.skip("cuobjdump/nvdisasm are not on PATH")
    cubin = K.nvcc_cubin(K.KernelBuild("v3"), "sm_90a")
    sass = subprocess.run(["cuobjdump", "-sass", str(cubin)], capture_output=True, text=True, check=True).stdout
    assert "HGMMA.64x64x16.F32" in sass and "HGMMA.64x128x16.F32" in sass
    assert "USETMAXREG" in sass
    assert "LDL" not in sass and "STL" not in sass
