"""Compiled kernels are reused across runs: CuPy's disk cache, keyed by the whole source."""

from __future__ import annotations

from pathlib import Path

from pa_bench.backends import kernels as K


def test_every_local_header_is_inlined_so_the_cache_key_sees_it(tmp_path, monkeypatch):
    (tmp_path / "v1.cu").write_text('#include "a.cuh"\n#include <cuda_fp16.h>\nkernel v1\n')
    (tmp_path / "a.cuh").write_text('#pragma once\n  #include "b.cuh"\nheader a\n#include "b.cuh"\n')
    (tmp_path / "b.cuh").write_text("header b one\n")
    monkeypatch.setattr(K, "KERNEL_DIR", tmp_path)
    src = K.kernel_source("v1")
    assert '#include "' not in src and "#include <cuda_fp16.h>" in src  # toolkit headers stay
    assert src.index("header b one") < src.index("header a") < src.index("kernel v1")
    assert src.count("header b one") == 1  # each file once
    (tmp_path / "b.cuh").write_text("header b two\n")  # a nested header's edit changes the source
    assert K.kernel_source("v1") != src and "header b two" in K.kernel_source("v1")


def test_the_real_kernels_hold_no_include_of_kernels_left():
    for v in K.kernel_variants():
        src = K.kernel_source(v)
        assert '#include "' not in src
        assert (K.KERNEL_DIR / K.HEADER).read_text() in src


def test_the_cache_dir_follows_cupys_settings(monkeypatch, tmp_path):
    monkeypatch.delenv("CUPY_CACHE_IN_MEMORY", raising=False)
    monkeypatch.delenv("CUPY_CACHE_DIR", raising=False)
    assert K.kernel_cache_dir() == Path.home() / ".cupy" / "kernel_cache"
    monkeypatch.setenv("CUPY_CACHE_DIR", str(tmp_path))
    assert K.kernel_cache_dir() == tmp_path
    monkeypatch.setenv("CUPY_CACHE_IN_MEMORY", "1")
    assert K.kernel_cache_dir() is None
    assert K.cache_outcome(None, set()) == "off"


def test_a_compile_that_adds_a_binary_is_a_miss(tmp_path):
    cache = tmp_path / "kernel_cache"
    before = K.cache_entries(cache)  # no directory yet
    assert before == set()
    cache.mkdir()
    (cache / "0123_2.cubin").write_bytes(b"x")
    assert K.cache_outcome(cache, before) == "miss"
    assert K.cache_outcome(cache, K.cache_entries(cache)) == "hit"
