"""scripts/launch_target.py without a GPU: the launch options as pins, the compute-sanitizer sweep's
launches, and the dry run of both forms."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

import pa_bench

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "launch_target.py"
spec = importlib.util.spec_from_file_location("launch_target", SCRIPT)
lt = importlib.util.module_from_spec(spec)
sys.modules["launch_target"] = lt   # its dataclass looks its module up
spec.loader.exec_module(lt)


def test_launch_options_become_pins():
    assert lt.pins_of(lt.parse_args([])) == pa_bench.Pins()   # nothing pinned: the policy's launch
    args = lt.parse_args(["--variant", "v3", "--rows", "192", "--share", "off", "--step", "64",
                          "--segment-keys", "0", "--tiles", "1"])
    assert lt.pins_of(args) == pa_bench.Pins(tiles=1, rows=192, share=False, step=64, segments=False)
    assert lt.pins_of(lt.parse_args(["--share", "on", "--segment-keys", "4096"])) == \
        pa_bench.Pins(share=True, segments=4096)
    with pytest.raises(SystemExit):
        lt.parse_args(["--launches", "0"])
    with pytest.raises(SystemExit):
        lt.parse_args(["--tiles", "3"])


def test_the_sweep_covers_every_variant_both_cta_sizes_tiles_and_splits():
    problems = lt.sweep_problems(small=False)
    assert len(problems) == 6 and len(lt.sweep_problems(small=True)) == 3
    assert {(p.label, p.head_dim, p.layout, p.page, p.data) for p in problems[:3]} == {
        ("448x64", 128, "paged", 16, "realistic"), ("448x64", 64, "contiguous", 64, "realistic"),
        ("448x64", 128, "paged", 64, "realistic")}
    items = lt.sweep_items(problems[0], None)
    got = [(i.variant, i.pins.tiles, i.pins.split, i.pins.rows) for i in items]
    assert got[:4] == [("v1", 1, False, None), ("v3", 1, False, 128), ("v3", 2, False, 192), ("triton", 1, False, None)]
    # v2 and v2t at two tiles and one, the key split off and on (a context of 448 keys)
    assert got[4:] == [(v, t, sp, None) for v in ("v2", "v2t") for t in (2, 1) for sp in (False, True)]
    first_chunk = pa_bench.make_problem("0x64")
    assert all(not i.pins.split for i in lt.sweep_items(first_chunk, None))   # no context: no split
    only = lt.sweep_items(problems[0], {"v3", "my_plugin"})
    assert [(i.variant, i.pins.rows) for i in only] == [("v3", 128), ("v3", 192), ("my_plugin", None)]


def test_dry_runs_print_what_would_launch(capsys):
    assert lt.main(["--sweep", "--small", "--only", "v3", "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 6 and lines[0] == "448x64 d128 paged v3 rows=128 split=False"
    assert lt.main(["--variant", "v3", "--shape", "32Kx1024", "--rows", "128", "--dry-run"]) == 0
    assert capsys.readouterr().out.startswith("v3 on 32Kx1024 x 3, pins ")


def test_without_a_gpu_it_says_so_in_one_line(monkeypatch, capsys):
    def no_gpu(*args, **kwargs):
        raise pa_bench.PaBenchError("the cuda backend needs CuPy and an NVIDIA GPU")

    monkeypatch.setattr(pa_bench, "session", no_gpu)
    assert lt.main(["--variant", "v2", "--shape", "0x64"]) == 2
    assert capsys.readouterr().err == "launch_target: the cuda backend needs CuPy and an NVIDIA GPU\n"
