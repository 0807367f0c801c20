"""One run from several: the shard runs of ``pa-bench run --shard I/N`` (SLURM array tasks, the
``--devices`` workers) merged into one run directory (``pa-bench merge RUN... -o RUN``).

Runs merge only when they measured the same thing: the same command (mode), backend, config
(``meta.json`` ``config``, compared key by key), seed, sampled rows and kernel sources (the
hash of each file, ``backend_meta.kernel_sources``). Anything else is refused with one line that
names the first difference (:class:`MergeConflict`, exit 2).

Every row keeps its own ``gpu``, ``arch``, ``device_index`` and ``device_uuid``, so a merge of an
H200 shard and an A100 shard is one cross-GPU table. A row (shape x variant) that two parts hold
is an error unless the two rows are identical cell for cell. The merged ``meta.json`` is the
parts' common settings plus ``parts`` (each part's run, shard, status, GPU, git commit and times);
``shard`` is dropped (the merged run covers the config's plan; the report names planned rows that
no part held).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pa_bench.errors import PaBenchError
from pa_bench.store.records import COLUMNS, Record, format_cell
from pa_bench.store.results import RunDir, _atomic_write_text, _dump_series, now_utc_iso

#: meta.json keys that belong to one part, not to the merged run (kept under ``parts``).
PART_KEYS = ("shard", "resumes", "command", "created", "started", "finished", "status",
             "wall_seconds", "phase_seconds", "git_commit", "git_dirty", "backend_meta",
             "environment", "backend", "config_path")


class MergeConflict(PaBenchError):
    """The runs named to ``pa-bench merge`` cannot be one run (a different config, seed,
    kernel source ...), or two of them hold different rows of the same shape x variant."""


def _flat(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, Mapping) and k not in ("reference",):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _show(v: Any) -> str:
    if isinstance(v, list):
        return ",".join(map(str, v))
    return "not set" if v is None else (repr(v) if isinstance(v, str) else str(v))


def _kernel_sources(meta: Mapping[str, Any]) -> dict[str, Any] | None:
    bm = meta.get("backend_meta")
    ks = bm.get("kernel_sources") if isinstance(bm, Mapping) else None
    return dict(ks) if isinstance(ks, Mapping) else None


def _backend(meta: Mapping[str, Any]) -> str | None:
    b = meta.get("backend")
    return b.get("backend") if isinstance(b, Mapping) else b


def check_compatible(runs: Sequence[RunDir], metas: Sequence[Mapping[str, Any]]) -> None:
    """Refuse runs that did not measure the same thing, naming the first difference."""
    first, m0 = runs[0], metas[0]
    for run, m in zip(runs[1:], metas[1:]):
        def refuse(what: str, a: Any, b: Any) -> MergeConflict:
            return MergeConflict(f"cannot merge {run.path} with {first.path}: {what} is {b} there "
                                 f"but {a} in {first.path}")

        for what, get in (("the command", lambda x: x.get("mode")),
                          ("the backend", _backend),
                          ("the seed", lambda x: x.get("seed"))):
            if get(m0) != get(m):
                raise refuse(what, _show(get(m0)), _show(get(m)))
        c0, c = _flat(m0.get("config") or {}), _flat(m.get("config") or {})
        for key in list(c0) + [k for k in c if k not in c0]:
            if key in c0 and key in c and c0[key] != c[key]:   # a key one part predates: not compared
                raise refuse(f"config key {key}", _show(c0[key]), _show(c[key]))
        if m0.get("sample_rows") != m.get("sample_rows"):
            raise refuse("--sample-rows", _show(m0.get("sample_rows")), _show(m.get("sample_rows")))
        k0, k = _kernel_sources(m0), _kernel_sources(m)
        if k0 != k:
            if k0 is None or k is None:
                raise refuse("the kernel sources hash", "recorded" if k0 else "not recorded",
                             "recorded" if k else "not recorded")
            name = next(n for n in list(k0) + list(k) if k0.get(n) != k.get(n))
            raise refuse(f"the hash of {name}", _show(k0.get(name)), _show(k.get(name)))


def _cells(rec: Record) -> tuple[str, ...]:
    return tuple(format_cell(c, rec.value(c)) for c in COLUMNS)


def _planned_order(config: Mapping[str, Any]) -> tuple[dict[str, int], dict[str, int]]:
    shapes = config.get("shapes") if isinstance(config.get("shapes"), list) else []
    keys = [s.get("shape") if isinstance(s, Mapping) else s for s in shapes]
    variants = config.get("variants") if isinstance(config.get("variants"), list) else []
    return ({str(k): i for i, k in enumerate(keys)}, {str(v): i for i, v in enumerate(variants)})


def merge_records(runs: Sequence[RunDir], config: Mapping[str, Any]) -> list[Record]:
    """Every part's rows, in the config's plan order; a row in two parts must be identical."""
    seen: dict[tuple[str, str], tuple[RunDir, Record]] = {}
    for run in runs:
        for rec in run.records():
            key = rec.key()
            if key in seen:
                other, old = seen[key]
                was, now = _cells(old), _cells(rec)
                if was != now:
                    i = next(i for i, (a, b) in enumerate(zip(was, now)) if a != b)
                    raise MergeConflict(f"cannot merge: {key[0]} {key[1]} is in {other.path} and "
                                        f"{run.path} with a different {COLUMNS[i]} "
                                        f"({_show(old.value(COLUMNS[i]))} vs {_show(rec.value(COLUMNS[i]))})")
                continue
            seen[key] = (run, rec)
    shapes, variants = _planned_order(config)
    records = [rec for _run, rec in seen.values()]
    return sorted(records, key=lambda r: (shapes.get(r.shape, len(shapes)),
                                          variants.get(r.variant, len(variants))))


def _merge_series(runs: Sequence[RunDir], read) -> dict[str, list]:
    out: dict[str, list] = {}
    for run in runs:
        for key, values in read(run).items():
            if key in out and out[key] != values:
                raise MergeConflict(f"cannot merge: {run.path} holds other samples of {key}")
            out[key] = values
    return out


def _common(dicts: Sequence[Any]) -> dict[str, Any]:
    """The keys whose value every dict shares (what is true of every part)."""
    if not dicts or not all(isinstance(d, Mapping) for d in dicts):
        return {}
    return {k: v for k, v in dicts[0].items() if all(k in d and d[k] == v for d in dicts[1:])}


def _part(run: RunDir, meta: Mapping[str, Any], records: list[Record]) -> dict[str, Any]:
    def unique(values) -> list:
        return list(dict.fromkeys(v for v in values if v is not None))

    return {"run": str(run.path), "run_id": run.run_id, "rows": len(records),
            "gpus": unique(r.gpu for r in records), "archs": unique(r.arch for r in records),
            "devices": unique(r.device_uuid for r in records),
            **{k: meta[k] for k in PART_KEYS if k in meta
               and k not in ("environment", "backend_meta", "backend")},
            "environment": meta.get("environment"), "backend": meta.get("backend"),
            "backend_meta": meta.get("backend_meta")}


def merge_runs(runs: Sequence[RunDir], out: RunDir, *, command: list[str] | None = None,
               extra_meta: Mapping[str, Any] | None = None) -> RunDir:
    """Merge ``runs`` into the (new, empty) run directory ``out``; returns it.

    Writes records.csv, samples.json / clocks.json (where the parts have them) and meta.json.
    Raises :class:`MergeConflict` (one line) when the parts cannot be one run."""
    if not runs:
        raise MergeConflict("merge needs at least one run")
    paths = [r.path.resolve() for r in runs]
    if len(set(paths)) != len(paths):
        dup = next(p for p in paths if paths.count(p) > 1)
        raise MergeConflict(f"cannot merge: {dup} is named twice")
    metas = [r.read_meta() for r in runs]
    for run, meta in zip(runs, metas):
        if not meta:
            raise MergeConflict(f"cannot merge {run.path}: it has no meta.json")
    check_compatible(runs, metas)
    config = metas[0].get("config") or {}
    records = merge_records(runs, config)
    samples = _merge_series(runs, RunDir.samples)
    clocks = _merge_series(runs, RunDir.clocks)

    parts = [_part(r, m, r.records()) for r, m in zip(runs, metas)]
    meta = {k: v for k, v in metas[0].items() if k not in PART_KEYS}
    for key in ("environment", "backend"):  # what every part shares (e.g. one GPU model)
        common = _common([m.get(key) for m in metas])
        if common:
            meta[key] = common
    ks = _kernel_sources(metas[0])
    if ks is not None:
        meta["backend_meta"] = {"kernel_sources": ks}
    commits = {m.get("git_commit") for m in metas}
    if len(commits) == 1:
        meta["git_commit"] = commits.pop()
    started = [m["started"] for m in metas if m.get("started")]
    finished = [m["finished"] for m in metas if m.get("finished")]
    phase_seconds: dict[str, float] = {}
    for m in metas:
        for name, sec in (m.get("phase_seconds") or {}).items():
            phase_seconds[name] = round(phase_seconds.get(name, 0.0) + float(sec), 3)
    all_complete = all(m.get("status") == "complete" for m in metas)
    meta.update(
        parts=parts, merged=now_utc_iso(), created=now_utc_iso(),
        command=list(command) if command is not None else None,
        started=min(started) if started else None, finished=max(finished) if finished else None,
        status="complete" if all_complete else "incomplete",
        phase_seconds=phase_seconds,  # summed over the parts (device-seconds of work)
    )
    meta.update(extra_meta or {})
    out.path.mkdir(parents=True, exist_ok=True)
    out.write_records(records)
    if samples:
        _atomic_write_text(out.samples_path, _dump_series(samples))
    if clocks:
        _atomic_write_text(out.clocks_path, _dump_series(clocks))
    out.write_meta(meta)
    return out


def prepare_output(path: str | Path) -> RunDir:
    """The merge's output directory: new, or an existing empty one (never overwrites a run)."""
    p = Path(path)
    if p.exists() and (not p.is_dir() or any(p.iterdir())):
        raise MergeConflict(f"-o {path}: exists and is not an empty directory (a merge never "
                            "overwrites a run)")
    p.mkdir(parents=True, exist_ok=True)
    return RunDir(p)


__all__ = ["MergeConflict", "PART_KEYS", "check_compatible", "merge_records", "merge_runs",
           "prepare_output"]
