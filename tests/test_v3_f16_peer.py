"""The v3-f16 control peer (pa_bench/backends/v3_controls.py; the plug-in pa_bench/backends/v3_f16.py)
without a GPU: its refusals, and that it is registered only when loaded as a plug-in (its GPU
checks: tests/gpu/test_v3_f16_gpu.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from pa_bench import variants as registry
from pa_bench.backends import v3_controls
from pa_bench.peers import CannotRun, peer_class, runs_on

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture()
def v3f16():
    """The module, with its peer registered for the test and unregistered after it."""
    from pa_bench.backends import v3_f16

    v3_f16.register()
    yield v3_f16
    registry.unregister(v3_f16.NAME)


def _problem(head_dim=128, heads_q=32, heads_kv=8):
    return SimpleNamespace(head_dim=head_dim, heads_q=heads_q, heads_kv=heads_kv)


def test_it_is_a_cuda_peer_of_its_own_class(v3f16):
    entry = registry.get("v3-f16")
    assert entry.is_peer and peer_class("v3-f16") is v3f16.V3F16
    assert runs_on("v3-f16", "cuda") and not runs_on("v3-f16", "numpy")


def test_without_cupy_it_says_so(v3f16, monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)        # import cupy now fails
    why = v3f16.V3F16.unavailable(_problem())
    assert why.startswith("v3-f16 needs CuPy") and "\n" not in why
    with pytest.raises(CannotRun, match="needs CuPy"):
        v3f16.V3F16(SimpleNamespace(problem=_problem()))


@pytest.mark.parametrize("cc", [80, 89, 100])
def test_it_refuses_every_gpu_but_sm90(v3f16, monkeypatch, cc):
    monkeypatch.setattr(v3_controls, "device_cc", lambda name: (None, cc))
    assert v3f16.V3F16.unavailable(_problem()) == f"v3-f16 needs sm_90a (wgmma, setmaxnreg), not sm_{cc}"
    with pytest.raises(CannotRun, match=f"not sm_{cc}"):
        v3f16.V3F16(SimpleNamespace(problem=_problem()))


def test_on_sm90_it_takes_v3s_head_dims_and_groups_only(v3f16, monkeypatch):
    monkeypatch.setattr(v3_controls, "device_cc", lambda name: (None, 90))
    assert v3f16.V3F16.unavailable(_problem(128)) is None
    assert v3f16.V3F16.unavailable(_problem(64, 16, 16)) is None
    assert v3f16.V3F16.unavailable(_problem(96)) == "v3-f16 has no head_dim 96 (it builds 64 and 128)"
    assert "heads_kv to divide heads_q" in v3f16.V3F16.unavailable(_problem(128, 24, 16))
    assert "at most 128 query heads" in v3f16.V3F16.unavailable(_problem(128, 256, 1))


def test_registering_twice_keeps_one_entry(v3f16):
    v3f16.register()
    assert registry.names().count("v3-f16") == 1


def test_it_is_registered_only_as_a_plugin():
    """A fresh process: not in the registry after pa-bench and its default config load, in it once
    the plug-in is loaded; no shipped config names it."""
    code = (
        "from pa_bench import variants as r\n"
        "from pa_bench.problem import plugins\n"
        "import pa_bench.cli\n"
        "from pa_bench.problem.config import DEFAULT_CONFIG, load_config\n"
        "load_config(DEFAULT_CONFIG)\n"
        "assert 'v3-f16' not in r.names(), r.names()\n"
        "plugins.load('pa_bench.backends.v3_f16')\n"
        "assert r.get('v3-f16').is_peer\n"
        "print('ok')\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]
    for cfg in (ROOT / "configs").glob("*.yaml"):
        assert "v3-f16" not in cfg.read_text() and "v3_f16" not in cfg.read_text(), cfg.name


def test_its_fp16_kv_are_the_torch_peers_bits(v3f16):
    """fp16(fp16(int8) * fp16(scale)), formed as torch_util forms the torch peers' K/V (NumPy in
    place of CuPy here: the same array calls)."""
    torch = pytest.importorskip("torch")
    from pa_bench.problem.inputs import make_inputs
    from pa_bench.problem.plan import Problem
    from pa_bench.problem.shapes import parse_shape

    inp = make_inputs(Problem(parse_shape("100x28"), heads_q=4, heads_kv=2, data="realistic", seed=3))
    k16, v16 = v3_controls.fp16_kv(np, inp.k_i8, inp.v_i8, inp.k_scale, inp.v_scale)
    for got, x8, sc in ((k16, inp.k_i8, inp.k_scale), (v16, inp.v_i8, inp.v_scale)):
        want = torch.from_numpy(x8).to(torch.float16) * torch.from_numpy(sc).to(torch.float16).unsqueeze(-1)
        assert got.dtype == np.float16 and np.array_equal(got.view(np.uint16), want.numpy().view(np.uint16))


@pytest.mark.parametrize("shape", ["32Kx1024", "64Kx512", "2.1Kx256", "0x1536"])
def test_the_control_builds_v3s_launch_and_consumer_step(shape):
    """The control runs v3's consumer loop: v3's rows and, where v3 takes 128-key steps, those."""
    from pa_bench.launch import cta_rows, step_keys
    from pa_bench.backends.v3_f16 import build_for
    from pa_bench.problem.plan import Problem
    from pa_bench.problem.shapes import parse_shape

    pb = Problem(parse_shape(shape))
    build = build_for(pb)
    assert build.kv_f16 and not (build.kv_shared or build.kv_images)
    assert build.cta_rows == cta_rows("v3", pb.context, pb.queries, pb.heads_q, pb.heads_kv)
    assert build.step_keys == step_keys("v3", pb.context, pb.queries, pb.heads_q, pb.heads_kv) == \
        (128 if shape in ("32Kx1024", "64Kx512") else 64)
