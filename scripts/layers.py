"""Count a package's import graph: nodes, floors, arrows, arrows running back up, circles.

A node is one top-level module of the package (``__init__`` and ``__main__`` included), one
subpackage folder, or one folder beside the package that uses it (``scripts/``,
``experiments/``). An arrow A -> B says some file of A imports something of B, at module level
or inside a function; each pair of nodes counts once, and the imports behind it (file, module)
are kept as its evidence. Imports inside one node are not arrows. Importing a submodule
(``pa_bench.backends.cuda``) is an arrow to its node only. Importing the package itself
(``import pa_bench``, ``from pa_bench import bench``) is an arrow to ``__init__`` from a folder
beside the package; from a module inside it, it is no arrow: the package's ``__init__`` has run
(up to the names it defines first, ``__version__``) before any module inside it runs.

Floors: a node stands one floor above everything it imports. By default the floors are placed
over the condensation: the nodes of a circle (a strongly connected component of more than one
node) share one floor, and every arrow of the circle runs back up. With ``--depth-first`` the
arrows that close a circle in a depth-first walk (nodes and their imports taken in sorted order)
are set aside, the rest placed in floors, and only the set-aside arrows run back up. An arrow
runs back up when it ends on a node of the same or a higher floor than its start; both ways
agree when there is no circle. ``--check`` fails on more floors than ``--max-floors``, on any
arrow back up and on any circle.

    python scripts/layers.py [ROOT] [--package pa_bench] [--depth-first] [--json]
                             [--check --max-floors 8]
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

OUTSIDE = ("scripts", "experiments")


@dataclass(frozen=True)
class Import:
    """One import statement's evidence: the importing file and the module it names."""

    source_file: str
    module: str


@dataclass
class Graph:
    """Nodes, the arrows between them (with the imports behind each) and their floors."""

    nodes: list[str]
    arrows: dict[tuple[str, str], list[Import]]
    floors: dict[str, int] = field(default_factory=dict)
    circles: list[list[str]] = field(default_factory=list)

    @property
    def floor_count(self) -> int:
        return max(self.floors.values(), default=-1) + 1

    @property
    def back_arrows(self) -> list[tuple[str, str]]:
        """Arrows ending on the same or a higher floor than they start from."""
        return [(a, b) for a, b in self.arrows if self.floors[b] >= self.floors[a]]

    @property
    def import_count(self) -> int:
        return sum(len(found) for found in self.arrows.values())


def package_modules(package_dir: Path) -> set[str]:
    """Dotted names of every module and package under ``package_dir`` (``pa_bench.backends``)."""
    name = package_dir.name
    found = {name}
    for path in package_dir.rglob("*.py"):
        parts = path.relative_to(package_dir).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found.add(".".join((name, *parts)))
    return found


def node_of_module(dotted: str, package_dir: Path) -> str | None:
    """The node a dotted module name belongs to, or None when it is outside the package."""
    parts = dotted.split(".")
    if parts[0] != package_dir.name:
        return None
    if len(parts) == 1:
        return "__init__"
    if (package_dir / parts[1]).is_dir():
        return parts[1] + "/"
    if (package_dir / f"{parts[1]}.py").is_file():
        return parts[1]
    return "__init__"  # a name the package's __init__ defines


def node_of_file(path: Path, root: Path, package: str) -> str | None:
    rel = path.relative_to(root).parts
    if rel[0] in OUTSIDE:
        return rel[0] + "/"
    if rel[0] != package:
        return None
    if len(rel) == 2:
        return rel[1][: -len(".py")]
    return rel[1] + "/"


def _display(node: str) -> str:
    return node if node.endswith("/") else node + ".py"


def imported_modules(path: Path, root: Path, package: str, modules: set[str]) -> set[str]:
    """Dotted names of the package's modules one file imports, anywhere in the file."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    folder = list(path.relative_to(root).parts[:-1])  # the file's package, as dotted parts
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = folder[: len(folder) - node.level + 1]
                stem = ".".join(base + ([node.module] if node.module else []))
            else:
                stem = node.module or ""
            for alias in node.names:
                candidate = f"{stem}.{alias.name}"
                # ``from pa_bench import variants`` names a module; ``from x import f`` a name in x
                found.add(candidate if candidate in modules else stem)
    return {m for m in found if m.split(".")[0] == package}


def collect(root: Path, package: str = "pa_bench", depth_first: bool = False) -> Graph:
    """Read every file of ``root/package`` and of the folders beside it that use it."""
    root = Path(root)
    package_dir = root / package
    modules = package_modules(package_dir)
    files = sorted(package_dir.rglob("*.py"))
    for folder in OUTSIDE:
        if (root / folder).is_dir():
            files += sorted((root / folder).rglob("*.py"))
    nodes: set[str] = set()
    arrows: dict[tuple[str, str], set[Import]] = {}
    for path in files:
        source = node_of_file(path, root, package)
        if source is None:
            continue
        nodes.add(source)
        for dotted in imported_modules(path, root, package, modules):
            if dotted == package and source.rstrip("/") not in OUTSIDE:
                continue  # a module of the package reading the package's own name
            target = node_of_module(dotted, package_dir)
            if target is not None and target != source:
                found = Import(path.relative_to(root).as_posix(), dotted)
                arrows.setdefault((source, target), set()).add(found)
    graph = Graph(
        nodes=sorted(nodes),
        arrows={pair: sorted(arrows[pair], key=str) for pair in sorted(arrows)},
    )
    place_floors(graph, depth_first)
    return graph


def _successors(graph: Graph) -> dict[str, list[str]]:
    edges: dict[str, list[str]] = {n: [] for n in graph.nodes}
    for source, target in graph.arrows:
        edges[source].append(target)
    return {n: sorted(t) for n, t in edges.items()}


def strongly_connected(nodes: list[str], edges: dict[str, list[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative. A component comes out after every one it reaches."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    for start in nodes:
        if start in index:
            continue
        work = [(start, iter(edges[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for nxt in successors:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(edges[nxt])))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    components.append(sorted(component))
    return components


def closing_arrows(nodes: list[str], edges: dict[str, list[str]]) -> set[tuple[str, str]]:
    """The arrows a depth-first walk finds pointing back to a node still on its path."""
    state: dict[str, int] = {}  # 1 = on the path, 2 = done
    closing: set[tuple[str, str]] = set()
    for start in nodes:
        if start in state:
            continue
        state[start] = 1
        work = [(start, iter(edges[start]))]
        while work:
            node, successors = work[-1]
            for nxt in successors:
                if state.get(nxt) == 1:
                    closing.add((node, nxt))
                elif nxt not in state:
                    state[nxt] = 1
                    work.append((nxt, iter(edges[nxt])))
                    break
            else:
                state[node] = 2
                work.pop()
    return closing


def place_floors(graph: Graph, depth_first: bool = False) -> None:
    """Floors: over the condensation, or with a depth-first walk's closing arrows set aside."""
    edges = _successors(graph)
    components = strongly_connected(graph.nodes, edges)
    graph.circles = sorted((c for c in components if len(c) > 1), key=lambda c: c[0])
    if depth_first:
        closing = closing_arrows(graph.nodes, edges)
        edges = {n: [t for t in ts if (n, t) not in closing] for n, ts in edges.items()}
        components = strongly_connected(graph.nodes, edges)  # now all of one node each
    component_of = {n: i for i, comp in enumerate(components) for n in comp}
    floor_of: dict[int, int] = {}
    for i, comp in enumerate(components):
        below = [floor_of[component_of[t]] for n in comp for t in edges[n] if component_of[t] != i]
        floor_of[i] = max(below, default=-1) + 1
    graph.floors = {n: floor_of[component_of[n]] for n in graph.nodes}


def longest_chain(graph: Graph) -> list[str]:
    """One chain of arrows from a node on the top floor down to the ground, a floor a step: what
    a cut must break to lower the building (nodes in sorted order where several would do)."""
    if not graph.nodes:
        return []
    below = {n: sorted(t for (a, t) in graph.arrows if a == n) for n in graph.nodes}
    node = min(n for n in graph.nodes if graph.floors[n] == graph.floor_count - 1)
    chain = [node]
    while graph.floors[node] > 0:
        node = next(t for t in below[node] if graph.floors[t] == graph.floors[node] - 1)
        chain.append(node)
    return chain


def summary(graph: Graph) -> dict:
    """The counts and their evidence as plain data (the ``--json`` form)."""
    return {
        "nodes": len(graph.nodes),
        "floors": graph.floor_count,
        "arrows": len(graph.arrows),
        "imports": graph.import_count,
        "back_up": len(graph.back_arrows),
        "circles": [[_display(n) for n in c] for c in graph.circles],
        "longest_chain": [_display(n) for n in longest_chain(graph)],
        "back_up_arrows": [
            {
                "from": _display(a),
                "to": _display(b),
                "imports": [f"{i.source_file}: {i.module}" for i in graph.arrows[(a, b)]],
            }
            for a, b in graph.back_arrows
        ],
        "by_floor": {
            str(f): sorted(_display(n) for n in graph.nodes if graph.floors[n] == f)
            for f in range(graph.floor_count)
        },
    }


def table(graph: Graph) -> str:
    data = summary(graph)
    lines = [
        f"nodes {data['nodes']}  floors {data['floors']}  arrows {data['arrows']} "
        f"({data['imports']} imports)  back up {data['back_up']}  circles {len(data['circles'])}",
        "",
        "floor  nodes",
    ]
    for f in reversed(range(graph.floor_count)):
        lines.append(f"{f:>5}  {'  '.join(data['by_floor'][str(f)])}")
    lines.append("longest chain: " + " -> ".join(data["longest_chain"]))
    for arrow in data["back_up_arrows"]:
        lines.append(f"back up: {arrow['from']} -> {arrow['to']}  ({'; '.join(arrow['imports'])})")
    for circle in data["circles"]:
        lines.append("circle: " + " <-> ".join(circle))
    return "\n".join(lines)


def problems(graph: Graph, max_floors: int) -> list[str]:
    """What ``--check`` refuses, one line each; empty when the graph passes."""
    found = []
    if graph.floor_count > max_floors:
        found.append(f"{graph.floor_count} floors, at most {max_floors} allowed")
    for a, b in graph.back_arrows:
        found.append(f"arrow back up: {_display(a)} -> {_display(b)}")
    for c in graph.circles:
        found.append("circle: " + " <-> ".join(_display(n) for n in c))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", nargs="?", default=".", type=Path,
                        help="the folder holding the package (default: the current one)")
    parser.add_argument("--package", default="pa_bench")
    parser.add_argument("--depth-first", action="store_true",
                        help="set aside the arrows that close a circle in a depth-first walk")
    parser.add_argument("--json", action="store_true", help="print the counts as JSON")
    parser.add_argument("--check", action="store_true",
                        help="exit 1 on too many floors, an arrow back up or a circle")
    parser.add_argument("--max-floors", type=int, default=8)
    args = parser.parse_args(argv)
    if not (args.root / args.package).is_dir():
        parser.error(f"no package folder {args.root / args.package}")
    graph = collect(args.root, args.package, args.depth_first)
    print(json.dumps(summary(graph), indent=2) if args.json else table(graph))
    if args.check:
        found = problems(graph, args.max_floors)
        for line in found:
            print(f"check: {line}", file=sys.stderr)
        return 1 if found else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
