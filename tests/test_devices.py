"""run --devices with fake GPUs: real worker processes on the numpy backend, one per
"device", merged into one run directory whose rows name their device."""

from __future__ import annotations

import json
import sys

import pytest

from pa_bench import devices
from pa_bench.problem.config import load_config
from pa_bench.problem.plan import make_plan
from pa_bench.shard import Shard, shard_problems
from pa_bench.store.results import open_run

FAKE = [devices.Device(0, "Fake GPU A", "GPU-aaaa-0"), devices.Device(1, "Fake GPU B", "GPU-bbbb-1"),
        devices.Device(2, "Fake GPU C", "GPU-cccc-2")]


@pytest.fixture
def fake_gpus(monkeypatch):
    monkeypatch.setattr(devices, "discover", lambda: list(FAKE))


def test_devices_run_is_one_run_with_every_row_and_its_device(smoke_yaml, numpy_args, invoke,
                                                              fake_gpus, tmp_path):
    res = invoke("run", smoke_yaml, *numpy_args, "--devices", "0,2", "--sample-rows", "8",
                 "--results", tmp_path)
    assert res.exit_code == 0, res.output
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]  # one run directory
    run = open_run(run_dir)
    records = run.records()
    plan = make_plan(load_config(smoke_yaml))
    assert sorted(r.key() for r in records) == sorted(
        (p.shape.written, v) for p in plan.problems for v in plan.variants)
    for k, dev in enumerate([FAKE[0], FAKE[2]]):  # device k ran shard k/2
        mine = {p.shape.written for p in shard_problems(plan.problems, Shard(k, 2))}
        rows = [r for r in records if r.shape in mine]
        assert rows and {(r.device_index, r.device_uuid) for r in rows} == {(dev.index, dev.uuid)}
    assert all(r.parity_pass and r.sampled_rows == 8 for r in records)
    meta = run.read_meta()
    assert [d["uuid"] for d in meta["devices"]] == ["GPU-aaaa-0", "GPU-cccc-2"]
    assert [p["shard"] for p in meta["parts"]] == [
        {**p["shard"], "index": k, "count": 2} for k, p in enumerate(meta["parts"])]
    assert meta["status"] == "complete" and meta["wall_seconds"] > 0
    assert (run_dir / "parts" / "gpu2.log").exists() and (run_dir / "report.md").exists()


def test_worker_env_pins_one_gpu_by_uuid():
    env = devices.worker_env(FAKE[1], 2, base={"PATH": "/bin"})
    assert env["CUDA_VISIBLE_DEVICES"] == "GPU-bbbb-1" and env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert int(env["OMP_NUM_THREADS"]) >= 1
    assert devices.worker_env(devices.Device(5, "x"), 1, base={})["CUDA_VISIBLE_DEVICES"] == "5"


def test_select_devices():
    assert devices.select("all", FAKE) == FAKE
    assert devices.select("2,0", FAKE) == [FAKE[2], FAKE[0]]
    for spec, needle in [("3", "no GPU 3 on this machine (it has 0, 1, 2)"),
                         ("0,0", "GPU 0 is named twice"), ("x", "'x' is not a GPU index")]:
        with pytest.raises(devices.DeviceError, match=needle.replace("(", r"\(").replace(")", r"\)")):
            devices.select(spec, FAKE)


def test_devices_without_gpus_is_one_line(smoke_yaml, numpy_args, one_line_error, invoke,
                                          monkeypatch, tmp_path):
    monkeypatch.setattr(devices, "discover", lambda: [])
    res = invoke("run", smoke_yaml, *numpy_args, "--devices", "all", "--results", tmp_path)
    assert "no NVIDIA GPU on this machine" in one_line_error(res, code=2)
    assert not any(tmp_path.iterdir())


def test_devices_with_shard_is_a_usage_error(smoke_yaml, one_line_error, invoke, fake_gpus,
                                             tmp_path):
    res = invoke("run", smoke_yaml, "--devices", "all", "--shard", "0/2", "--results", tmp_path)
    assert "--devices runs every shard itself" in one_line_error(res, code=2)


def test_workers_that_all_fail_are_one_line(smoke_yaml, tmp_path):
    def broken(config_file, shard, **_):
        return [sys.executable, "-c", "import sys; print('error: no GPU here'); sys.exit(2)"]

    config = make_plan(load_config(smoke_yaml), shapes="64x16").config
    with pytest.raises(devices.PaBenchError, match="no worker wrote a run: GPU 0: error: no GPU here"):
        devices.run_on_devices(config, FAKE[:2], backend="numpy", results_root=tmp_path,
                               argv_for=broken)


def test_a_failed_worker_leaves_the_others_rows_and_an_incomplete_run(smoke_yaml, tmp_path):
    def half(config_file, shard, **kw):
        if shard.index == 1:
            return [sys.executable, "-c", "import sys; sys.exit(3)"]
        return devices.worker_argv(config_file, shard, **kw)

    config = make_plan(load_config(smoke_yaml), shapes="64x16,100x20", variants=["v1"]).config
    path = devices.run_on_devices(config, FAKE[:2], backend="numpy", results_root=tmp_path,
                                  sample_rows=4, argv_for=half, write_report=False)
    run = open_run(path)
    meta = json.loads((path / "meta.json").read_text())
    assert meta["status"] == "incomplete" and len(meta["parts"]) == 1
    assert [r.device_uuid for r in run.records()] == ["GPU-aaaa-0"]


def test_clock_and_identity_follow_the_cuda_device_not_nvml_index_0(monkeypatch):
    """NVML numbers the host's GPUs and ignores CUDA_VISIBLE_DEVICES: a worker pinned to GPU 3
    sees it as CUDA device 0, and must read GPU 3's clock (found by PCI bus id)."""
    import types

    from pa_bench.measure import timing

    cupy = types.SimpleNamespace(cuda=types.SimpleNamespace(
        Device=lambda i: types.SimpleNamespace(pci_bus_id="0000:3B:00.0")))

    def by_index(i):
        raise AssertionError("NVML index 0 is another GPU under CUDA_VISIBLE_DEVICES")

    nvml = types.SimpleNamespace(
        nvmlInit=lambda: None, NVML_CLOCK_SM=1, nvmlDeviceGetHandleByIndex=by_index,
        nvmlDeviceGetHandleByPciBusId=lambda bus: {"0000:3B:00.0": "gpu3"}[bus],
        nvmlDeviceGetClockInfo=lambda h, kind: {"gpu3": 1755}[h],
        nvmlDeviceGetIndex=lambda h: {"gpu3": 3}[h],
        nvmlDeviceGetUUID=lambda h: {"gpu3": b"GPU-3333"}[h])
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    clock = timing.ClockReader(0)
    assert clock.source == "nvml" and clock.read() == 1755.0
    assert timing.device_identity(0) == {"device_index": 3, "device_uuid": "GPU-3333"}


def test_workers_share_the_prefetch_memory_budget(monkeypatch):
    from pa_bench.problem import prefetch

    monkeypatch.delenv("PA_BENCH_PREFETCH_BYTES", raising=False)
    monkeypatch.setattr(prefetch, "default_budget", lambda: 90_000)
    env = devices.worker_env(FAKE[0], 3, base={})
    assert env["PA_BENCH_PREFETCH_BYTES"] == "30000"           # a third each for three workers
    assert devices.worker_env(FAKE[0], 3, base={"PA_BENCH_PREFETCH_BYTES": "0"})["PA_BENCH_PREFETCH_BYTES"] == "0"
