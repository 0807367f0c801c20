"""The tidy record: one row per shape x variant, the columns of README "Output columns" (docs/DESIGN.md, "Records") with their exact names.

`Record` holds plain values only (str, int, float, bool or None). An empty measurement is
`None`, written as an empty CSV cell. `write_csv` / `read_csv` use the standard `csv` module so
that a round trip is exact: floats are written with `repr` (shortest exact form, `nan`/`inf`
kept), bools as `True`/`False`, None as an empty cell. `records_to_frame` / `frame_to_records`
convert to and from a pandas DataFrame (imported lazily) with nullable dtypes.
"""

from __future__ import annotations

import csv
import io
import math
import typing
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from pa_bench.errors import RunError
from pa_bench.store.schema import SCHEMA_VERSION, check_version, migrate_record_v2, version_of

STATUS_OK = "ok"
STATUS_SKIPPED = "skipped"
STATUS_FAILED = "failed"
STATUSES = (STATUS_OK, STATUS_SKIPPED, STATUS_FAILED)


@dataclass(kw_only=True)
class Record:
    """One shape x variant of a run. Only `shape` and `variant` are required."""

    # what ran
    config: str | None = None
    shape: str  # the shape string as written in the config / command line, e.g. "32Kx1024"
    context: int | None = None
    queries: int | None = None
    heads_q: int | None = None
    heads_kv: int | None = None
    head_dim: int | None = None
    layout: str | None = None
    page: int | None = None
    data: str | None = None
    # who ran it
    variant: str
    backend: str | None = None
    gpu: str | None = None
    arch: str | None = None
    # outcome
    status: str = STATUS_OK
    reason: str | None = None
    # timing
    ms_median: float | None = None
    ms_min: float | None = None
    ms_max: float | None = None
    ms_rel_spread: float | None = None  # relative standard deviation of the samples
    samples: int | None = None  # number of timing samples
    tflops: float | None = None
    kv_gbps: float | None = None
    sm_clock_mhz: float | None = None  # median SM clock the samples ran at
    throttled: int | None = None  # number of throttled samples
    stop_reason: str | None = None  # why sampling stopped: noise, timeout or max_samples
    clock_source: str | None = None  # where sm_clock_mhz came from: sm-cycles (stamps), nvml or nvidia-smi
    host_bound: bool | None = None  # some sample's hold timed out before the host had enqueued it
    # parity
    max_abs_err: float | None = None
    rel_l2_err: float | None = None
    nmse: float | None = None
    model_max_abs_err: float | None = None
    err_ratio: float | None = None
    parity_pass: bool | None = None
    sampled_rows: int | None = None  # query rows compared; None = all rows
    quant_max_abs_err: float | None = None
    deterministic: bool | None = None
    # the config's reference figures (the PR's)
    ref_ms: float | None = None
    ref_err: float | None = None
    # extras (docs/DESIGN.md)
    ms_q1: float | None = None
    ms_q3: float | None = None
    ms_ci_lo: float | None = None  # the median's 95 % confidence interval (measure.stats.median_interval)
    ms_ci_hi: float | None = None
    ci_kind: str | None = None  # what ms_ci_lo/hi is: samples, placements or processes (measure.xproc)
    processes: int | None = None  # worker processes whose samples the row pools (--processes)
    ms_proc_medians: str | None = None  # each process's median, ';'-separated
    ms_xproc_lo: float | None = None  # the median's 95 % interval across processes (measure.xproc)
    ms_xproc_hi: float | None = None
    speedup_vs_v1: float | None = None  # median of paired per-round ratios v1 / this
    speedup_lo: float | None = None  # q1 of those ratios
    speedup_hi: float | None = None  # q3 of those ratios
    cosine: float | None = None
    nan_inf: int | None = None
    canary_ok: bool | None = None
    diff_vs_v1: float | None = None
    diff_vs_v2: float | None = None
    out_dtype: str | None = None
    softmax_scale: float | None = None
    seed: int | None = None
    mma: str | None = None
    force_turing: bool | None = None
    label: str | None = None  # display label, e.g. "1.5K" for 0x1536
    # the device that ran the row: NVML index on its host and UUID; `gpu` is its name
    device_index: int | None = None
    device_uuid: str | None = None
    impl: str | None = None  # what a peer ran: the library's kernel or backend (torch's choice: cudnn, flash ...)
    # a kernel that rounds an input beyond the cache's format (Variant.input_rounding; empty otherwise):
    input_round_err: float | None = None  # max |FP64 with the rounded input - FP64 without| on the compared rows
    budget_pass: bool | None = None  # max_abs_err <= quant_max_abs_err (None: not judged); parity_pass needs it
    # the result schema (pa_bench.store.schema); a version-1 file has no such column
    schema_version: int = SCHEMA_VERSION

    def key(self) -> tuple[str, str]:
        """(shape, variant): the identity of a row within a run."""
        return (self.shape, self.variant)

    def value(self, column: str) -> Any:
        """The value of the column named ``column`` (one of COLUMNS)."""
        return getattr(self, column)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Record":
        """Build a Record from a mapping; unknown keys are ignored, values are coerced."""
        values = {}
        for name in COLUMNS:
            if name in d:
                values[name] = _coerce(name, d[name])
        for name in ("shape", "variant"):
            if values.get(name) is None:
                raise RunError(f"a record has no {name!r}")
        if values.get("status") is None:
            values.pop("status", None)
        return cls(**values)

    @property
    def display_shape(self) -> str:
        """Label if one was given, else the shape string."""
        return self.label or self.shape


COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(Record))

_HINTS = typing.get_type_hints(Record)


def _base_type(hint: Any) -> type:
    for t in (bool, int, float, str):
        if hint is t or t in typing.get_args(hint):
            return t
    raise TypeError(f"unsupported Record field type {hint!r}")


#: column name -> bool | int | float | str
FIELD_TYPES: dict[str, type] = {name: _base_type(_HINTS[name]) for name in COLUMNS}

_TRUE = {"true", "1", "yes"}
_FALSE = {"false", "0", "no"}


def _is_missing(value: Any) -> bool:
    """None, or pandas' NA / NaT (recognised without importing pandas)."""
    return value is None or type(value).__name__ in ("NAType", "NaTType")


def _coerce(name: str, value: Any) -> Any:
    """Coerce `value` (possibly a CSV string or a NumPy scalar) to column `name`'s type."""
    if _is_missing(value):
        return None
    kind = FIELD_TYPES[name]
    if isinstance(value, str):
        text = value.strip()
        if text == "":
            return None
        if kind is str:
            return value
        if kind is bool:
            low = text.lower()
            if low in _TRUE:
                return True
            if low in _FALSE:
                return False
            raise RunError(f"column {name!r}: {value!r} is not a boolean")
        try:
            if kind is int:
                f = float(text)
                if not f.is_integer():
                    raise ValueError
                return int(f)
            return float(text)
        except ValueError:
            raise RunError(f"column {name!r}: {value!r} is not a number") from None
    if kind is str:
        return str(value)
    if kind is bool:
        return bool(value)
    if kind is int:
        f = float(value)
        if math.isnan(f):
            return None
        return int(f)
    return float(value)


def format_cell(name: str, value: Any) -> str:
    """The CSV text of one value: '' for None, repr for floats, True/False for bools."""
    value = _coerce(name, value)
    if value is None:
        return ""
    kind = FIELD_TYPES[name]
    if kind is float:
        return repr(float(value))
    return str(value)


def write_csv(records: Iterable[Record], path: str | Path | io.TextIOBase) -> None:
    """Write records with a header of COLUMNS (to a path or an open text stream)."""
    if isinstance(path, (str, Path)):
        with open(path, "w", newline="", encoding="utf-8") as fh:
            _write(records, fh)
    else:
        _write(records, path)


def _write(records: Iterable[Record], fh: Any) -> None:
    w = csv.writer(fh, lineterminator="\n")
    w.writerow(COLUMNS)
    for rec in records:  # every row is written at this version, whatever it was read from
        w.writerow([str(SCHEMA_VERSION) if name == "schema_version" else format_cell(name, rec.value(name))
                    for name in COLUMNS])


def read_csv(path: str | Path | io.TextIOBase) -> list[Record]:
    """Read records written by `write_csv`. An older file is migrated (version 1 has no
    `schema_version` column and a subset of the columns: the missing ones are None; version 2's
    pinned-flash `torch-sdpa` rows read as `torch-sdpa-flash`, pa_bench.store.schema); a row of a
    newer version is refused in one line (:class:`~pa_bench.errors.SchemaError`)."""
    if isinstance(path, (str, Path)):
        try:
            with open(path, newline="", encoding="utf-8") as fh:
                return _read(fh, str(path))
        except OSError as exc:
            raise RunError(f"cannot read {path}: {exc.strerror or exc}") from None
    return _read(path, "<stream>")


def _read(fh: Any, where: str) -> list[Record]:
    out = []
    for i, row in enumerate(csv.DictReader(fh), start=2):
        version = version_of(row.get("schema_version"), f"{where}, line {i}")
        check_version(version, where)
        if version < 3:
            row = migrate_record_v2(row)
        row["schema_version"] = str(SCHEMA_VERSION)
        try:
            out.append(Record.from_dict(row))
        except RunError as exc:
            raise RunError(f"{where}, line {i}: {exc}") from None
    return out


_FRAME_DTYPES = {bool: "boolean", int: "Int64", float: "float64", str: "object"}


def records_to_frame(records: Iterable[Record]):
    """A pandas DataFrame with one row per record and COLUMNS as columns.

    Dtypes: ints -> Int64, bools -> boolean (nullable), floats -> float64 (None -> NaN),
    strings -> object (None kept).
    """
    import pandas as pd  # noqa: PLC0415 - pandas is only needed for frames

    rows = [r.to_dict() for r in records]
    cols = {}
    for name in COLUMNS:
        vals = [row[name] for row in rows]
        kind = FIELD_TYPES[name]
        if kind is float:
            cols[name] = pd.Series([math.nan if v is None else v for v in vals], dtype="float64")
        else:
            cols[name] = pd.Series(vals, dtype=_FRAME_DTYPES[kind])
    return pd.DataFrame(cols, columns=list(COLUMNS))


def frame_to_records(df) -> list[Record]:
    """Records from a DataFrame; NaN/NA cells become None, unknown columns are ignored."""
    out = []
    for row in df.to_dict(orient="records"):
        clean = {}
        for name, value in row.items():
            if name not in FIELD_TYPES:
                continue
            if isinstance(value, float) and math.isnan(value):
                value = None
            clean[name] = value
        out.append(Record.from_dict(clean))
    return out
