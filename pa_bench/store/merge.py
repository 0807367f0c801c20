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

import math
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from pa_bench.errors import PaBenchError
from pa_bench.store.records import COLUMNS, STATUS_OK, Record, format_cell
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


def check_compatible(runs: Sequence[RunDir], metas: Sequence[Mapping[str, Any]],
                     ignore: Collection[str] = ()) -> None:
    """Refuse runs that did not measure the same thing, naming the first difference
    (``ignore``: ``mode``, ``sample_rows``, where a part may differ there by design)."""
    first, m0 = runs[0], metas[0]
    if ignore:
        metas = [m0] + [{**m, **{k: m0.get(k) for k in ignore}} for m in metas[1:]]
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


def _merged_meta(runs: Sequence[RunDir], metas: Sequence[Mapping[str, Any]],
                 command: list[str] | None) -> dict[str, Any]:
    """The merged meta.json: the parts' common settings, ``parts``, the span of their times and
    their phase seconds summed."""
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
    return meta


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

    meta = _merged_meta(runs, metas, command)
    meta.update(extra_meta or {})
    out.path.mkdir(parents=True, exist_ok=True)
    out.write_records(records)
    if samples:
        _atomic_write_text(out.samples_path, _dump_series(samples))
    if clocks:
        _atomic_write_text(out.clocks_path, _dump_series(clocks))
    out.write_meta(meta)
    return out


# --------------------------------------------------------------------------- processes


def _pooled_record(base: Record, timed: Sequence[tuple[Record, list, list | None]],
                   base_samples: Sequence[list] | None) -> Record:
    """``base`` (the first process's row) with its timing columns made from every process's
    samples: the pooled median and spread, each process's median and the across-process
    interval (which ``ms_ci_lo``/``ms_ci_hi`` then hold, ``ci_kind`` naming it)."""
    from pa_bench.measure import stats, xproc

    rec = Record.from_dict(base.to_dict())
    per_process = [s for _r, s, _c in timed]
    pooled = [x for s in per_process for x in s]
    st = stats.summarize(pooled)
    iv = xproc.process_interval(per_process)
    first = timed[0][0]
    rec.ms_median, rec.ms_min, rec.ms_max = st.median, st.min, st.max
    rec.ms_q1, rec.ms_q3, rec.ms_rel_spread, rec.samples = st.q1, st.q3, st.rel_stdev, st.count
    rec.ms_ci_lo, rec.ms_ci_hi, rec.ci_kind = iv.lo, iv.hi, iv.kind
    rec.processes = iv.processes
    rec.ms_proc_medians = xproc.format_medians(iv.medians)
    rec.ms_xproc_lo, rec.ms_xproc_hi = (iv.lo, iv.hi) if iv.kind == xproc.KIND_PROCESSES else (None, None)
    scale = first.ms_median / st.median if first.ms_median else None
    rec.tflops = first.tflops * scale if first.tflops is not None and scale else None
    rec.kv_gbps = first.kv_gbps * scale if first.kv_gbps is not None and scale else None
    clocks = [float(c) for _r, _s, cs in timed for c in (cs or [])
              if c is not None and math.isfinite(float(c))]
    rec.sm_clock_mhz = float(np.median(clocks)) if clocks else first.sm_clock_mhz
    rec.throttled = sum(int(r.throttled or 0) for r, _s, _c in timed)
    reasons = [r.stop_reason for r, _s, _c in timed if r.stop_reason]
    rec.stop_reason = max(dict.fromkeys(reasons), key=reasons.count) if reasons else None
    rec.host_bound = any(bool(r.host_bound) for r, _s, _c in timed) or first.host_bound
    rec.clock_source = first.clock_source
    if base_samples is not None:
        ratios = np.concatenate([_round_ratios(b, s) for b, s in zip(base_samples, per_process)])
        if ratios.size:
            lo, hi = stats.median_interval(ratios)
            rec.speedup_vs_v1, rec.speedup_lo, rec.speedup_hi = float(np.median(ratios)), lo, hi
    return rec


def _round_ratios(base: Sequence[float], other: Sequence[float]) -> np.ndarray:
    """base_k / other_k over the rounds both have (pa_bench.measure.stats.paired_speedup's)."""
    n = min(len(base), len(other))
    b = np.asarray(list(base[:n]), dtype=np.float64)
    o = np.asarray(list(other[:n]), dtype=np.float64)
    ok = np.isfinite(b) & np.isfinite(o) & (b > 0) & (o > 0)
    return b[ok] / o[ok]


def merge_processes(runs: Sequence[RunDir], out: RunDir, *, command: list[str] | None = None,
                    extra_meta: Mapping[str, Any] | None = None) -> RunDir:
    """Merge the runs of ``--processes`` workers (each a whole run of the same plan, one after
    another on one GPU) into the new run directory ``out``.

    Every row is the first worker's (its parity, status, the shape's columns) with the timing
    columns made from the samples of every worker that timed it (:func:`_pooled_record`).
    samples.json / clocks.json hold each row's samples pooled in worker order, as any run's do;
    ``meta.json`` ``processes`` says how many workers there were, what each ran, and
    ``samples``: per row key, how many samples each worker made, in that order
    (:meth:`pa_bench.store.results.RunDir.process_samples` splits the pooled list by them).
    The first worker may be a ``run`` (parity and timing) and the others ``time``: the command
    and ``--sample-rows`` are not compared; everything else must match (:func:`check_compatible`)."""
    from pa_bench.variants import BASELINE

    if not runs:
        raise MergeConflict("merge needs at least one run")
    metas = [r.read_meta() for r in runs]
    for run, meta in zip(runs, metas):
        if not meta:
            raise MergeConflict(f"cannot merge {run.path}: it has no meta.json")
    check_compatible(runs, metas, ignore=("mode", "sample_rows"))
    config = metas[0].get("config") or {}
    per_run = [({r.key(): r for r in run.records()}, run.samples(), run.clocks()) for run in runs]
    keys = list(dict.fromkeys(k for recs, _s, _c in per_run for k in recs))
    records, samples, clocks, counts = [], {}, {}, {}
    for shape, variant in keys:
        skey = f"{shape}|{variant}"
        base = next(recs[(shape, variant)] for recs, _s, _c in per_run if (shape, variant) in recs)
        timed, made = [], []
        for recs, smp, clk in per_run:
            rec = recs.get((shape, variant))
            ok = (rec is not None and rec.status == STATUS_OK and rec.ms_median is not None
                  and smp.get(skey))
            made.append(len(smp[skey]) if ok else 0)
            if ok:
                cs = clk.get(skey)
                timed.append((rec, list(smp[skey]), cs if cs and len(cs) == len(smp[skey]) else None))
        if not timed:
            records.append(base)
            continue
        if base.status != STATUS_OK or base.ms_median is None:
            base = timed[0][0]          # the first worker did not time the row: the first that did
        bkey = f"{shape}|{BASELINE}"
        base_samples = None
        if variant != BASELINE:
            got = [smp.get(bkey) for (recs, smp, _c), n in zip(per_run, made) if n]
            base_samples = got if all(got) else None
        records.append(_pooled_record(base, timed, base_samples))
        samples[skey] = [x for _r, s, _c in timed for x in s]
        if all(cs is not None for _r, _s, cs in timed):
            clocks[skey] = [c for _r, _s, cs in timed for c in cs]
        counts[skey] = made
    shapes, variants = _planned_order(config)
    records.sort(key=lambda r: (shapes.get(r.shape, len(shapes)), variants.get(r.variant, len(variants))))

    meta = _merged_meta(runs, metas, command)
    meta["mode"] = metas[0].get("mode")
    meta["sample_rows"] = metas[0].get("sample_rows")
    meta["processes"] = {
        "count": len(runs),
        "workers": [{"worker": k, "mode": m.get("mode"), "run": str(r.path), "status": m.get("status"),
                     "wall_seconds": m.get("wall_seconds")} for k, (r, m) in enumerate(zip(runs, metas))],
        "samples": counts,
    }
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
           "merge_processes",
           "prepare_output"]
