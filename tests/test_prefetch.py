"""pa_bench.problem.prefetch: the next shapes' inputs drawn on threads, the same bytes, in order,
within the memory budget."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from pa_bench.problem.inputs import make_inputs
from pa_bench.problem.plan import Problem
from pa_bench.problem.prefetch import InputsPrefetch, input_bytes
from pa_bench.problem.shapes import parse_shape


def problem(shape, **kw):
    base = dict(heads_q=4, heads_kv=2, head_dim=64, layout="paged", page=16, data="realistic", seed=5)
    base.update(kw)
    return Problem(parse_shape(shape), **base)


def test_inputs_drawn_ahead_on_threads_are_the_bytes_of_drawing_them_in_turn():
    probs = [problem("300x40"), problem("1000x17", data="normal"), problem("64x64", layout="contiguous")]
    with InputsPrefetch(probs, budget_bytes=1 << 34, workers=3) as pf:
        got = [pf.take(p) for p in probs]
    for p, inp in zip(probs, got):
        want = make_inputs(p)
        assert inp.problem == p
        for name in ("q", "k_i8", "v_i8", "k_scale", "v_scale", "k_float", "v_float"):
            assert np.array_equal(getattr(inp, name), getattr(want, name)), name
        if p.layout == "paged":
            assert np.array_equal(inp.paged.k_pool, want.paged.k_pool)
            assert np.array_equal(inp.paged.page_table, want.paged.page_table)
            assert np.array_equal(inp.paged.v_scale_pool, want.paged.v_scale_pool, equal_nan=True)   # NaN filler


class FakeMake:
    """Records which problems are being made at once; each takes a little while."""

    def __init__(self, fail=()):
        self.lock = threading.Lock()
        self.running, self.peak, self.calls, self.fail = 0, 0, [], set(fail)

    def __call__(self, p):
        with self.lock:
            self.running += 1
            self.peak = max(self.peak, self.running)
            self.calls.append(p.shape.label)
        time.sleep(0.05)
        with self.lock:
            self.running -= 1
        if p.shape.label in self.fail:
            raise ValueError(f"bad {p.shape.label}")
        return ("inputs of", p.shape.label)


def labels(*shapes):
    return [problem(s) for s in shapes]


def test_shapes_ahead_start_when_one_is_taken_and_the_budget_bounds_them():
    probs = labels("10x1", "20x1", "30x1", "40x1", "50x1")
    make = FakeMake()
    # every shape "holds" 10 bytes; 30 bytes: the current one and two ahead
    pf = InputsPrefetch(probs, budget_bytes=30, workers=3, make=make, size=lambda p: 10)
    assert make.calls == []                                 # nothing before the first take
    assert pf.take(probs[0]) == ("inputs of", "10x1")
    time.sleep(0.2)
    assert sorted(make.calls) == ["10x1", "20x1", "30x1"]   # two ahead, not three
    for p in probs[1:]:
        assert pf.take(p) == ("inputs of", p.shape.label)
    pf.close()
    assert sorted(make.calls) == sorted(p.shape.label for p in probs)   # each made once
    assert make.peak <= 3


def test_a_budget_of_zero_makes_each_shape_when_it_is_taken():
    probs = labels("10x1", "20x1", "30x1")
    make = FakeMake()
    pf = InputsPrefetch(probs, budget_bytes=0, make=make, size=lambda p: 10)
    assert not pf.enabled
    pf.take(probs[0])
    time.sleep(0.1)
    assert make.calls == ["10x1"]


def test_a_passed_over_shape_is_dropped_and_errors_reach_only_their_shape():
    probs = labels("10x1", "20x1", "30x1", "40x1")
    make = FakeMake(fail={"30x1"})
    pf = InputsPrefetch(probs, budget_bytes=100, workers=3, make=make, size=lambda p: 10)
    pf.take(probs[0])
    with pytest.raises(ValueError, match="bad 30x1"):   # 20x1 passed over (e.g. all rows kept)
        pf.take(probs[2])
    assert pf.take(probs[3]) == ("inputs of", "40x1")
    pf.close()


def test_a_problem_not_in_the_list_is_made_on_the_spot():
    make = FakeMake()
    pf = InputsPrefetch(labels("10x1"), budget_bytes=100, make=make, size=lambda p: 10)
    assert pf.take(problem("99x9")) == ("inputs of", "99x9")


def test_input_bytes_grows_with_the_kv_cache():
    small, big = problem("1Kx64", heads_q=32, heads_kv=8, head_dim=128), problem("1024Kx64", heads_q=32, heads_kv=8, head_dim=128)
    assert 10e9 < input_bytes(big) < 20e9          # 1M keys, 8 KV heads, D=128: about 15 GB
    assert input_bytes(big) > 500 * input_bytes(small)


def test_the_budget_comes_from_the_environment(monkeypatch):
    from pa_bench.problem.prefetch import default_budget

    monkeypatch.setenv("PA_BENCH_PREFETCH_BYTES", "12345")
    assert default_budget() == 12345
    monkeypatch.setenv("PA_BENCH_PREFETCH_BYTES", "0")
    assert not InputsPrefetch(labels("10x1"), make=FakeMake()).enabled


def test_a_process_exits_without_waiting_for_a_shape_being_drawn_ahead():
    # the shape after the first takes 30 s to draw; the process leaves right after the first
    # (as an interrupted or failed run does) and must not wait for it
    import subprocess
    import sys
    import time

    code = (
        "import time\n"
        "from pa_bench.problem.prefetch import InputsPrefetch\n"
        "def make(p):\n"
        "    if p == 'slow':\n"
        "        time.sleep(30)\n"
        "    return p\n"
        "pf = InputsPrefetch(['fast', 'slow'], budget_bytes=10, make=make, size=lambda p: 1)\n"
        "assert pf.take('fast') == 'fast'\n"
        "time.sleep(0.2)\n"
        "raise SystemExit(3)\n"
    )
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 3, proc.stderr
    assert time.monotonic() - t0 < 15, "the process waited for the shape being drawn ahead"
