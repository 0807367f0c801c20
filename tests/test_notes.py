"""A row's notes as data (pa_bench.notes): the phase that wrote each, joined into records.csv's
reason column once, and read back with their phases."""

from __future__ import annotations

from pa_bench import notes as N
from pa_bench.notes import INPUTS, PARITY, TIMING, Note


def test_notes_round_trip_through_the_reason_column():
    notes = [Note(PARITY, "peers are timing-only"),
             Note(PARITY, "parity judged on the 2 of 8 rows the numerics model ran on"),
             Note(TIMING, "the numpy backend does not time kernels (needs CuPy and a GPU)"),
             Note(INPUTS, "shape 64Kx512 will not fit: needs about 90 GiB")]
    reason = N.join(notes)
    assert reason == ("peers are timing-only; parity judged on the 2 of 8 rows the numerics model "
                      "ran on; timing: the numpy backend does not time kernels (needs CuPy and a "
                      "GPU); inputs: shape 64Kx512 will not fit: needs about 90 GiB")
    assert N.parse(reason) == notes


def test_a_text_is_written_once_under_the_first_phase_that_said_it():
    same = "v2 needs sm_80+ (cp.async), not sm_75"
    assert N.join([Note(PARITY, same), Note(TIMING, same)]) == same
    assert N.join([]) is None and N.parse(None) == [] and N.parse("") == []


def test_a_parity_text_that_reads_like_a_prefix_stays_parity():
    # an error's own text may hold ': ' (a CUDA error, a parity verdict): only inputs and timing
    # are prefixes
    for text in ("RuntimeError: CUDA error: an illegal memory access", "parity: max err 1e-3 > 2e-4"):
        assert N.parse(text) == [Note(PARITY, text)]
    assert N.parse("timing: failed: RuntimeError: boom") == [Note(TIMING, "failed: RuntimeError: boom")]


def test_a_report_problem_is_a_note_not_a_lost_run(tmp_path, monkeypatch):
    from pa_bench.present import report
    from pa_bench.store.records import Record
    from pa_bench.store.results import new_run_dir

    run = new_run_dir(tmp_path, "x", "numpy")
    run.write_meta({"status": "complete"})
    run.save_record(Record(shape="64x16", variant="v1"))
    said = []

    def broken(*_a, **_k):
        raise ValueError("disk full\nmore")

    monkeypatch.setattr(report, "write_report", broken)
    report.write_report_or_note(run.path, said.append)
    assert said == [f"note: report.md not written (disk full); rebuild it with: pa-bench report {run.path}"]


def test_a_retimed_row_of_a_resumed_run_keeps_its_parity_notes(smoke_yaml, tmp_path, monkeypatch):
    from test_runner import FakeGpu, records_of, tiny  # noqa: PLC0415 - the runner tests' fakes

    from pa_bench import runner
    from pa_bench.problem.config import load_config

    smoke = load_config(smoke_yaml)
    monkeypatch.setattr(runner, "MODEL_WORK_BUDGET", 4 * 16 * 1100)  # a parity note on every row
    path = runner.run_all(tiny(smoke, "1023x113"), FakeGpu(), results_root=tmp_path)
    before = records_of(path)
    assert all("rows the numerics model ran on" in r.reason for r in before.values())
    records = path / "records.csv"
    records.write_text("".join(ln for ln in records.read_text().splitlines(keepends=True)
                               if ",v2t," not in ln))  # v2t never finished: the shape is re-timed
    runner.run_all(tiny(smoke, "1023x113"), FakeGpu(), results_root=tmp_path, resume_run=path)
    after = records_of(path)
    for v in ("v1", "v2"):  # kept, re-timed with v2t: their parity notes come through the CSV
        assert N.parse(after[("1023x113", v)].reason) == N.parse(before[("1023x113", v)].reason)
    assert "rows the numerics model ran on" in after[("1023x113", "v2t")].reason
