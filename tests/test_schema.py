"""The versioned result schema: round trip, migration of version-1 and version-2 runs (copies of
committed H200 runs, samples cut short, in tests/data), newer versions refused."""

import json
import shutil
from pathlib import Path

import pytest

from pa_bench.errors import SchemaError
from pa_bench.present.compare import compare_runs
from pa_bench.present.report import build_report
from pa_bench.store.records import Record, read_csv
from pa_bench.store.results import new_run_dir, open_run
from pa_bench.store.schema import SCHEMA_VERSION, RunMeta, migrate_v1, upgrade_meta

DATA = Path(__file__).resolve().parent / "data"
V1_RUN = DATA / "run_v1"      # an H200 run from before schema_version existed
V2_RUN = DATA / "run_v2"      # an H200 run at version 2, its torch-sdpa rows the pinned flash kernel


def _tree(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def test_round_trip_writes_the_version_in_meta_and_records(tmp_path):
    run = new_run_dir(tmp_path, "pr2092", "numpy")
    run.write_meta({"mode": "run", "status": "complete", "command": ["pa-bench", "run"], "seed": 3,
                    "environment": {"driver": "580"}, "note": "by hand"})
    run.write_records([Record(shape="32Kx1024", variant="v1", ms_median=1.5)])
    stored = json.loads(run.meta_path.read_text())
    assert stored["schema_version"] == SCHEMA_VERSION == 3
    meta = run.meta()
    assert (meta.mode, meta.seed, meta.command, meta.environment) == ("run", 3, ["pa-bench", "run"], {"driver": "580"})
    assert meta.extra == {"note": "by hand"} and RunMeta.from_dict(meta.to_dict()) == meta
    header, row = run.records_path.read_text().splitlines()
    assert header.split(",")[-1] == "schema_version" and row.split(",")[-1] == "3"
    assert run.records()[0].ms_median == 1.5


def test_a_known_key_of_the_wrong_type_is_one_line(tmp_path):
    run = new_run_dir(tmp_path, "pr2092", "numpy")
    with pytest.raises(SchemaError, match=r"key 'seed' is str, not int"):
        run.write_meta({"seed": "zero"})


def test_committed_v1_run_migrates_on_read_and_reports(invoke, tmp_path):
    before = _tree(V1_RUN)
    raw = json.loads((V1_RUN / "meta.json").read_text())
    assert "schema_version" not in raw
    run = open_run(V1_RUN)
    meta = run.meta()
    assert meta.schema_version == 3 and meta.status == "complete" and meta.backend["gpu"] == "NVIDIA H200"
    assert meta.command[0].endswith("pa-bench") or "pa_bench" in " ".join(meta.command)
    assert migrate_v1(raw) == {**raw, "schema_version": 2}
    recs = run.records()
    assert recs and all(r.schema_version == 3 for r in recs) and recs[0].device_uuid is None
    text = build_report(run, out_dir=tmp_path, plots=False)
    assert "NVIDIA H200" in text and "Command: `" in text and "13.0 / " in text
    df = compare_runs(run, run)
    assert len(df) == len(recs)
    result = invoke("compare", V1_RUN, V1_RUN)
    assert result.exit_code == 0, result.output
    assert _tree(V1_RUN) == before  # read-only


def test_a_version_2_runs_pinned_flash_row_reads_as_torch_sdpa_flash(tmp_path):
    before = _tree(V2_RUN)
    raw = [line.split(",")[10] for line in (V2_RUN / "records.csv").read_text().splitlines()[1:]]
    assert "torch-sdpa" in raw and "torch-sdpa-flash" not in raw     # as version 2 wrote it
    run = open_run(V2_RUN)
    assert run.stored_version() == 2
    recs = {r.variant: r for r in run.records() if r.shape == "32Kx1024"}
    assert "torch-sdpa" not in recs
    flash, dequant = recs["torch-sdpa-flash"], recs["torch-sdpa+dequant"]
    assert flash.impl == "flash" and dequant.impl == "flash" and recs["v3"].impl is None
    assert flash.ms_median == pytest.approx(1.571, abs=5e-4)     # the same row, renamed
    assert "32Kx1024|torch-sdpa-flash" in run.samples() and "32Kx1024|torch-sdpa" not in run.samples()
    assert "32Kx1024|torch-sdpa-flash" in run.clocks()
    variants = run.meta().config["variants"]
    assert "torch-sdpa-flash" in variants and "torch-sdpa" not in variants
    text = build_report(run, out_dir=tmp_path, plots=False)
    assert "torch-sdpa-flash" in text
    assert _tree(V2_RUN) == before  # read-only


def test_a_resumed_version_2_run_moves_its_samples_to_version_3(tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(V2_RUN, copy)
    run = open_run(copy)
    run.update_meta(status="running")             # what --resume does first
    assert run.stored_version() == SCHEMA_VERSION
    stored = json.loads(run.samples_path.read_text())
    assert "32Kx1024|torch-sdpa-flash" in stored and "32Kx1024|torch-sdpa" not in stored
    assert run.samples() == stored


def _newer(tmp_path: Path) -> Path:
    run = new_run_dir(tmp_path, "pr2092", "numpy")
    run.write_records([Record(shape="32Kx1024", variant="v1", ms_median=1.5)])
    run.write_meta({"mode": "run", "status": "complete"})
    meta = json.loads(run.meta_path.read_text())
    run.meta_path.write_text(json.dumps({**meta, "schema_version": SCHEMA_VERSION + 1}))
    return run.path


def test_a_newer_version_is_refused_in_one_line(invoke, tmp_path):
    path = _newer(tmp_path)
    with pytest.raises(SchemaError, match=r"schema version 4 is newer than this pa-bench reads \(up to 3\)"):
        open_run(path).read_meta()
    for args in (["report", str(path), "-o", str(tmp_path / "r.md")], ["compare", str(path), str(path)]):
        result = invoke(*args)
        assert result.exit_code == 2, result.output
        assert "newer than this pa-bench" in result.output and len(result.output.strip().splitlines()) == 1


def test_a_newer_records_row_is_refused(tmp_path):
    path = tmp_path / "records.csv"
    path.write_text("shape,variant,schema_version\n32Kx1024,v1,7\n")
    with pytest.raises(SchemaError, match="version 7 is newer"):
        read_csv(path)
    with pytest.raises(SchemaError, match="not an integer"):
        upgrade_meta({"schema_version": "two"})
