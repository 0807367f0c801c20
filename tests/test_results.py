"""Run directories: never overwritten, atomic records, resume keys, samples, newest runs."""

import datetime as dt
import json
import os
import time

import pytest

from pa_bench.errors import RunError, RunNotFound
from pa_bench.store.records import Record
from pa_bench.store.results import (
    RunDir,
    git_commit,
    new_run_dir,
    newest_runs,
    now_utc_iso,
    open_run,
    run_id_for,
)

WHEN = dt.datetime(2026, 11, 30, 3, 9, 58, tzinfo=dt.timezone.utc)


def test_run_id_format():
    assert run_id_for("pr2092", "cuda", WHEN) == "20261130-030958-pr2092-cuda"
    assert run_id_for("my config/x", "numpy", WHEN) == "20261130-030958-my-config-x-numpy"


def test_two_runs_in_the_same_second_get_distinct_dirs(tmp_path):
    a = new_run_dir(tmp_path / "results", "pr2092", "cuda", WHEN)
    b = new_run_dir(tmp_path / "results", "pr2092", "cuda", WHEN)
    c = new_run_dir(tmp_path / "results", "pr2092", "cuda", WHEN)
    assert a.path.name == "20261130-030958-pr2092-cuda"
    assert b.path.name == "20261130-030958-pr2092-cuda-2"
    assert c.path.name == "20261130-030958-pr2092-cuda-3"
    assert all(r.path.is_dir() for r in (a, b, c))
    # and without a fixed clock
    d, e = new_run_dir(tmp_path, "x", "numpy"), new_run_dir(tmp_path, "x", "numpy")
    assert d.path != e.path


def test_existing_run_is_not_clobbered(tmp_path):
    existing = tmp_path / "20261130-030958-pr2092-cuda"
    existing.mkdir()
    (existing / "records.csv").write_text("precious\n")
    run = new_run_dir(tmp_path, "pr2092", "cuda", WHEN)
    assert run.path != existing
    run.save_record(Record(shape="1Kx256", variant="v1"))
    assert (existing / "records.csv").read_text() == "precious\n"


def test_meta_round_trip_sorted(tmp_path):
    run = new_run_dir(tmp_path, "pr2092", "numpy", WHEN)
    assert run.read_meta() == {}
    run.write_meta({"seed": 0, "command": ["pa-bench", "run"], "config": {"name": "pr2092"},
                    "path": tmp_path})
    text = run.meta_path.read_text()
    assert text.index('"command"') < text.index('"config"') < text.index('"seed"')
    meta = run.read_meta()
    assert meta["config"] == {"name": "pr2092"} and meta["path"] == str(tmp_path)
    assert run.update_meta(seed=1)["seed"] == 1 and run.read_meta()["command"] == ["pa-bench", "run"]


def test_save_record_replaces_by_key_and_keeps_order(tmp_path):
    run = new_run_dir(tmp_path, "pr2092", "cuda", WHEN)
    run.save_record(Record(shape="32Kx1024", variant="v1", status="failed", reason="oom"))
    run.save_record(Record(shape="32Kx1024", variant="v2t", ms_median=7.6))
    run.save_record(Record(shape="32Kx1024", variant="v1", ms_median=13.0))
    recs = run.records()
    assert [r.key() for r in recs] == [("32Kx1024", "v1"), ("32Kx1024", "v2t")]
    assert recs[0].status == "ok" and recs[0].ms_median == 13.0
    # no temporary files left behind
    assert sorted(p.name for p in run.path.iterdir()) == ["records.csv"]


def test_done_keys_only_ok_rows(tmp_path):
    run = new_run_dir(tmp_path, "pr2092", "cuda", WHEN)
    run.save_record(Record(shape="a", variant="v1"))
    run.save_record(Record(shape="a", variant="v2", status="skipped", reason="sm_75"))
    run.save_record(Record(shape="b", variant="v1", status="failed", reason="nan"))
    assert run.done_keys() == {("a", "v1")}
    # resume: reopen and find the same rows
    again = open_run(run.path)
    assert again.done_keys() == {("a", "v1")} and len(again.records()) == 3


def test_interrupted_write_keeps_finished_rows(tmp_path, monkeypatch):
    run = new_run_dir(tmp_path, "pr2092", "cuda", WHEN)
    run.save_record(Record(shape="a", variant="v1", ms_median=1.0))

    def boom(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(KeyboardInterrupt):
        run.save_record(Record(shape="a", variant="v2t", ms_median=0.5))
    monkeypatch.undo()
    assert [r.key() for r in run.records()] == [("a", "v1")]
    assert sorted(p.name for p in run.path.iterdir()) == ["records.csv"]


def test_samples_round_trip(tmp_path):
    run = new_run_dir(tmp_path, "pr2092", "cuda", WHEN)
    assert run.samples() == {}
    run.save_samples("32Kx1024", "v1", [13.01, 12.99, 13.0000000001])
    run.save_samples("32Kx1024", "v2t", [7.6, 7.61], clocks_mhz=[1650.0, None])
    run.save_samples("32Kx1024", "v1", [13.5])  # replaced
    assert run.samples() == {"32Kx1024|v1": [13.5], "32Kx1024|v2t": [7.6, 7.61]}
    assert run.clocks() == {"32Kx1024|v2t": [1650.0, None]}
    assert run.samples_for("32Kx1024", "v2t") == [7.6, 7.61]
    # plain JSON in the documented format
    assert json.loads(run.samples_path.read_text())["32Kx1024|v2t"] == [7.6, 7.61]


def test_open_run_errors(tmp_path):
    with pytest.raises(RunNotFound, match="no run directory"):  # bad input: exit 2
        open_run(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(RunNotFound, match="not a pa-bench run"):
        open_run(tmp_path / "empty")
    run = new_run_dir(tmp_path, "c", "numpy", WHEN)
    run.write_meta({})
    assert open_run(run.run_id, root=tmp_path) == run


def test_newest_runs_ordering(tmp_path):
    def make(when, name="pr2092"):
        r = new_run_dir(tmp_path, name, "cuda", when)
        r.save_record(Record(shape="a", variant="v1"))
        return r

    old = make(WHEN)
    newer = make(WHEN + dt.timedelta(hours=1), name="smoke")
    same_second = make(WHEN + dt.timedelta(hours=1), name="smoke")  # gets -2
    (tmp_path / "not-a-run").mkdir()
    meta_only = new_run_dir(tmp_path, "zzz", "cuda", WHEN + dt.timedelta(days=1))
    meta_only.write_meta({})  # no records.csv: ignored
    assert newest_runs(tmp_path, 1) == [same_second]
    assert newest_runs(tmp_path, 2) == [newer, same_second]
    assert newest_runs(tmp_path, 10) == [old, newer, same_second]
    assert newest_runs(tmp_path / "missing", 2) == []


def test_newest_runs_falls_back_to_mtime(tmp_path):
    a, b = RunDir(tmp_path / "first"), RunDir(tmp_path / "second")
    for r in (b, a):  # create b first, then a
        r.path.mkdir()
        r.save_record(Record(shape="a", variant="v1"))
    os.utime(b.records_path, (time.time() - 100, time.time() - 100))
    assert newest_runs(tmp_path, 2) == [b, a]


def test_git_commit_and_time(tmp_path, monkeypatch):
    monkeypatch.delenv("PA_BENCH_GIT_COMMIT", raising=False)
    assert git_commit(tmp_path) is None  # not a repository
    here = git_commit(os.path.dirname(__file__))
    assert here is None or len(here) == 40
    stamp = now_utc_iso()
    assert stamp.endswith("Z") and dt.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ")


def test_git_commit_falls_back_to_the_environment_outside_a_repo(tmp_path, monkeypatch):
    from pa_bench.store.results import git_commit

    monkeypatch.setenv("PA_BENCH_GIT_COMMIT", "0123abcd")
    assert git_commit(tmp_path) == "0123abcd"
    monkeypatch.setenv("PA_BENCH_GIT_COMMIT", "not a hash")
    assert git_commit(tmp_path) is None


def test_the_environment_names_the_commit_even_inside_a_repo(monkeypatch):
    """A tree copied to a GPU machine may carry a stale .git: the named commit wins, and
    whether the tree is dirty is then unknown."""
    from pa_bench.store.results import git_commit, git_dirty

    repo = os.path.dirname(os.path.dirname(__file__))
    monkeypatch.setenv("PA_BENCH_GIT_COMMIT", "89abcdef")
    assert git_commit(repo) == "89abcdef"
    assert git_dirty(repo) is None
