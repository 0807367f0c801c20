"""pa-bench prompt: chunking, the timed subset, the interpolation and the sums on
synthetic times, a run through a backend whose ``time`` returns known samples, and the CLI end
to end on the numpy backend."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from pa_bench import prompt as P
from pa_bench.backends.numpy import NumpyBackend
from pa_bench.errors import ConfigError
from pa_bench.store.prompt_rows import read_prompt_csv

SMALL = dict(tokens="1K", chunk="256", heads_q=4, heads_kv=2, head_dim=64)


# --------------------------------------------------------------------------- chunks


def test_98k_is_98_whole_chunks_of_1024():
    chunks = P.split_prompt(P.parse_tokens("98K"), 1024)
    assert len(chunks) == 98
    assert [(c.context, c.queries) for c in chunks[:2]] == [(0, 1024), (1024, 1024)]
    assert (chunks[-1].context, chunks[-1].queries, chunks[-1].partial) == (99328, 1024, False)


def test_the_last_chunk_is_partial_and_the_chunks_cover_the_prompt():
    chunks = P.split_prompt(100000, 1024)
    assert len(chunks) == 98
    assert (chunks[-1].context, chunks[-1].queries, chunks[-1].partial) == (99328, 672, True)
    assert not any(c.partial for c in chunks[:-1])
    assert sum(c.queries for c in chunks) == 100000
    assert all(b.context == a.end for a, b in zip(chunks, chunks[1:]))
    (only,) = P.split_prompt(100, 256)
    assert (only.context, only.queries, only.partial) == (0, 100, True)


@pytest.mark.parametrize("text, n", [("98K", 100352), ("2.5K", 2560), (100000, 100000),
                                     ("4096", 4096)])
def test_tokens_read_like_shapes(text, n):
    assert P.parse_tokens(text) == n


@pytest.mark.parametrize("bad", ["lots", 0, -5, True, "1.5"])
def test_bad_tokens_are_a_config_error(bad):
    with pytest.raises(ConfigError, match="tokens"):
        P.parse_tokens(bad)


def test_parity_on_first_middle_and_last():
    assert P.parity_chunks(P.split_prompt(98 * 1024, 1024)) == [0, 49, 97]
    assert P.parity_chunks(P.split_prompt(2 * 1024, 1024)) == [0, 1]


# --------------------------------------------------------------------------- the timed subset


def test_measured_chunks_hold_the_ends_the_partial_one_and_every_break():
    chunks = P.split_prompt(100000, 1024)
    got = P.choose_measured(chunks, 8, required=[64, 65])
    assert len(got) == 8
    assert {0, 96, 97, 64, 65} <= set(got)  # first, last full, partial, both sides of a break
    assert P.choose_measured(chunks, 200) == list(range(98))
    # the required ones are timed even past the count
    assert P.choose_measured(chunks, 3, required=[10, 11, 50, 51]) == [0, 10, 11, 50, 51, 96, 97]


def test_measured_chunks_are_spread_evenly_without_breaks():
    chunks = P.split_prompt(97 * 1024, 1024)
    got = P.choose_measured(chunks, 5)
    assert got == [0, 24, 48, 72, 96]


def test_regime_breaks_mark_both_sides_of_a_change():
    chunks = P.split_prompt(6 * 100, 100)
    regimes = [1, 1, 1, 2, 2, 2]
    assert P.regime_breaks(chunks, regimes) == [2, 3]
    assert P.regime_breaks(chunks, [1] * 6) == []


def test_segments_of_the_98k_prompt_give_a_break_at_64k():
    pc = P.load_prompt_config()
    from pa_bench.problem.plan import problem_for

    backend = NumpyBackend()
    problems = [problem_for(pc.config, c.shape()) for c in pc.chunks]
    regimes = [P.regime_of(backend, pc.config.variants, p) for p in problems]
    # v3 runs one key segment up to context 64K (from 15K on with 128-key steps, 256 CTAs of 128
    # rows: fill.pair_steps), and the long-context segments start past context 65536 | 66560
    assert P.regime_breaks(pc.chunks, regimes) == [64, 65]


def test_a_regime_is_per_variant_and_sees_v3s_fill_segments():
    """Chunks of 64 queries with 32/8 heads give v3 16 CTAs: from 1K keys on its keys run in fill
    segments (pa_bench.numerics.model.segment_keys), so the regime changes there for v3 only."""
    from pa_bench.problem.plan import Problem
    from pa_bench.problem.shapes import parse_shape

    backend = NumpyBackend()

    def regime(ctx):
        pb = Problem(shape=parse_shape(f"{ctx}x64"), heads_q=32, heads_kv=8, head_dim=128)
        return P.regime_of(backend, ["v1", "v3", "torch-sdpa"], pb)     # peers have no regime

    assert regime(512) == ((1, False), (1, False))
    assert regime(1024) == ((1, False), (2, False))
    assert regime(4096)[1][0] == -(-(4096 + 64) // backend.segment_keys("v3", Problem(
        shape=parse_shape("4096x64"), heads_q=32, heads_kv=8, head_dim=128))) == 8
    assert regime(4096)[0] == (1, False)                                 # v1: no fill rule


# --------------------------------------------------------------------------- interpolation


def _affine(chunks, a, b):
    return np.array([a + b * c.context for c in chunks])


def test_interpolation_is_exact_on_affine_times():
    chunks = P.split_prompt(40 * 64, 64)
    measured = [0, 7, 20, 39]
    w = P.interpolation_weights(chunks, measured)
    assert np.allclose(w.sum(axis=1), 1.0)
    t = _affine(chunks, 0.3, 0.002)
    assert np.allclose(w @ t[measured], t)


def test_interpolation_is_linear_between_neighbours():
    chunks = P.split_prompt(5 * 10, 10)
    w = P.interpolation_weights(chunks, [0, 4])
    t_measured = np.array([1.0, 9.0])
    assert list(w @ t_measured) == [1.0, 3.0, 5.0, 7.0, 9.0]


def test_a_partial_chunk_must_be_measured():
    chunks = P.split_prompt(45, 10)
    with pytest.raises(ValueError, match="partial"):
        P.interpolation_weights(chunks, [0, 3])
    w = P.interpolation_weights(chunks, [0, 3, 4])
    assert w[4].tolist() == [0.0, 0.0, 1.0]


def test_holdout_is_zero_on_a_line_and_sees_a_bend():
    chunks = P.split_prompt(9 * 10, 10)
    measured = [0, 4, 8]
    line = {j: 1.0 + chunks[j].context for j in measured}
    (h,) = P.holdout_checks(chunks, measured, line)
    assert h.chunk == 4 and h.rel_err == pytest.approx(0.0)
    bent = {**line, 4: line[4] * 1.25}
    (h,) = P.holdout_checks(chunks, measured, bent)
    assert h.rel_err == pytest.approx(1 / 1.25 - 1)
    # a check across a change of regime says nothing about the interpolation: left out
    assert P.holdout_checks(chunks, measured, bent, regimes=[1] * 5 + [2] * 4) == []


# --------------------------------------------------------------------------- sums


def _result(samples):
    n = len(samples)
    return SimpleNamespace(samples_ms=list(samples), clocks_mhz=[None] * n,
                           throttled=[False] * n, stop_reason="noise")


def _synthetic(chunks, measured, slopes, rounds=12):
    """Each variant's chunk time is a + b*context, times a drift shared by all variants in a
    round (so the per-round ratio is exact)."""
    drift = 1.0 + 0.02 * np.sin(np.arange(rounds))
    out = {}
    for v, (a, b) in slopes.items():
        out[v] = {j: _result((a + b * chunks[j].context) * drift) for j in measured}
    return out, drift


def test_sums_speedups_and_shares_on_synthetic_times():
    chunks = P.split_prompt(32 * 128, 128)
    measured = P.choose_measured(chunks, 6)
    slopes = {"v1": (0.2, 0.001), "v2t": (0.1, 0.0005)}  # v2t exactly twice as fast
    timings, drift = _synthetic(chunks, measured, slopes)
    rows, totals = P.summarize(chunks, measured, timings, tokens=32 * 128)
    by = {t.variant: t for t in totals}
    med = float(np.median(drift))
    exact_v1 = med * sum(0.2 + 0.001 * c.context for c in chunks)
    assert by["v1"].total_ms == pytest.approx(exact_v1)
    assert by["v1"].tokens_per_s == pytest.approx(32 * 128 / (exact_v1 / 1e3))
    assert by["v2t"].speedup_vs_v1 == pytest.approx(2.0)
    assert (by["v2t"].speedup_lo, by["v2t"].speedup_hi) == pytest.approx((2.0, 2.0))
    assert by["v2t"].rounds == 12
    assert by["v1"].speedup_vs_v1 == 1.0
    times = np.array([0.2 + 0.001 * c.context for c in chunks])
    assert by["v1"].longest_chunks == 8
    assert by["v1"].longest_share == pytest.approx(np.sort(times)[-8:].sum() / times.sum())
    assert by["v1"].holdout_err == pytest.approx(0.0, abs=1e-12)
    assert by["v1"].holdout_tested == len(measured) - 2
    assert len(rows) == 32 * 2
    sources = {(r.chunk, r.source) for r in rows if r.variant == "v1"}
    assert sources == {(c.index, "measured" if c.index in measured else "interpolated")
                       for c in chunks}
    assert sum(r.ms for r in rows if r.variant == "v2t") == pytest.approx(by["v2t"].total_ms)


def test_the_spread_comes_from_the_rounds():
    chunks = P.split_prompt(4 * 100, 100)
    measured = [0, 3]
    v1 = {0: _result([1.0, 1.0, 1.0, 1.0]), 3: _result([3.0, 3.0, 3.0, 3.0])}
    # round k: v2 takes 2, 2, 4, 4 ms in total against v1's 4: ratios 2, 2, 1, 1
    v2 = {0: _result([0.5, 0.5, 1.0, 1.0]), 3: _result([1.5, 1.5, 3.0, 3.0])}
    _, totals = P.summarize(chunks, measured, {"v1": v1, "v2": v2}, tokens=400)
    t = totals[1]
    assert t.rounds == 4
    assert (t.speedup_lo, t.speedup_hi) == pytest.approx((1.0, 2.0))
    # interpolated chunks 1 and 2 count in the weights: total v1 = 1 + 5/3 + 7/3 + 3
    assert totals[0].total_ms == pytest.approx(8.0)


def test_a_variant_missing_a_chunk_has_no_total_and_says_why():
    chunks = P.split_prompt(3 * 64, 64)
    measured = [0, 2]
    timings = {
        "v1": {0: _result([1.0] * 5), 2: _result([2.0] * 5)},
        "torch-sdpa": {0: _result([1.0] * 5), 2: "out of memory"},
        "v2": {0: P.TimingFailure("CUDARuntimeError: boom"), 2: _result([1.0] * 5)},
        "v2t": {0: "the numpy backend does not time kernels", 2: "the numpy backend does not time kernels"},
    }
    rows, totals = P.summarize(chunks, measured, timings, tokens=192)
    by = {t.variant: t for t in totals}
    assert by["v1"].total_ms == pytest.approx(4.5)
    assert by["torch-sdpa"].total_ms is None
    assert by["torch-sdpa"].reason == "timing on chunk 2: out of memory"
    assert not by["torch-sdpa"].failed and by["v2"].failed
    assert by["v2t"].reason == "timing: the numpy backend does not time kernels"
    sdpa = [r for r in rows if r.variant == "torch-sdpa"]
    assert [(r.source, r.ms) for r in sdpa] == [("measured", 1.0), ("skipped", None),
                                                ("skipped", None)]
    assert sdpa[2].reason == "out of memory"


# --------------------------------------------------------------------------- config


def test_the_98k_config():
    pc = P.load_prompt_config()
    assert (pc.prompt.tokens, pc.prompt.chunk, pc.prompt.measure) == (100352, 1024, 8)
    cfg = pc.config
    assert (cfg.heads_q, cfg.heads_kv, cfg.head_dim, cfg.layout, cfg.page, cfg.data) == \
        (32, 8, 128, "paged", 64, "normal")
    assert {"v1", "v2", "v2t", "torch-sdpa"} <= set(cfg.variants)
    assert [s.spec for s in cfg.shapes] == ["0x1024", "50176x1024", "99328x1024"]
    assert pc.prompt.reference.tok_s == {"v1": 1473.0, "v2t": 1550.0}


def test_overrides_beat_the_config():
    pc = P.load_prompt_config(None, tokens="100000", measure="all", heads_q=4, heads_kv=2,
                              max_seconds=1.5)
    assert pc.prompt.tokens == 100000 and pc.chunks[-1].partial
    assert pc.prompt.measure >= len(pc.chunks)
    assert (pc.config.heads_q, pc.config.timing.max_seconds) == (4, 1.5)


@pytest.mark.parametrize("yaml_text, needle", [
    ("name: p\nprompt: {tokens: 1K, chunk: 256}\nbogus: 1\n", "unknown key 'bogus'"),
    ("name: p\nprompt: {tokens: 1K, chunk: 256, extra: 1}\n", "prompt.extra"),
    ("name: p\nprompt: {tokens: 1K, chunk: 256}\nshapes: [1Kx256]\n", "shapes"),
    ("name: p\nprompt: {chunk: 256}\n", "prompt.tokens"),
    ("name: p\nprompt: {tokens: many, chunk: 256}\n", "prompt.tokens"),
    ("name: p\nprompt: {tokens: 1K, chunk: 256, measure: 1}\n", "prompt.measure"),
    ("name: p\nshapes: [1Kx256]\n", "missing required key 'prompt'"),
    ("name: p\nprompt: {tokens: 1K, chunk: 256}\nheads_q: 32\nheads_kv: 5\n", "heads_kv"),
])
def test_config_errors_name_the_key(tmp_path, yaml_text, needle):
    path = tmp_path / "p.yaml"
    path.write_text(yaml_text)
    with pytest.raises(ConfigError) as err:
        P.load_prompt_config(path)
    assert needle in str(err.value) and str(path) in str(err.value)


# --------------------------------------------------------------------------- a run


class KnownTimes(NumpyBackend):
    """The numpy backend (parity by the numerics model) with a ``time`` that returns known
    samples: v1 takes 0.1 + 0.001 * context ms, v2t half of that."""

    def unsupported_timing(self, variant, problem):
        return None

    def time(self, prepared, variants, settings):
        ctx = prepared.problem.context
        base = 0.1 + 0.001 * ctx
        return {v: _result([base * (0.5 if v == "v2t" else 1.0)] * 10) for v in variants}


def test_a_run_writes_prompt_csv_samples_meta_and_the_report(tmp_path):
    pc = P.load_prompt_config(None, measure=3, variants=["v1", "v2t"], **SMALL)
    path = P.run_prompt(pc, KnownTimes(), results_root=tmp_path, command=["pa-bench", "prompt"])
    rows = read_prompt_csv(path)
    assert len(rows) == 4 * 2
    v1 = [r for r in rows if r.variant == "v1"]
    assert [r.ms for r in v1] == pytest.approx([0.1 + 0.001 * 256 * i for i in range(4)])
    assert [r.source for r in v1].count("measured") == 3
    meta = json.loads((path / "meta.json").read_text())
    assert meta["mode"] == "prompt" and meta["status"] == "complete"
    totals = {t["variant"]: t for t in meta["prompt"]["totals"]}
    assert totals["v2t"]["speedup_vs_v1"] == pytest.approx(2.0)
    assert totals["v1"]["tokens_per_s"] == pytest.approx(1024 / (sum(r.ms for r in v1) / 1e3))
    samples = json.loads((path / "samples.json").read_text())
    assert set(samples) == {f"{256 * j}x256|{v}" for j in meta["prompt"]["measured"]
                            for v in ("v1", "v2t")}
    with open(path / "records.csv", newline="") as fh:
        records = list(csv.DictReader(fh))
    assert {(r["shape"], r["variant"]) for r in records} == {
        (s, v) for s in ("0x256", "512x256", "768x256") for v in ("v1", "v2t")}
    assert all(r["parity_pass"] == "True" for r in records)
    report = (path / "report.md").read_text()
    assert "## Prompt read" in report and "1,473" in report and "attention alone" in report
    assert "whole engine" in report
    # the parameters say how the chunks were timed (records.csv holds only the parity rows)
    params = {ln.split("|")[1].strip(): ln.split("|")[2].strip() for ln in report.splitlines()
              if ln.startswith("| ") and ln.count("|") == 3}
    assert params["timing"].startswith("cold") and params["timing"].endswith("per chunk (prompt.csv)")
    assert params["variants"] == "v1, v2t"
    pytest.importorskip("matplotlib")
    assert (path / "prompt_cumulative.png").stat().st_size > 0


def test_cli_prompt_on_numpy_skips_timing_and_checks_three_chunks(invoke, numpy_args, tmp_path):
    result = invoke("prompt", *numpy_args, "--tokens", "1.25K", "--chunk", "256", "--measure", "3",
                    "--heads", "4/2", "--head-dim", "64", "--variant", "v1,v2t,torch-sdpa",
                    "--results", tmp_path, "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    prompt = out["prompt"]
    assert prompt["chunks"] == 5 and prompt["parity_chunks"] == [0, 2, 4]
    assert all(t["total_ms"] is None and "numpy backend does not time" in t["reason"]
               for t in prompt["totals"])
    assert {(r["shape"], r["variant"]) for r in out["records"]} == {
        (s, v) for s in ("0x256", "512x256", "1024x256") for v in ("v1", "v2t")}
    assert all(r["parity_pass"] for r in out["records"])
    rows = read_prompt_csv(Path(out["run"]))
    assert len(rows) == 5 * 3 and {r.source for r in rows} == {"skipped"}
    assert all(r.reason for r in rows)


def test_cli_prompt_bad_config_is_one_line(one_line_error, invoke, numpy_args, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: p\nprompt: {tokens: 1K, chunk: 256}\nwhat: 1\n")
    result = invoke("prompt", "--config", bad, *numpy_args)
    assert result.exit_code == 2
    one_line_error(result, "'what'")
