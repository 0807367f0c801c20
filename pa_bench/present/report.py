"""Markdown report (and PNG plots) rebuilt from a stored run alone: records.csv + meta.json.

No GPU, no config import: everything the report prints comes from the run directory, so
`pa-bench report` works on any machine, on runs made elsewhere.

Sections: title; the run's parameters and environment; the parameters the PR left unstated and
what this run chose; one table per shape (every variant's time, speed-up over v1 with its
spread, throughput, errors, parity, status); the PR's figures beside ours; skipped and failed
rows with reasons, and the planned rows an interrupted or killed run never reached (from the
plan in meta.json against records.csv); throttled samples; plots. A run with no row at all is
an error (:class:`~pa_bench.errors.EmptyRun`), not an empty report.

meta.json is read typed (`pa_bench.store.schema.RunMeta`, `RunDir.meta()`; an older run is
migrated): command (argv), created, config (`Config.to_dict()`: timing, reference.source, ...),
seed, git_commit, mode, status, shard, parts, prompt; `backend` (describe(): gpu, arch,
sm_count), else `environment` for those; `environment`: sm_clock_max_mhz, driver, cuda_driver,
cuda_runtime, cupy, nvcc, torch, pa_bench. Missing keys print as '-'.
"""

from __future__ import annotations

import math
import os
import shlex
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pa_bench import variants as registry
from pa_bench.errors import DamagedRun, EmptyRun, PaBenchError
from pa_bench import fmt
from pa_bench.fmt import DASH
from pa_bench.measure import xproc
from pa_bench.present.prompt_report import prompt_section
from pa_bench.store.records import STATUS_OK, Record
from pa_bench.store.results import REPORT_FILE, RunDir, is_reference_run, open_run
from pa_bench.store.schema import RunMeta

PLOT_MS = "ms_per_chunk.png"
PLOT_TFLOPS = "tflops_vs_context.png"
PLOT_INSTALL_HINT = "pip install 'pa-bench[plot]'"

# --------------------------------------------------------------------------- formatting


def _cell(text: Any) -> str:
    """A markdown table cell: no pipes or newlines."""
    s = DASH if text is None or text == "" else str(text)
    return s.replace("|", "\\|").replace("\n", " ")


def _table(header: list[str], rows: list[list[Any]], align: list[str] | None = None) -> list[str]:
    align = align or ["l"] * len(header)
    sep = ["---:" if a == "r" else "---" for a in align]
    out = ["| " + " | ".join(header) + " |", "| " + " | ".join(sep) + " |"]
    out += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return out


# --------------------------------------------------------------------------- meta access


def _mapping(value: Any) -> Mapping[str, Any]:
    """A mapping nested in meta.json's config, shard or parts, or {} where a hand-edited file
    holds something else (RunMeta types the top-level keys only)."""
    return value if isinstance(value, Mapping) else {}


def _env(meta: RunMeta, key: str) -> Any:
    """The environment's ``key`` (pa_bench.present.envinfo.environment()), or None."""
    return meta.environment.get(key)


def _described(meta: RunMeta, key: str) -> Any:
    """The backend's describe() value of ``key``, else the environment's."""
    value = meta.backend.get(key)
    return _env(meta, key) if value is None else value


def _command(meta: RunMeta) -> str | None:
    return None if not meta.command else shlex.join(str(c) for c in meta.command)


# --------------------------------------------------------------------------- records helpers


def _shapes(records: list[Record]) -> list[str]:
    seen: dict[str, None] = {}
    for r in records:
        seen.setdefault(r.shape, None)
    return list(seen)


def _variants(records: list[Record]) -> list[str]:
    """The records' variants in table order (pa_bench.variants; unregistered ones last)."""
    return registry.in_order(r.variant for r in records)


def _by_key(records: list[Record]) -> dict[tuple[str, str], Record]:
    return {r.key(): r for r in records}


def _unique(records: Iterable[Record], name: str) -> list[Any]:
    out: list[Any] = []
    for r in records:
        v = r.value(name)
        if v is not None and v not in out:
            out.append(v)
    return out


def _param(records: list[Record], name: str, cfg: Mapping[str, Any], cfg_name: str | None = None):
    """The value(s) a run used: from the records, else from meta's config."""
    vals = _unique(records, name)
    if not vals:
        v = cfg.get(cfg_name or name)
        return None if v is None else [v]
    return vals


def _join(vals: list[Any] | None, fmt=str) -> str:
    if not vals:
        return DASH
    return ", ".join(fmt(v) for v in vals)


def _rec_or_meta(records: list[Record], name: str, meta: RunMeta) -> str | None:
    """The records' value(s) of `name` joined, else the backend's describe() value of `name`."""
    vals = _unique(records, name)
    if vals:
        return _join(vals)
    value = _described(meta, name)
    return None if value is None else str(value)


def shape_title(shape: str, recs: list[Record]) -> str:
    """'1.5K (0 x 1536)' / '32Kx1024 (32768 x 1024)': the label and the exact numbers."""
    labels = _unique(recs, "label")
    ctx, nq = _unique(recs, "context"), _unique(recs, "queries")
    name = labels[0] if labels else shape
    if ctx and nq:
        return f"{name} ({ctx[0]} x {nq[0]})"
    return name


def _speedup_of(rec: Record | None, v1: Record | None) -> tuple[float | None, float | None, float | None]:
    """Paired speed-up over v1 from the record, else the ratio of medians (no spread)."""
    if rec is None:
        return None, None, None
    if rec.speedup_vs_v1 is not None:
        return rec.speedup_vs_v1, rec.speedup_lo, rec.speedup_hi
    if rec.variant == registry.BASELINE and rec.ms_median is not None:
        return 1.0, None, None
    if v1 is not None and v1.ms_median and rec.ms_median:
        return v1.ms_median / rec.ms_median, None, None
    return None, None, None


# --------------------------------------------------------------------------- sections


def _parameters(records: list[Record], meta: RunMeta) -> list[str]:
    cfg = meta.config
    timing = _mapping(cfg.get("timing"))
    hq, hkv = _param(records, "heads_q", cfg), _param(records, "heads_kv", cfg)
    d = _param(records, "head_dim", cfg)
    layout, page = _param(records, "layout", cfg), _param(records, "page", cfg)
    scale = _param(records, "softmax_scale", cfg)
    scale_text = _join(scale, lambda s: f"{float(s):.6g}")
    if scale and d and len(scale) == 1 and len(d) == 1:
        if math.isclose(float(scale[0]), 1 / math.sqrt(float(d[0])), rel_tol=1e-9):
            scale_text += f" (1/sqrt({d[0]}))"
    elif not scale and d:
        scale_text = f"1/sqrt({d[0]})"
    layout_text = _join(layout)
    if layout and "paged" in layout and page:
        layout_text += f", {_join(page)} keys per page"
    gpu = _rec_or_meta(records, "gpu", meta)
    arch = _rec_or_meta(records, "arch", meta)
    sm_count = _described(meta, "sm_count")
    clocks = [c for c in _unique(records, "sm_clock_mhz")]
    clock_text = DASH
    if clocks:
        clock_text = f"{min(clocks):.0f}" + (f"{DASH}{max(clocks):.0f}" if max(clocks) != min(clocks) else "")
        sources = set(_unique(records, "clock_source"))
        clock_text += (" MHz, the clock the samples ran at" if sources == {"sm-cycles"} else
                       " MHz as the driver reports it (NVML or nvidia-smi: the clock the GPU is set to; "
                       "under load it runs lower)")
    nominal = _env(meta, "sm_clock_max_mhz")
    if nominal is not None:
        clock_text = clock_text + f" (nominal {float(nominal):.0f} MHz)" if clocks else f"{float(nominal):.0f} MHz nominal"
    gpu_text = f"{gpu or DASH} ({arch or DASH}" + (f", {sm_count} SMs)" if sm_count else ")")
    prompt = meta.prompt
    timed_prompt = prompt is not None and any(t.get("total_ms") is not None for t in prompt.get("totals") or [])
    if not any(r.ms_median is not None for r in records) and not timed_prompt:  # no settings for no samples
        timing_text = "nothing was timed in this run" + (
            " (a parity run)" if meta.mode == "parity" else
            " (the numpy backend does not time)" if "numpy" in _unique(records, "backend") else "")
    elif timing:
        mode = "hot (back-to-back launches)" if timing.get("hot") else f"cold ({fmt.l2_flush_text(timing)} before each launch)"
        primed = "; every variant called once untimed before its samples in a round" if (
            timing.get("prime") and not timing.get("hot")) else ""
        timing_text = (
            f"{mode}; {timing.get('warmup', DASH)} warm-up launches{primed}; until each median's 95 % "
            f"interval is within {100 * float(timing.get('max_noise', math.nan)):.2g}% of it with >= "
            f"{timing.get('min_seconds', DASH)} s "
            f"and >= {timing.get('min_samples', DASH)} samples, or {timing.get('max_seconds', DASH)} s"
        ) + ("; per chunk (prompt.csv)" if timed_prompt else "")
    else:
        timing_text = DASH
    seed = _param(records, "seed", cfg) or ([meta.seed] if meta.seed is not None else None)
    rows = [
        ["config", _join(_unique(records, "config")) if _unique(records, "config") else cfg.get("name")],
        ["heads (query / KV)", f"{_join(hq)} / {_join(hkv)}"],
        ["head dim", _join(d)],
        ["layout", layout_text],
        ["data", f"{_join(_param(records, 'data', cfg))}, seed {_join(seed)}"],
        ["output dtype", _join(_param(records, "out_dtype", cfg))],
        ["softmax scale", scale_text],
        ["variants", _join(registry.in_order([r.variant for r in records] + [
            t["variant"] for t in (prompt or {}).get("totals") or [] if t.get("variant")]))],
        ["backend", _rec_or_meta(records, "backend", meta)],
        ["GPU", gpu_text],
        ["SM clock", clock_text],
        ["MMA path", _join(_unique(records, "mma"))
         + (" (Turing path forced)" if True in _unique(records, "force_turing") else "")],
        ["driver / CUDA driver / CUDA runtime",
         f"{_env(meta, 'driver') or DASH} / {_env(meta, 'cuda_driver') or DASH}"
         f" / {_env(meta, 'cuda_runtime') or DASH}"],
        ["CuPy / nvcc / torch",
         f"{_env(meta, 'cupy') or DASH} / {_env(meta, 'nvcc') or DASH} / {_env(meta, 'torch') or DASH}"],
        ["timing", timing_text],
        ["interval", xproc.interval_text(records) or DASH],
        ["pa-bench / git commit", f"{_env(meta, 'pa_bench') or DASH} / {meta.git_commit or DASH}"],
        ["created", meta.created or DASH],
    ]
    out = ["## Parameters", ""] + _table(["parameter", "value"], rows)
    cmd = _command(meta)
    out += ["", f"Command: `{cmd}`" if cmd else "Command: not recorded."]
    return out


def _unstated(records: list[Record], meta: RunMeta) -> list[str]:
    cfg = meta.config
    hq, hkv = _param(records, "heads_q", cfg), _param(records, "heads_kv", cfg)
    d = _param(records, "head_dim", cfg)
    layout, page = _param(records, "layout", cfg), _param(records, "page", cfg)
    data = _param(records, "data", cfg)
    data_text = _join(data)
    if data and "realistic" in data:
        data_text += " (a few outlier key channels and an attention sink on the first tokens)"
    elif data and "normal" in data:
        data_text += " (i.i.d. normal)"
    lines = [
        "## What the PR left unstated, and what this run chose",
        "",
        f"- query / KV heads: {_join(hq)} / {_join(hkv)} (GQA: query head h uses KV head h // (Hq/Hkv))",
        f"- head dimension: {_join(d)}",
        "- int8 scales: symmetric, one fp32 scale per token per KV head, for K and for V",
        f"- KV layout: {_join(layout)}"
        + (f", {_join(page)} keys per page, pages shuffled in a larger pool" if layout and "paged" in layout else ""),
        f"- output type: {_join(_param(records, 'out_dtype', cfg))}",
        f"- data: {data_text}",
        "- error metric: max abs error against an FP64 reference computed on the same fp16 Q and "
        "the dequantised int8 K/V (also relative L2, NMSE); parity when kernel error <= "
        "2 x numerics-model error + a few fp32 ulps",
    ]
    for shape in _shapes(records):
        recs = [r for r in records if r.shape == shape]
        labels = [lab for lab in _unique(recs, "label") if lab != shape]
        ctx, nq = _unique(recs, "context"), _unique(recs, "queries")
        if labels and ctx and nq:
            lines.append(
                f"- the PR's \"{labels[0]}\" row: read as {ctx[0]} x {nq[0]} "
                f"(context x queries{', a first chunk with no earlier context' if ctx[0] == 0 else ''})"
            )
    return lines


def several_gpus(records: list[Record]) -> bool:
    """True when the rows ran on more than one GPU (a merged run, ``--devices``)."""
    return len(_unique(records, "gpu")) > 1 or len(_unique(records, "device_uuid")) > 1


def gpu_cell(r: Record) -> str:
    """The row's GPU and its NVML index on its host: ``<gpu> #<index>``."""
    return (r.gpu or DASH) + (f" #{r.device_index}" if r.device_index is not None else "")


def _shape_section(shape: str, recs: list[Record], gpu_column: bool = False) -> list[str]:
    by_variant = {r.variant: r for r in recs}
    v1 = by_variant.get(registry.BASELINE)
    out = [f"### {shape_title(shape, recs)}", ""]
    header = ["variant", "ms median [q1–q3]", "speed-up vs v1 [spread]", "TFLOP/s", "GB/s",
              "max abs err vs FP64", "model err", "ratio", "parity", "status"]
    align = ["l", "r", "r", "r", "r", "r", "r", "r", "l", "l"]
    if gpu_column:  # the rows of a merged run ran on different GPUs: say which
        header.insert(1, "GPU")
        align.insert(1, "l")
    rows = []
    for variant in _variants(recs):
        r = by_variant[variant]
        ms = fmt.ms(r.ms_median)
        if r.ms_median is not None and r.ms_q1 is not None and r.ms_q3 is not None:
            ms += f" [{fmt.ms(r.ms_q1)}{DASH}{fmt.ms(r.ms_q3)}]"
        if r.throttled:
            ms += f" ⚠ {r.throttled} throttled"
        if r.ms_median is not None and r.stop_reason not in (None, "noise"):
            ms += f" ⏱ {r.stop_reason} at {fmt.pct(r.ms_rel_spread, '.1f')} spread"
        if r.host_bound:
            ms += " ⚠ host-bound"
        sp = fmt.speedup(*_speedup_of(r, v1)) if r.ms_median is not None else DASH
        parity = DASH
        if r.parity_pass is None and r.max_abs_err is not None and registry.is_peer(r.variant):
            parity = "peer: no model"
        if r.parity_pass is not None:
            parity = "pass" if r.parity_pass else "**FAIL**"
            notes = []
            if r.nan_inf:
                notes.append(f"{r.nan_inf} NaN/Inf")
            if r.canary_ok is False:
                notes.append("guard overwritten")
            if r.deterministic is False:
                notes.append("not deterministic")
            if r.budget_pass is False:
                notes.append("over the accuracy budget")
            if notes:
                parity += " (" + ", ".join(notes) + ")"
        status = r.status if r.status == STATUS_OK or not r.reason else f"{r.status}: {r.reason}"
        rows.append([variant, ms, sp, fmt.rate(r.tflops), fmt.rate(r.kv_gbps), fmt.err(r.max_abs_err),
                     fmt.err(r.model_max_abs_err), fmt.ratio(r.err_ratio), parity, status])
        if gpu_column:
            rows[-1].insert(1, gpu_cell(r))
    out += _table(header, rows, align)
    notes = []
    sampled = _unique(recs, "sampled_rows")
    nq = _unique(recs, "queries")
    if sampled:
        of = f" of {nq[0]}" if nq else ""
        notes.append(f"Errors on {_join(sampled)} sampled query rows{of} (the reference is FP64 on those rows).")
    quant = _unique(recs, "quant_max_abs_err")
    if quant:
        notes.append(f"Quantisation error for context (FP64 on float K/V vs on int8 K/V): max abs {fmt.err(max(quant))}.")
    notes += rounding_notes(recs)
    for r in recs:
        diffs = []
        if r.diff_vs_v1 is not None and r.variant != "v1":
            diffs.append(f"vs v1 {fmt.err(r.diff_vs_v1)}")
        if r.diff_vs_v2 is not None and r.variant != "v2":
            d = "0 (bitwise identical)" if r.diff_vs_v2 == 0 else fmt.err(r.diff_vs_v2)
            diffs.append(f"vs v2 {d}")
        if diffs:
            notes.append(f"{r.variant} output max difference " + "; ".join(diffs) + ".")
    if notes:
        out += [""] + notes
    return out


def rounding_notes(recs: list[Record]) -> list[str]:
    """A line per row of a kernel that rounds an input beyond the cache's format: what the
    rounding alone costs against FP64 (``input_round_err``) and the accuracy budget's verdict
    (max err at most the KV quantisation error; docs/NUMERICS.md, "Input rounding")."""
    out = []
    for r in recs:
        if r.input_round_err is None and r.budget_pass is None:
            continue
        if r.budget_pass is None:
            budget = "not judged (no KV quantisation error on this data)"
        else:
            sign = "<=" if r.budget_pass else ">"
            budget = (f"{'pass' if r.budget_pass else '**FAIL**'}: max err {fmt.err(r.max_abs_err)} {sign} "
                      f"quantisation error {fmt.err(r.quant_max_abs_err)}")
        out.append(f"{r.variant} rounds its input further than the cache: the rounding alone costs max abs "
                   f"{fmt.err(r.input_round_err)} against FP64; accuracy budget {budget}.")
    return out


def _pr_section(records: list[Record], meta: RunMeta) -> list[str]:
    ref = _mapping(meta.config.get("reference"))
    source = ref.get("source")
    figures = _mapping(ref.get("figures"))
    by_key = _by_key(records)
    rows = []
    any_sampled = False
    for shape in _shapes(records):
        recs = [r for r in records if r.shape == shape]
        v1, v2t = by_key.get((shape, "v1")), by_key.get((shape, "v2t"))
        fig = _mapping(figures.get(shape))

        def ref_of(rec: Record | None, variant: str, what: str) -> float | None:
            value = None if rec is None else (rec.ref_ms if what == "ms" else rec.ref_err)
            if value is None:
                value = fmt.number(_mapping(fig.get(variant)).get(what))
            return value

        pr_v1, pr_v2t = ref_of(v1, "v1", "ms"), ref_of(v2t, "v2t", "ms")
        pr_err = ref_of(v2t, "v2t", "err")
        if pr_v1 is None and pr_v2t is None and pr_err is None:
            continue
        pr_speed = pr_v1 / pr_v2t if pr_v1 and pr_v2t else None
        ours_sp = _speedup_of(v2t, v1) if v2t is not None and v2t.ms_median is not None else (None, None, None)
        err = fmt.err(v2t.max_abs_err) if v2t is not None else DASH
        if v2t is not None and v2t.max_abs_err is not None and v2t.sampled_rows:
            err += "*"
            any_sampled = True
        rows.append([
            shape_title(shape, recs), fmt.ms(pr_v1), fmt.ms(pr_v2t),
            fmt.ratio(pr_speed or None, suffix="x"), fmt.err(pr_err),
            fmt.ms(v1.ms_median if v1 else None), fmt.ms(v2t.ms_median if v2t else None),
            fmt.speedup(*ours_sp), err,
        ])
    out = ["## Beside the PR's figures", ""]
    if not rows and figures:
        return out + [f"The config carries the PR's figures for {', '.join(map(str, figures))}, "
                      "but this run has no rows of those shapes."]
    if not rows:
        return out + ["This run's config carries no reference figures."]
    if source:
        out += [f"The PR's figures: {source.rstrip('.')}."]
    ours_gpu = _rec_or_meta(records, "gpu", meta)
    ours_arch = _rec_or_meta(records, "arch", meta)
    backend = _rec_or_meta(records, "backend", meta)
    out += [f"Ours: {ours_gpu or DASH} ({ours_arch or DASH}), backend {backend or DASH}. "
            "Milliseconds depend on the GPU; speed-ups and errors are the comparable figures.", ""]
    out += _table(
        ["shape", "PR v1 ms", "PR v2T ms", "PR speed-up", "PR v2T err",
         "ours v1 ms", "ours v2t ms", "ours speed-up", "ours v2t err"],
        rows, ["l", "r", "r", "r", "r", "r", "r", "r", "r"],
    )
    if any_sampled:
        out += ["", "\\* errors on sampled query rows (see the shape's table)."]
    return out


def _problems(records: list[Record], missing: list[tuple[str, str]]) -> list[str]:
    out = ["## Skipped, failed and missing", ""]
    bad = [r for r in records if r.status != STATUS_OK]
    if not bad and not missing:
        return out + ["None: every planned shape x variant ran."]
    for r in bad:
        out.append(f"- {shape_title(r.shape, [r])} {r.variant}: {r.status}: {r.reason or 'no reason recorded'}")
    for shape, variant in missing:
        out.append(f"- {shape} {variant}: missing: the run stopped before this row")
    return out


def planned_rows(meta: RunMeta) -> list[tuple[str, str]]:
    """(shape, variant) of every row the run's config planned, keyed as records.csv keys them
    (a labelled shape by its exact numbers); [] when meta.json holds no plan. A shard run
    (``--shard I/N``) planned only its shard's shapes."""
    shapes, variants = meta.config.get("shapes"), meta.config.get("variants")
    if not isinstance(shapes, list) or not isinstance(variants, list):
        return []
    shard = _mapping(meta.shard)
    if isinstance(shard.get("shapes"), list):
        mine = set(map(str, shard["shapes"]))
        shapes = [s for s in shapes if str(s.get("shape") if isinstance(s, Mapping) else s) in mine]
    keys = []
    for s in shapes:
        written = s.get("shape") if isinstance(s, Mapping) else s
        if written is not None:
            keys += [(str(written), str(v)) for v in variants]
    return keys


def missing_rows(records: list[Record], meta: RunMeta) -> list[tuple[str, str]]:
    """Planned rows that records.csv does not hold (an interrupted or killed run)."""
    have = {r.key() for r in records}
    return [k for k in planned_rows(meta) if k not in have]


def _status_note(meta: RunMeta) -> str:
    status = meta.status
    if status == "interrupted":
        return "the run was interrupted (meta.json status `interrupted`)"
    if status == "running":
        return "meta.json still says `running`: the run was killed, or is still running"
    return f"meta.json status `{status}`" if status else "meta.json records no status"


def _completeness(run: RunDir, records: list[Record], meta: RunMeta) -> list[str]:
    """A warning at the top of an incomplete run's report: how many planned rows it holds."""
    status, missing, planned = meta.status, missing_rows(records, meta), planned_rows(meta)
    if status == "complete" and not missing:
        return []
    if status is None and not missing and not planned:
        return []  # a hand-made run without meta: nothing to say
    text = f"**Incomplete run**: {_status_note(meta)}; "
    if planned:
        text += (f"{len(planned) - len(missing)} of {len(planned)} planned shape x variant rows "
                 f"are in records.csv, {len(missing)} missing (listed under *Skipped, failed and "
                 "missing*).")
    else:
        text += "meta.json holds no plan, so the missing rows cannot be named."
    if status in ("interrupted", "running"):
        text += f" Carry it on with `pa-bench {meta.mode or 'run'} --resume {run.path}`."
    return ["## Incomplete run", "", text]


def _throttling(records: list[Record]) -> list[str]:
    hot = [r for r in records if r.throttled]
    if not hot:
        return []
    out = ["## Throttled samples", "",
           "Samples taken below 75 % of the nominal SM clock are flagged (⚠ in the tables):", ""]
    for r in hot:
        of = f" of {r.samples}" if r.samples is not None else ""
        clock = f"; median SM clock {r.sm_clock_mhz:.0f} MHz" if r.sm_clock_mhz is not None else ""
        out.append(f"- {shape_title(r.shape, [r])} {r.variant}: {r.throttled}{of} samples throttled{clock}")
    return out


def _peer_note(records: list[Record], meta: RunMeta) -> list[str]:
    peers_ok = [r for r in records if registry.is_peer(r.variant) and r.status == STATUS_OK]
    if peers_ok or _env(meta, "torch"):
        return []
    return ["PyTorch is not installed on the machine that ran this: no torch-sdpa baseline."]


# --------------------------------------------------------------------------- plots


def _timed(records: list[Record]) -> list[Record]:
    return [r for r in records if r.status == STATUS_OK and r.ms_median is not None]


def figure_class():
    """matplotlib's Figure (no pyplot state), imported only where a plot is drawn: its first
    import on a machine builds the font cache (~13 s). The Agg backend: no display needed.
    Raises ImportError without matplotlib."""
    os.environ.setdefault("MPLBACKEND", "Agg")
    from matplotlib.figure import Figure  # noqa: PLC0415 - optional dependency, slow first import

    return Figure


def draw_plots(records: list[Record], out_dir: Path, prefix: str = "") -> list[tuple[str, str]]:
    """Write PNG plots; returns [(title, file name)]. Raises ImportError without matplotlib."""
    timed = _timed(records)
    if not timed:
        return []
    Figure = figure_class()  # noqa: N806 - a class
    made: list[tuple[str, str]] = []
    shapes = _shapes(timed)
    variants = _variants(timed)
    by_key = _by_key(timed)

    fig = Figure(figsize=(min(max(6.0, 1.1 * len(shapes) + 2), 14.0), 4.5), layout="constrained")
    ax = fig.add_subplot()
    width = 0.8 / max(len(variants), 1)
    for i, variant in enumerate(variants):
        xs, ys, lo, hi = [], [], [], []
        for j, shape in enumerate(shapes):
            r = by_key.get((shape, variant))
            if r is None:
                continue
            xs.append(j + (i - (len(variants) - 1) / 2) * width)
            ys.append(r.ms_median)
            lo.append(max(r.ms_median - (r.ms_q1 if r.ms_q1 is not None else r.ms_median), 0.0))
            hi.append(max((r.ms_q3 if r.ms_q3 is not None else r.ms_median) - r.ms_median, 0.0))
        ax.bar(xs, ys, width=width, label=variant, yerr=[lo, hi], capsize=2)
    ax.set_xticks(range(len(shapes)))
    ticks = [shape_title(s, [r for r in timed if r.shape == s]).replace(" (", "\n(") for s in shapes]
    if len(shapes) > 6:
        ax.set_xticklabels(ticks, fontsize=7, rotation=45, ha="right", rotation_mode="anchor")
    else:
        ax.set_xticklabels(ticks, fontsize=8)
    ax.set_ylabel("ms per chunk (median, q1–q3)")
    ys_all = [r.ms_median for r in timed if r.ms_median > 0]
    if ys_all and max(ys_all) / min(ys_all) > 50:
        ax.set_yscale("log")
    ax.set_title("Time per chunk by shape and variant")
    ax.legend(fontsize=8)
    name = prefix + PLOT_MS
    fig.savefig(out_dir / name, dpi=120)
    made.append(("Time per chunk", name))

    with_tf = [r for r in timed if r.tflops is not None and r.context is not None]
    groups: dict[tuple[str, int | None], list[tuple[int, float]]] = {}
    for r in with_tf:
        groups.setdefault((r.variant, r.queries), []).append((r.context, r.tflops))
    lines = {k: sorted(v) for k, v in groups.items() if len({c for c, _ in v}) > 1}
    if lines:
        fig = Figure(figsize=(7.0, 4.5), layout="constrained")
        ax = fig.add_subplot()
        line_variants = _variants([r for r in with_tf if (r.variant, r.queries) in lines])
        queries = sorted({q for _, q in lines if q is not None})
        markers = "os^vD<>ph*"
        styles = ["-", "--", ":", "-."]
        for vi, variant in enumerate(line_variants):
            for qi, q in enumerate(queries):
                pts = lines.get((variant, q))
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], color=f"C{vi}",
                            marker=markers[qi % len(markers)], linestyle=styles[qi % len(styles)],
                            label=f"{variant}, {q} queries")
        if min(c for pts in lines.values() for c, _ in pts) > 0:
            ax.set_xscale("log", base=2)
        ax.set_xlabel("context (keys before the chunk)")
        ax.set_ylabel("TFLOP/s")
        ax.set_title("Throughput vs context")
        ax.legend(fontsize=7)
        name = prefix + PLOT_TFLOPS
        fig.savefig(out_dir / name, dpi=120)
        made.append(("TFLOP/s vs context", name))
    return made


def _plots(records: list[Record], out_dir: Path, prefix: str) -> list[str]:
    out = ["## Plots", ""]
    try:
        made = draw_plots(records, out_dir, prefix)
    except ImportError:
        return out + [f"Plots skipped: matplotlib is not installed ({PLOT_INSTALL_HINT})."]
    if not made:
        return out + ["No timing data in this run: nothing to plot."]
    for title, name in made:
        out += [f"![{title}]({name})", ""]
    return out[:-1]


# --------------------------------------------------------------------------- entry points


def _as_run(run_path: str | Path | RunDir) -> RunDir:
    return run_path if isinstance(run_path, RunDir) else open_run(run_path)


def _parts_note(meta: RunMeta) -> str:
    """`` Merged from 4 runs: ...`` for a merged run (``pa-bench merge``, ``--devices``)."""
    def one(part: Any) -> str:
        p = _mapping(part)
        shard = _mapping(p.get("shard"))
        where = ", ".join(map(str, p.get("gpus") or [])) or DASH
        tag = f"shard {shard.get('index')}/{shard.get('count')} on " if shard else "on "
        return f"`{p.get('run_id')}` ({tag}{where})"

    parts = meta.parts or []
    return f" Merged from {len(parts)} runs: " + "; ".join(map(one, parts)) + "." if parts else ""


def build_report(run_path: str | Path | RunDir, out_dir: str | Path | None = None, plots: bool = True) -> str:
    """Markdown report of a stored run, from its records.csv and meta.json alone.

    Plots (when matplotlib is importable and `plots` is true) are written into `out_dir`
    (default: the run directory) and linked by file name, so the markdown belongs in `out_dir`.
    Outside the run directory their names get the run id as a prefix.
    """
    run = _as_run(run_path)
    records = run.records()
    meta = run.meta()
    if not records:
        how = "has only its header" if run.records_path.exists() else "is missing"
        raise EmptyRun(f"{run.path}: nothing to report: records.csv {how}; {_status_note(meta)}")
    check_whole(run, records, meta)
    cfg = meta.config
    out_dir = Path(out_dir) if out_dir is not None else run.path
    prefix = "" if out_dir.resolve() == run.path.resolve() else f"{run.run_id}-"

    config_name = _join(_unique(records, "config")) if _unique(records, "config") else cfg.get("name", "run")
    gpu = _rec_or_meta(records, "gpu", meta)
    lines = [f"# pa-bench: {config_name} on {gpu or 'an unknown device'}", "",
             f"Run `{run.run_id}`." + _parts_note(meta)]
    if cfg.get("description"):
        lines += ["", str(cfg["description"]).strip()]
    lines += [""]
    incomplete = _completeness(run, records, meta)
    if incomplete:
        lines += incomplete + [""]
    lines += _parameters(records, meta) + [""]
    lines += _unstated(records, meta) + [""]
    lines += prompt_section(run.path, meta.prompt, gpu, out_dir, prefix, plots)  # [] unless a prompt run
    lines += ["## Results per shape", ""]
    gpu_column = several_gpus(records)
    for shape in _shapes(records):
        lines += _shape_section(shape, [r for r in records if r.shape == shape], gpu_column) + [""]
    peer = _peer_note(records, meta)
    if peer and records:
        lines += peer + [""]
    lines += _pr_section(records, meta) + [""]
    lines += _problems(records, missing_rows(records, meta)) + [""]
    throttle = _throttling(records)
    if throttle:
        lines += throttle + [""]
    if plots:
        lines += _plots(records, out_dir, prefix) + [""]
    elif _timed(records):
        how = (f"`pa-bench report {run.path} -o DIR/report.md` draws them beside it"
               if is_reference_run(run.path) else f"`pa-bench report {run.path}` draws them")
        lines += ["## Plots", "", f"Not drawn by the command that wrote this report: {how}.", ""]
    return "\n".join(lines).rstrip() + "\n"


def check_whole(run: RunDir, records: list[Record], meta: RunMeta) -> None:
    """Refuse a damaged run in one line (:class:`DamagedRun`): no meta.json, or a run that
    meta.json calls complete (and that is not a merge of some shards) missing planned rows,
    which only a records.csv cut at a line's end gives (a cut inside a line is refused when
    records.csv is read)."""
    run.check_files()
    missing = missing_rows(records, meta)
    if meta.status == "complete" and not meta.parts and missing:
        shown = ", ".join(f"{s} {v}" for s, v in missing[:3]) + (", ..." if len(missing) > 3 else "")
        raise DamagedRun(f"{run.records_path}: holds {len(records)} of the {len(planned_rows(meta))} "
                         f"rows the run planned, though meta.json says it completed (missing: "
                         f"{shown}): the file was cut short")


@dataclass
class Rendered:
    """A report built for the CLI: its markdown, where it was written (None: printed only,
    for a committed reference run), the PNG plots it links, and a note for stderr."""

    text: str
    path: Path | None
    plots: list[Path]
    note: str


def render_report(run_path: str | Path | RunDir, out_path: str | Path | None = None,
                  plots: bool = True) -> Rendered:
    """``pa-bench report``: write the report (``out_path``, default the run's report.md), except
    into a committed reference run (results/reference/...): its report is built without plots
    and only returned, so that the committed files stay as they are; ``-o`` writes it anywhere."""
    run = _as_run(run_path)
    if out_path is None and is_reference_run(run.path):
        text = build_report(run, plots=False)
        return Rendered(text, None, [], f"{run.path} is a committed reference run: printed, not "
                        "rewritten (write it elsewhere with -o FILE)")
    path = write_report(run, out_path, plots=plots)
    return Rendered(path.read_text(encoding="utf-8"), path, linked_plots(path), f"wrote {path}")


def write_report(run_path: str | Path | RunDir, out_path: str | Path | None = None, plots: bool = True) -> Path:
    """Write the report (default `<run>/report.md`, plots beside it) and return its path."""
    run = _as_run(run_path)
    out = Path(out_path) if out_path is not None else run.path / REPORT_FILE
    if out_path is None and is_reference_run(run.path):  # -o may name any file, even there
        raise PaBenchError(f"{run.path} is a committed reference run: its report.md is not "
                           "rewritten unless -o names the file")
    out.parent.mkdir(parents=True, exist_ok=True)
    text = build_report(run, out_dir=out.parent, plots=plots)
    out.write_text(text, encoding="utf-8")
    return out


def write_report_or_note(run_path: str | Path | RunDir, log: Callable[[str], None],
                         plots: bool = True) -> None:
    """The report of a run that has just finished; a report problem is a note through ``log``
    (the run's rows are saved), never an error that would lose the run."""
    try:
        write_report(run_path, plots=plots)
    except Exception as exc:
        log(f"note: report.md not written ({fmt.first_line(exc)}); rebuild it with: "
            f"pa-bench report {_as_run(run_path).path}")


def linked_plots(report_path: str | Path) -> list[Path]:
    """The PNG files a written report links (they sit beside it)."""
    import re

    path = Path(report_path)
    names = re.findall(r"!\[[^\]]*\]\(([^)\s]+\.png)\)", path.read_text(encoding="utf-8"))
    return [path.parent / n for n in dict.fromkeys(names) if (path.parent / n).is_file()]
