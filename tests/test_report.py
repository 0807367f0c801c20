"""Markdown report from a hand-made run directory (records + meta only, no GPU, no config)."""

import datetime as dt
import importlib.util
import math
import sys

import pytest

from pa_bench.errors import EmptyRun
from pa_bench.store.records import Record
from pa_bench.fmt import err as fmt_err, ms as fmt_ms
from pa_bench.present.report import build_report, write_report
from pa_bench.store.results import new_run_dir

WHEN = dt.datetime(2026, 11, 30, 3, 9, 58, tzinfo=dt.timezone.utc)
HAS_MPL = importlib.util.find_spec("matplotlib") is not None

COMMON = dict(config="pr2092", heads_q=32, heads_kv=8, head_dim=128, layout="paged", page=64,
              data="realistic", backend="cuda", gpu="NVIDIA H200", arch="sm_90", out_dtype="float32",
              softmax_scale=1 / math.sqrt(128), seed=0, mma="m16n8k16", force_turing=False)

PR = {  # shape: (ctx, nq, label, PR v1 ms, PR v2T ms, PR v2T err)
    "32Kx1024": (32768, 1024, None, 13.0, 7.6, 3.7e-6),
    "0x1536": (0, 1536, "1.5K", 6.2, 5.0, 4.5e-6),
}

META = {
    "command": ["pa-bench", "run", "configs/pr2092.yaml"],
    "created": "2026-11-30T03:09:58Z",
    "environment": {"gpu": "NVIDIA H200", "arch": "sm_90", "sm_count": 132, "driver": "570.86",
                    "cuda_runtime": "12.8", "cupy": "13.6.0", "nvcc": "12.8", "torch": None,
                    "sm_clock_max_mhz": 1980.0, "git_commit": "abc1234"},
    "config": {
        "name": "pr2092",
        "description": "PR 2092's table.",
        "timing": {"hot": False, "warmup": 5, "min_seconds": 0.5, "max_seconds": 15.0,
                   "max_noise": 0.005, "min_samples": 10, "max_samples": 10000},
        "reference": {"source": "PR 2092: RTX 2080 Ti 22 GB (sm_75), SM clock 1650 MHz",
                      "figures": {}},
    },
}


def make_run(tmp_path, sampled=None, timed=True, name="pr2092"):
    run = new_run_dir(tmp_path / "results", name, "cuda", WHEN)
    run.write_meta(META)
    for shape, (ctx, nq, label, pr_v1, pr_v2t, pr_err) in PR.items():
        base = dict(COMMON, shape=shape, context=ctx, queries=nq, label=label, sampled_rows=sampled)
        t1 = dict(ms_median=6.0, ms_q1=5.95, ms_q3=6.05, ms_min=5.9, ms_max=6.3, samples=100,
                  tflops=300.0, kv_gbps=1500.0, sm_clock_mhz=1980.0, throttled=0) if timed else {}
        t2 = dict(ms_median=4.0, ms_q1=3.98, ms_q3=4.02, ms_min=3.9, ms_max=4.2, samples=100,
                  tflops=450.0, kv_gbps=2250.0, sm_clock_mhz=1975.0, throttled=3,
                  speedup_vs_v1=1.5, speedup_lo=1.49, speedup_hi=1.51) if timed else {}
        run.save_record(Record(**base, variant="v1", max_abs_err=3.6e-6, model_max_abs_err=3.0e-6,
                               err_ratio=1.2, parity_pass=True, deterministic=True,
                               ref_ms=pr_v1, **t1))
        run.save_record(Record(**base, variant="v2", max_abs_err=4.0e-6, model_max_abs_err=3.1e-6,
                               err_ratio=1.29, parity_pass=True, ms_median=4.1 if timed else None))
        run.save_record(Record(**base, variant="v2t", max_abs_err=3.9e-6, model_max_abs_err=3.1e-6,
                               err_ratio=1.258, parity_pass=True, diff_vs_v2=0.0, diff_vs_v1=2e-6,
                               ref_ms=pr_v2t, ref_err=pr_err, **t2))
        run.save_record(Record(**base, variant="torch-sdpa", status="skipped",
                               reason="PyTorch is not installed"))
    return run


def test_formatting_helpers():
    assert fmt_ms(13.04567) == "13.046" and fmt_ms(0.012345) == "0.0123" and fmt_ms(None) == "–"
    assert fmt_err(3.7e-6) == "3.70e-06"


def test_report_has_pr_figures_beside_ours_and_parameters(tmp_path):
    run = make_run(tmp_path)
    md = build_report(run.path, plots=False)
    assert md.startswith("# pa-bench: pr2092 on NVIDIA H200")
    # parameters of the run
    for text in ("| heads (query / KV) | 32 / 8 |", "| head dim | 128 |",
                 "paged, 64 keys per page", "realistic, seed 0", "| output dtype | float32 |",
                 "0.0883883 (1/sqrt(128))", "NVIDIA H200 (sm_90, 132 SMs)", "570.86", "13.6.0",
                 "Command: `pa-bench run configs/pr2092.yaml`", "cold (L2 flushed"):
        assert text in md, text
    # what the PR left unstated
    assert "What the PR left unstated" in md
    assert "the PR's \"1.5K\" row: read as 0 x 1536" in md
    # exact numbers in shape titles
    assert "### 32Kx1024 (32768 x 1024)" in md and "### 1.5K (0 x 1536)" in md
    # per-variant row: ms [q1-q3], paired speed-up with spread, errors, parity, throttle flag
    v2t_row = next(l for l in md.splitlines() if l.startswith("| v2t | 4.000"))
    assert "4.000 [3.980–4.020] ⚠ 3 throttled" in v2t_row
    assert "1.50x [1.49–1.51]" in v2t_row and "3.90e-06" in v2t_row and "| pass |" in v2t_row
    assert "v2t output max difference vs v1 2.00e-06; vs v2 0 (bitwise identical)." in md
    # the PR's figures beside ours
    header = ("| shape | PR v1 ms | PR v2T ms | PR speed-up | PR v2T err | ours v1 ms | ours v2t ms "
              "| ours speed-up | ours v2t err |")
    assert header in md
    row = next(l for l in md.splitlines() if l.startswith("| 32Kx1024 (32768 x 1024) | 13.000"))
    assert row == ("| 32Kx1024 (32768 x 1024) | 13.000 | 7.600 | 1.71x | 3.70e-06 | 6.000 | 4.000 "
                   "| 1.50x [1.49–1.51] | 3.90e-06 |")
    assert "| 1.5K (0 x 1536) | 6.200 | 5.000 | 1.24x | 4.50e-06 |" in md
    assert "The PR's figures: PR 2092: RTX 2080 Ti 22 GB (sm_75), SM clock 1650 MHz." in md
    # skipped rows with reasons, throttling, peer note
    assert "- 32Kx1024 (32768 x 1024) torch-sdpa: skipped: PyTorch is not installed" in md
    assert "## Throttled samples" in md and "v2t: 3 of 100 samples throttled" in md
    assert "no torch-sdpa baseline" in md
    assert "sampled" not in md  # every row compared


def test_report_says_sampled(tmp_path):
    md = build_report(make_run(tmp_path, sampled=64).path, plots=False)
    assert "Errors on 64 sampled query rows of 1024" in md
    assert "3.90e-06* |" in md and "errors on sampled query rows" in md


def test_parity_only_run_and_failures(tmp_path):
    run = make_run(tmp_path, timed=False)
    run.save_record(Record(**dict(COMMON, shape="0x1536", context=0, queries=1536, label="1.5K"),
                           variant="v2t", status="failed", reason="parity: 12 NaN/Inf",
                           parity_pass=False, nan_inf=12, max_abs_err=float("nan"), canary_ok=False))
    md = build_report(run.path, plots=False)
    assert "**FAIL** (12 NaN/Inf, guard overwritten)" in md
    assert "- 1.5K (0 x 1536) v2t: failed: parity: 12 NaN/Inf" in md
    assert "| v1 | – | – |" in md  # no timing: empty cells, no crash


@pytest.mark.parametrize("header_only", [False, True])
def test_a_run_without_rows_is_an_error(tmp_path, header_only):
    run = new_run_dir(tmp_path, "x", "numpy", WHEN)
    run.write_meta({**META, "status": "interrupted"})
    if header_only:
        run.write_records([])
        assert run.records_path.read_text().startswith("config,")
    with pytest.raises(EmptyRun) as info:
        build_report(run.path, plots=False)
    msg = str(info.value)
    assert ("has only its header" if header_only else "is missing") in msg
    assert "interrupted" in msg and "\n" not in msg


def _plan(shapes, variants, **meta):
    return {**META, "config": {**META["config"], "shapes": shapes, "variants": variants}, **meta}


@pytest.mark.parametrize("status, words", [
    ("interrupted", ["the run was interrupted", "pa-bench run --resume"]),
    ("running", ["still says `running`: the run was killed", "pa-bench run --resume"]),
])
def test_an_unfinished_run_names_its_missing_rows(tmp_path, status, words):
    run = make_run(tmp_path)  # 2 shapes x 4 variants in records.csv
    run.write_meta(_plan(["32Kx1024", {"shape": "0x1536", "label": "1.5K"}, "2.1Kx256"],
                         ["v1", "v2", "v2t", "torch-sdpa"], status=status, mode="run"))
    md = build_report(run.path, plots=False)
    head = md.split("## Parameters")[0]
    assert "**Incomplete run**" in head and "8 of 12 planned shape x variant rows" in head
    for w in words:
        assert w in head
    for v in ("v1", "v2", "v2t", "torch-sdpa"):
        assert f"- 2.1Kx256 {v}: missing: the run stopped before this row" in md
    assert "every planned shape x variant ran" not in md
    assert "0x1536 v1: missing" not in md  # a labelled shape is matched by its numbers


def test_a_complete_run_says_nothing_is_missing(tmp_path):
    run = make_run(tmp_path)
    run.write_meta(_plan(["32Kx1024", {"shape": "0x1536", "label": "1.5K"}],
                         ["v1", "v2", "v2t", "torch-sdpa"], status="complete"))
    md = build_report(run.path, plots=False)
    assert "Incomplete run" not in md and "missing:" not in md
    assert "- 32Kx1024 (32768 x 1024) torch-sdpa: skipped: PyTorch is not installed" in md


def test_figures_for_shapes_the_run_lacks_are_not_called_absent(tmp_path):
    run = make_run(tmp_path)
    meta = _plan(["32Kx1024", "0x1536", "64Kx512"], ["v1", "v2t"], status="interrupted")
    meta["config"]["reference"] = {"source": "PR 2092", "figures": {
        "64Kx512": {"v1": {"ms": 6.7, "err": None}, "v2t": {"ms": 4.8, "err": 4.9e-6}}}}
    run.write_meta(meta)
    records = run.records()
    for r in records:  # the figures are the config's, for a shape the run never reached
        r.ref_ms = r.ref_err = None
    run.write_records(records)
    md = build_report(run.path, plots=False)
    assert "carries no reference figures" not in md
    assert "The config carries the PR's figures for 64Kx512, but this run has no rows" in md


def test_an_untimed_run_claims_no_timing_parameters(tmp_path):
    run = make_run(tmp_path, timed=False)
    for r in (records := run.records()):
        r.ms_median = None
        r.backend = "numpy"
    run.write_records(records)
    md = build_report(run.path, plots=False)
    timing_row = next(line for line in md.splitlines() if line.startswith("| timing |"))
    assert "nothing was timed in this run (the numpy backend does not time)" in timing_row
    assert "warm-up" not in md and "L2 flushed" not in md


def test_plots_skipped_without_matplotlib(tmp_path, monkeypatch):
    for mod in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, mod)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    run = make_run(tmp_path)
    path = write_report(run)
    md = path.read_text()
    assert path == run.path / "report.md"
    assert "Plots skipped: matplotlib is not installed (pip install 'pa-bench[plot]')." in md
    assert not list(run.path.glob("*.png"))


@pytest.mark.skipif(not HAS_MPL, reason="matplotlib is not installed (pip install 'pa-bench[plot]')")
def test_plots_written_and_linked(tmp_path):
    run = make_run(tmp_path)
    write_report(run)
    assert (run.path / "ms_per_chunk.png").exists()
    assert not (run.path / "tflops_vs_context.png").exists()  # one context per query count
    # a second context for the same query count draws the TFLOP/s vs context plot
    run.save_record(Record(**dict(COMMON, shape="64Kx1024", context=65536, queries=1024), variant="v2t",
                           ms_median=8.0, tflops=460.0))
    run.save_record(Record(**dict(COMMON, shape="64Kx1024", context=65536, queries=1024), variant="v1",
                           ms_median=12.0, tflops=310.0))
    path = write_report(run)
    md = path.read_text()
    for name in ("ms_per_chunk.png", "tflops_vs_context.png"):
        png = run.path / name
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"]({name})" in md
    # written elsewhere: plots go beside that report, named after the run
    other = write_report(run, tmp_path / "out" / "r.md")
    assert (tmp_path / "out" / f"{run.run_id}-ms_per_chunk.png").exists()
    assert f"]({run.run_id}-ms_per_chunk.png)" in other.read_text()


@pytest.mark.skipif(not HAS_MPL, reason="matplotlib is not installed (pip install 'pa-bench[plot]')")
def test_no_plot_for_parity_only(tmp_path):
    md = build_report(make_run(tmp_path, timed=False).path)
    assert "No timing data in this run: nothing to plot." in md


def test_rows_that_stopped_short_of_the_noise_limit_and_peers_are_marked(tmp_path):
    run = new_run_dir(tmp_path / "results", "pr2092", "cuda", WHEN)
    run.write_meta(META)
    base = dict(COMMON, shape="32Kx1024", context=32768, queries=1024)
    timed = dict(ms_q1=1.9, ms_q3=2.1, ms_min=1.8, ms_max=2.3, samples=50)
    run.save_record(Record(**base, variant="v1", ms_median=2.0, ms_rel_spread=0.012, stop_reason="timeout",
                           host_bound=True, max_abs_err=3e-6, model_max_abs_err=3e-6, err_ratio=1.0,
                           parity_pass=True, **timed))
    run.save_record(Record(**base, variant="v2", ms_median=1.5, ms_rel_spread=0.004, stop_reason="noise",
                           max_abs_err=3e-6, model_max_abs_err=3e-6, err_ratio=1.0, parity_pass=True, **timed))
    run.save_record(Record(**base, variant="torch-sdpa", ms_median=1.7, stop_reason="noise",
                           max_abs_err=8e-6, parity_pass=None, **timed))
    md = build_report(run)
    v1_row = next(line for line in md.splitlines() if line.startswith("| v1 "))
    v2_row = next(line for line in md.splitlines() if line.startswith("| v2 "))
    peer_row = next(line for line in md.splitlines() if line.startswith("| torch-sdpa "))
    assert "⏱ timeout at 1.2% spread" in v1_row and "host-bound" in v1_row
    assert "⏱" not in v2_row and "host-bound" not in v2_row
    assert "peer: no model" in peer_row and "8.00e-06" in peer_row


def test_report_says_whose_clock_it_is(tmp_path):
    """A clock from the stamps is the one the samples ran at; NVML's (no source, or nvml) is the
    clock the GPU is set to, and the report says so."""
    md = build_report(make_run(tmp_path).path, plots=False)
    clock = next(l for l in md.splitlines() if l.startswith("| SM clock |"))
    assert "1975–1980 MHz as the driver reports it" in clock and "nominal 1980 MHz" in clock
    run = new_run_dir(tmp_path / "stamped", "pr2092", "cuda", WHEN)
    run.write_meta(META)
    run.save_record(Record(**COMMON, shape="32Kx1024", context=32768, queries=1024, variant="v3",
                           ms_median=1.1, samples=30, sm_clock_mhz=1805.0, clock_source="sm-cycles"))
    clock = next(l for l in build_report(run.path, plots=False).splitlines() if l.startswith("| SM clock |"))
    assert "1805 MHz, the clock the samples ran at" in clock
