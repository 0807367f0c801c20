"""Bad input on the command line: one line `error: ...` naming what is wrong, and exit code 2.

Issue #14: bad --data contents, missing run directories, empty option values, signals."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from pa_bench.cli import cli

SMALL = ["--backend", "numpy", "--sample-rows", "4"]


def invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def one_line_error(result, code: int, *needles: str) -> str:
    assert result.exit_code == code, (result.exit_code, result.output)
    assert "Traceback" not in result.output
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    assert "internal error" not in lines[0] and "interrupted" not in lines[0]
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def runs_under(root: Path) -> list[Path]:
    return [p for p in root.iterdir() if p.is_dir()] if root.is_dir() else []


# --------------------------------------------------------------------------- --data FILE.npz


def _capture(**change):
    rng = np.random.default_rng(0)
    arrays = dict(q=rng.standard_normal((4, 28, 64)).astype(np.float32),
                  k=rng.standard_normal((2, 128, 64)).astype(np.float32),
                  v=rng.standard_normal((2, 128, 64)).astype(np.float32))
    arrays.update(change)
    return {n: a for n, a in arrays.items() if a is not None}


def _nan_k():
    k = np.ones((2, 128, 64), np.float32)
    k[1, 5, 3] = np.nan
    return k


K8 = np.zeros((2, 128, 64), np.int8)


@pytest.mark.parametrize("arrays, args, needles", [
    (_capture(k=np.ones((2, 128, 32), np.float32), v=np.ones((2, 128, 32), np.float32)), [],
     ["'k' has head dim 32", "'q' has 64"]),
    (_capture(k=None, v=None, k_i8=K8, v_i8=K8, k_scale=np.ones((2, 128), np.float32)), [],
     ["but not ['v_scale']"]),
    (_capture(k=_nan_k()), [], ["'k'", "NaN at index [1, 5, 3]"]),
    (_capture(q=np.zeros((4, 28, 64), np.int32)), [], ["'q' is int32"]),
    (_capture(q=np.zeros((3, 28, 64), np.float32)), [], ["'q' has 3 heads", "2 KV heads"]),
    (_capture(), ["--heads", "8/2"], ["holds 4/2 heads", "8/2", "--heads"]),
    (_capture(), ["--head-dim", "128"], ["head dim 64", "128", "--head-dim"]),
    (_capture(), ["--shapes", "1Kx28"], ["100x28 chunk", "1Kx28", "--shapes"]),
])
def test_bad_data_contents_stop_the_run_before_it_starts(tmp_path, arrays, args, needles):
    path = tmp_path / "cap.npz"
    np.savez(path, **arrays)
    res = invoke("run", *SMALL, "--data", path, "--results", tmp_path / "res", *args)
    one_line_error(res, 2, *needles)
    assert runs_under(tmp_path / "res") == []  # nothing ran, no run directory claims otherwise


@pytest.mark.parametrize("content, needles", [
    (b"", ["empty (0 bytes)"]),
    (b"q k v\n1 2 3\n", ["not an .npz archive"]),
    (b"\x93NUMPY\x01\x00v\x00{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }",
     ["single .npy array"]),
])
def test_unreadable_data_files_are_bad_input(tmp_path, content, needles):
    path = tmp_path / "cap.npz"
    path.write_bytes(content)
    res = invoke("parity", *SMALL, "--data", path, "--results", tmp_path / "res")
    line = one_line_error(res, 2, *needles)
    assert "pickle" not in line


def test_a_good_capture_fixes_shape_heads_and_head_dim(tmp_path):
    path = tmp_path / "cap.npz"
    np.savez(path, **_capture())
    res = invoke("parity", *SMALL, "--variant", "v1", "--data", path, "--results", tmp_path)
    assert res.exit_code == 0, res.output
    assert "heads 4/2" in res.stdout and "head_dim 64" in res.stdout and "100x28" in res.stdout


# --------------------------------------------------------------------------- options


def test_empty_variant_list_is_an_error():
    one_line_error(invoke("run", "--variant", ""), 2, "'--variant'", "empty")
    one_line_error(invoke("parity", "--variant", " , "), 2, "'--variant'", "empty")
