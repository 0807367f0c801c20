"""The result schema: its version and the typed top-level keys of meta.json.

Version 2 (this one) writes ``schema_version`` in meta.json and as a column of records.csv.
Version 1 is every run written before (no ``schema_version`` anywhere): its keys are a subset of
version 2's, so :func:`migrate_v1` only stamps the version. A run of a newer version than this
pa-bench knows is refused with one line (:class:`~pa_bench.errors.SchemaError`, exit code 2).

:class:`RunMeta` lists the top-level keys pa-bench writes (runner, devices, merge, prompt) with
their types; readers (report, compare, merge) read these keys and no others. Keys written by
something else (e.g. a note added by hand) are kept in ``extra`` and never read.
"""

from __future__ import annotations

import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from pa_bench.errors import SchemaError

SCHEMA_VERSION = 2


@dataclass(kw_only=True)
class RunMeta:
    """meta.json's top-level keys (None / empty when a run did not write them)."""

    schema_version: int = SCHEMA_VERSION
    mode: str | None = None  # run, parity or prompt
    status: str | None = None  # running, complete, interrupted, incomplete
    created: str | None = None  # UTC ISO times
    started: str | None = None
    finished: str | None = None
    merged: str | None = None  # set by `pa-bench merge`
    command: list | None = None  # argv
    config: dict = field(default_factory=dict)  # Config.to_dict()
    config_path: str | None = None
    seed: int | None = None
    sample_rows: int | None = None
    backend: dict = field(default_factory=dict)  # the backend's describe(): gpu, arch, sm_count, ...
    backend_meta: dict = field(default_factory=dict)  # the backend's meta(): builds, launches, ...
    environment: dict = field(default_factory=dict)  # pa_bench.present.envinfo.environment()
    git_commit: str | None = None
    git_dirty: bool | None = None
    wall_seconds: float | None = None
    phase_seconds: dict = field(default_factory=dict)
    resumes: list = field(default_factory=list)
    shard: dict | None = None  # a shard run's plan (pa_bench.shard)
    parts: list | None = None  # a merged run's parts (pa_bench.store.merge)
    devices: list | None = None  # run --devices: the GPUs
    prompt: dict | None = None  # pa-bench prompt's summary
    extra: dict = field(default_factory=dict)  # keys pa-bench does not write (kept, never read)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], where: str = "meta.json") -> "RunMeta":
        """Typed meta from a current-version dict; a known key of the wrong type is one line."""
        values: dict[str, Any] = {}
        extra = dict(d.get("extra") or {})
        for key, value in d.items():
            if key == "extra":
                continue
            if key not in _TYPES:
                extra[key] = value
                continue
            if value is not None and not isinstance(value, _TYPES[key]):
                want = " or ".join(t.__name__ for t in _TYPES[key])
                raise SchemaError(f"{where}: key {key!r} is {type(value).__name__}, not {want}")
            if value is not None or key not in _DEFAULTED:
                values[key] = value
        return cls(**values, extra=extra)

    def to_dict(self) -> dict[str, Any]:
        """The meta.json object: every key that is set (None and empty containers left out)."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"}
        out = {k: v for k, v in out.items() if v is not None and v != {} and v != []}
        out.update(self.extra)
        return out


def _types(hint: Any) -> tuple[type, ...]:
    args = [a for a in typing.get_args(hint) if a is not type(None)] or [hint]
    ts = tuple(typing.get_origin(a) or a for a in args)
    if float in ts:  # JSON writes 3.0 as 3
        ts += (int,)
    return ts


_HINTS = typing.get_type_hints(RunMeta)
_TYPES: dict[str, tuple[type, ...]] = {f.name: _types(_HINTS[f.name]) for f in fields(RunMeta)
                                       if f.name != "extra"}
_DEFAULTED = {f.name for f in fields(RunMeta) if f.default_factory in (dict, list)}


def version_of(value: Any, where: str) -> int:
    """A stored ``schema_version`` as an int (missing = 1); one line if it is not a version."""
    if value is None or value == "":
        return 1
    try:
        version = int(value)
    except (TypeError, ValueError):
        raise SchemaError(f"{where}: schema_version {value!r} is not an integer") from None
    if version < 1 or str(version) != str(value).strip():
        raise SchemaError(f"{where}: schema_version {value!r} is not a version")
    return version


def check_version(version: int, where: str) -> None:
    """Refuse (one line) a run written by a newer pa-bench."""
    if version > SCHEMA_VERSION:
        raise SchemaError(f"{where}: result schema version {version} is newer than this pa-bench "
                          f"reads (up to {SCHEMA_VERSION}); upgrade pa-bench to read it")


def migrate_v1(meta: Mapping[str, Any]) -> dict[str, Any]:
    """A version-1 meta.json as version 2. Version 1's keys (runs up to 2026-12-01) are a subset
    of version 2's with the same meaning, so only the version is added."""
    out = dict(meta)
    out["schema_version"] = 2
    return out


_MIGRATIONS: dict[int, Callable[[Mapping[str, Any]], dict[str, Any]]] = {1: migrate_v1}


def upgrade_meta(meta: Mapping[str, Any], where: str = "meta.json") -> dict[str, Any]:
    """A stored meta.json of any known version as the current version's dict (keys checked)."""
    version = version_of(meta.get("schema_version"), where)
    check_version(version, where)
    out = dict(meta)
    while version < SCHEMA_VERSION:
        out = _MIGRATIONS[version](out)
        version = out["schema_version"]
    RunMeta.from_dict(out, where)  # types of the known keys
    return out
