"""The plug-in kernel variant v3-n128 (pa_bench/v3_n128.py: v3.cu at 128-key tiles) without a GPU:
its build, numerics model and segments follow its tiles, it is registered only as a plug-in,
and it compiles for sm_90a without spills (its GPU checks: tests/gpu/test_v3_n128_gpu.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pa_bench import variants as registry
from pa_bench.backends import kernel_info as ki
from pa_bench.backends import kernels as K
from pa_bench.numerics import model

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture()
def n128():
    from pa_bench import v3_n128

    v3_n128.register()
    yield v3_n128
    registry.unregister(v3_n128.NAME)


def test_its_build_is_v3s_source_and_function_at_128_keys(n128):
    build = K.KernelBuild("v3-n128", head_dim=64, paged=False)
    assert build.function == "pa_v3" and K.kernel_path("v3-n128") == K.kernel_path("v3")
    assert build.defines()[-1] == "-DPA_V3_BN=128" and "-DPA_HEAD_DIM=64" in build.defines()
    assert K.KernelBuild("v3").function == "pa_v3" and "-DPA_V3_BN=128" not in K.KernelBuild("v3").defines()
    assert K.arch_options("v3-n128", 90) == ("--gpu-architecture=sm_90a",)


def test_its_numerics_model_takes_128_key_tiles_and_one_pv_chain(n128):
    assert model.tile_keys("v3-n128") == 128 and model.tile_keys("v3") == 64
    assert model.pv_chain_keys("v3-n128") == 0 == model.pv_chain_keys("v3")   # P.V straight into O


@pytest.mark.parametrize("context,queries,heads", [(2048, 256, (32, 8)), (0, 1536, (32, 8)), (1000, 37, (32, 8)),
                                                    (3000, 100, (8, 1)), (100000, 256, (32, 8))])
def test_its_segments_are_v3s_rule_in_whole_tiles(n128, context, queries, heads):
    got = model.segment_keys(context, "v3-n128", queries, *heads)
    v3 = model.segment_keys(context, "v3", queries, *heads)
    assert got % 128 == 0 and (got == 0) == (v3 == 0)
    assert v3 <= got < v3 + 128                 # the same rule, rounded up to whole 128-key tiles
    if got:
        K.launch_geometry("v3-n128", queries, *heads, context=context, segment_keys=got)


def test_its_launch_refuses_segments_that_cut_a_tile(n128):
    with pytest.raises(ValueError, match="multiple of 128"):
        K.launch_geometry("v3-n128", 113, 32, 8, context=1023, segment_keys=64)
    assert K.launch_geometry("v3", 113, 32, 8, context=1023, segment_keys=64).segments == 18
    geo = K.launch_geometry("v3-n128", 113, 32, 8, context=1023, segment_keys=512)
    assert geo.grid == K.launch_geometry("v3", 113, 32, 8, context=1023, segment_keys=512).grid


def test_it_is_registered_only_as_a_plugin():
    code = (
        "from pa_bench import plugins, variants as r\n"
        "import pa_bench.cli\n"
        "from pa_bench.problem.config import DEFAULT_CONFIG, load_config\n"
        "load_config(DEFAULT_CONFIG)\n"
        "assert 'v3-n128' not in r.names(), r.names()\n"
        "plugins.load('pa_bench.v3_n128')\n"
        "plugins.load('pa_bench.v3_n128')\n"
        "assert r.get('v3-n128').kind == r.CUDA_KERNEL and r.names().count('v3-n128') == 1\n"
        "print('ok')\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]
    for cfg in (ROOT / "configs").glob("*.yaml"):
        assert "v3-n128" not in cfg.read_text() and "v3_n128" not in cfg.read_text(), cfg.name


@pytest.mark.nvcc
@pytest.mark.skipif(ki.nvcc_path() is None, reason="nvcc (the CUDA compiler) is not on PATH")
def test_it_compiles_for_sm90a_only_without_spills(n128):
    rows = ki.kernel_table(head_dim=128, variants=["v3-n128"], archs=["sm_80", "sm_90"])
    by_arch = {r["arch"]: r for r in rows}
    assert not by_arch["sm_80"]["compiled"] and "sm_90a" in by_arch["sm_80"]["reason"]
    r = by_arch["sm_90"]
    assert r["compiled"], r["reason"]
    assert r["spill_bytes"] == 0 and r["stack_bytes"] == 0 and r["wgmma_serialized"] is None
    assert r["registers"] == 65536 // 384 // 8 * 8     # all 168: what setmaxnreg's 40 + 2 x 232 redistribute
    assert r["mma"] == "wgmma.m64n128k16" and r["bulk_copy"] and not r["cp_async"]
