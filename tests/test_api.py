"""The public API (pa_bench/api.py, docs/API.md) on the numpy backend: the doc's CPU examples run
as written, the frames carry records.csv's columns and types, and a session's parts agree."""

from __future__ import annotations

import re
import warnings
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import pa_bench
from pa_bench.store.records import COLUMNS, read_csv

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "API.md"
SMALL = dict(backend="numpy", heads_q=4, heads_kv=2)


def cpu_examples() -> list[str]:
    """The python blocks of docs/API.md's section "On a CPU"."""
    text = DOC.read_text()
    section = text.split("## On a CPU", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


def test_doc_has_cpu_examples_and_every_public_name():
    assert len(cpu_examples()) == 2
    text = DOC.read_text()
    for name in pa_bench.__all__:
        if name != "__version__":
            assert f"`{name}" in text or f"{name}(" in text, name


@pytest.mark.parametrize("index", [0, 1])
def test_doc_cpu_example_runs(index, tmp_path):
    code = cpu_examples()[index]
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
           "TMPDIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    if index == 0:
        assert "run directory: " + str(tmp_path) in done.stdout
        assert "the numpy backend does not time kernels" in done.stdout
    assert not (tmp_path / "results").exists()  # nothing written where it was run


def test_check_frame_is_records_csv(tmp_path):
    frame = pa_bench.check(shapes="0x64,100x32", variants="v1,v2", results=tmp_path, **SMALL)
    run_dir = Path(frame.attrs["run_dir"])
    assert run_dir.parent == tmp_path
    assert list(frame.columns) == list(COLUMNS)
    stored = pd.read_csv(run_dir / "records.csv")
    assert list(stored.columns) == list(frame.columns)
    assert list(zip(frame["shape"], frame["variant"])) == [
        ("0x64", "v1"), ("0x64", "v2"), ("100x32", "v1"), ("100x32", "v2")]
    assert frame["parity_pass"].all()
    assert frame["max_abs_err"].gt(0).all() and frame["heads_q"].eq(4).all()
    # the same records as the file, value for value
    assert [r.to_dict() for r in read_csv(run_dir / "records.csv")] == \
        [r.to_dict() for r in pa_bench.read_run(run_dir).pipe(_records)]
    assert str(frame["parity_pass"].dtype) == "boolean" and str(frame["ms_median"].dtype) == "float64"


def _records(frame):
    from pa_bench.store.records import frame_to_records

    return frame_to_records(frame)


def test_bench_on_numpy_skips_timing_with_the_reason(tmp_path):
    frame = pa_bench.bench(shapes="0x64", variants="v2", results=tmp_path, **SMALL)
    assert len(frame) == 1 and np.isnan(frame.loc[0, "ms_median"])
    assert "the numpy backend does not time kernels" in frame.loc[0, "reason"]
    both = pa_bench.bench(shapes="0x64", variants="v2", parity=True, results=tmp_path, **SMALL)
    assert bool(both.loc[0, "parity_pass"]) and both.loc[0, "max_abs_err"] > 0
    assert np.isnan(both.loc[0, "ms_median"])


def test_bad_override_names_the_key():
    from pa_bench.errors import ConfigError

    with pytest.raises(ConfigError, match="unknown key 'heads'"):
        pa_bench.load_config(heads=4)


def test_make_problem_takes_the_config_and_fields():
    config = pa_bench.load_config(heads_q=4, heads_kv=2, layout="contiguous")
    pb = pa_bench.make_problem("2.1Kx256", config, seed=7)
    assert (pb.context, pb.queries, pb.heads_q, pb.heads_kv, pb.layout, pb.seed) == (
        2150, 256, 4, 2, "contiguous", 7)
    assert pa_bench.make_problem("0x64") == pa_bench.Problem(pa_bench.parse_shape("0x64"))


def test_session_parts_agree_on_numpy():
    config = pa_bench.load_config(heads_q=4, heads_kv=2)
    with pa_bench.session("100x32", backend="numpy", config=config) as s:
        rows = s.sample_rows(8, seed=1)
        assert len(rows) == 8 and rows[0] == 0 and rows[-1] == 31
        ref = s.reference(rows)
        assert ref.shape == (4, 8, 128) and ref.dtype == np.float64
        out = s.compute("v2", rows)
        model = s.model("v2", rows)
        assert np.array_equal(np.asarray(out.out), model)   # numpy's output is the model's
        assert 0 < np.abs(model - ref).max() < 1e-2
        assert "does not time" in s.time(["v2"])["v2"]
        assert s.unsupported("v2") is None
    assert s.closed


def test_help_reads_well():
    text = pa_bench.bench.__doc__
    assert "Returns:" in text and "records.csv" in text
    done = subprocess.run([sys.executable, "-c", "import pa_bench; help(pa_bench.bench)"],
                          env={"PYTHONPATH": str(ROOT), "PAGER": "cat", "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "parity: check each variant's output" in done.stdout


def test_a_session_runs_another_launch_through_pins_or_a_launch():
    from dataclasses import replace

    config = pa_bench.load_config(heads_q=4, heads_kv=2)
    with pa_bench.session("2Kx64", backend="numpy", config=config) as s:
        rule = s.launch_of("v2")
        assert (rule.split_keys, rule.segment_keys) == (1024, 0)       # few rows after a context: split
        pins = pa_bench.Pins(segments=512)
        seg = s.launch_of("v2", launch=pins)
        assert (seg.split_keys, seg.segment_keys) == (0, 512)          # segments turn the split off
        assert pa_bench.launch_for("v2", s.problem, pins) == seg
        assert s.launch_of("v2", launch=rule) == rule and pa_bench.pins_of(seg) != pa_bench.Pins()
        rows = s.sample_rows(4, seed=1)
        by_rule, by_pins, by_launch = (s.compute("v2", rows, launch=x).out for x in (None, pins, seg))
        assert not np.array_equal(by_rule, by_pins)                   # segments change the bits
        assert np.array_equal(by_pins, by_launch)
        assert np.array_equal(s.model("v2", rows, launch=seg), by_launch)  # the model follows the launch
        with pytest.raises(pa_bench.PaBenchError, match="cannot be made here"):
            s.compute("v2", rows, launch=replace(seg, rows=128))      # v2 has no CTA-row choice


def test_nothing_in_the_package_imports_the_api():
    """The API is the top: no module below it imports it or a name only it defines."""
    import ast

    public = set(pa_bench.__all__) - {"__version__"}
    offenders = []
    for path in (ROOT / "pa_bench").rglob("*.py"):
        if path.name == "__init__.py" and path.parent.name == "pa_bench" or path.name == "api.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "pa_bench.api":
                offenders.append(str(path))
            elif isinstance(node, ast.ImportFrom) and node.module == "pa_bench" and not node.level:
                offenders += [f"{path}: {a.name}" for a in node.names
                              if a.name in public and not (ROOT / "pa_bench" / f"{a.name}.py").exists()]
            elif isinstance(node, ast.Import) and any(a.name == "pa_bench.api" for a in node.names):
                offenders.append(str(path))
    assert offenders == []


def test_the_columns_the_doc_and_docstrings_name_are_records_columns():
    text = DOC.read_text()
    records = text.split("## Records", 1)[1].split("\n\n", 2)[1]
    named = set(re.findall(r"`([a-z_0-9]+)`", records)) - {"check", "bench"}
    named |= set(re.findall(r'"([a-z_0-9]+)"', text.split("## On a GPU", 1)[1].split("print(frame[", 1)[1].split("]]")[0]))
    for fn in (pa_bench.check, pa_bench.bench):
        returns = fn.__doc__.split("Returns:", 1)[1]
        named |= set(re.findall(r"``([a-z_0-9]+)``", returns.split("attrs")[0]))
    assert len(named) >= 12 and named <= set(COLUMNS), named - set(COLUMNS)


def test_auto_without_a_gpu_warns_that_it_runs_the_numpy_backend(tmp_path):
    from pa_bench.backends import cuda_problem

    if cuda_problem() is not None:   # no GPU here (None: the cuda backend can run)
        with pytest.warns(UserWarning, match="using the numpy backend") as caught:
            frame = pa_bench.check(shapes="0x64", variants="v1", results=tmp_path, heads_q=4, heads_kv=2)
        assert caught[0].filename == __file__          # points at the caller's line
        assert frame.attrs["run_dir"].endswith("-numpy")
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            pa_bench.check(shapes="0x64", variants="v1", results=tmp_path, heads_q=4, heads_kv=2)
