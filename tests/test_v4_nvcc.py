"""v4 (sm_90a only) compiled with nvcc, no GPU: where it builds, its resources, and that S runs on
the int8 tensor cores (IGMMA in the machine code) with P.V on the fp16 ones (HGMMA), S converted
to fp32 without the I2F pipe, and setmaxnreg honoured."""

from __future__ import annotations

import collections
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

V4 = registry.get("v4")
SMEM_LIMIT = 227 * 1024                       # sm_90's shared memory per CTA with the opt-in
_SASS_TOOLS = shutil.which("cuobjdump") is not None and shutil.which("nvdisasm") is not None


def test_v4_registry_entry_is_v3s_arithmetic_with_q_rounded():
    v3 = registry.get("v3")
    assert V4.input_rounding == "q-int8-row" and v3.input_rounding is None
    assert (V4.tile_keys, V4.pv_chain_keys, V4.max_slack, V4.fill_rows) == \
        (v3.tile_keys, v3.pv_chain_keys, v3.max_slack, v3.fill_rows)
    assert not V4.tile_sharing and not V4.turing_path and V4.nvcc_arch(90) == "sm_90a"
    assert K.launch_geometry("v4", 1023, 32, 8, cta_rows=192) == K.launch_geometry("v3", 1023, 32, 8, cta_rows=192)


def test_an_unknown_input_rounding_is_refused():
    with pytest.raises(ValueError, match="input_rounding"):
        registry.Variant("x", registry.CUDA_KERNEL, "x", source="x.cu", tile_keys=64, input_rounding="q-int4")


@pytest.mark.parametrize("head_dim", [128, 64])
def test_v4_builds_for_sm90a_only_without_spills(head_dim):
    rows = ki.kernel_table(head_dim=head_dim, variants=["v4"], archs=["sm_80", "sm_90"])
    for r in rows:
        if r["arch"] == "sm_90":
            assert r["compiled"], r["reason"]
            assert r["spill_bytes"] == 0 and r["stack_bytes"] == 0
            assert r["wgmma_serialized"] is None, f"ptxas serialised v4's wgmma: {r['wgmma_serialized']}"
            # S: int8 m64n64k32; P.V: fp16 m64nDk16
            assert r["mma"] == f"wgmma.m64n{head_dim}k16,wgmma.m64n64k32"
            assert r["bulk_copy"] and not r["cp_async"]
            assert r["dynamic_smem_bytes"] <= SMEM_LIMIT
        else:
            assert not r["compiled"] and "sm_90a" in r["reason"]


def _nvcc(build: K.KernelBuild, tmp_path) -> tuple[str, str]:
    """(ptxas's log, cuobjdump -sass) of a build, compiled as kernel_info and the backend do."""
    cubin = tmp_path / "v4.cubin"
    proc = subprocess.run([ki.nvcc_path(), "-cubin", "-gencode=arch=compute_90a,code=sm_90a", "-O3", "-Xptxas", "-v",
                           *build.options(), "-o", str(cubin), str(K.kernel_path("v4"))],
                          capture_output=True, text=True, check=True)
    sass = ""
    if _SASS_TOOLS:
        sass = subprocess.run(["cuobjdump", "-sass", str(cubin)], capture_output=True, text=True, check=True).stdout
    return proc.stderr + proc.stdout, sass


def _sass_loops():
    """scripts/sass_loops.py as a module."""
    import importlib.util
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "scripts" / "sass_loops.py"
    spec = importlib.util.spec_from_file_location("sass_loops", script)
    module = importlib.util.module_from_spec(spec)
    sys.modules["sass_loops"] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("head_dim", [128, 64])
@pytest.mark.parametrize("rows,budgets", [(128, (72, 216)), (192, (56, 152))], ids=["rows128", "rows192"])
@pytest.mark.parametrize("paged,out_f16", [(True, False), (False, True)], ids=["paged", "contig-f16out"])
def test_v4_machine_code(tmp_path, head_dim, rows, budgets, paged, out_f16):
    """Every flavour: no spill, no C7508 (setmaxnreg ignored) and no serialised wgmma in ptxas's
    log; in the consumers' step loop (the longest loop) S is IGMMA 64x64x32 s8.s8 (D/32 k-steps, and
    as many again on the speculative softmax's fallback), P.V is HGMMA with fp32 accumulation, the
    exponentials are MUFU.EX2 and no I2F converts S; the setmaxnreg budgets are v3's and hold."""
    build = K.KernelBuild("v4", head_dim=head_dim, paged=paged, out_f16=out_f16, cta_rows=rows)
    log, sass = _nvcc(build, tmp_path)
    assert "C7508" not in log and not any("setmaxnreg" in ln for ln in log.splitlines() if "warning" in ln), log
    assert ki._wgmma_serialized(log) is None, log
    parsed = ki._parse_ptxas(log, "pa_v4")
    assert parsed["spill_bytes"] == 0 and parsed["stack_bytes"] == 0
    if not _SASS_TOOLS:
        pytest.skip("cuobjdump/nvdisasm are not on PATH")
    SL = _sass_loops()
    ins = SL.function_instructions(sass, "pa_v4")
    assert "LDL" not in sass and "STL" not in sass
    loop = SL.loops(ins, min_body=100)[-1]
    body = [t for a, t in ins if loop.start <= a <= loop.end]
    mix = collections.Counter(SL.opcode(t) for t in body)
    igmma = [t for t in body if SL.opcode(t) == "IGMMA"]
    hgmma = [t for t in body if SL.opcode(t) == "HGMMA"]
    assert len(igmma) == 2 * (head_dim // 32) and all("IGMMA.64x64x32.S8.S8" in t for t in igmma), igmma
    assert len(hgmma) == 4 and all(f"HGMMA.64x{head_dim}x16.F32" in t for t in hgmma), hgmma
    assert mix["I2F"] == 0 and mix["I2FP"] == 0
    assert sum("MUFU.EX2" in t for t in body) >= 64
    regions = {kind: (count, need) for _, kind, count, need in SL.setmaxnreg_regions(ins)}
    (dec, dec_need), (inc, inc_need) = regions["DEALLOC"], regions["TRY_ALLOC"]
    assert (dec, inc) == budgets and 0 < dec_need <= dec and 0 < inc_need <= inc, regions


def test_v4_shared_memory_is_below_v3s(tmp_path):
    """v4's stage holds K in int8 (8 KB less a stage at D 128) and Q is int8 (half of v3's), plus
    Q's scales: v3's layout otherwise."""
    def alloc(variant: str, rows: int) -> int:
        probe = tmp_path / f"probe_{variant}.cu"
        probe.write_text(f'#include "{variant}.cu"\n#include <cstdio>\nint main() {{ std::printf("%d\\n", v3::SMEM_ALLOC); }}\n')
        exe = tmp_path / f"probe_{variant}_{rows}"
        subprocess.run([ki.nvcc_path(), *K.KernelBuild(variant, cta_rows=rows).options(),
                        "-gencode=arch=compute_90a,code=sm_90a", "-o", str(exe), str(probe)],
                       capture_output=True, text=True, check=True)
        return int(subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout)

    for rows in (128, 192):
        v3, v4 = alloc("v3", rows), alloc("v4", rows)
        q_saved = rows * 128                  # Q: rows x 128 dims, 2 bytes -> 1
        stages_saved = 4 * 64 * 128           # four stages' K: 64 keys x 128 dims, 2 bytes -> 1
        assert v3 - v4 == q_saved + stages_saved - 4 * rows, (v3, v4)
        assert v4 <= SMEM_LIMIT
