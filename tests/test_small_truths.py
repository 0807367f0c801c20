"""What docs/CLI.md and the reports say about a run matches what the run wrote."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def readme_run_files() -> dict[str, str]:
    """The run-directory listing in docs/CLI.md: file name -> what it says about it."""
    text = (REPO / "docs" / "CLI.md").read_text(encoding="utf-8")
    section = text.split("## Results directory", 1)[1].split("\n## ", 1)[0]
    block = section.split("```", 2)[1]
    files: dict[str, str] = {}
    name = None
    for line in block.splitlines()[2:]:
        m = re.match(r"  (\S+)\s+(.*)", line)
        if m:
            name = m.group(1)
            files[name] = m.group(2)
        elif name and line.strip():
            files[name] += " " + line.strip()
    return files


def test_cli_doc_lists_what_a_numpy_run_writes(invoke, numpy_args, smoke_yaml, tmp_path):
    res = invoke("run", smoke_yaml, *numpy_args, "--shapes", "256x64", "--variant", "v1",
                 "--results", tmp_path)
    assert res.exit_code == 0, res.output
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    written = {p.name for p in run_dir.iterdir()}
    listed = readme_run_files()
    assert written == {"meta.json", "records.csv", "report.md"}
    assert written <= set(listed)
    # files the run did not write are listed with the condition under which they are written
    assert "once a row is timed" in listed["samples.json"]
    assert "not on the numpy backend" in listed["samples.json"]
    assert "where the backend" in listed["clocks.json"]
    assert "matplotlib" in listed["*.png"]
    # and its report claims no timing settings, since nothing was timed
    report = (run_dir / "report.md").read_text()
    timing_row = next(line for line in report.splitlines() if line.startswith("| timing |"))
    assert "nothing was timed" in timing_row and "warm-up" not in report


def test_the_environment_table_names_every_variable_the_package_reads():
    """docs/CLI.md's table of environment variables lists each PA_BENCH_* name in pa_bench/."""
    read = set()
    for path in (REPO / "pa_bench").rglob("*.py"):
        read |= set(re.findall(r"PA_BENCH_[A-Z_]+[A-Z]", path.read_text(encoding="utf-8")))
    text = (REPO / "docs" / "CLI.md").read_text(encoding="utf-8")
    table = text.split("## Environment variables", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^\| `(PA_BENCH_[A-Z_]+)", table, flags=re.M))
    assert read and read <= listed, sorted(read - listed)
