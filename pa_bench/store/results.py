"""Run directories `results/<run-id>/`: create (never overwrite), meta, records, samples, resume.

Layout of a run directory:

- `records.csv`  one row per shape x variant (`pa_bench.store.records`), rewritten atomically after
  every finished row, so an interrupted run keeps what it finished;
- `samples.json` `{"<shape>|<variant>": [ms, ...], ...}` raw per-launch times, one key per line;
  a ``--processes`` run pools each row's workers' samples in worker order, and ``meta.json``
  ``processes.samples`` holds how many each made (``RunDir.process_samples`` splits them);
- `clocks.json`  same keys, the SM clock (MHz, or null) read around each sample, when known;
- `meta.json`    environment, config, command line ... (sorted keys, indent 2; the keys are
  `pa_bench.store.schema.RunMeta`'s, with `schema_version`; an older run migrates on read);
- `report.md` and `*.png` written by `pa_bench.present.report`.

`run-id` = `YYYYmmdd-HHMMSS-<config>-<backend>` (UTC); if that directory exists a suffix
`-2`, `-3`, ... is added. Every file is written through a temporary file and `os.replace`,
so a reader never sees half a file, with a plain write's permissions (group-readable under the
usual umask). A run whose meta.json is missing or not JSON, or whose records.csv was cut
short, is refused in one line (:class:`~pa_bench.errors.DamagedRun`).

A user's runs are `results/<run-id>/`; the committed runs the README quotes are
`results/reference/<gpu>/<run-id>/`: read by `report` and `compare`, never picked as "the newest
run" and never written into.
"""

from __future__ import annotations

import csv
import datetime as _dt
import io
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from pa_bench.errors import DamagedRun, ResultsNotWritable, RunError, RunNotFound
from pa_bench.fmt import one_line as fmt_one_line
from pa_bench.store.records import STATUS_OK, Record, read_csv, write_csv
from pa_bench.store.schema import SCHEMA_VERSION, RunMeta, migrate_series_v2, upgrade_meta, version_of

RECORDS_FILE = "records.csv"
SAMPLES_FILE = "samples.json"
CLOCKS_FILE = "clocks.json"
META_FILE = "meta.json"
REPORT_FILE = "report.md"
#: Committed runs live in `results/reference/<gpu>/<run-id>/` (read, never written by pa-bench).
REFERENCE_DIR = "reference"

_TS_FORMAT = "%Y%m%d-%H%M%S"
_RUN_ID_RE = re.compile(r"^(?P<ts>\d{8}-\d{6})-(?P<rest>.+?)(?:-(?P<n>\d+))?$")
_MAX_SUFFIX = 10000


def now_utc_iso() -> str:
    """Current UTC time, e.g. '2026-11-30T03:09:58Z'."""
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def git_commit(repo_path: str | Path = ".") -> str | None:
    """The commit the work tree at `repo_path` was taken from.

    ``PA_BENCH_GIT_COMMIT`` names it where it is set (a copy of the tree on a remote GPU
    machine may carry no ``.git``, or a stale one); otherwise HEAD of the repository; None if
    neither is known.
    """
    given = os.environ.get("PA_BENCH_GIT_COMMIT", "").strip()
    if given:
        return given if re.fullmatch(r"[0-9a-f]{7,64}", given) else None
    out = _git(repo_path, "rev-parse", "HEAD")
    return out if out and re.fullmatch(r"[0-9a-f]{7,64}", out) else None


def git_dirty(repo_path: str | Path = ".") -> bool | None:
    """True if the work tree has uncommitted changes; None if unknown (also when the commit
    was named by ``PA_BENCH_GIT_COMMIT``: the local repository may not be that commit)."""
    if os.environ.get("PA_BENCH_GIT_COMMIT", "").strip() or git_commit(repo_path) is None:
        return None
    out = _git(repo_path, "status", "--porcelain", "--untracked-files=no")
    return None if out is None else bool(out)


def _git(repo_path: str | Path, *args: str) -> str | None:
    git = shutil.which("git")
    if git is None:
        return None
    try:
        proc = subprocess.run(
            [git, "-C", str(repo_path), *args],
            capture_output=True, text=True, timeout=10, check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def _file_mode() -> int:
    """The mode a plain ``open()`` would give a new file: 0o666 less the umask (mkstemp's files
    are 0600, which would hide a shared sweep from the rest of a lab's group)."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def _atomic_write_text(path: Path, text: str) -> None:
    """Write `text` to `path` through a temporary file in the same directory and os.replace;
    the file gets the permissions of a plain write (readable by the group under umask 022)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, _file_mode())
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _sample_key(shape: str, variant: str) -> str:
    return f"{shape}|{variant}"


def _dump_series(d: dict[str, list]) -> str:
    """JSON object with one key per line (compact yet diff- and grep-friendly)."""
    if not d:
        return "{}\n"
    lines = [f"{json.dumps(k)}: {json.dumps(v, separators=(',', ':'))}" for k, v in d.items()]
    return "{\n" + ",\n".join(lines) + "\n}\n"


def check_csv_complete(path: Path) -> None:
    """Refuse (:class:`DamagedRun`, one line naming the file) a CSV that was cut short: pa-bench
    ends every line with a newline and writes every field of every row, so a file whose end is
    not a newline, or a row with fewer or more fields than the header, was truncated or edited."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise DamagedRun(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise DamagedRun(f"{path}: cannot read ({exc.strerror or exc})") from None
    if not text:
        raise DamagedRun(f"{path}: empty (not even the header): the file is damaged")
    if not text.endswith("\n"):
        raise DamagedRun(f"{path}: cut short (its last line has no newline): the file is damaged")
    rows = csv.reader(io.StringIO(text, newline=""))
    try:
        width = len(next(rows))
        for row in rows:
            if len(row) != width:
                raise DamagedRun(f"{path}, line {rows.line_num}: {len(row)} fields, the header has "
                                 f"{width}: the file is damaged (truncated or edited)")
    except csv.Error as exc:
        raise DamagedRun(f"{path}, line {rows.line_num}: {exc}: the file is damaged") from None


class RunDir:
    """One run directory. Create with `new_run_dir`, reopen with `open_run`."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RunDir) and self.path.resolve() == other.path.resolve()

    def __hash__(self) -> int:
        return hash(self.path.resolve())

    def __fspath__(self) -> str:
        return str(self.path)

    # -- paths ---------------------------------------------------------------------------
    @property
    def run_id(self) -> str:
        return self.path.name

    @property
    def records_path(self) -> Path:
        return self.path / RECORDS_FILE

    @property
    def samples_path(self) -> Path:
        return self.path / SAMPLES_FILE

    @property
    def clocks_path(self) -> Path:
        return self.path / CLOCKS_FILE

    @property
    def meta_path(self) -> Path:
        return self.path / META_FILE

    @property
    def report_path(self) -> Path:
        return self.path / REPORT_FILE

    # -- meta ----------------------------------------------------------------------------
    def write_meta(self, meta: dict[str, Any]) -> None:
        """Write meta.json (sorted keys, indent 2) at this schema version (`schema_version`
        stamped, known keys' types checked); values JSON cannot hold are written as str."""
        meta = {**meta, "schema_version": SCHEMA_VERSION}
        RunMeta.from_dict(meta, str(self.meta_path))
        text = json.dumps(meta, sort_keys=True, indent=2, default=str) + "\n"
        if self.stored_version() < SCHEMA_VERSION:   # an older run written again (--resume):
            for path, series in ((self.samples_path, self.samples()), (self.clocks_path, self.clocks())):
                if series:                            # its series keys move to this version first
                    _atomic_write_text(path, _dump_series(series))
        _atomic_write_text(self.meta_path, text)

    def update_meta(self, **values: Any) -> dict[str, Any]:
        """Merge `values` into meta.json and return the new meta."""
        meta = self.read_meta()
        meta.update(values)
        self.write_meta(meta)
        return meta

    def read_meta(self) -> dict[str, Any]:
        """meta.json as a dict; {} if the run has none yet."""
        if not self.meta_path.exists():
            return {}
        try:
            meta = json.loads(self.meta_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise DamagedRun(f"{self.meta_path}: unreadable meta.json ({fmt_one_line(exc)})") from None
        if not isinstance(meta, dict):
            raise DamagedRun(f"{self.meta_path}: meta.json is not a JSON object")
        return upgrade_meta(meta, str(self.meta_path))

    def check_files(self) -> None:
        """Refuse a damaged run in one line (:class:`DamagedRun`): meta.json missing (every run
        writes it before its first row) or unreadable, records.csv cut short."""
        if not self.meta_path.is_file():
            raise DamagedRun(f"{self.meta_path}: missing (pa-bench writes it before any row): "
                             "the run directory is damaged or incomplete")
        self.read_meta()
        self.records()

    def finish_meta(self, *, resumed: bool, wall_seconds: float, phase_seconds: dict,
                    **values: Any) -> dict[str, Any]:
        """Record a command's end: ``values`` (status, finished ...) and its own seconds. A
        resumed run keeps the first command's ``wall_seconds`` and ``phase_seconds`` and gives
        the resume's own to its entry in ``resumes``."""
        if not resumed:
            return self.update_meta(wall_seconds=wall_seconds, phase_seconds=phase_seconds, **values)
        meta = self.read_meta()
        resumes = [dict(r) for r in meta.get("resumes") or []] or [{}]
        resumes[-1].update(wall_seconds=wall_seconds, phase_seconds=phase_seconds)
        return self.update_meta(resumes=resumes, **values)

    def meta(self) -> RunMeta:
        """meta.json typed (an older schema migrated; an empty RunMeta if there is none yet)."""
        return RunMeta.from_dict(self.read_meta(), str(self.meta_path))

    # -- records -------------------------------------------------------------------------
    def records(self) -> list[Record]:
        """The run's records in file order ([] if none yet)."""
        if not self.records_path.exists():
            return []
        check_csv_complete(self.records_path)
        try:
            return read_csv(self.records_path)
        except RunError as exc:  # a value that does not parse: the file is damaged
            raise DamagedRun(str(exc)) from None

    def save_record(self, record: Record) -> None:
        """Add a record, replacing the row with the same (shape, variant) in place, and
        rewrite records.csv atomically."""
        rows = self.records()
        key = record.key()
        for i, old in enumerate(rows):
            if old.key() == key:
                rows[i] = record
                break
        else:
            rows.append(record)
        self.write_records(rows)

    def write_records(self, records: Iterable[Record]) -> None:
        """Replace records.csv with `records` (atomically)."""
        buf = io.StringIO()
        write_csv(list(records), buf)
        _atomic_write_text(self.records_path, buf.getvalue())

    def done_keys(self) -> set[tuple[str, str]]:
        """(shape, variant) of the rows that finished with status 'ok' (skipped by --resume)."""
        return {r.key() for r in self.records() if r.status == STATUS_OK}

    # -- samples -------------------------------------------------------------------------
    def save_samples(
        self,
        shape: str,
        variant: str,
        samples_ms: Sequence[float],
        clocks_mhz: Sequence[float | None] | None = None,
    ) -> None:
        """Store one shape x variant's raw samples (and SM clocks) replacing earlier ones."""
        key = _sample_key(shape, variant)
        data = self.samples()
        data[key] = [float(x) for x in samples_ms]
        _atomic_write_text(self.samples_path, _dump_series(data))
        if clocks_mhz is not None:
            clocks = self.clocks()
            clocks[key] = [None if c is None else float(c) for c in clocks_mhz]
            _atomic_write_text(self.clocks_path, _dump_series(clocks))

    def samples(self) -> dict[str, list[float]]:
        """{"<shape>|<variant>": [ms, ...]} ({} if none), keys as this schema version names them."""
        return self._migrated(self._read_series(self.samples_path))

    def clocks(self) -> dict[str, list[float | None]]:
        """{"<shape>|<variant>": [MHz or None, ...]} ({} if none recorded)."""
        return self._migrated(self._read_series(self.clocks_path))

    def stored_version(self) -> int:
        """The schema version the run was written at (meta.json's, before any migration)."""
        if not self.meta_path.exists():
            return SCHEMA_VERSION
        try:
            raw = json.loads(self.meta_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return SCHEMA_VERSION   # read_meta reports the damage
        if not isinstance(raw, dict):
            return SCHEMA_VERSION
        return version_of(raw.get("schema_version"), str(self.meta_path))

    def _migrated(self, series: dict[str, list]) -> dict[str, list]:
        return migrate_series_v2(series) if series and self.stored_version() < 3 else series

    def samples_for(self, shape: str, variant: str) -> list[float] | None:
        return self.samples().get(_sample_key(shape, variant))

    def process_samples(self, shape: str, variant: str) -> list[list[float]] | None:
        """A ``--processes`` run's samples of one row, one list per worker that timed it (the
        pooled list split by ``meta.json`` ``processes.samples``); None for a run of one
        process, or a row without samples."""
        pooled = self.samples_for(shape, variant)
        procs = self.read_meta().get("processes")
        counts = (procs.get("samples") or {}).get(_sample_key(shape, variant)) \
            if isinstance(procs, dict) else None
        if pooled is None or not counts or sum(counts) != len(pooled):
            return None
        out, at = [], 0
        for n in counts:
            if n:
                out.append(pooled[at:at + n])
            at += n
        return out

    @staticmethod
    def _read_series(path: Path) -> dict[str, list]:
        if not path.exists():
            return {}
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise RunError(f"{path}: unreadable ({exc})") from None
        if not isinstance(data, dict):
            raise RunError(f"{path}: not a JSON object")
        return data


def run_id_for(config_name: str, backend: str, when: _dt.datetime | None = None) -> str:
    """`YYYYmmdd-HHMMSS-<config>-<backend>` (UTC); names are made filesystem-safe."""
    when = when or _dt.datetime.now(_dt.timezone.utc)
    if when.tzinfo is not None:
        when = when.astimezone(_dt.timezone.utc)
    return f"{when.strftime(_TS_FORMAT)}-{_safe(config_name)}-{_safe(backend)}"


def _safe(name: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9._+-]+", "-", str(name)).strip("-.")
    return cleaned or "run"


def new_run_dir(
    root: str | Path, config_name: str, backend: str, when: _dt.datetime | None = None
) -> RunDir:
    """Create a fresh `root/<run-id>/` and return it. Never reuses an existing directory:
    creation is an atomic mkdir, and on a collision `-2`, `-3`, ... is appended."""
    root = Path(root)
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ResultsNotWritable(f"cannot create results directory {root}: "
                                 f"{exc.strerror or exc}") from None
    base = run_id_for(config_name, backend, when)
    for n in range(1, _MAX_SUFFIX):
        path = root / (base if n == 1 else f"{base}-{n}")
        try:
            path.mkdir()
        except FileExistsError:
            continue
        except OSError as exc:
            raise ResultsNotWritable(f"cannot create run directory {path}: "
                                     f"{exc.strerror or exc}") from None
        return RunDir(path)
    raise RunError(f"too many runs named {base} under {root}")


def is_reference_run(path: str | Path) -> bool:
    """Whether ``path`` is a committed reference run: it lies under ``results/reference/``
    (``results/reference/<gpu>/<run-id>/``), where the README's figures come from. pa-bench
    reads such a run but never writes into it."""
    parts = Path(path).resolve().parts
    return any(a == "results" and b == REFERENCE_DIR for a, b in zip(parts, parts[1:]))


def _reference_run(root: Path, run_id: str) -> Path | None:
    """``root/reference/<gpu>/<run_id>`` where exactly one GPU folder holds that run id."""
    found = [p for p in (root / REFERENCE_DIR).glob(f"*/{run_id}") if p.is_dir()]
    return found[0] if len(found) == 1 else None


def open_run(path: str | Path, root: str | Path | None = None) -> RunDir:
    """Reopen an existing run (for --resume, report, compare).

    `path` is a run directory, or a run id under `root` (or under `root/reference/<gpu>/`). It
    must hold records.csv or meta.json.
    """
    p = Path(path)
    if not p.is_dir() and root is not None and (Path(root) / p).is_dir():
        p = Path(root) / p
    if not p.is_dir() and root is not None and len(p.parts) == 1:
        p = _reference_run(Path(root), p.name) or p
    if not p.is_dir():
        raise RunNotFound(f"no run directory {path}")
    if not ((p / RECORDS_FILE).exists() or (p / META_FILE).exists()):
        raise RunNotFound(f"{path} is not a pa-bench run (no {RECORDS_FILE} or {META_FILE})")
    return RunDir(p)


def _run_sort_key(path: Path) -> tuple[float, int, float, str]:
    """(time from the run id or mtime, collision suffix, mtime, name)."""
    try:
        mtime = (path / RECORDS_FILE).stat().st_mtime
    except OSError:
        mtime = 0.0
    m = _RUN_ID_RE.match(path.name)
    when = mtime
    suffix = 1
    if m:
        try:
            ts = _dt.datetime.strptime(m.group("ts"), _TS_FORMAT)
            when = ts.replace(tzinfo=_dt.timezone.utc).timestamp()
            suffix = int(m.group("n")) if m.group("n") else 1
        except ValueError:
            pass
    return (when, suffix, mtime, path.name)


def newest_runs(root: str | Path, n: int = 1) -> list[RunDir]:
    """The `n` newest of a user's runs under `root` that hold records.csv, oldest first, newest
    LAST (so `a, b = newest_runs(root, 2)` gives the earlier run as A). Ordered by the run id's
    timestamp and suffix, else by records.csv's mtime. [] if there are none. Only `root`'s own
    run directories count: the committed runs under `root/reference/` never do."""
    root = Path(root)
    if not root.is_dir() or n <= 0:
        return []
    runs = [p for p in root.iterdir() if p.is_dir() and p.name != REFERENCE_DIR
            and (p / RECORDS_FILE).is_file()]
    runs.sort(key=_run_sort_key)
    return [RunDir(p) for p in runs[-n:]]


def reference_runs(root: str | Path) -> list[RunDir]:
    """The committed runs under ``root/reference/<gpu>/``, oldest first (as newest_runs)."""
    base = Path(root) / REFERENCE_DIR
    if not base.is_dir():
        return []
    runs = [p for p in base.glob("*/*") if p.is_dir() and (p / RECORDS_FILE).is_file()]
    runs.sort(key=_run_sort_key)
    return [RunDir(p) for p in runs]


def _same_config(runs: list[RunDir], n: int) -> list[RunDir]:
    """The newest ``n`` of ``runs`` (oldest first) that share a config and backend (their run ids
    after the time stamp): runs that can be compared. [] if no config has ``n``."""
    groups: dict[str, list[RunDir]] = {}
    for run in runs:
        m = _RUN_ID_RE.match(run.run_id)
        groups.setdefault(m.group("rest") if m else run.run_id, []).append(run)
    full = [g[-n:] for g in groups.values() if len(g) >= n]
    return max(full, key=lambda g: _run_sort_key(g[-1].path)) if full else []


def pick_runs(names: Sequence[str], root: str | Path, n: int, command: str = "report") -> list[RunDir]:
    """The runs ``names`` names (paths, or run ids under ``root``), else the ``n`` newest of a
    user's runs under ``root`` (never a committed reference run). With too few, one line
    (:class:`RunNotFound`) that says how to make a run or which runs can be named instead."""
    if names:
        return [open_run(r, root=root) for r in names]
    found = newest_runs(root, n)
    if len(found) >= n:
        return found
    have = f"only {len(found)} run" if found else ("no runs" if n == 1 else "no two runs")
    needs = "" if n == 1 else " (it needs two)"
    refs = _same_config(reference_runs(root), n)
    if refs:
        example = " ".join(str(r.path) for r in refs)
        named = f"or name {'one' if n == 1 else 'two'}, e.g. pa-bench {command} {example}"
    else:
        named = f"or name {'the run' if n == 1 else 'the two runs'}"
    raise RunNotFound(f"{have} of yours under {root}/ to {command}{needs}: make one with "
                      f"'pa-bench run configs/smoke.yaml' (seconds on a CPU), {named}")


def open_run_to_resume(path: str | Path, root: str | Path | None = None) -> RunDir:
    """A run that ``--resume`` may write into: any run but a committed reference run."""
    run = open_run(path, root=root)
    if is_reference_run(run.path):
        raise RunNotFound(f"{run.path} is a committed reference run: it is not resumed or "
                          "written into (run the config again for a run of your own)")
    return run
