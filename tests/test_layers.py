"""scripts/layers.py on small packages written for the test: nodes, floors, arrows, circles."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "layers.py"
spec = importlib.util.spec_from_file_location("layers", SCRIPT)
layers = importlib.util.module_from_spec(spec)
sys.modules["layers"] = layers  # its dataclasses look their module up
spec.loader.exec_module(layers)


def write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


# ground <- sub/ <- mid <- top, and scripts/ on top of everything; no circle.
LAYERED = {
    "pkg/__init__.py": '__version__ = "1"\n',
    "pkg/ground.py": "import os\n",
    "pkg/sub/__init__.py": "",
    "pkg/sub/a.py": "from pkg import ground\n",
    "pkg/sub/b.py": "from . import a\nfrom ..ground import x\n",  # one arrow to ground, not two
    "pkg/mid.py": "def f():\n    from pkg.sub.b import g\n    return g\n",  # function level
    "pkg/top.py": "import pkg.mid\nfrom pkg import __version__\n",  # inside: no arrow to __init__
    "scripts/tool.py": "from pkg.top import main\nfrom pkg.sub import a\nimport pkg\n",
}


def test_layered_package_counts_floors_and_arrows(tmp_path):
    graph = layers.collect(write(tmp_path, LAYERED), "pkg")
    assert graph.nodes == ["__init__", "ground", "mid", "scripts/", "sub/", "top"]
    assert set(graph.arrows) == {
        ("sub/", "ground"),
        ("mid", "sub/"),
        ("top", "mid"),
        ("scripts/", "top"),
        ("scripts/", "__init__"),
        ("scripts/", "sub/"),
    }
    # two files of sub/ import ground: one arrow, two imports behind it
    assert [i.source_file for i in graph.arrows[("sub/", "ground")]] == ["pkg/sub/a.py", "pkg/sub/b.py"]
    assert graph.floors == {"__init__": 0, "ground": 0, "sub/": 1, "mid": 2, "top": 3, "scripts/": 4}
    assert graph.floor_count == 5
    assert layers.longest_chain(graph) == ["scripts/", "top", "mid", "sub/", "ground"]
    assert graph.back_arrows == [] and graph.circles == []
    assert layers.problems(graph, max_floors=5) == []
    assert layers.problems(graph, max_floors=4) == ["5 floors, at most 4 allowed"]


# a <-> sub/ is a circle (sub/y imports a, a imports sub/x); top stands above it.
CIRCLE = {
    "pkg/__init__.py": "",
    "pkg/low.py": "",
    "pkg/a.py": "from pkg.sub import x\nfrom pkg import low\n",
    "pkg/sub/__init__.py": "",
    "pkg/sub/x.py": "",
    "pkg/sub/y.py": "def late():\n    import pkg.a\n",
    "pkg/top.py": "from pkg import a\n",
}


def test_circle_shares_a_floor_and_its_arrows_run_back_up(tmp_path):
    graph = layers.collect(write(tmp_path, CIRCLE), "pkg")
    assert graph.circles == [["a", "sub/"]]
    assert graph.floors["a"] == graph.floors["sub/"] == 1
    assert graph.floors["top"] == 2 and graph.floor_count == 3
    assert sorted(graph.back_arrows) == [("a", "sub/"), ("sub/", "a")]
    found = layers.problems(graph, max_floors=8)
    assert "circle: a.py <-> sub/" in found
    assert "arrow back up: sub/ -> a.py" in found


def test_depth_first_sets_aside_only_the_closing_arrow(tmp_path):
    graph = layers.collect(write(tmp_path, CIRCLE), "pkg", depth_first=True)
    # the walk starts at a (sorted order), goes to sub/, and sub/ -> a closes the circle
    assert graph.back_arrows == [("sub/", "a")]
    assert graph.floors == {"__init__": 0, "low": 0, "sub/": 0, "a": 1, "top": 2}
    assert graph.circles == [["a", "sub/"]]  # still reported: it is still a circle


def test_relative_imports_and_submodule_names_resolve_to_their_node(tmp_path):
    write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/sub/__init__.py": "from .inner import thing\n",
        "pkg/sub/inner.py": "from ..util import helper\n",
        "pkg/util.py": "",
        "pkg/user.py": "from pkg import sub\nimport pkg.sub.inner as alias\n",
    })
    graph = layers.collect(tmp_path, "pkg")
    assert set(graph.arrows) == {("sub/", "util"), ("user", "sub/")}
    modules = {i.module for i in graph.arrows[("user", "sub/")]}
    assert modules == {"pkg.sub", "pkg.sub.inner"}


def test_command_line_json_and_check(tmp_path, capsys):
    root = write(tmp_path, CIRCLE)
    assert layers.main([str(root), "--package", "pkg", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["nodes"], data["floors"], data["arrows"], data["back_up"]) == (5, 3, 4, 2)
    assert data["circles"] == [["a.py", "sub/"]] and data["longest_chain"] == ["top.py", "a.py", "low.py"]
    assert data["back_up_arrows"][1] == {"from": "sub/", "to": "a.py", "imports": ["pkg/sub/y.py: pkg.a"]}
    assert layers.main([str(root), "--package", "pkg", "--check", "--max-floors", "8"]) == 1
    assert "check: circle: a.py <-> sub/" in capsys.readouterr().err

    clean = write(tmp_path / "clean", LAYERED)
    assert layers.main([str(clean), "--package", "pkg", "--check", "--max-floors", "5"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("nodes 6  floors 5  arrows 6 (7 imports)  back up 0  circles 0")
    assert layers.main([str(clean), "--package", "pkg", "--check", "--max-floors", "4"]) == 1


def test_the_package_keeps_its_layers():
    """pa_bench with scripts/ and experiments/ as nodes: at most eight floors, no arrow running back
    up and no circle (docs/DESIGN.md, "Layers"). A change that breaks this names the arrows."""
    root = Path(__file__).resolve().parents[1]
    graph = layers.collect(root)
    assert graph.circles == [], graph.circles
    assert graph.back_arrows == [], graph.back_arrows
    assert graph.floor_count <= 8, layers.table(graph)
    assert layers.problems(graph, 8) == []
