"""The v3-f16-n128 control peer (pa_bench/peers/v3_f16_n128.py) without a GPU: v3-f16's class at
128-key tiles, its refusals under its own name, its segments in whole 128-key tiles, and that it
is registered only as a plug-in (its GPU checks: tests/gpu/test_v3_n128_gpu.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from pa_bench import variants as registry
from pa_bench.numerics.model import SEGMENT_KEYS
from pa_bench.numerics.model import segment_keys as v3_rule
from pa_bench.peers import CannotRun, peer_class, runs_on

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture()
def n128():
    from pa_bench.peers import v3_f16, v3_f16_n128

    v3_f16_n128.register()
    yield v3_f16_n128
    for name in (v3_f16_n128.NAME, v3_f16.NAME):
        if registry.find(name) is not None:
            registry.unregister(name)


def _problem(head_dim=128, heads_q=32, heads_kv=8, context=0, queries=256):
    return SimpleNamespace(head_dim=head_dim, heads_q=heads_q, heads_kv=heads_kv, context=context, queries=queries)


def test_it_is_v3_f16s_class_at_128_key_tiles(n128):
    from pa_bench.peers import v3_f16

    cls = peer_class("v3-f16-n128")
    assert cls is n128.V3F16N128 and issubclass(cls, v3_f16.V3F16)
    assert cls.tile_keys == 128 and v3_f16.V3F16.tile_keys == 64
    assert runs_on("v3-f16-n128", "cuda") and not runs_on("v3-f16-n128", "numpy")


def test_its_refusals_name_it(n128, monkeypatch):
    from pa_bench.peers import v3_f16

    monkeypatch.setattr(v3_f16, "_device", lambda: (None, 80))
    assert n128.V3F16N128.unavailable(_problem()) == "v3-f16-n128 needs sm_90a (wgmma, setmaxnreg), not sm_80"
    with pytest.raises(CannotRun, match="v3-f16-n128 needs sm_90a"):
        n128.V3F16N128(SimpleNamespace(problem=_problem()))
    monkeypatch.setattr(v3_f16, "_device", lambda: (None, 90))
    assert n128.V3F16N128.unavailable(_problem(96)) == "v3-f16-n128 has no head_dim 96 (it builds 64 and 128)"
    monkeypatch.undo()                                     # the real _device, and no CuPy
    monkeypatch.setitem(sys.modules, "cupy", None)
    assert n128.V3F16N128.unavailable(_problem()).startswith("v3-f16-n128 needs CuPy")


@pytest.mark.parametrize("context,queries", [(2048, 256), (0, 1536), (100000, 256), (1000, 37)])
def test_its_segments_are_v3s_in_whole_tiles(context, queries):
    """v3's rule (the fill rule gives multiples of 64), rounded up to 128 keys: the kernel starts
    segment z at tile z * segment_keys / 128."""
    from pa_bench.peers import v3_f16

    pb = _problem(context=context, queries=queries)
    want = v3_rule(context, "v3", queries, 32, 8)
    assert v3_f16.segment_keys(pb, 64) == want
    got = v3_f16.segment_keys(pb, 128)
    assert got % 128 == 0 and want <= got < want + 128
    if context > SEGMENT_KEYS:
        assert got == SEGMENT_KEYS


def test_its_build_names_the_tile_size():
    from pa_bench.backends import kernels as K

    build = K.KernelBuild("v3", kv_f16=True, tile_keys=128)
    assert build.defines()[-2:] == ("-DPA_KV_F16=1", "-DPA_V3_BN=128")


def test_it_is_registered_only_as_a_plugin():
    """A fresh process: not in the registry by default; loading it registers it (and v3-f16, the
    class it sets to 128-key tiles); no shipped config names it."""
    code = (
        "from pa_bench import plugins, variants as r\n"
        "import pa_bench.cli\n"
        "from pa_bench.problem.config import DEFAULT_CONFIG, load_config\n"
        "load_config(DEFAULT_CONFIG)\n"
        "assert 'v3-f16-n128' not in r.names(), r.names()\n"
        "plugins.load('pa_bench.peers.v3_f16_n128')\n"
        "assert r.get('v3-f16-n128').is_peer and r.get('v3-f16').is_peer\n"
        "assert r.names().count('v3-f16-n128') == 1\n"
        "print('ok')\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]
    for cfg in (ROOT / "configs").glob("*.yaml"):
        assert "v3-f16-n128" not in cfg.read_text() and "v3_f16_n128" not in cfg.read_text(), cfg.name
