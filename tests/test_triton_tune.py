"""scripts/triton_tune.py on the CPU: its arguments, the candidates it enumerates for the PR shapes,
its one-line errors, the table entry it prints, and (through Triton's interpreter) one candidate of
each kernel switch on a tiny shape against FP64 and the numerics model."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import triton_tune as T  # noqa: E402

from pa_bench.backends import triton_runner  # noqa: E402

_reason = triton_runner.unavailable_reason(need_gpu=False)
if _reason:
    pytest.skip(_reason, allow_module_level=True)


def test_arguments():
    a = T.parse_args([])
    assert (a.config, a.shapes, a.candidates, a.out, a.rows, a.budget_s, a.list) == (
        "configs/pr2092.yaml", None, None, None, 32, 180.0, False)
    assert (a.min_seconds, a.max_seconds) == (0.2, 1.5)
    a = T.parse_args(["--shapes", "32Kx1024,0x1536", "--out", "x", "--candidates", "m64-w4-s5-asm-tma", "--no-v2"])
    assert (a.shapes, a.out, a.candidates, a.no_v2) == ("32Kx1024,0x1536", "x", "m64-w4-s5-asm-tma", True)
    with pytest.raises(SystemExit) as exc:
        T.parse_args(["--rows", "0"])
    assert exc.value.code == 2
    settings = T.timing_settings(a.min_seconds, 1.5)
    assert (settings["hot"], settings["min_seconds"], settings["max_seconds"]) == (False, 0.2, 1.5)
    assert (settings["prime"], settings["round_samples"]) == (False, 1)   # each sample after another candidate's


def test_candidates_of_the_pr_shapes(capsys):
    args = T.parse_args([])
    pbs = T.problems(args)
    assert [p.shape.label for p in pbs] == ["32Kx1024", "64Kx512", "1.5K", "2.1Kx256"]
    mod = triton_runner.kernel_module()
    for pb in pbs:
        cfgs = T.enumerate_candidates(pb, 132)
        assert cfgs[0] == mod.default_config(128, 4, pb.queries, 32, 132)
        assert 15 <= len(cfgs) <= 32 and len(set(cfgs)) == len(cfgs)
        assert {c.convert for c in cfgs} == {"cast", "bits", "asm"} and {c.loads for c in cfgs} == {"gather", "tile", "tma"}
        changed = [c.name for c in cfgs if T.arithmetic(c) != "same"]
        # 128-key tiles over two of the 64-key pages: `tile`, as the 64-key tiles' fastest loads
        assert changed == ["m64-w4-s5-asm-tile-n128", "m64-w4-s3-asm-tile-n128", "m128-w8-s5-asm-tile-n128",
                           "m128-w8-s7-asm-tile-n128", "m64-w4-s3-asm-tile-n128-dh", "m128-w8-s5-asm-tile-n128-dh"]
    assert T.main(["--list"]) == 0
    out = capsys.readouterr().out
    for label in ("32Kx1024 (d128-h32.8-paged64-q1024-k65536)", "64Kx512", "1.5K", "2.1Kx256", "m128-w8-s5-asm-tile",
                  "tile 128 (changes tile_keys)"):
        assert label in out


def test_named_candidates_put_the_default_first_and_drop_what_cannot_run():
    args = T.parse_args(["--shapes", "2.1Kx256"])
    pb = T.problems(args)[0]
    cfgs = T.enumerate_candidates(pb, 132, "m128-w8-s5-asm-tile,m64-w4-s3-cast-gather")
    assert [c.name for c in cfgs] == ["m64-w4-s3-cast-gather", "m128-w8-s5-asm-tile"]
    from pa_bench.problem.plan import Problem

    page16 = Problem(pb.shape, page=16)
    assert [c.name for c in T.enumerate_candidates(page16, 132, "m64-w4-s5-asm-tma")] == ["m64-w4-s3-cast-gather"]


def test_bad_input_is_one_line_error(capsys):
    assert T.main(["--list", "--candidates", "m64-w4-s5-asm-warp"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: not a triton configuration name") and err.count("\n") == 1
    assert T.main(["--list", "--shapes", "12xx3"]) == 2
    assert capsys.readouterr().err.startswith("error: ")


def test_best_per_shape_and_the_table_entry(monkeypatch):
    rows = [
        {"shape": "A", "candidate": "m128-w8-s3-cast-gather", "status": "ok", "arithmetic": "same", "ms": 3.0},
        {"shape": "A", "candidate": "m128-w8-s5-asm-tile", "status": "ok", "arithmetic": "same", "ms": 1.5,
         "vs_default": 2.0},
        {"shape": "A", "candidate": "m64-w4-s5-asm-gather-n128", "status": "ok", "arithmetic": "tile 128", "ms": 1.0},
        {"shape": "A", "candidate": "m64-w4-s5-asm-tma", "status": "failed", "arithmetic": "same", "ms": 0.5},
        {"shape": "B", "candidate": "m64-w4-s3-cast-gather", "status": "ok", "arithmetic": "same", "ms": 0.1},
        {"shape": "B", "candidate": "v2", "status": "reference", "arithmetic": "cuda kernel", "ms": 0.05},
    ]
    best = T.best_per_shape(rows)      # a 128-key candidate that passed is as eligible; never v2 or a failure
    assert {s: r["candidate"] for s, r in best.items()} == {"A": "m64-w4-s5-asm-gather-n128", "B": "m64-w4-s3-cast-gather"}
    rows[2]["status"] = "failed"
    best = T.best_per_shape(rows)
    assert {s: r["candidate"] for s, r in best.items()} == {"A": "m128-w8-s5-asm-tile", "B": "m64-w4-s3-cast-gather"}
    monkeypatch.setattr(triton_runner, "TUNED", {"Other GPU": {"c0": "m64-w4-s3-cast-gather"}})
    text = T.table_entry("NVIDIA H200", best, {"A": "cA", "B": "cB"}, "results/x/triton_tune.json")
    scope = {}
    exec(text, scope)
    assert scope["TUNED"] == {"Other GPU": {"c0": "m64-w4-s3-cast-gather"},
                              "NVIDIA H200": {"cA": "m128-w8-s5-asm-tile", "cB": "m64-w4-s3-cast-gather"}}
    assert "1.5 ms, 2.00x the default" in text and "# scripts/triton_tune.py, results/x/triton_tune.json" in text


def test_one_candidate_of_each_switch_in_the_interpreter(monkeypatch):
    """The representatives of every switch value among a tiny paged shape's candidates, run by the
    interpreter (the PTX conversion replaced by the bit conversion, which the interpreter runs),
    pass parity against FP64; those at the default's launch parameters give its bits."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    from pa_bench.problem.inputs import make_inputs
    from pa_bench.problem.plan import Problem
    from pa_bench.problem.shapes import parse_shape

    pb = Problem(parse_shape("150x40"), heads_q=4, heads_kv=2, head_dim=64, layout="paged", page=64, seed=2)
    cfgs = T.enumerate_candidates(pb, 132)
    reps = T.switch_representatives(cfgs)
    assert reps[0] == cfgs[0]
    seen = {(k, getattr(c, k)) for c in reps for k in ("convert", "loads", "k_trans", "warp_specialize", "block_n")}
    assert {("convert", "asm"), ("loads", "tma"), ("k_trans", True), ("block_n", 128)} <= seen   # ws: no candidate
    mod = triton_runner.kernel_module()
    inputs = make_inputs(pb)
    default = T.cpu_check(inputs, reps[0])
    assert default["parity"], default["why"]
    for cfg in reps[1:]:
        if cfg.convert not in mod.INTERPRETER_CONVERTS:
            cfg = mod.Config.parse(cfg.name.replace("-asm-", "-bits-"))
        res = T.cpu_check(inputs, cfg, default["out"])
        assert res["parity"], f"{cfg.name}: {res['why']}"
        same_launch = (cfg.block_m, cfg.block_n) == (reps[0].block_m, reps[0].block_n)
        if same_launch:
            assert res["bitwise"], cfg.name
    assert np.isfinite(default["out"]).all()


class _FakeCp:
    """The few CuPy calls scripts/triton_tune.py makes, on NumPy arrays."""

    float16, float32, uint16, uint32 = np.float16, np.float32, np.uint16, np.uint32
    empty, asarray, array_equal = staticmethod(np.empty), staticmethod(np.asarray), staticmethod(np.array_equal)

    @staticmethod
    def asnumpy(x):
        return np.asarray(x)

    class cuda:
        class runtime:
            @staticmethod
            def deviceSynchronize():
                pass


class _FakeTimer:
    def hold(self): pass
    def flush(self): pass
    def start(self): self.t = time.perf_counter()
    def stop(self): self.ms = (time.perf_counter() - self.t) * 1e3
    def release(self): pass
    def elapsed(self, deadline_s=None): return self.ms, False
    def synchronize(self, deadline_s=None): pass


class _FakeSession:
    """The pa_bench.Session calls of the GPU path, answered on the CPU (the reference and the model
    by NumPy, the kernel's arrays from the host)."""

    made: list = []

    def __init__(self, problem):
        from pa_bench.problem.inputs import make_inputs

        self.problem, self.inputs = problem, make_inputs(problem)
        self.model_tiles = []
        _FakeSession.made.append(self)

    def sample_rows(self, n, seed=0):
        from pa_bench.numerics.reference import sample_rows

        return sample_rows(self.problem.queries, n, seed)

    def kernel_arrays(self):
        from pa_bench.backends.triton_runner import _host_arrays

        return _host_arrays(self.inputs)

    def reference(self, rows):
        from pa_bench.numerics.reference import reference_attention

        pb, inputs = self.problem, self.inputs
        return reference_attention(inputs.q, inputs.k_i8, inputs.v_i8, pb.context, pb.softmax_scale, rows=rows,
                                   k_scale=inputs.k_scale, v_scale=inputs.v_scale)

    def model(self, variant, rows, tile_keys, split_keys, pv_chain_keys, max_slack):
        from pa_bench.numerics.model import model_attention

        assert (variant, split_keys, pv_chain_keys, max_slack) == ("triton", 0, 0, None)
        self.model_tiles.append(tile_keys)
        return model_attention(self.inputs, tile_keys, rows)

    def close(self):
        pass

    def unsupported(self, variant, timing=False):
        return "no v2 on the CPU"

    def time_calls(self, calls, **settings):
        from pa_bench.measure import timing
        from pa_bench.problem.config import TimingSettings

        return timing.time_interleaved(calls, TimingSettings(**settings), timer=_FakeTimer())


def test_the_gpu_path_on_a_fake_backend(monkeypatch, capsys):
    """run_shape end to end with the interpreter: rows for passing, failing (the PTX conversion the
    interpreter cannot run) and arithmetic-changing candidates, the bitwise column, timings, and
    the fastest pick."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(T.Shape, "device", "cpu")
    monkeypatch.setattr(T, "cupy_module", lambda: _FakeCp)
    from pa_bench.problem.plan import Problem
    from pa_bench.problem.shapes import parse_shape

    pb = Problem(parse_shape("130x40"), heads_q=4, heads_kv=2, head_dim=64, layout="paged", page=64, seed=4)
    mod = triton_runner.kernel_module()
    cfgs = [mod.Config.parse(n) for n in ("m64-w4-s3-cast-gather", "m64-w4-s3-bits-tile", "m64-w4-s5-bits-tma-kt",
                                          "m64-w4-s3-asm-tile", "m64-w4-s3-cast-gather-n128",
                                          "m128-w8-s5-bits-tile-n128")]
    args = T.parse_args(["--rows", "8", "--max-seconds", "0.3", "--min-seconds", "0.01"])
    rows = []
    _FakeSession.made.clear()
    T.run_shape(_FakeSession, pb, cfgs, args, time.perf_counter(), 132, rows)
    backend = _FakeSession.made[0]
    by = {r["candidate"]: r for r in rows}
    assert [r["candidate"] for r in rows] == [c.name for c in cfgs]
    for name in ("m64-w4-s3-cast-gather", "m64-w4-s3-bits-tile", "m64-w4-s5-bits-tma-kt"):
        r = by[name]
        assert (r["status"], r["parity"], r["bitwise_vs_default"], r["arithmetic"]) == ("ok", "PASS", True, "same"), r
        assert r["ms"] > 0 and r["tflops"] >= 0 and r["vs_default"] > 0 and r["samples"] >= 1
    assert by["m64-w4-s3-asm-tile"]["status"] == "failed" and "inline_asm" in by["m64-w4-s3-asm-tile"]["note"]
    assert backend.model_tiles == [64, 128]           # a model per tile size, built once
    for name in ("m64-w4-s3-cast-gather-n128", "m128-w8-s5-bits-tile-n128"):
        wide = by[name]
        assert (wide["status"], wide["parity"], wide["bitwise_vs_default"]) == ("ok", "PASS", "n/a")
        assert wide["arithmetic"].startswith("tile 128")
        assert wide["model_err"] != by["m64-w4-s3-cast-gather"]["model_err"]   # judged by the 128-key model
    best = T.best_per_shape(rows)[pb.shape.label]
    passed = [r for r in rows if r["status"] == "ok" and r["candidate"] != "v2"]
    assert best["status"] == "ok" and best["parity"] == "PASS" and best["candidate"] != "v2"
    assert best["ms"] == min(r["ms"] for r in passed)          # the fastest that passed, any tile size
    out = capsys.readouterr().out
    assert "m64-w4-s3-asm-tile" in out and "failed: InterpreterError" in out


def test_run_all_writes_the_table_entry_and_files(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(T.Shape, "device", "cpu")
    monkeypatch.setattr(T, "cupy_module", lambda: _FakeCp)
    monkeypatch.setattr(triton_runner, "TUNED", {})
    from pa_bench.problem.plan import Problem
    from pa_bench.problem.shapes import parse_shape

    pb = Problem(parse_shape("70x20"), heads_q=2, heads_kv=1, head_dim=64, layout="contiguous", seed=5)
    args = T.parse_args(["--rows", "4", "--max-seconds", "0.2", "--min-seconds", "0.01", "--out", str(tmp_path),
                         "--candidates", "m64-w4-s3-bits-gather,m64-w4-s3-bits-tma"])
    assert T.run_all(_FakeSession, "Fake GPU", 132, [pb], args, time.perf_counter(), watch=False) == 0
    import csv
    import json

    data = json.loads((tmp_path / "triton_tune.json").read_text())
    cls = triton_runner.problem_class(pb)
    assert data["classes"] == {pb.shape.label: cls} and data["meta"]["gpu"] == "Fake GPU"
    assert data["best"][pb.shape.label] in {r["candidate"] for r in data["rows"] if r["status"] == "ok"}
    scope = {}
    exec(data["tuned_entry"], scope)
    assert scope["TUNED"] == {"Fake GPU": {cls: data["best"][pb.shape.label]}}
    with open(tmp_path / "triton_tune.csv") as f:
        table = list(csv.DictReader(f))
    assert [r["candidate"] for r in table] == ["m64-w4-s3-cast-gather", "m64-w4-s3-bits-gather", "m64-w4-s3-bits-tma"]
    assert set(T.COLUMNS) <= set(table[0])
    assert "the table entry" in capsys.readouterr().out


def test_apply_replaces_the_table_in_triton_runner(tmp_path, capsys):
    source = T.RUNNER_FILE.read_text()
    assert source.count(T.TABLE_START) == 1
    entry = T.table_entry("NVIDIA H200", {"32Kx1024": {"candidate": "m128-w8-s5-asm-tile", "ms": 1.2, "vs_default": 2.9}},
                          {"32Kx1024": "d128-h32.8-paged64-q1024-k65536"})
    once = T.apply_entry(source, entry)
    head = source[:source.index(T.TABLE_START)]
    assert once.startswith(head + entry + "\n") and once.count(T.TABLE_START) == 1
    block_end = once.index("\n}\n", len(head)) + 2
    rest = once[block_end:]
    assert source.endswith(rest) and len(rest) > 1000          # the text after the table is untouched
    assert T.apply_entry(once, entry) == once                  # a filled table is replaced as a whole
    scope = {}
    exec(once[len(head):block_end], scope)
    from pa_bench.backends import triton_runner   # the entry keeps the table's other classes

    assert scope["TUNED"]["NVIDIA H200"] == {**triton_runner.TUNED.get("NVIDIA H200", {}),
                                             "d128-h32.8-paged64-q1024-k65536": "m128-w8-s5-asm-tile"}
    with pytest.raises(ValueError, match="not a TUNED table"):
        T.apply_entry(source, "x = 1")
    bad = tmp_path / "run.json"
    bad.write_text("{}")
    assert T.main(["--apply", str(bad)]) == 2
    assert capsys.readouterr().err.startswith("error: --apply")


def test_a_hang_writes_what_was_measured_and_exits(monkeypatch, tmp_path, capsys):
    import json

    exits = []
    monkeypatch.setattr(T.os, "_exit", exits.append)
    args = T.parse_args(["--out", str(tmp_path)])
    outputs = T.Outputs(args, {"gpu": "G"}, time.perf_counter())
    outputs.rows.append({"shape": "32Kx1024", "candidate": "m128-w8-s3-cast-gather", "status": "ok",
                         "arithmetic": "same", "ms": 3.5})
    outputs.classes["32Kx1024"] = "c"
    dog = T.Watchdog(outputs.hung)
    dog.arm("32Kx1024 m128-w8-s5-asm-tma", 0.05)
    deadline = time.monotonic() + 10
    while not exits and time.monotonic() < deadline:
        time.sleep(0.1)
    dog.disarm()
    assert exits[:1] == [3]
    data = json.loads((tmp_path / "triton_tune.json").read_text())
    assert data["rows"][-1]["candidate"] == "m128-w8-s5-asm-tma" and data["rows"][-1]["status"] == "failed"
    assert "hung" in data["rows"][-1]["note"] and data["best"] == {"32Kx1024": "m128-w8-s3-cast-gather"}
    assert "error: 32Kx1024 m128-w8-s5-asm-tma: the GPU gave no result" in capsys.readouterr().out
