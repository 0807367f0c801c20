"""The committed runs and what quotes them: every run under results/reference/ is quoted by the
README, a doc, a test or the code (its run id appears there), and every results/reference path
that the README and the docs quote exists. A run's own files (its EVIDENCE.md) do not quote it:
a run nothing else names leaves the tree, and git history keeps it (results/README.md)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
REFERENCE = REPO / "results" / "reference"

# Where a quote counts: the README and the results' README, the docs, and the project's own
# files (tests, code, configs, kernels, tools); never a file under results/reference/.
DOCS = [REPO / "README.md", REPO / "results" / "README.md", *sorted((REPO / "docs").glob("*.md"))]
QUOTING_DIRS = ("docs", "tests", "pa_bench", "scripts", "experiments", "configs", "kernels", "examples")
QUOTING_SUFFIXES = {".md", ".py", ".yaml", ".yml", ".cu", ".cuh", ".txt"}

# results/reference/<gpu>/<run-id>, then optionally /<file> (a trailing * makes it a pattern)
QUOTED_PATH = re.compile(r"results/reference/([\w-]+)/([\w.-]+)(/[\w.-]+)?(\*)?")


def committed_runs() -> list[Path]:
    return sorted(p for p in REFERENCE.glob("*/*") if p.is_dir())


def quoting_texts() -> dict[Path, str]:
    files = list(DOCS)
    for name in QUOTING_DIRS:
        files += [p for p in (REPO / name).rglob("*") if p.is_file() and p.suffix in QUOTING_SUFFIXES]
    return {p: p.read_text(errors="replace") for p in dict.fromkeys(files) if p.is_file()}


def quoted_paths() -> list[tuple[Path, str, Path, Path | None]]:
    """(doc, quoted text, run directory, file or None) of every results/reference path in the docs."""
    out = []
    for doc in DOCS:
        for m in QUOTED_PATH.finditer(doc.read_text()):
            gpu, run, rest, pattern = m.group(1), m.group(2).rstrip("."), m.group(3), m.group(4)
            target = REFERENCE / gpu / run
            name = rest.lstrip("/").rstrip(".") if rest else ""
            out.append((doc, m.group(0), target, target / name if name and not pattern else None))
    return out


def test_there_are_committed_runs_and_the_docs_quote_them():
    assert len(committed_runs()) >= 10
    assert len(quoted_paths()) >= 10


def test_every_committed_run_is_quoted_somewhere():
    texts = quoting_texts()
    unquoted = [str(run.relative_to(REPO)) for run in committed_runs()
                if not any(run.name in text for text in texts.values())]
    assert not unquoted, (f"committed runs that nothing quotes (git rm -r them; history keeps "
                          f"them): {unquoted}")


def test_every_quoted_reference_path_exists():
    missing = []
    for doc, quoted, run, file in quoted_paths():
        if not run.is_dir() or (file is not None and not file.exists()):
            missing.append(f"{doc.relative_to(REPO)}: {quoted}")
    assert not missing, f"quoted paths under results/reference that do not exist: {missing}"


@pytest.mark.parametrize("quote, found", [
    ("see results/reference/h200/20261203-sm-clock/EVIDENCE.md.", ("h200", "20261203-sm-clock", "EVIDENCE.md")),
    ("(results/reference/h100/20261205-175637-pr2092-cuda)", ("h100", "20261205-175637-pr2092-cuda", "")),
    ("`results/reference/h200/20261201-ncu-profiles-32Kx1024/triton_*`", ("h200", "20261201-ncu-profiles-32Kx1024", None)),
    ("results/reference/<gpu>/<run-id>/", None),
])
def test_quoted_path_pattern(quote, found):
    m = QUOTED_PATH.search(quote)
    if found is None:
        assert m is None
        return
    gpu, run, rest, pattern = m.group(1), m.group(2).rstrip("."), m.group(3), m.group(4)
    name = None if pattern else (rest or "").lstrip("/").rstrip(".")
    assert (gpu, run, name) == found
