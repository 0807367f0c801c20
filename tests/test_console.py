"""What pa-bench prints on a terminal (pa_bench.present.console): tables that fit 80 or 100
columns without splitting a word or a number, --wide for every column, and progress in a log
that names the shape, the variant, the rows done and an ETA, and never counts back."""

from __future__ import annotations

import re

import pytest

from pa_bench import variants as registry
from pa_bench.present import console as C
from pa_bench.problem.config import DEFAULT_CONFIG, load_config
from pa_bench.store.records import Record


def _full_run() -> list[Record]:
    """Two PR shapes x every registered variant, timed, with long cells: the widest a table gets."""
    recs = []
    for shape, label, ctx, q in (("32Kx1024", None, 32768, 1024), ("0x1536", "1.5K", 0, 1536)):
        for i, v in enumerate(registry.names()):
            r = Record(shape=shape, label=label, context=ctx, queries=q, variant=v, status="ok",
                       backend="cuda", gpu="NVIDIA H200", arch="sm_90")
            if v == "torch-flex":
                r.status, r.reason = "skipped", "torch-flex needs torch >= 2.5"
                recs.append(r)
                continue
            r.ms_median = 12.3456 / (1 + i)
            r.ms_ci_lo, r.ms_ci_hi = 0.99 * r.ms_median, 1.01 * r.ms_median
            r.ms_q1, r.ms_q3 = r.ms_ci_lo, r.ms_ci_hi
            r.tflops, r.kv_gbps, r.samples, r.sm_clock_mhz = 123.4 * (1 + i), 2345.0, 200, 1980.0
            r.stop_reason, r.host_bound = ("max_samples", True) if i == 2 else ("noise", False)
            r.speedup_vs_v1, r.speedup_lo, r.speedup_hi = 1.0 + i, 0.99 + i, 1.01 + i
            r.max_abs_err, r.model_max_abs_err, r.err_ratio = 1.28e-3, 1.2e-3, 1.07
            r.quant_max_abs_err, r.deterministic = 0.356, True
            r.parity_pass = None if registry.is_peer(v) else True
            r.impl = {"torch-sdpa": "cudnn", "torch-sdpa+dequant": "flash"}.get(v)
            recs.append(r)
    return recs


def _show(capsys, monkeypatch, columns: int, wide: bool = False) -> list[str]:
    monkeypatch.setenv("COLUMNS", str(columns))
    C.show_run(_full_run(), {"backend": "cuda", "gpu": "NVIDIA H200", "arch": "sm_90"},
               load_config(DEFAULT_CONFIG), parity=True, timing=True, wide=wide)
    return capsys.readouterr().out.splitlines()


def _words(lines: list[str]) -> set[str]:
    return {w for ln in lines for w in ln.split()}


def test_a_full_runs_tables_fit_100_columns_and_split_no_word(capsys, monkeypatch):
    lines = _show(capsys, monkeypatch, 100)
    assert max(len(ln) for ln in lines) <= 100
    words = _words(lines)
    # every variant, number and header word is whole somewhere on a line
    assert set(registry.names()) <= words
    assert {"1.28e-03", "1.20e-03", "3.56e-01", "12.346", "[12.222-12.469]", "123.4", "3.00x",
            "max_samples!", "host-bound", "shape", "verdict", "TFLOP/s", "skipped"} <= words
    assert "32Kx1024 (32768x1024)" in "\n".join(lines)  # the shape's exact numbers beside it
    # the kernel a peer ran, and a row's own note, under the tables
    assert "torch-sdpa ran cudnn" in lines and "torch-sdpa+dequant ran flash" in lines
    assert "1.5K torch-flex: torch-flex needs torch >= 2.5" in lines


def test_at_80_columns_cells_wrap_at_spaces_only(capsys, monkeypatch):
    lines = _show(capsys, monkeypatch, 80)
    words = _words(lines)
    assert {"1.28e-03", "12.346", "[12.222-12.469]", "shape", "torch-sdpa+dequant"} <= words
    # a word is never cut: no fragment of one stands alone on a line
    assert not words & {"shap", "1.28", "e-03", "torch-sdpa+", "[12.222-"}
    # only the variant names (18 columns of "torch-sdpa+dequant") keep a table above 80
    assert max(len(ln) for ln in lines) <= 100


def test_wide_tables_hold_every_column(capsys, monkeypatch):
    lines = _show(capsys, monkeypatch, 100, wide=True)
    header = "\n".join(lines)
    for column in ("diff v1", "determ.", "PR err", "reason", "ms q1-q3", "ms 95% CI", "impl",
                   "KV GB/s", "SM MHz", "throttled"):
        assert column in header
    assert max(len(ln) for ln in lines) > 100  # at full width: no wrapping


def test_the_time_tables_reason_leaves_out_parity_notes(capsys, monkeypatch):
    recs = _full_run()
    recs[0].reason = "parity judged on the 2 of 8 rows the numerics model ran on; timing: late"
    monkeypatch.setenv("COLUMNS", "100")
    C.show_run(recs, {}, load_config(DEFAULT_CONFIG), parity=True, timing=True, wide=True)
    parity_table, time_table = capsys.readouterr().out.split(C.TIME_TITLE)
    assert "parity judged" in parity_table and "parity judged" not in time_table
    assert "timing: late" in time_table


@pytest.mark.parametrize("width, fits", [(80, 80), (100, 100)])
def test_the_smoke_run_fits_the_terminal(invoke, smoke_yaml, numpy_args, tmp_path, width, fits):
    res = invoke("run", smoke_yaml, *numpy_args, "--results", tmp_path, env={"COLUMNS": str(width)})
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert max(len(ln) for ln in lines) <= fits
    assert {"1.28e-03", "shape", "256x64", "v2t", "pass"} <= _words(lines)


def test_compare_fits_80_columns(invoke, tmp_path):
    from test_compare import make, rec  # noqa: PLC0415 - the runs test_compare builds

    variants = ("v1", "torch-sdpa+dequant")
    a = make(tmp_path, "a", [rec("32Kx1024", v, 13.0) for v in variants])
    b = make(tmp_path, "b", [rec("32Kx1024", v, 14.5, parity=False) for v in variants], minutes=1)
    res = invoke("compare", a.path, b.path, env={"COLUMNS": "80"})
    assert res.exit_code == 0, res.output
    lines = [ln for ln in res.stdout.splitlines() if not ln.startswith(("A: ", "B: "))]
    assert max(len(ln) for ln in lines) <= 80
    assert {"torch-sdpa+dequant", "13.000", "14.500", "+11.5%", "(regressed)"} <= _words(lines)
    wide = invoke("compare", a.path, b.path, "--wide", env={"COLUMNS": "80"}).stdout
    assert "pass -> FAIL (regressed)" in wide and "95% interval" in wide


def test_kernels_fit_80_columns(invoke, monkeypatch):
    from pa_bench.backends import kernel_info

    built = {"compiled": True, "reason": None, "spill_bytes": 0, "combine_registers": 40,
             "cp_async": False, "bulk_copy": False}
    rows = [dict(built, variant="v1", arch="sm_90", registers=203, smem_bytes=16896, mma="m16n8k16",
                 cta="128 threads: 4 warps x 16 rows of one query head"),
            dict(built, variant="v3", arch="sm_90", registers=168, smem_bytes=0, bulk_copy=True,
                 mma="wgmma.m64n128k16,wgmma.m64n64k16", wgmma_serialized="non wgmma instructions",
                 cta="384 threads: a producer warpgroup + 2 consumer warpgroups x 64 rows"),
            dict(variant="v3", arch="sm_80", compiled=False, cta="384 threads",
                 reason="not built: v3 needs sm_90a (wgmma, setmaxnreg), not sm_80")]
    monkeypatch.setattr(kernel_info, "kernel_table", lambda *a, **k: rows)
    res = invoke("kernels", env={"COLUMNS": "80"})
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert max(len(ln) for ln in lines) <= 80
    words = _words(lines)
    assert {"wgmma.m64n128k16", "wgmma.m64n64k16", "bulk", "16896", "203"} <= words
    assert "v3 sm_80: not built: v3 needs sm_90a (wgmma, setmaxnreg), not sm_80" in lines
    assert any(ln.startswith("v3 sm_90: WGMMA SERIALISED by ptxas") for ln in lines)
    assert "segment" in res.stdout
    assert "CTA / reason" in invoke("kernels", "--wide").stdout  # every column, one row a build


def test_fit_widths_wraps_the_header_before_the_cells():
    header = ["shape", "a long header"]
    rows = [["256x64", "1.0"], ["1023x113", "2.0"]]
    assert C.fit_widths(header, rows, 100) == [8, 13]
    assert C.fit_widths(header, rows, 21) == [8, 11]     # "a long" over "header"
    assert C.fit_widths(header, rows, 5) == [8, 6]       # no narrower than its longest words


# --------------------------------------------------------------------------- progress


def _log_lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.strip()]


def test_progress_in_a_log_names_shape_variant_rows_and_eta(capsys, monkeypatch, smoke_yaml,
                                                            tmp_path):
    from pa_bench import runner
    from pa_bench.backends.numpy import NumpyBackend
    from pa_bench.problem.plan import make_plan

    monkeypatch.setattr(C.RichProgress, "QUIET_S", 0.0)  # a line at every row from the start
    config = make_plan(load_config(smoke_yaml), shapes="256x64,1023x113",
                       variants=["v1", "v2t"]).config
    runner.run_parity(config, NumpyBackend(), results_root=tmp_path, progress=C.RichProgress(),
                      write_report=False)
    lines = [ln for ln in _log_lines(capsys.readouterr().err) if "rows" in ln]
    assert len(lines) == 4  # one at each finished row
    done = [int(re.search(r"(\d+)/4 rows", ln).group(1)) for ln in lines]
    assert done == sorted(done) == [1, 2, 3, 4]  # never back
    assert lines[0].startswith("parity smoke on numpy: 256x64 (256x64): kernels v1 ")
    assert lines[-1].startswith("parity smoke on numpy: 1023x113 (1023x113): kernels v2t ")
    assert all("ETA " in ln for ln in lines) and lines[-1].endswith("ETA 0s")


def test_the_eta_weighs_the_rows_left_by_their_work(monkeypatch):
    clock = [100.0]
    monkeypatch.setattr(C.time, "monotonic", lambda: clock[0])
    progress = C.RichProgress()
    progress.start(4, "run", work=10.0)
    assert progress.eta() is None  # nothing done yet
    progress.advance(work=1.0, ran=False)  # kept by --resume: no time, out of the estimate
    clock[0] += 30.0
    progress.advance(work=3.0)  # 3 of the 9 FLOPs left took 30 s
    assert progress.eta() == pytest.approx(60.0)
    assert "2/4 rows" in progress.status() and progress.status().endswith("ETA 1m00s")
    rows_only = C.RichProgress()
    rows_only.start(3, "prompt")
    clock[0] += 10.0
    rows_only.advance()
    assert rows_only.eta() == pytest.approx(20.0)  # no work given: by rows


def test_durations():
    assert [C.duration(s) for s in (None, 0.4, 59.6, 61, 3725)] == ["-", "0s", "1m00s", "1m01s", "1h02m"]


def _skipped(shape: str, variant: str, reason: str) -> Record:
    return Record(shape=shape, label=None, context=0, queries=64, variant=variant,
                  status="skipped", reason=reason, backend="numpy", gpu="cpu", arch="cpu")


def test_a_reason_several_variants_share_at_every_shape_is_one_line():
    recs = [_skipped(s, v, f"{v} runs on the cuda backend only")
            for s in ("0x64", "64x64") for v in ("torch-sdpa", "torch-flex")]
    lines, grouped = C.skipped_groups(recs)
    assert lines == ["skipped at every shape: torch-sdpa, torch-flex (each runs on the cuda backend only)"]
    assert grouped == recs
    # two shapes of three: named; a reason of one variant only, or not every pairing: own lines
    lines, _ = C.skipped_groups(recs + [Record(shape="128x64", context=128, queries=64, variant="v1")])
    assert lines == ["skipped at 0x64, 64x64: torch-sdpa, torch-flex (each runs on the cuda backend only)"]
    assert C.skipped_groups(recs[:1] + recs[2:3]) == ([], [])
    assert C.skipped_groups(recs[:3]) == ([], [])


def test_a_prompt_read_with_nothing_timed_prints_one_line(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    why = "timing: the numpy backend does not time kernels (needs CuPy and a GPU)"
    summary = {"tokens": 1280, "chunks": 5, "chunk": 256,
               "totals": [{"variant": v, "total_ms": None, "reason": why} for v in ("v1", "v2t")]}
    C.show_prompt(summary, None)
    out = capsys.readouterr().out
    assert out.replace("\n", " ").startswith(
        "prompt read: 1280 tokens in 5 chunks of 256, not timed: the numpy backend does not time "
        "kernels (needs CuPy and a GPU) ")  # one line, wrapped at the console's width
    assert "attention-only" not in out and "skipped" not in out
    summary["totals"][1]["failed"] = True   # a failure is never folded away: the table shows it
    C.show_prompt(summary, None)
    assert "failed" in capsys.readouterr().out
