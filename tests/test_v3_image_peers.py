"""v3 on fp16 stage images without a GPU: the v3-dq plug-in peer (pa_bench/backends/v3_dq.py) refuses
in its own name, and the workspace of v3's shared tiles holds what the kernel's share_base lays out
(the GPU checks: tests/gpu/test_v3_dq_gpu.py, tests/gpu/test_v3_shared_tiles_gpu.py)."""

from __future__ import annotations

import importlib
import sys
from types import SimpleNamespace

import pytest

from pa_bench import variants as registry
from pa_bench.backends import v3_controls
from pa_bench.peers import CannotRun, peer_class, runs_on

MODULES = {"v3-dq": "pa_bench.backends.v3_dq"}


@pytest.fixture(params=list(MODULES))
def peer(request):
    """(name, module), its peer registered for the test and unregistered after it."""
    mod = importlib.import_module(MODULES[request.param])
    mod.register()
    yield request.param, mod
    registry.unregister(mod.NAME)


def _problem(head_dim=128, heads_q=32, heads_kv=8):
    return SimpleNamespace(head_dim=head_dim, heads_q=heads_q, heads_kv=heads_kv)


def test_each_is_a_cuda_peer_of_its_own_class(peer):
    name, mod = peer
    assert mod.NAME == name and peer_class(name).name == name
    assert runs_on(name, "cuda") and not runs_on(name, "numpy")


def test_without_cupy_each_says_so_in_its_own_name(peer, monkeypatch):
    name, mod = peer
    monkeypatch.setitem(sys.modules, "cupy", None)        # import cupy now fails
    cls = peer_class(name)
    why = cls.unavailable(_problem())
    assert why.startswith(f"{name} needs CuPy") and "\n" not in why
    with pytest.raises(CannotRun, match=f"^{name} needs CuPy"):
        cls(SimpleNamespace(problem=_problem()))


def test_each_refuses_what_v3_cannot_build_in_its_own_name(peer, monkeypatch):
    name, mod = peer
    cls = peer_class(name)
    monkeypatch.setattr(v3_controls, "device_cc", lambda who: (None, 80))
    assert cls.unavailable(_problem()) == f"{name} needs sm_90a (wgmma, setmaxnreg), not sm_80"
    monkeypatch.setattr(v3_controls, "device_cc", lambda who: (None, 90))
    assert cls.unavailable(_problem(128)) is None and cls.unavailable(_problem(64, 16, 16)) is None
    assert cls.unavailable(_problem(96)) == f"{name} has no head_dim 96 (it builds 64 and 128)"
    assert cls.unavailable(_problem(128, 24, 16)).startswith(f"{name} needs heads_kv to divide heads_q")


@pytest.mark.parametrize("base", [0, 4, 256, 512, 1020])
@pytest.mark.parametrize("seg,hkv,tiles,segs", [(0, 8, 33, 1), (3 * 32 * 1024 * 130, 8, 529, 3), (37, 1, 1, 1)])
def test_share_workspace_holds_the_kernels_layout_at_any_alignment(base, seg, hkv, tiles, segs):
    """kernels/v3.cu share_base and producer: images at the first 1,024-byte boundary past the
    segment floats, a u32 flag a tile after them, then u64 counters at (flag end + 4) rounded down
    to 8; the buffer (``base`` bytes past an aligned address) must hold the last counter."""
    from pa_bench.backends.kernels import share_workspace_bytes as workspace_bytes

    img = 33280
    images = (base + 4 * seg + 1023) // 1024 * 1024
    flags_end = images + hkv * tiles * img + 4 * hkv * tiles
    counters = (flags_end + 4) // 8 * 8
    end = counters + 8 * hkv * segs
    assert end - base <= workspace_bytes(seg, hkv, tiles, img, segs)


@pytest.mark.parametrize("flags", [("kv_f16", "kv_images"), ("kv_f16", "kv_shared"), ("kv_images", "kv_shared")])
def test_a_build_takes_one_v3_producer(flags):
    from pa_bench.backends import kernels as K

    with pytest.raises(ValueError, match="two producers"):
        K.KernelBuild("v3", **{f: True for f in flags})
    assert "-DPA_V3_SHARE=1" in K.KernelBuild("v3", kv_shared=True).defines()
    assert "-DPA_V3_DQ=1" in K.KernelBuild("v3", kv_images=True).defines()


def test_each_segment_layout_of_a_shared_tile_build_gets_its_own_workspace():
    """The images, flags and counters lie past the segment floats (share_base), so launches of one
    shared-tile build with 1 and 3 segments on one shape read two layouts: each gets a workspace that
    holds its own (a workspace sized for one segment would be overrun by three, and its stale image
    bytes read as flags and tickets), with its own launch count; the same layout again reuses it."""
    import numpy as np

    from pa_bench.backends import kernels as K
    from pa_bench.backends.cuda import CudaBackend, Prepared

    build = K.KernelBuild("v3", kv_shared=True)
    backend = object.__new__(CudaBackend)             # no GPU: only the workspace bookkeeping
    backend.cp = SimpleNamespace(zeros=np.zeros, float32=np.float32)
    backend._image_bytes = {build: 33280}
    pb = SimpleNamespace(heads_q=32, heads_kv=8, queries=1024, keys=32768 + 1024, head_dim=128)
    prep = Prepared(SimpleNamespace(problem=pb), *([None] * 6), 6, "float32", None, None)

    def workspace(segments):
        geo = K.LaunchGeometry((8, 6, segments), 384, True, segment_keys=11264 if segments > 1 else 0,
                               segments=segments)
        floats = max(K.workspace_floats(geo, pb.queries, pb.heads_q, pb.head_dim), 2)
        need = K.share_workspace_bytes(floats, pb.heads_kv, -(-pb.keys // 64), 33280, segments)
        return backend._shared_workspace(prep, build, geo, floats), need

    one, need_one = workspace(1)
    one["epoch"] = 5                                  # launches made on the 1-segment layout
    three, need_three = workspace(3)
    assert three is not one and three["epoch"] == 0 and not three["part"].any()
    assert three["part"].nbytes >= need_three > one["part"].nbytes >= need_one
    again, _ = workspace(1)
    assert again is one and again["epoch"] == 5


@pytest.mark.parametrize("shape", ["32Kx1024", "64Kx512", "2.1Kx256", "0x1536", "8Kx1024"])
def test_v3_dq_builds_v3s_launch_and_consumer_step(shape):
    """v3-dq gives v3's bits only at v3's rows and v3's consumer step (128-key steps change the
    summation): its build follows the launch rule on each shape, the long ones at 128-key steps."""
    from pa_bench.launch import cta_rows, step_keys
    from pa_bench.backends.v3_dq import build_for
    from pa_bench.problem.plan import Problem
    from pa_bench.problem.shapes import parse_shape

    pb = Problem(parse_shape(shape))
    build = build_for(pb)
    step = step_keys("v3", pb.context, pb.queries, pb.heads_q, pb.heads_kv)
    assert build.kv_images and not build.kv_shared
    assert build.cta_rows == cta_rows("v3", pb.context, pb.queries, pb.heads_q, pb.heads_kv)
    assert build.step_keys == step == (128 if shape in ("32Kx1024", "64Kx512") else 64)
    assert ("-DPA_V3_STEP_KEYS=128" in build.defines()) == (step == 128)
