"""experiments/v3_stamping.py: what the stamping scripts share, checked without a GPU (a stand-in
backend and event API record what is called)."""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "experiments"))
import v3_stamping as V  # noqa: E402

from pa_bench.api import _open  # noqa: E402 - a session on a stand-in backend
from pa_bench.backends.cuda import CudaBackend  # noqa: E402


def test_the_copy_holds_every_kernel_file_and_the_hooks_first(tmp_path):
    kd = V.hooked_kernels(ROOT / "kernels", "pa-test-", "// hooks\n")
    assert sorted(p.name for p in kd.iterdir()) == sorted(p.name for p in (ROOT / "kernels").iterdir())
    assert (kd / V.HOOKS).read_text() == "// hooks\n" + (ROOT / "kernels" / V.HOOKS).read_text()
    for f in ("v3.cu", "v3_pairs.cuh", "pa_common.cuh"):
        assert (kd / f).read_text() == (ROOT / "kernels" / f).read_text()


def test_every_stamp_point_is_a_hook_of_the_kernel_and_an_unknown_one_fails_loudly():
    src = "".join((ROOT / "kernels" / f).read_text() for f in ("v3.cu", "v3_pairs.cuh"))
    for p in V.STAMP_POINTS:
        assert f"PA_V3_STAMP({p}," in src, p
    for p in V.WG_POINTS:
        assert f"PA_V3_STAMP_WG({p}," in src, p
    hooks = V.stamp_hooks("pa_x", {"landed": "x();"})
    assert "#define pa_x_landed(n) x();\n" in hooks and "#define pa_x_wg_last_pv(wg, tid, n)\n" in hooks
    with pytest.raises(SystemExit, match="no stamp point"):
        V.stamp_hooks("pa_x", {"nowhere": ""})


def test_the_problem_is_the_pr_one():
    pb = V.problem("2.1Kx256")
    assert (pb.heads_q, pb.heads_kv, pb.head_dim, pb.layout, pb.page) == (32, 8, 128, "paged", 64)
    assert pb.shape.label == "2.1Kx256"
    assert V.stamp_pins().rows == 128 and V.stamp_pins().share is None   # the stamps fit 128-row CTAs


class _Module:
    def get_function(self, name):
        return f"fn:{name}"


class _Backend:
    """Stands in for CudaBackend: its compile, probes and launcher are stubs; ``adopt`` is the real one."""

    adopt = CudaBackend.adopt
    name = "cuda"

    def __init__(self, build=None):
        from pa_bench.backends.kernels import KernelBuild

        self.b = build or KernelBuild("v3", cta_rows=128)
        self._kernels, self._combines, self._smem, self._image_bytes, self.calls = {}, {}, {}, {}, []

    def prepare(self, inputs):
        self.calls.append("prepare")
        return "prep"

    def launch(self, variant, pb):
        return "the policy's launch"

    def build(self, variant, pb, launch=None):
        assert launch == "the policy's launch"
        self.calls.append(f"build {variant}")
        return self.b

    def _module(self, build):
        self.calls.append("module")
        return _Module(), "kernel"

    def _dynamic_smem(self, mod, fn, build):
        return 1234

    def _probe_int(self, mod, name):
        self.calls.append(f"probe {name}")
        return 33280

    def launcher(self, prep, variant):
        self.calls.append(f"launcher {variant}")
        assert self._kernels == {self.b: "kernel"} and self._combines == {self.b: "fn:pa_combine"}
        return "launch"


def test_v3_runs_from_the_module_whose_stamps_are_read(monkeypatch):
    import pa_bench.problem.inputs as inputs

    monkeypatch.setattr(inputs, "make_inputs", lambda pb: "inputs")
    be = _Backend()
    session = _open(V.problem("0x64"), None, be)   # a pa_bench.Session on the stand-in
    mod, launch = V.module_launch(session)
    assert (session.prepared, launch) == ("prep", "launch") and isinstance(mod, _Module)
    assert be.calls == ["prepare", "build v3", "module", "launcher v3"] and be._smem == {be.b: 1234}
    assert be._image_bytes == {}


def test_a_shared_tile_build_gets_its_image_bytes_before_its_launcher(monkeypatch):
    """The launcher sizes a shared-tile build's workspace by its image bytes (CudaBackend does the
    same when it builds): without them the launch fails (a KeyError) before anything runs."""
    import pa_bench.problem.inputs as inputs
    from pa_bench.backends.kernels import KernelBuild

    monkeypatch.setattr(inputs, "make_inputs", lambda pb: "inputs")
    be = _Backend(KernelBuild("v3", kv_shared=True, cta_rows=128, step_keys=128))
    V.module_launch(_open(V.problem("32Kx1024"), None, be))
    assert be.calls == ["prepare", "build v3", "module", "probe pa_v3_image_bytes", "launcher v3"]
    assert be._image_bytes == {be.b: 33280}


def test_adopting_registers_everything_a_launch_reads_or_nothing():
    """CudaBackend.adopt is what both kernel() and the stamping scripts register a module with: the
    smem, the kernel, pa_combine, and (shared tiles only) the image bytes; a failed probe records none."""
    from pa_bench.backends.kernels import KernelBuild

    be = _Backend(KernelBuild("v3", kv_shared=True, cta_rows=128, step_keys=128))
    be.adopt(be.b, _Module(), "kernel")
    assert (be._smem, be._image_bytes) == ({be.b: 1234}, {be.b: 33280})
    assert (be._kernels, be._combines) == ({be.b: "kernel"}, {be.b: "fn:pa_combine"})

    other = KernelBuild("v3", cta_rows=192)
    be.adopt(other, _Module(), "k192")
    assert be._kernels[other] == "k192" and other not in be._image_bytes

    def no_probe(mod, name):
        raise RuntimeError(f"no {name}")

    be2 = _Backend(KernelBuild("v3", kv_shared=True, cta_rows=128))
    be2._probe_int = no_probe
    with pytest.raises(RuntimeError):
        be2.adopt(be2.b, _Module(), "kernel")
    assert be2._smem == be2._kernels == be2._combines == be2._image_bytes == {}


def test_event_times_warm_first_then_time_each_launch():
    log = []

    class _Event:
        def record(self):
            log.append("record")

        def synchronize(self):
            log.append("sync")

    class _Cuda:
        Event = _Event

        @staticmethod
        def get_elapsed_time(a, b):
            return 0.5                                  # ms

    class _Cp:
        cuda = _Cuda

    times = V.event_times_us(_Cp, lambda: log.append("launch"), warm=2, n=3)
    assert times == pytest.approx([500.0] * 3)
    assert log[:2] == ["launch", "launch"] and log[2:6] == ["record", "launch", "record", "sync"]
    assert log.count("launch") == 5


def test_one_stamped_launch_zeroes_launches_and_reads_back(tmp_path):
    import numpy as np

    log = []

    class _Stamps:
        def __init__(self):
            self.a = np.full((2, 3), 7, dtype=np.uint64)

        def fill(self, x):
            log.append("fill")
            self.a[:] = x

    stamps = _Stamps()

    class _Device:
        def synchronize(self):
            log.append("sync")

    class _Cuda:
        Device = _Device

    class _Cp:
        cuda = _Cuda

        @staticmethod
        def asnumpy(s):
            return s.a.copy()

    def launch():
        log.append("launch")
        stamps.a[0, 1] = 5

    t = V.stamped_launch(_Cp, stamps, launch)
    assert log == ["fill", "launch", "sync"] and t.dtype == np.int64 and t.tolist() == [[0, 5, 0], [0, 0, 0]]
    V.keep(tmp_path, "steps_toy", t, "summary")
    assert np.load(tmp_path / "steps_toy.npy").tolist() == t.tolist()
    assert (tmp_path / "steps_toy.txt").read_text() == "summary\n"
    V.keep(None, "nothing", t, "x")                        # no directory: nothing kept
