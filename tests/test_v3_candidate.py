"""scripts/v3_candidate.py: a candidate v3 from another tree registers as ``v3_cand`` with v3's launch
rule, its entry points renamed and nothing else, and builds for sm_90a (an A/B of two kernel sources
in one run: `pa-bench run --plugin scripts/v3_candidate.py --variant v3,v3_cand`)."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest

from pa_bench import variants as registry
from pa_bench.errors import PaBenchError

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def candidate(monkeypatch, tmp_path):
    """The plug-in module, loaded as `--plugin` loads it, from a copy of kernels/ with one edit."""
    folder = tmp_path / "kernels"
    shutil.copytree(ROOT / "kernels", folder)
    src = (folder / "v3.cu").read_text()
    (folder / "v3.cu").write_text(src.replace("#include \"pa_common.cuh\"", "#include \"pa_common.cuh\"\n// candidate", 1))
    monkeypatch.setenv("PA_V3_CANDIDATE", str(folder))
    spec = importlib.util.spec_from_file_location("v3_candidate", ROOT / "scripts" / "v3_candidate.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    yield mod
    registry.unregister(mod.NAME)


def test_only_the_kernel_and_its_probe_are_renamed(candidate):
    src = "".join((ROOT / "kernels" / f).read_text() for f in ("v3.cu", "v3_controls.cuh"))   # (pa_v3_images)
    out = candidate.renamed(src)
    assert "pa_v3_cand(PA_KERNEL_PARAMS)" in out and "void pa_v3_cand_smem_bytes(int* out)" in out
    assert "pa_v3(PA_KERNEL_PARAMS)" not in out and "void pa_v3_smem_bytes" not in out
    assert "void pa_v3_image_bytes(int* out)" in out and "pa_v3_images(PA_KERNEL_PARAMS)" in out
    assert out.replace("pa_v3_cand", "pa_v3") == src
    with pytest.raises(PaBenchError, match="no pa_v3 kernel"):
        candidate.renamed("// nothing")


def test_the_candidate_takes_v3s_launch_rule(candidate):
    from dataclasses import replace

    import pa_bench
    from pa_bench import launch as model   # the launch policy's rules (rows, segments, steps)
    from pa_bench.backends import kernels as K
    from pa_bench.problem.plan import Problem
    from pa_bench.problem.shapes import parse_shape

    entry, v3 = registry.get("v3_cand"), registry.get("v3")
    assert (entry.fill_rows, entry.tile_sharing, entry.tile_keys) == (v3.fill_rows, v3.tile_sharing, v3.tile_keys)
    assert Path(entry.source).read_text().count("// candidate") == 1
    assert K.kernel_path("v3_cand") == Path(entry.source)
    for shape in ("32Kx1024", "0x1536", "2.1Kx256"):
        pb = Problem(parse_shape(shape))
        args = (pb.context, pb.queries, pb.heads_q, pb.heads_kv)
        assert model.step_keys("v3_cand", *args) == model.step_keys("v3", *args)
        assert model.cta_rows("v3_cand", *args) == model.cta_rows("v3", *args)
        assert model.segment_keys(pb.context, "v3_cand", *args[1:]) == model.segment_keys(pb.context, "v3", *args[1:])
        assert pa_bench.launch_for("v3_cand", pb) == replace(pa_bench.launch_for("v3", pb), variant="v3_cand")
        assert K.launch_geometry("v3_cand", pb.queries, pb.heads_q, pb.heads_kv, context=pb.context) == \
            K.launch_geometry("v3", pb.queries, pb.heads_q, pb.heads_kv, context=pb.context)


def test_a_candidate_that_keeps_v3s_bits_is_held_to_them(candidate, monkeypatch):
    from pa_bench.numerics.judge import twin_note

    assert registry.get("v3_cand").bitwise_twin is None        # by default only parity is judged
    registry.unregister(candidate.NAME)
    monkeypatch.setenv("PA_V3_CANDIDATE_SAME_BITS", "1")
    candidate.register()
    assert registry.get("v3_cand").bitwise_twin == "v3"
    assert twin_note("v3_cand", "v3", False, 1e-7).startswith("parity: v3_cand is not bitwise identical to v3")


def test_a_git_ref_gives_that_commits_kernels(candidate):
    files = candidate.candidate_files("HEAD")
    assert set(files) >= {"v3.cu", "v3_pairs.cuh", "pa_common.cuh"}
    with pytest.raises(PaBenchError, match="neither a folder nor a git ref"):
        candidate.candidate_files("no-such-ref-anywhere")


def test_the_candidate_builds_for_sm90a_at_128_key_steps(candidate):
    """Its own function names reach ptxas's report (pa_v3_cand) at the long shapes' build."""
    from pa_bench.backends import kernel_info as ki

    if ki.nvcc_path() is None:
        pytest.skip("nvcc is not on PATH")
    r = ki.compile_one("v3_cand", "sm_90", 128, False, True, False, cta_rows=128, kv_shared=True, step_keys=128)
    assert r["compiled"], r["reason"]
    assert r["registers"] and r["spill_bytes"] == 0
