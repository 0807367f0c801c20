"""The versioned result schema: round trip, migration of a committed version-1 run, newer versions refused."""

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from pa_bench.cli import cli
from pa_bench.errors import SchemaError
from pa_bench.present.compare import compare_runs
from pa_bench.present.report import build_report
from pa_bench.store.records import Record, read_csv
from pa_bench.store.results import new_run_dir, open_run
from pa_bench.store.schema import SCHEMA_VERSION, RunMeta, migrate_v1, upgrade_meta

# meta.json and records.csv of an H200 run written before the schema had a version
V1_RUN = Path(__file__).resolve().parent / "data" / "v1_run"
needs_v1 = pytest.mark.skipif(not V1_RUN.is_dir(), reason="the committed version-1 run is not in this checkout")


def _tree(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def test_round_trip_writes_the_version_in_meta_and_records(tmp_path):
    run = new_run_dir(tmp_path, "pr2092", "numpy")
    run.write_meta({"mode": "run", "status": "complete", "command": ["pa-bench", "run"], "seed": 3,
                    "environment": {"driver": "580"}, "note": "by hand"})
    run.write_records([Record(shape="32Kx1024", variant="v1", ms_median=1.5)])
    stored = json.loads(run.meta_path.read_text())
    assert stored["schema_version"] == SCHEMA_VERSION == 2
    meta = run.meta()
    assert (meta.mode, meta.seed, meta.command, meta.environment) == ("run", 3, ["pa-bench", "run"], {"driver": "580"})
    assert meta.extra == {"note": "by hand"} and RunMeta.from_dict(meta.to_dict()) == meta
    header, row = run.records_path.read_text().splitlines()
    assert header.split(",")[-1] == "schema_version" and row.split(",")[-1] == "2"
    assert run.records()[0].ms_median == 1.5


def test_a_known_key_of_the_wrong_type_is_one_line(tmp_path):
    run = new_run_dir(tmp_path, "pr2092", "numpy")
    with pytest.raises(SchemaError, match=r"key 'seed' is str, not int"):
        run.write_meta({"seed": "zero"})


@needs_v1
def test_committed_v1_run_migrates_on_read_and_reports(tmp_path):
    before = _tree(V1_RUN)
    raw = json.loads((V1_RUN / "meta.json").read_text())
    assert "schema_version" not in raw
    run = open_run(V1_RUN)
    meta = run.meta()
    assert meta.schema_version == 2 and meta.status == "complete" and meta.backend["gpu"] == "NVIDIA H200"
    assert meta.command[0].endswith("pa-bench") or "pa_bench" in " ".join(meta.command)
    assert migrate_v1(raw) == {**raw, "schema_version": 2}
    recs = run.records()
    assert recs and all(r.schema_version == 2 for r in recs) and recs[0].device_uuid is None
    text = build_report(run, out_dir=tmp_path, plots=False)
    assert "NVIDIA H200" in text and "Command: `" in text and "13.0 / " in text
    df = compare_runs(run, run)
    assert len(df) == len(recs)
    result = CliRunner().invoke(cli, ["compare", str(V1_RUN), str(V1_RUN)])
    assert result.exit_code == 0, result.output
    assert _tree(V1_RUN) == before  # read-only


def _newer(tmp_path: Path) -> Path:
    run = new_run_dir(tmp_path, "pr2092", "numpy")
    run.write_records([Record(shape="32Kx1024", variant="v1", ms_median=1.5)])
    run.write_meta({"mode": "run", "status": "complete"})
    meta = json.loads(run.meta_path.read_text())
    run.meta_path.write_text(json.dumps({**meta, "schema_version": SCHEMA_VERSION + 1}))
    return run.path


def test_a_newer_version_is_refused_in_one_line(tmp_path):
    path = _newer(tmp_path)
    with pytest.raises(SchemaError, match=r"schema version 3 is newer than this pa-bench reads \(up to 2\)"):
        open_run(path).read_meta()
    for args in (["report", str(path), "-o", str(tmp_path / "r.md")], ["compare", str(path), str(path)]):
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 2, result.output
        assert "newer than this pa-bench" in result.output and len(result.output.strip().splitlines()) == 1


def test_a_newer_records_row_is_refused(tmp_path):
    path = tmp_path / "records.csv"
    path.write_text("shape,variant,schema_version\n32Kx1024,v1,7\n")
    with pytest.raises(SchemaError, match="version 7 is newer"):
        read_csv(path)
    with pytest.raises(SchemaError, match="not an integer"):
        upgrade_meta({"schema_version": "two"})
