"""The result schema: its version and the typed top-level keys of meta.json.

Versions, oldest first:

- 1: no ``schema_version`` anywhere; its keys are a subset of version 2's (:func:`migrate_v1`
  only stamps the version).
- 2: ``schema_version`` in meta.json and as a column of records.csv.
- 3 (this one): records gain ``ms_ci_lo``/``ms_ci_hi`` (the interval of the median) and ``impl``
  (which library kernel a peer ran). ``torch-sdpa`` now means SDPA as a user calls it (torch's
  own dispatch); up to version 2 that row pinned the flash backend, so an older run's
  ``torch-sdpa`` rows, samples and config entry read as ``torch-sdpa-flash``, and its sdpa rows
  get ``impl`` "flash" (:func:`migrate_v2`, :func:`migrate_variant_v2`).

A run of a newer version than this pa-bench knows is refused with one line
(:class:`~pa_bench.errors.SchemaError`, exit code 2).

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

SCHEMA_VERSION = 3


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
    kernel_seconds: dict = field(default_factory=dict)
    compile_ahead: dict | None = None  # pa_bench.backends.compile_ahead: what the child built, its seconds
    resumes: list = field(default_factory=list)
    shard: dict | None = None  # a shard run's plan (pa_bench.shard)
    parts: list | None = None  # a merged run's parts (pa_bench.store.merge)
    devices: list | None = None  # run --devices: the GPUs
    processes: dict | None = None  # run/time --processes: the workers and whose samples are whose (pa_bench.devices)
    prompt: dict | None = None  # pa-bench prompt's summary
    hung: list | None = None  # rows whose GPU wait passed its deadline: [{shape, variant, what, seconds}]
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
        out = {k: v for k, v in vars(self).items() if k != "extra"}
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


#: Up to version 2 the ``torch-sdpa`` row pinned SDPA's flash backend (and so did
#: ``torch-sdpa+dequant``); from version 3 ``torch-sdpa`` is torch's own dispatch.
RENAMED_IN_V3 = {"torch-sdpa": "torch-sdpa-flash"}
PINNED_FLASH_BEFORE_V3 = ("torch-sdpa", "torch-sdpa+dequant")


def migrate_variant_v2(name: str) -> str:
    """A variant name as a version-2 (or older) run wrote it, as version 3 reads it."""
    return RENAMED_IN_V3.get(name, name)


def migrate_record_v2(row: dict[str, Any]) -> dict[str, Any]:
    """A version-2 (or older) records.csv row as version 3: the pinned flash row renamed and
    its kernel named in ``impl``."""
    out = dict(row)
    variant = out.get("variant")
    if variant in PINNED_FLASH_BEFORE_V3:
        if not out.get("impl"):
            out["impl"] = "flash"
        out["variant"] = migrate_variant_v2(variant)
    return out


def migrate_series_v2(series: Mapping[str, Any]) -> dict[str, Any]:
    """samples.json / clocks.json keys ``"<shape>|<variant>"`` of a version-2 run, as version 3."""
    out = {}
    for key, value in series.items():
        shape, sep, variant = str(key).rpartition("|")
        out[f"{shape}{sep}{migrate_variant_v2(variant)}" if sep else key] = value
    return out


def migrate_v2(meta: Mapping[str, Any]) -> dict[str, Any]:
    """A version-2 meta.json as version 3: the config's variant list renamed (see the module
    docstring); every other key means the same."""
    out = dict(meta)
    config = out.get("config")
    if isinstance(config, Mapping) and isinstance(config.get("variants"), list):
        out["config"] = {**config, "variants": [migrate_variant_v2(v) for v in config["variants"]]}
    out["schema_version"] = 3
    return out


_MIGRATIONS: dict[int, Callable[[Mapping[str, Any]], dict[str, Any]]] = {1: migrate_v1, 2: migrate_v2}


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
