"""environment(): complete without CuPy or a GPU, never raises, parses what it finds."""

import json
import os
import stat
import sys
import types

import pytest

from pa_bench.present import envinfo
from pa_bench.present.envinfo import environment, format_environment, parse_nvcc_version

GPU_FIELDS = ("gpu", "compute_capability", "arch", "sm_count", "l2_bytes", "driver",
              "cuda_runtime", "cuda_driver", "sm_clock_max_mhz")


def test_environment_without_cupy(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy -> ImportError
    env = environment()
    assert env["cupy"] is None and env["cuda_available"] is False
    for key in GPU_FIELDS:
        assert env[key] is None, key
    assert env["python"].count(".") == 2
    assert env["numpy"] and env["click"] and env["pa_bench"]
    json.dumps(env)  # storable in meta.json as is
    text = format_environment(env)
    assert "gpu           none (CuPy is not installed)" in text
    assert "cupy          not installed" in text


class _FakeRuntime:
    def __init__(self, count=1, fail=None):
        self.count, self.fail = count, fail

    def runtimeGetVersion(self):
        return 12040

    def driverGetVersion(self):
        return 13000

    def getDeviceCount(self):
        if self.fail:
            raise RuntimeError(self.fail)
        return self.count

    def getDeviceProperties(self, device):
        return {"name": b"NVIDIA GeForce RTX 2080 Ti", "major": 7, "minor": 5,
                "multiProcessorCount": 68, "l2CacheSize": 5767168,
                "totalGlobalMem": 22 << 30, "clockRate": 1650000}


def _fake_cupy(runtime):
    mod = types.ModuleType("cupy")
    mod.__version__ = "13.6.0"
    mod.cuda = types.SimpleNamespace(runtime=runtime)
    return mod


def test_environment_with_a_gpu(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy(_FakeRuntime()))
    monkeypatch.setattr(envinfo, "_nvidia_smi", lambda device: {"driver": "595.12"})
    env = environment()
    assert env["cupy"] == "13.6.0" and env["cuda_available"] is True
    assert env["gpu"] == "NVIDIA GeForce RTX 2080 Ti"
    assert (env["arch"], env["compute_capability"], env["sm_count"]) == ("sm_75", "7.5", 68)
    assert env["l2_bytes"] == 5767168 and env["sm_clock_max_mhz"] == 1650.0
    assert (env["cuda_runtime"], env["cuda_driver"], env["driver"]) == ("12.4", "13.0", "595.12")
    text = format_environment(env)
    assert "RTX 2080 Ti (sm_75" in text and "595.12" in text and "L2 5.5 MiB" in text


@pytest.mark.parametrize("runtime", [_FakeRuntime(fail="cudaErrorNoDevice: no CUDA-capable device"),
                                     _FakeRuntime(count=0)])
def test_environment_cupy_without_gpu_never_raises(monkeypatch, runtime):
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy(runtime))
    env = environment()
    assert env["cupy"] == "13.6.0" and env["cuda_available"] is False
    assert env["gpu"] is None and env["arch"] is None and env["sm_count"] is None
    assert env["gpu_error"]
    assert "gpu           none (" in format_environment(env)


def test_parse_nvcc_version():
    out = ("nvcc: NVIDIA (R) Cuda compiler driver\nCopyright (c) 2005-2024 NVIDIA Corporation\n"
           "Cuda compilation tools, release 12.4, V12.4.131\nBuild cuda_12.4.r12.4/compiler.34097967_0")
    assert parse_nvcc_version(out) == "12.4"
    assert parse_nvcc_version("garbage") is None and parse_nvcc_version(None) is None


@pytest.mark.skipif(os.name != "posix", reason="uses a shell script as a fake nvcc")
def test_nvcc_from_path(tmp_path, monkeypatch):
    fake = tmp_path / "nvcc"
    fake.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 11.8, V11.8.89'\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert envinfo.nvcc_info() == ("11.8", str(fake))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert envinfo.nvcc_info() == (None, None)
    env = environment()
    assert env["nvcc"] is None and "not on PATH" in format_environment(env)


def test_the_cuda_backend_describes_the_gpu_through_envinfo(monkeypatch):
    """One GPU-information path: the backend's device facts are envinfo.gpu_info's."""
    from types import SimpleNamespace

    from pa_bench.backends import cuda
    from pa_bench.present import envinfo

    facts = dict.fromkeys(envinfo._GPU_KEYS)
    facts.update(gpu="Fake GPU", arch="sm_90", sm_count=7, l2_bytes=123, gpu_memory_bytes=456,
                 cuda_driver="13.0", cuda_runtime="13.2")
    monkeypatch.setattr(envinfo, "gpu_info", lambda device=0: facts)
    monkeypatch.setattr(cuda, "_device_identity", lambda ordinal: {})
    be = cuda.CudaBackend.__new__(cuda.CudaBackend)
    be.props, be.cc, be.force_turing = {"sharedMemPerBlockOptin": 232448}, 90, False
    be.device = SimpleNamespace(id=0)
    be.cp = SimpleNamespace(__version__="14.2.0", cuda=SimpleNamespace(nvrtc=SimpleNamespace(getVersion=lambda: (13, 0))))
    d = be.describe()
    assert (d["gpu"], d["arch"], d["sm_count"], d["l2_bytes"], d["memory_bytes"]) == ("Fake GPU", "sm_90", 7, 123, 456)
    assert (d["driver_version"], d["runtime_version"], d["nvrtc_version"]) == ("13.0", "13.2", "13.0")
