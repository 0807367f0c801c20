"""The compile pool (pa_bench.backends.compile_ahead.start_pool / CompilePool) on the CPU: which
builds a run needs, real worker processes running a stand-in compile, the results waited for
and adopted by the backend's kernel(), and a failed build reported on its row as without it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from pa_bench.backends import compile_ahead
from pa_bench.backends import kernels as K
from pa_bench.backends.cuda import CudaBackend, process_age_s, start_torch_import
from pa_bench.errors import PaBenchError
from pa_bench.problem.config import load_config
from pa_bench.problem.plan import make_plan


def fake_compile(build, *args):
    """A pool job that compiles nothing: fails the builds named 'bad', else reports nvrtc."""
    if build[0] == "bad":
        return {"compiler": None, "seconds": 0.0, "error": "nvrtc: error: bad build"}
    return {"compiler": "nvrtc", "seconds": 0.25, "error": None}


class FakeBackend:
    """build(v, problem) -> (variant, head_dim, ctx > 0): two shapes share a build."""

    cc = 90

    def unsupported(self, variant, problem):
        return "v2 refuses 0x96" if (variant, problem.shape.written) == ("v2", "0x96") else None

    def build(self, variant, problem):
        return (variant, problem.head_dim, problem.context > 0)


def test_the_run_needs_each_cuda_build_once_and_no_peer_or_refused_one(smoke_yaml):
    plan = make_plan(load_config(smoke_yaml), variants=["v1", "v2", "torch-sdpa"])
    builds = compile_ahead.needed_builds(FakeBackend(), plan.problems, plan.variants)
    # shapes 256x64, 1023x113 (context > 0: one build each variant) and 0x96 (v2 refuses it)
    assert builds == [("v1", 64, True), ("v2", 64, True), ("v1", 64, False)]


def test_pool_size_is_the_cores_capped_and_none_for_one_build(monkeypatch):
    monkeypatch.setattr(compile_ahead.os, "sched_getaffinity", lambda _pid: set(range(16)), raising=False)
    monkeypatch.delenv(compile_ahead.POOL_ENV, raising=False)
    assert compile_ahead.pool_size(40) == 16 and compile_ahead.pool_size(5) == 5
    assert compile_ahead.pool_size(1) == 0
    monkeypatch.setenv(compile_ahead.POOL_ENV, "4")
    assert compile_ahead.pool_size(40) == 4


def test_the_pool_runs_every_build_in_worker_processes_and_reports_the_failed(monkeypatch):
    monkeypatch.setattr(K, "kernel_cache_dir", lambda: "/tmp")
    monkeypatch.delenv(compile_ahead.POOL_ENV, raising=False)
    monkeypatch.setattr(compile_ahead, "pool_size", lambda n: 2)
    backend = FakeBackend()
    builds = [("v1", 64, True), ("bad", 64, True), ("v2", 64, False)]
    monkeypatch.setattr(compile_ahead, "needed_builds", lambda *a: builds)
    pool = compile_ahead.start_pool(backend, [], [], compile_fn=fake_compile)
    assert backend.compile_pool is pool
    assert pool.wait_for(("v1", 64, True)) == {"compiler": "nvrtc", "seconds": 0.25, "error": None}
    assert pool.wait_for(("not", "the", "pool's")) is None
    pool.close()
    meta = pool.meta()
    assert meta["workers"] == 2 and meta["builds"] == 3 and meta["done"] == 3 and meta["seconds"] >= 0
    assert meta["failed"] == [{"variant": None, "build": str(("bad", 64, True)),
                               "error": "nvrtc: error: bad build"}]
    pool.close()   # once


def test_no_pool_when_turned_off_or_without_a_disk_cache(monkeypatch):
    monkeypatch.setattr(compile_ahead, "needed_builds", lambda *a: [("a",), ("b",), ("c",)])
    monkeypatch.setattr(K, "kernel_cache_dir", lambda: "/tmp")
    monkeypatch.setenv(compile_ahead.POOL_ENV, "0")
    assert compile_ahead.start_pool(FakeBackend(), [], [], compile_fn=fake_compile) is None
    monkeypatch.delenv(compile_ahead.POOL_ENV)
    monkeypatch.setattr(K, "kernel_cache_dir", lambda: None)       # CUPY_CACHE_IN_MEMORY
    assert compile_ahead.start_pool(FakeBackend(), [], [], compile_fn=fake_compile) is None


class Build(tuple):
    variant = "v2"
    function = "pa_v2"


def _stand_in(pool, module):
    order = []

    class Pool:
        def wait_for(self, build):
            order.append("pool")
            return pool(build)

    def _module(build):
        order.append("compile")
        return module(build)

    me = SimpleNamespace(_kernels={}, compile_pool=Pool(), compilers={}, compiles={},
                         _module=_module, adopt=lambda b, mod, fn: me._kernels.__setitem__(b, fn))
    return me, order


def test_kernel_waits_for_the_pools_build_then_adopts_its_own_cache_hit(monkeypatch):
    monkeypatch.setattr(K, "kernel_cache_dir", lambda: None)
    b = Build(("v2",))
    me, order = _stand_in(lambda build: {"compiler": "nvrtc", "seconds": 1.5, "error": None},
                          lambda build: ("module", "fn"))
    me.compilers[b] = "nvcc"
    assert CudaBackend.kernel(me, b) == "fn"
    assert order == ["pool", "compile"]
    assert me.compiles[b]["pool_seconds"] == 1.5
    assert CudaBackend.kernel(me, b) == "fn" and order == ["pool", "compile"]   # once


def test_a_build_the_pool_failed_fails_on_its_row_as_without_the_pool(monkeypatch):
    monkeypatch.setattr(K, "kernel_cache_dir", lambda: None)

    def broken(build):
        raise RuntimeError("nvrtc: error: identifier undefined")

    me, order = _stand_in(lambda build: {"compiler": None, "seconds": 0.1,
                                         "error": "nvrtc: error: identifier undefined"}, broken)
    with pytest.raises(PaBenchError, match="compiling v2 failed: .*identifier undefined"):
        CudaBackend.kernel(me, Build(("v2",)))
    assert order == ["pool", "compile"]


def test_torch_is_imported_early_only_for_a_plan_that_uses_it(smoke_yaml, monkeypatch):
    import sys

    cfg = load_config(smoke_yaml)                         # v1, v2, v2t: no torch
    assert start_torch_import(cfg) is None
    monkeypatch.setitem(sys.modules, "torch", object())  # already imported: nothing to start
    assert start_torch_import(cfg.with_overrides(variants=["v1", "torch-sdpa"])) is None
    assert start_torch_import(None) is None


def test_process_age_is_the_seconds_since_this_process_started():
    age = process_age_s()
    assert age is None or 0 < age < 24 * 3600
