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
REG_CAP = 65536 // V3.threads // 8 * 8        # __launch_bounds__(512, 1): 128 registers at entry


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


@pytest.mark.parametrize("rows", [128, 192])
@pytest.mark.parametrize("paged,out_f16", [(True, False), (False, True)])
def test_v3_flavours_compile(paged, out_f16, rows):
    """Both CTA sizes the launch picks from (model.cta_rows), 384 and 512 threads."""
    r = ki.compile_one("v3", "sm_90", 128, False, paged, out_f16, cta_rows=rows)
    assert r["compiled"] and r["spill_bytes"] == 0 and r["stack_bytes"] == 0, r["reason"]
    assert r["wgmma_serialized"] is None, r["wgmma_serialized"]
    assert 32 <= r["registers"] <= 65536 // K.kv_group_threads(rows) // 8 * 8


@pytest.mark.parametrize("kv_f16", [False, True])
def test_v3_at_128_rows_builds_at_d64_without_spills(kv_f16):
    r = ki.compile_one("v3", "sm_90", 64, False, True, False, kv_f16=kv_f16, cta_rows=128)
    assert r["compiled"] and r["spill_bytes"] == 0 and r["stack_bytes"] == 0, r["reason"]


def test_v3_machine_code_uses_hgmma_and_setmaxnreg():
    if shutil.which("cuobjdump") is None or shutil.which("nvdisasm") is None:
        pytest.skip("cuobjdump/nvdisasm are not on PATH")
    cubin = K.nvcc_cubin(K.KernelBuild("v3"), "sm_90a")
    sass = subprocess.run(["cuobjdump", "-sass", str(cubin)], capture_output=True, text=True, check=True).stdout
    assert "HGMMA.64x64x16.F32" in sass and "HGMMA.64x128x16.F32" in sass
    assert "USETMAXREG" in sass
    assert "LDL" not in sass and "STL" not in sass


# ---- the fp16-K/V control build (-DPA_KV_F16=1: KernelBuild.kv_f16, the peer v3-f16)
SMEM_LIMIT = 227 * 1024                       # sm_90's shared memory per CTA with the opt-in
_SASS_TOOLS = shutil.which("cuobjdump") is not None and shutil.which("nvdisasm") is not None


@pytest.mark.parametrize("head_dim,paged,out_f16", [(128, True, False), (128, False, True), (64, True, False)])
def test_v3_f16_builds_for_sm90a_without_spills(head_dim, paged, out_f16):
    r = ki.compile_one("v3", "sm_90", head_dim, False, paged, out_f16, kv_f16=True)
    assert r["compiled"], r["reason"]
    assert r["spill_bytes"] == 0 and r["stack_bytes"] == 0
    assert r["wgmma_serialized"] is None, f"ptxas serialised the control's wgmma: {r['wgmma_serialized']}"
    assert 32 <= r["registers"] <= REG_CAP
    assert r["mma"] == ("wgmma.m64n64k16" if head_dim == 64 else "wgmma.m64n128k16,wgmma.m64n64k16")
    assert r["cp_async"] and not r["bulk_copy"]   # per-thread cp.async copies, no TMA bulk copies
    assert not ki.compile_one("v3", "sm_80", head_dim, False, paged, out_f16, kv_f16=True)["compiled"]


def _smem_alloc(tmp_path, kv_f16: bool, rows: int = 0) -> int:
    """v3::SMEM_ALLOC of a build, printed by a host program that includes v3.cu (no GPU needed)."""
    probe = tmp_path / "smem_probe.cu"
    probe.write_text('#include "v3.cu"\n#include <cstdio>\nint main() { std::printf("%d\\n", v3::SMEM_ALLOC); }\n')
    exe = tmp_path / f"probe_{'f16' if kv_f16 else 'i8'}_{rows}"
    build = K.KernelBuild("v3", kv_f16=kv_f16, cta_rows=rows)
    subprocess.run([ki.nvcc_path(), *build.options(), "-gencode=arch=compute_90a,code=sm_90a", "-o", str(exe),
                    str(probe)], capture_output=True, text=True, check=True)
    return int(subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout)


@pytest.mark.parametrize("rows,slots", [(192, 2), (128, 3)])
def test_v3_f16_shared_memory_fits_and_drops_the_int8_ring(tmp_path, rows, slots):
    f16, i8 = _smem_alloc(tmp_path, True, rows), _smem_alloc(tmp_path, False, rows)
    assert f16 <= i8 <= SMEM_LIMIT
    # the same Q and fp16 stages; no int8 staging slots (16.5 KB each: three at 128 rows, two at
    # 192, whose Q takes 16 KB more) and no `landed` barriers
    assert i8 - f16 == slots * (2 * 64 * 128 + 2 * 64 * 4) + slots * 8
    assert f16 - _smem_alloc(tmp_path, True, 128) == (64 * 128 * 2 if rows == 192 else 0)


def _sass_loops():
    """scripts/sass_loops.py as a module."""
    import importlib.util
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "scripts" / "sass_loops.py"
    spec = importlib.util.spec_from_file_location("sass_loops", script)
    module = importlib.util.module_from_spec(spec)
    sys.modules["sass_loops"] = module       # its dataclass looks its module up
    spec.loader.exec_module(module)
    return module


def _v3_instructions(sass_loops, kv_f16: bool, rows: int = 0):
    cubin = K.nvcc_cubin(K.KernelBuild("v3", kv_f16=kv_f16, cta_rows=rows), "sm_90a")
    sass = subprocess.run(["cuobjdump", "-sass", str(cubin)], capture_output=True, text=True, check=True).stdout
    return sass_loops.function_instructions(sass, "pa_v3")


@pytest.mark.skipif(not _SASS_TOOLS, reason="cuobjdump/nvdisasm are not on PATH")
@pytest.mark.parametrize("kv_f16", [True, False], ids=["f16", "int8"])
@pytest.mark.parametrize("rows, budgets", [(128, (72, 216)), (192, (56, 152))], ids=["rows128", "rows192"])
def test_v3_setmaxnreg_budgets_hold_in_the_machine_code(kv_f16, rows, budgets):
    """The code reachable after each setmaxnreg names no register past the count it sets: the
    producer's (after setmaxnreg.dec) and the consumers' (after setmaxnreg.inc), at both CTA
    sizes; the consumers need more than the launch's even share (168 at 384 threads, 128 at 512)."""
    sass_loops = _sass_loops()
    regions = {kind: (count, need) for _, kind, count, need in
               sass_loops.setmaxnreg_regions(_v3_instructions(sass_loops, kv_f16, rows))}
    assert set(regions) == {"DEALLOC", "TRY_ALLOC"}, regions
    (dec, dec_need), (inc, inc_need) = regions["DEALLOC"], regions["TRY_ALLOC"]
    assert (dec, inc) == budgets                      # PRODUCER_REGS, CONSUMER_REGS in v3.cu
    share = 65536 // (128 * (1 + rows // 64)) // 8 * 8
    assert 0 < dec_need <= dec and share < inc_need <= inc, regions


@pytest.mark.skipif(not _SASS_TOOLS, reason="cuobjdump/nvdisasm are not on PATH")
def test_v3_f16_consumer_loop_is_v3s_up_to_address_arithmetic():
    """The consumers' step loop (the longest loop) of the control does v3's work: the same count of
    every instruction but integer and address arithmetic (which ptxas schedules a little
    differently with the int8 ring gone: shared-memory offsets move), and the same length within
    a few instructions."""
    import collections

    sass_loops = _sass_loops()
    address = {"IMAD", "LEA", "MOV", "IADD3", "UIADD3", "SHF", "VIADD", "ULEA", "UMOV", "USHF", "ULOP3", "LOP3"}

    def step_loop(kv_f16):
        ins = _v3_instructions(sass_loops, kv_f16)
        lp = sass_loops.loops(ins, min_body=100)[-1]
        return collections.Counter(sass_loops.opcode(t) for a, t in ins if lp.start <= a <= lp.end)

    f16, i8 = step_loop(True), step_loop(False)
    assert sum(f16.values()) > 500 and abs(sum(f16.values()) - sum(i8.values())) <= 8
    work = {k: n for k, n in i8.items() if k not in address}
    assert {k: n for k, n in f16.items() if k not in address} == work
    assert work["HGMMA"] >= 8 and work["MUFU"] >= 64 and work["FFMA"] >= 64


# ---- v3 on fp16 stage images: the conversion in a pass of its own (-DPA_V3_DQ=1, the peer v3-dq)
# or once per tile for all the CTAs of a KV range (-DPA_V3_SHARE=1, v3's shared tiles)
@pytest.mark.parametrize("producer,head_dim,paged,out_f16,rows", [
    ("shared", 128, True, False, 192), ("shared", 128, True, False, 128), ("shared", 64, False, True, 192),
    ("images", 128, True, False, 192)])
def test_v3_image_builds_compile_without_spills(producer, head_dim, paged, out_f16, rows):
    r = ki.compile_one("v3", "sm_90", head_dim, False, paged, out_f16, cta_rows=rows,
                       kv_images=producer == "images", kv_shared=producer == "shared")
    assert r["compiled"], r["reason"]
    assert r["spill_bytes"] == 0 and r["stack_bytes"] == 0, f"{producer}: {r['spill_bytes']} bytes spilled"
    assert r["wgmma_serialized"] is None, r["wgmma_serialized"]
    assert r["bulk_copy"] and not r["cp_async"]   # the images (and the shared tiles' int8 rows) by bulk copies
    assert 32 <= r["registers"] <= 65536 // K.kv_group_threads(rows) // 8 * 8


# ---- 128-key consumer steps (-DPA_V3_STEP_KEYS=128, KernelBuild.step_keys): two tiles a step, K
# and V staged apart, on images (v3's shared tiles, or v3-dq's pass) at 128 rows
@pytest.mark.parametrize("producer,head_dim,paged,out_f16", [
    ("shared", 128, True, False), ("shared", 128, False, True), ("shared", 64, False, True), ("shared", 64, True, False),
    ("images", 128, True, False), ("images", 64, False, True), ("f16", 128, True, False), ("f16", 64, False, True)])
def test_v3_128_key_step_builds_compile_without_spills(producer, head_dim, paged, out_f16):
    r = ki.compile_one("v3", "sm_90", head_dim, False, paged, out_f16, cta_rows=128, kv_shared=producer == "shared",
                       kv_images=producer == "images", kv_f16=producer == "f16", step_keys=128)
    assert r["compiled"], r["reason"]
    assert r["spill_bytes"] == 0 and r["stack_bytes"] == 0, f"{r['spill_bytes']} bytes spilled"
    assert r["wgmma_serialized"] is None, r["wgmma_serialized"]
    # images by bulk copies; the control's fp16 rows by cp.async, and nothing else
    assert (bool(r["bulk_copy"]), bool(r["cp_async"])) == ((False, True) if producer == "f16" else (True, False))


def test_v3_128_key_steps_need_128_rows_and_a_pairs_producer():
    assert "-DPA_V3_STEP_KEYS=128" in K.KernelBuild("v3", kv_shared=True, cta_rows=128, step_keys=128).defines()
    assert "-DPA_V3_STEP_KEYS=128" in K.KernelBuild("v3", kv_images=True, cta_rows=128, step_keys=128).defines()
    assert not any("STEP_KEYS" in d for d in K.KernelBuild("v3", kv_shared=True, cta_rows=128).defines())
    assert "-DPA_V3_STEP_KEYS=128" in K.KernelBuild("v3", kv_f16=True, cta_rows=128, step_keys=128).defines()
    for bad in (dict(cta_rows=128), dict(kv_f16=True, cta_rows=192), dict(kv_shared=True, cta_rows=192),
                dict(kv_images=True, cta_rows=192), dict(kv_shared=True, cta_rows=128, step_keys=96)):
        with pytest.raises(ValueError, match="step_keys"):
            K.KernelBuild("v3", step_keys=bad.pop("step_keys", 128), **bad)


def test_v3_128_key_step_shared_memory_fits(tmp_path):
    probe = tmp_path / "smem_probe.cu"
    probe.write_text('#include "v3.cu"\n#include <cstdio>\nint main() { std::printf("%d\\n", v3::SMEM_ALLOC); }\n')
    build = K.KernelBuild("v3", kv_shared=True, cta_rows=128, step_keys=128)
    subprocess.run([ki.nvcc_path(), *build.options(), "-gencode=arch=compute_90a,code=sm_90a", "-o",
                    str(tmp_path / "probe"), str(probe)], capture_output=True, text=True, check=True)
    smem = int(subprocess.run([str(tmp_path / "probe")], capture_output=True, text=True, check=True).stdout)
    # Q (32 KB), three K slots (two tiles' K, 32 KB, and their scales, 1 KB), two V slots (32 KB), the
    # converters' int8 slot (16.5 KB), barriers and the claim words, the alignment slack
    assert 32768 + 3 * 33792 + 2 * 32768 + 16896 < smem <= SMEM_LIMIT


@pytest.mark.skipif(not _SASS_TOOLS, reason="cuobjdump/nvdisasm are not on PATH")
def test_v3_128_key_steps_in_the_machine_code():
    """S of a step is one m64n128k16 wgmma per k-step (8 at D 128: 16 in a steady step with P.V's 8,
    and 8 more on its rare fallback, where the speculative softmax fails and S is issued again),
    and the setmaxnreg budgets (72 / 216) hold."""
    sass_loops = _sass_loops()
    cubin = K.nvcc_cubin(K.KernelBuild("v3", kv_shared=True, cta_rows=128, step_keys=128), "sm_90a")
    sass = subprocess.run(["cuobjdump", "-sass", str(cubin)], capture_output=True, text=True, check=True).stdout
    ins = sass_loops.function_instructions(sass, "pa_v3")
    gmma = [i for i in ins if "HGMMA" in str(i)]
    # the first step's S, the loop's S, P.V and second S, the last step's P.V
    assert len(gmma) == 40 and all("HGMMA.64x128x16" in str(i) for i in gmma), [str(i) for i in gmma][:4]
    regions = {kind: (count, need) for _, kind, count, need in sass_loops.setmaxnreg_regions(ins)}
    (dec, dec_need), (inc, inc_need) = regions["DEALLOC"], regions["TRY_ALLOC"]
    assert (dec, inc) == (72, 216) and 0 < dec_need <= dec and 168 < inc_need <= inc, regions


@pytest.mark.skipif(not _SASS_TOOLS, reason="cuobjdump/nvdisasm are not on PATH")
def test_v3_128_key_step_loop_does_the_same_work_on_every_producer():
    """v3-dq and the fp16 control at 128-key steps run v3's consumers, so that v3-dq's kernel alone
    and v3-f16 time v3's 128-key loop behind copy-only producers: the step loop (the longest loop)
    of the image-pass build and of the control issues the shared-tile build's wgmma,
    floating-point, conversion, shared-memory, shuffle and barrier instructions, opcode for opcode
    and as many of each (ptxas allocates and orders each kernel's registers apart, so only the
    integer address work and the order may differ)."""
    import collections

    sass_loops = _sass_loops()
    work = ("HGMMA", "WARPGROUP", "MUFU", "FMUL", "FADD", "FMNMX", "FSEL", "FSETP", "F2FP", "LDS", "SHFL", "SYNCS", "BAR")

    def step_loop(**producer):
        cubin = K.nvcc_cubin(K.KernelBuild("v3", cta_rows=128, step_keys=128, **producer), "sm_90a")
        sass = subprocess.run(["cuobjdump", "-sass", str(cubin)], capture_output=True, text=True, check=True).stdout
        ins = sass_loops.function_instructions(sass, "pa_v3")
        lp = sass_loops.loops(ins, min_body=100)[-1]
        ops = (str(t).split()[1 if str(t).startswith("@") else 0] for a, t in ins if lp.start <= a <= lp.end)
        return collections.Counter(op for op in ops if op.split(".")[0] in work)

    shared, images, f16 = step_loop(kv_shared=True), step_loop(kv_images=True), step_loop(kv_f16=True)
    # S and P.V (8 each), and S again (8) on the rare fallback: the loop holds the speculative
    # softmax and, where it fails, the full rule after the second S
    assert sum(v for k, v in shared.items() if k.startswith("HGMMA.64x128x16")) == 24, shared
    assert sum(shared.values()) > 900 and shared == images == f16


@pytest.mark.skipif(not _SASS_TOOLS, reason="cuobjdump/nvdisasm are not on PATH")
@pytest.mark.parametrize("producer", ["shared", "images", "f16"])
def test_v3_128_key_step_setmaxnreg_budgets_hold(producer):
    """Each 128-key build's producer (the issuer and converters, the issuer alone, the control's
    copiers) fits in its 72 registers after setmaxnreg.dec, and the consumers in 216."""
    sass_loops = _sass_loops()
    build = K.KernelBuild("v3", cta_rows=128, step_keys=128, kv_shared=producer == "shared",
                          kv_images=producer == "images", kv_f16=producer == "f16")
    sass = subprocess.run(["cuobjdump", "-sass", str(K.nvcc_cubin(build, "sm_90a"))], capture_output=True, text=True,
                          check=True).stdout
    regions = {kind: (count, need) for _, kind, count, need in
               sass_loops.setmaxnreg_regions(sass_loops.function_instructions(sass, "pa_v3"))}
    (dec, dec_need), (inc, inc_need) = regions["DEALLOC"], regions["TRY_ALLOC"]
    assert (dec, inc) == (72, 216) and 0 < dec_need <= dec and 168 < inc_need <= inc, regions
