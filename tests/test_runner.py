"""The runner's walk: records per shape x variant, skipped/failed rows, timing merge, resume."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from pa_bench import runner
from pa_bench.problem.config import DEFAULT_CONFIG, load_config
from pa_bench.errors import PaBenchError
from pa_bench.resume import ResumeConflict
from pa_bench.launch import split_keys
from pa_bench.backends.numpy import NumpyBackend
from pa_bench.store.records import COLUMNS
from pa_bench.store.results import open_run
from pa_bench.measure.timing import TimingResult


@pytest.fixture(scope="module")
def smoke(smoke_yaml):
    return load_config(smoke_yaml)


def tiny(config, shapes="256x64,1023x113", variants=None):
    """A fast config: the smoke parameters on a few shapes."""
    from pa_bench.problem.plan import make_plan

    return make_plan(config, shapes=shapes, variants=variants).config


def records_of(path):
    return {r.key(): r for r in open_run(path).records()}


class FakeGpu(NumpyBackend):
    """The numpy model posing as a GPU backend, with scripted failures and synthetic timing."""

    name = "cuda"
    kernels_are_model = False

    def __init__(self, *, unsupported=None, crash=None, too_big=(), perturb=None, nan=None,
                 timing=True, interrupt_on=None):
        super().__init__()
        self.unsupported = unsupported or {}
        self.crash = crash
        self.too_big = set(too_big)
        self.perturb = perturb
        self.nan = nan
        self.timing = timing
        self.interrupt_on = interrupt_on
        self.computed = []

    def describe(self):
        return {"backend": "cuda", "gpu": "Fake GPU", "arch": "sm_90", "mma": "m16n8k16"}

    def unsupported_parity(self, variant, problem):
        return self.unsupported.get(variant) or super().unsupported_parity(variant, problem)

    def unsupported_timing(self, variant, problem):
        if variant.startswith("torch-"):
            return "PyTorch is not installed"
        return self.unsupported.get(variant)

    def prepare(self, inputs):
        if inputs.problem.context in self.too_big:
            raise PaBenchError(f"shape {inputs.problem.label} will not fit: needs about 900 GiB")
        return inputs

    def compute(self, prepared, variant, rows, check_determinism=None):
        shape = prepared.problem.label
        self.computed.append((shape, variant))
        if self.interrupt_on == (shape, variant):
            raise KeyboardInterrupt
        if self.crash == (shape, variant):
            raise RuntimeError("CUDA error: an illegal memory access was encountered\nmore text")
        ko = super().compute(prepared, variant, rows, check_determinism)
        if self.perturb == variant:
            ko = replace(ko, out=np.nextafter(ko.out, np.float32(np.inf)))
        if self.nan == variant:
            out = ko.out.copy()
            out[0, 0, 0] = np.nan
            ko = replace(ko, out=out)
        return ko

    def time(self, prepared, variants, settings):
        if not self.timing:
            return super().time(prepared, variants, settings)
        out = {}
        for i, v in enumerate(variants):
            base = {"v1": 2.0, "v2": 1.5, "v2t": 1.6}[v]
            samples = [base + 0.01 * ((k * 7) % 5) for k in range(20)]
            out[v] = TimingResult(samples_ms=samples, clocks_mhz=[1980.0] * 19 + [1000.0],
                                  nominal_mhz=1980.0, throttled=[False] * 19 + [True],
                                  stop_reason="noise" if v != "v2" else "timeout", hot=False,
                                  clock_source="nvml", host_bound=v == "v1", late_samples=int(v == "v1"))
        return out


def test_run_all_on_numpy_fills_every_parity_column(smoke, tmp_path):
    path = runner.run_all(smoke, NumpyBackend(), results_root=tmp_path, command=["pa-bench", "run"])
    recs = records_of(path)
    assert len(recs) == len(smoke.shapes) * len(smoke.variants)
    for rec in recs.values():
        assert rec.status == "ok"
        assert rec.parity_pass is True
        assert rec.err_ratio == 1.0  # the numpy backend's kernel is the model
        assert rec.max_abs_err == rec.model_max_abs_err > 0
        assert rec.quant_max_abs_err > 0
        assert rec.deterministic is True and rec.canary_ok is True and rec.nan_inf == 0
        assert rec.sampled_rows is None  # smoke: every row
        assert rec.ms_median is None and "does not time" in rec.reason
        assert rec.gpu == "cpu" and rec.backend == "numpy" and rec.config == "smoke"
        assert rec.diff_vs_v1 is not None and rec.diff_vs_v2 is not None
    assert recs[("1023x113", "v2t")].diff_vs_v2 == 0.0
    assert recs[("1023x113", "v1")].diff_vs_v1 == 0.0
    assert (path / "report.md").is_file()
    meta = json.loads((path / "meta.json").read_text())
    assert meta["status"] == "complete" and meta["mode"] == "run"
    assert meta["config"]["name"] == "smoke" and meta["seed"] == 0
    assert meta["command"] == ["pa-bench", "run"]
    assert meta["backend"]["backend"] == "numpy" and "environment" in meta
    assert "git_commit" in meta and meta["wall_seconds"] >= 0


def test_records_follow_the_plan_order(smoke, tmp_path):
    cfg = tiny(smoke, variants=["v2t", "v1"])
    path = runner.run_parity(cfg, NumpyBackend(), results_root=tmp_path)
    keys = [r.key() for r in open_run(path).records()]
    assert keys == [("256x64", "v2t"), ("256x64", "v1"), ("1023x113", "v2t"), ("1023x113", "v1")]


def test_sampled_rows_are_recorded(smoke, tmp_path):
    path = runner.run_parity(tiny(smoke, "1023x113"), NumpyBackend(), results_root=tmp_path,
                             sample_rows=8)
    for rec in records_of(path).values():
        assert rec.sampled_rows == 8 and rec.parity_pass is True


def test_skipped_failed_and_too_big_rows_do_not_stop_the_sweep(smoke, tmp_path):
    cfg = tiny(smoke, "256x64,1023x113,0x96")
    be = FakeGpu(unsupported={"v2": "v2 needs cp.async (sm_80+); this GPU is sm_75"},
                 crash=("256x64", "v2t"), too_big=[1023])
    path = runner.run_all(cfg, be, results_root=tmp_path)
    recs = records_of(path)
    assert len(recs) == 9
    v2 = recs[("256x64", "v2")]
    assert v2.status == "skipped" and "cp.async" in v2.reason
    crashed = recs[("256x64", "v2t")]
    assert crashed.status == "failed"
    assert crashed.reason.startswith("RuntimeError: CUDA error: an illegal memory access")
    assert "more text" not in crashed.reason  # one line
    for v in ("v1", "v2t"):
        big = recs[("1023x113", v)]
        assert big.status == "skipped" and "will not fit" in big.reason
    ok = recs[("0x96", "v1")]  # the sweep went on after the failures
    assert ok.status == "ok" and ok.parity_pass is True and ok.ms_median is not None


def test_timing_is_merged_into_the_parity_record(smoke, tmp_path):
    cfg = tiny(smoke, "256x64")
    path = runner.run_all(cfg, FakeGpu(), results_root=tmp_path)
    recs = records_of(path)
    v1, v2t = recs[("256x64", "v1")], recs[("256x64", "v2t")]
    assert v2t.parity_pass is True and v2t.ms_median == pytest.approx(1.62)
    assert v2t.samples == 20 and v2t.throttled == 1 and v2t.sm_clock_mhz == 1980.0
    assert v2t.ms_q1 <= v2t.ms_median <= v2t.ms_q3 and v2t.ms_rel_spread > 0
    assert v2t.tflops > 0 and v2t.kv_gbps > 0
    assert v2t.speedup_vs_v1 == pytest.approx(2.02 / 1.62, rel=0.02)
    assert v2t.speedup_lo <= v2t.speedup_vs_v1 <= v2t.speedup_hi
    assert v1.speedup_vs_v1 == 1.0
    # why sampling stopped, the clock's source and the host-bound flag reach records.csv
    assert (v2t.stop_reason, v2t.clock_source, v2t.host_bound) == ("noise", "nvml", False)
    assert recs[("256x64", "v2")].stop_reason == "timeout" and v1.host_bound is True
    problem_flops = 4 * 64 * 4 * sum(256 + i + 1 for i in range(64))
    assert v2t.tflops == pytest.approx(problem_flops / (v2t.ms_median * 1e-3) / 1e12)
    samples = open_run(path).samples()
    assert len(samples["256x64|v2t"]) == 20
    # the model runs on the CPU beside a GPU backend: the error ratio is a real ratio
    assert v2t.err_ratio == pytest.approx(v2t.max_abs_err / v2t.model_max_abs_err)


def test_model_rows_are_sampled_past_the_work_budget(smoke, tmp_path, monkeypatch):
    budget = 4 * 16 * 1100  # Hq x rows x keys: about 16 of the 113 rows
    monkeypatch.setattr(runner, "MODEL_WORK_BUDGET", budget)
    path = runner.run_parity(tiny(smoke, "1023x113"), FakeGpu(), results_root=tmp_path)
    for rec in records_of(path).values():
        assert rec.sampled_rows is None  # the kernel is compared with FP64 on every row
        assert rec.parity_pass is True  # judged on the model's rows: like with like
        assert rec.err_ratio == 1.0  # the fake kernel is the model
        assert rec.max_abs_err >= rec.model_max_abs_err
        assert "rows the numerics model ran on" in rec.reason


def test_v2t_must_be_bitwise_v2(smoke, tmp_path):
    path = runner.run_parity(tiny(smoke, "256x64"), FakeGpu(perturb="v2t"), results_root=tmp_path)
    rec = records_of(path)[("256x64", "v2t")]
    assert rec.parity_pass is False and "bitwise" in rec.reason
    assert rec.diff_vs_v2 > 0


def test_nan_fails_parity(smoke, tmp_path):
    path = runner.run_parity(tiny(smoke, "256x64"), FakeGpu(nan="v1"), results_root=tmp_path)
    rec = records_of(path)[("256x64", "v1")]
    assert rec.status == "ok" and rec.parity_pass is False and rec.nan_inf == 1
    assert "NaN" in rec.reason


def test_interrupt_keeps_finished_rows_and_resume_carries_on(smoke, tmp_path):
    cfg = tiny(smoke)
    be = FakeGpu(timing=False, interrupt_on=("1023x113", "v2"))
    with pytest.raises(runner.RunInterrupted) as err:
        runner.run_parity(cfg, be, results_root=tmp_path)
    run_dir = err.value.run_dir
    kept = records_of(run_dir)
    assert ("256x64", "v2t") in kept and ("1023x113", "v1") in kept
    assert ("1023x113", "v2") not in kept
    assert json.loads((run_dir / "meta.json").read_text())["status"] == "interrupted"

    again = FakeGpu(timing=False)
    path = runner.run_parity(cfg, again, results_root=tmp_path, resume_run=run_dir)
    assert path == run_dir
    assert {s for s, _ in again.computed} == {"1023x113"}  # the finished shape is not redone
    recs = records_of(path)
    assert len(recs) == 6 and all(r.parity_pass for r in recs.values())
    assert recs[("256x64", "v1")] == kept[("256x64", "v1")]


def test_resume_with_another_config_is_refused(smoke, tmp_path):
    path = runner.run_parity(tiny(smoke, "256x64"), NumpyBackend(), results_root=tmp_path)
    other = load_config(DEFAULT_CONFIG)
    with pytest.raises(ResumeConflict, match="name is 'pr2092' here but 'smoke' in the run") as info:
        runner.run_parity(other, NumpyBackend(), results_root=tmp_path, resume_run=path)
    assert info.value.exit_code == 2


def test_resume_keeps_the_runs_settings_and_refuses_other_ones(smoke, tmp_path):
    """A resume takes the stored sampled rows and refuses a different layout."""
    cfg = tiny(smoke, "256x64,1023x113", ["v1"])
    path = runner.run_parity(cfg, NumpyBackend(), results_root=tmp_path, sample_rows=16)
    run = open_run(path)
    run.write_records([r for r in run.records() if r.shape == "256x64"])
    runner.run_parity(cfg, NumpyBackend(), results_root=tmp_path, resume_run=path)
    assert {r.sampled_rows for r in open_run(path).records()} == {16}
    with pytest.raises(ResumeConflict, match="--sample-rows is 8 here but 16 in the run"):
        runner.run_parity(cfg, NumpyBackend(), results_root=tmp_path, resume_run=path, sample_rows=8)
    with pytest.raises(ResumeConflict, match="head_dim is 128 here but 64 in the run"):
        runner.run_parity(cfg.with_overrides(head_dim=128), NumpyBackend(), results_root=tmp_path,
                          resume_run=path)
    with pytest.raises(ResumeConflict, match="the command is 'run' here but 'parity'"):
        runner.run_all(cfg, NumpyBackend(), results_root=tmp_path, resume_run=path)
    with pytest.raises(ResumeConflict, match="the backend is cuda here but numpy"):
        runner.run_parity(cfg, FakeGpu(), results_root=tmp_path, resume_run=path)


def test_shape_work_is_a_pure_resume_plan():
    from pa_bench.resume import shape_work
    from pa_bench.store.records import Record

    done = Record(shape="s", variant="v1", status="ok", parity_pass=True, ms_median=1.0)
    half = Record(shape="s", variant="v2", status="ok", parity_pass=True)  # not timed yet
    work = shape_work(["v1", "v2", "v2t", "torch-sdpa"], parity=True, timing=True,
                      parity_reasons={"torch-sdpa": "peers are timing-only"},
                      timing_reasons={"v2t": "no GPU"}, previous={"v1": done, "v2": half})
    assert work.kept == ("v1",)
    assert work.parity == ("v2", "v2t")
    assert work.timing == ("v1", "v2", "torch-sdpa")  # every timable variant, timed together
    assert work.skipped == ()
    assert work.last_phase("parity", "time") == {"v2": "time", "v2t": "parity", "torch-sdpa": "time"}


def test_save_outputs_writes_npy_per_shape(smoke, tmp_path):
    out = tmp_path / "outputs"
    runner.run_parity(tiny(smoke, "1023x113"), NumpyBackend(), results_root=tmp_path / "r",
                      sample_rows=5, save_outputs=out)
    d = out / "1023x113"
    rows = np.load(d / "rows.npy")
    assert len(rows) == 5 and rows[0] == 0 and rows[-1] == 112
    ref = np.load(d / "reference.npy")
    assert ref.dtype == np.float64 and ref.shape == (4, 5, 64)
    for v in ("v1", "v2", "v2t"):
        out_v = np.load(d / f"{v}.npy")
        assert out_v.shape == ref.shape and out_v.dtype == np.float32


def test_two_runs_never_share_a_directory(smoke, tmp_path):
    cfg = tiny(smoke, "256x64", ["v1"])
    a = runner.run_parity(cfg, NumpyBackend(), results_root=tmp_path)
    b = runner.run_parity(cfg, NumpyBackend(), results_root=tmp_path)
    assert a != b and a.is_dir() and b.is_dir()


def test_every_record_column_is_known(smoke):
    from pa_bench.problem.plan import make_plan

    plan = make_plan(smoke)
    job = runner._Job("run", smoke, NumpyBackend(), None, runner.NullProgress(), None, None,
                      NumpyBackend().describe())
    rec = runner.base_record(job, plan.problems[1], "v2t")
    assert rec.shape == "1023x113" and rec.context == 1023 and rec.queries == 113
    assert rec.label == "1023x113" and rec.seed == 0 and rec.softmax_scale == 0.125
    assert set(rec.to_dict()) == set(COLUMNS)


def test_resume_of_a_timed_run_retimes_the_shape_together(smoke, tmp_path):
    cfg = tiny(smoke)
    path = runner.run_all(cfg, FakeGpu(), results_root=tmp_path)
    run = open_run(path)
    before = {r.key(): r for r in run.records()}
    run.write_records([r for r in run.records() if r.key() != ("1023x113", "v2t")])

    again = FakeGpu()
    runner.run_all(cfg, again, results_root=tmp_path, resume_run=path)
    after = records_of(path)
    assert {s for s, _ in again.computed} == {"1023x113"}
    v2t = after[("1023x113", "v2t")]
    assert v2t.parity_pass is True and v2t.ms_median is not None
    assert v2t.speedup_vs_v1 is not None  # v1 was timed again beside it (interleaved)
    v1 = after[("1023x113", "v1")]
    assert v1.parity_pass is True and v1.max_abs_err == before[("1023x113", "v1")].max_abs_err
    assert after[("256x64", "v2")] == before[("256x64", "v2")]


def test_the_model_follows_the_backends_key_split(smoke, tmp_path):
    """2Kx64 on the smoke heads is split by v2/v2t (pa_bench.numerics.model.split_keys): the runner's model
    must be the split one, so the fake kernel (the model itself) has an error ratio of exactly 1."""
    backend = FakeGpu()
    path = runner.run_parity(tiny(smoke, "2Kx64"), backend, results_root=tmp_path)
    recs = records_of(path)
    assert split_keys("v2", 64, 2048, 4) == 1024 and split_keys("v1", 64, 2048, 4) == 0
    for v in ("v1", "v2", "v2t"):
        assert recs[("2Kx64", v)].err_ratio == 1.0, v


class MetaAtTheEnd(FakeGpu):
    """A backend whose meta grows as kernels are built (like the cuda backend's builds list)."""

    def __init__(self):
        super().__init__()
        self.built = []

    def compute(self, prepared, variant, rows, check_determinism=None):
        self.built.append(variant)
        return super().compute(prepared, variant, rows, check_determinism)

    def meta(self):
        return {"builds": sorted(set(self.built))}


def test_meta_records_the_builds_made_during_the_run(smoke, tmp_path):
    path = runner.run_parity(tiny(smoke, "256x64"), MetaAtTheEnd(), results_root=tmp_path)
    assert open_run(path).read_meta()["backend_meta"]["builds"] == ["v1", "v2", "v2t"]
