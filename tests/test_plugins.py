"""Plug-ins: a module or a .py file that registers a peer, found by a config, --plugin or an
installed entry point, and run through the same chain as the kernels (the numpy backend here)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest

from pa_bench import runner
from pa_bench.problem import plugins
from pa_bench import variants as registry
from pa_bench.backends.numpy import NumpyBackend
from pa_bench.errors import ConfigError, PluginError
from pa_bench.numerics.reference import reference_attention
from pa_bench.peers import Peer, peer_class, register_peer, runs_on
from pa_bench.problem.config import DEFAULT_CONFIG, load_config
from pa_bench.problem.inputs import make_inputs
from pa_bench.problem.plan import make_plan
from pa_bench.store.results import open_run

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "plugin_peer.py"
SMOKE = DEFAULT_CONFIG.parent / "smoke.yaml"


@pytest.fixture()
def toy():
    """The worked example loaded as a plug-in (unregistered afterwards, so tests stay apart)."""
    plugins.load(str(EXAMPLE))
    yield "toy-f32"
    registry.unregister("toy-f32")
    for name in [k for k, v in plugins.loaded().items() if v == str(EXAMPLE.resolve())]:
        plugins.forget(name)


def test_the_example_peer_registers_and_matches_fp64(toy):
    entry = registry.get(toy)
    assert entry.is_peer and runs_on(toy, "numpy") and runs_on(toy, "cuda")
    config = load_config(SMOKE)
    problem = make_plan(config, shapes="1023x113").problems[0]
    inputs = make_inputs(problem)
    out = peer_class(toy)(inputs, device="cpu").output()
    ref = reference_attention(inputs.q, inputs.k_i8, inputs.v_i8, problem.context, problem.softmax_scale,
                              k_scale=inputs.k_scale, v_scale=inputs.v_scale)
    assert out.shape == ref.shape and out.dtype == np.float32
    rel = float(np.linalg.norm(out - ref) / np.linalg.norm(ref))
    assert 0 < rel < 1e-5                                 # float32 arithmetic on the same K/V


def test_a_plugin_peer_runs_through_the_runner_on_numpy(tmp_path, toy):
    config = load_config(SMOKE).with_overrides(plugins=[str(EXAMPLE)], variants="v1,toy-f32")
    assert config.plugins == (str(EXAMPLE.resolve()),)
    path = runner.run_parity(config, NumpyBackend(), results_root=tmp_path)
    rows = {(r.shape, r.variant): r for r in open_run(path).records()}
    assert len(rows) == 2 * len(config.shapes)
    for shape in ("256x64", "1023x113", "0x96"):
        peer = rows[(shape, "toy-f32")]
        assert peer.status == "ok" and peer.impl == "numpy" and peer.parity_pass is None
        assert 0 < peer.rel_l2_err < 1e-5 and peer.deterministic is True
        assert rows[(shape, "v1")].parity_pass is True
    assert open_run(path).meta().config["plugins"] == [str(EXAMPLE.resolve())]


def test_a_peer_that_runs_on_the_gpu_only_is_skipped_on_numpy_with_the_reason(toy):
    problem = make_plan(load_config(SMOKE), shapes="256x64").problems[0]
    assert NumpyBackend().unsupported_parity("torch-sdpa", problem) == "torch-sdpa runs on the cuda backend only"
    assert NumpyBackend().unsupported_parity(toy, problem) is None


def test_a_module_plugin_and_a_config_list(tmp_path, monkeypatch):
    pkg = tmp_path / "my_attn_plugin.py"
    pkg.write_text(textwrap.dedent('''
        from pa_bench.peers import Peer, register_peer

        @register_peer
        class Mine(Peer):
            name = "mine-peer"
            backends = ("numpy",)
            def call(self):
                return lambda: None
            def output(self):
                raise RuntimeError("not called here")
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = tmp_path / "c.yaml"
    cfg.write_text(SMOKE.read_text().replace("variants: [v1, v2, v2t]",
                                             "plugins: [my_attn_plugin]\nvariants: [v1, mine-peer]"))
    try:
        config = load_config(cfg)
        assert config.plugins == ("my_attn_plugin",) and config.variants == ("v1", "mine-peer")
        assert registry.get("mine-peer").resolve_runner().__name__ == "Mine"
    finally:
        registry.unregister("mine-peer")


def test_a_bad_plugin_is_one_line_naming_it(tmp_path):
    with pytest.raises(PluginError, match=r"plug-in 'no_such_module_xyz' cannot be imported"):
        plugins.load("no_such_module_xyz")
    broken = tmp_path / "broken.py"
    broken.write_text("raise ValueError('boom')\n")
    with pytest.raises(PluginError, match=r"failed while loading: ValueError: boom"):
        plugins.load(str(broken))
    with pytest.raises(PluginError, match="no such file"):
        plugins.load(str(tmp_path / "missing.py"))
    cfg = tmp_path / "c.yaml"
    cfg.write_text(SMOKE.read_text().replace("variants: [v1, v2, v2t]", "plugins: [no_such_module_xyz]"))
    with pytest.raises(ConfigError, match=r"plugins\[0\]: plug-in 'no_such_module_xyz' cannot be imported"):
        load_config(cfg)


def test_register_peer_checks_the_interface():
    class NoName(Peer):
        pass

    with pytest.raises(ValueError, match="needs a name"):
        register_peer(NoName)

    class NoCall:
        name = "no-call"
        output = None

    with pytest.raises(ValueError, match="has no call"):
        register_peer(NoCall)
    assert registry.find("no-call") is None


def test_builtin_peers_are_registered_with_their_classes():
    for name, cls in (("torch-sdpa", "SdpaDefault"), ("torch-sdpa-flash", "SdpaFlash"),
                      ("torch-sdpa-cudnn", "SdpaCudnn"), ("torch-sdpa+dequant", "SdpaDequant"),
                      ("torch-flex", "FlexPeer")):
        peer = peer_class(name)
        assert peer.__name__ == cls and peer.name == name and not runs_on(name, "numpy")
    from pa_bench.peers.torch_sdpa import SdpaCudnn, SdpaFlash

    assert (SdpaFlash.pin, SdpaCudnn.pin) == ("FLASH_ATTENTION", "CUDNN_ATTENTION")


def test_sdpa_kernel_names_map_to_its_backends():
    from pa_bench.peers.torch_sdpa import classify

    assert classify(["cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3"]) == "cudnn"
    assert classify(["void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128>>"]) == "flash"
    assert classify(["fmha_cutlassF_f16_aligned_64x64_rf_sm80"]) == "efficient"
    assert classify(["void at::native::elementwise_kernel<128, 4>", "gemm"]) == "math"
    assert classify([]) is None


def test_a_plugin_cuda_kernel_lives_outside_kernels_and_brings_its_geometry(tmp_path):
    from pa_bench.backends import kernels as K

    (tmp_path / "mine_helpers.cuh").write_text("// my helpers\n#define MINE_ROWS 16\n")
    src = tmp_path / "mine.cu"
    src.write_text('#include "pa_common.cuh"\n#include "mine_helpers.cuh"\n'
                   'extern "C" __global__ void pa_mine_kernel() {}\n')
    registry.register(registry.Variant("mine_kernel", registry.CUDA_KERNEL, "a plug-in kernel",
                                       source=str(src), min_arch=80, tile_keys=64, threads=128,
                                       geometry=K.rows_per_cta))
    try:
        text = K.kernel_source("mine_kernel")
        assert "// ---- pa_common.cuh (inlined)" in text and "#define MINE_ROWS 16" in text
        assert K.kernel_path("mine_kernel") == src
        assert f"-I{tmp_path}" in K.KernelBuild("mine_kernel").options()
        geo = K.launch_geometry("mine_kernel", 113, 4, 2)
        assert geo.grid == (2, 4, 1) and geo.block == 128
        assert K.source_hashes()[str(src)]
    finally:
        registry.unregister("mine_kernel")
    with pytest.raises(ValueError, match="needs its source file"):
        registry.Variant("no_source", registry.CUDA_KERNEL, "x", tile_keys=64)


def test_the_readme_recipe_runs_the_example_plugin_from_the_command_line(tmp_path):
    """What docs/PLUGINS.md and the README give, as a user types it (a process of its own, so
    the plug-in's registration stays there)."""
    import json
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "pa_bench", "run", "configs/smoke.yaml", "--backend", "numpy",
                           "--plugin", "examples/plugin_peer.py", "--variant", "v1,toy-f32",
                           "--results", str(tmp_path)], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr
    run = open_run(next(tmp_path.iterdir()))
    rows = {(r.shape, r.variant): r for r in run.records()}
    assert {v for _, v in rows} == {"v1", "toy-f32"}
    assert all(r.status == "ok" for r in rows.values())
    assert all(rows[(s, "toy-f32")].impl == "numpy" for s in ("256x64", "1023x113", "0x96"))
    assert json.loads(run.meta_path.read_text())["config"]["plugins"] == [str(EXAMPLE.resolve())]
    assert "toy-f32" in proc.stdout
    bad = subprocess.run([sys.executable, "-m", "pa_bench", "run", "smoke", "--backend", "numpy",
                          "--plugin", "no_such_plugin_xyz"], capture_output=True, text=True, cwd=ROOT,
                         timeout=120)
    assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [
        "error: plug-in 'no_such_plugin_xyz' cannot be imported: No module named 'no_such_plugin_xyz'"]
