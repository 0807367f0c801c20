"""The ``pa-bench`` command line (click): parse the options, call the library.

Commands: ``parity``, ``time``, ``run``, ``report``, ``compare``, ``merge``, ``kernels``,
``env``, ``prompt``. What they print is pa_bench.present.console's: tables on stdout, progress
and notes on stderr; ``--json`` prints machine output on stdout instead of tables. How a
command ends (exit codes, every error as one line ``error: ...``) is pa_bench.exits'.
"""

from __future__ import annotations

import functools
import sys
from dataclasses import fields
from pathlib import Path
from typing import Callable

import click

from pa_bench import __version__
from pa_bench import fmt
from pa_bench.exits import CliFailure, PaBenchGroup, run_dir_of
from pa_bench.options import DEFAULT_RESULTS, RunOptions, build_backend, load_run_config, resolve_runs
from pa_bench.present import console
from pa_bench.variants import names as variant_names


@click.group(cls=PaBenchGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="pa-bench")
def cli() -> None:
    """Build, check and time int8-KV prompt-attention kernels (v1, v2, v2t, v3, triton) and their PyTorch peers.

    \b
    pa-bench run                  parity + timing of configs/pr2092.yaml
    pa-bench parity --shapes 32Kx1024
    pa-bench time --variant v2t
    pa-bench report               markdown report of the newest run
    """


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point (``pa-bench``)."""
    cli.main(args=argv, prog_name="pa-bench")


# --------------------------------------------------------------------------- shared options


def _comma_list(value: str | None) -> list[str] | None:
    items = [v.strip() for v in (value or "").split(",") if v.strip()]
    return items or None


def _variants(_ctx, _param, value: tuple[str, ...]) -> tuple[str, ...] | None:
    """``--variant`` is a comma list and may be repeated: every list counts, in order, once each
    (``--variant v3 --variant v3-f16`` times both)."""
    from pa_bench import variants as registry

    if not value:
        return None
    known = ", ".join(registry.names())
    items: list[str] = []
    for one in value:
        listed = _comma_list(one)
        if listed is None:
            raise click.BadParameter(f"is empty; name one or more variants ({known})")
        for v in listed:
            if v not in items:
                items.append(v)
    for v in items:
        if registry.find(v) is None:
            raise click.BadParameter(f"unknown variant {v!r} (choose from {known})")
    return tuple(items)


def _heads(_ctx, _param, value: str | None) -> tuple[int, int] | None:
    """``--heads 32/8`` (query heads / KV heads) or ``--heads 16`` (16 and 16: no GQA)."""
    if value is None:
        return None
    try:
        nums = [int(p.strip()) for p in value.replace(":", "/").replace(",", "/").split("/")]
    except ValueError:
        nums = []
    if len(nums) not in (1, 2):
        raise click.BadParameter(f"{value!r} is not HQ or HQ/HKV (e.g. 32/8)")
    if any(n < 1 for n in nums):
        raise click.BadParameter(f"{value!r}: query and KV heads must be at least 1")
    return nums[0], nums[-1]


def _sample_rows(_ctx, _param, value: str | None) -> int | None:
    """``--sample-rows N`` (N >= 1) or ``all`` (ALL_ROWS: every row); None: not given."""
    from pa_bench.problem.config import ALL_ROWS

    if value is None:
        return None
    if value.strip().lower() == "all":
        return ALL_ROWS
    try:
        n = int(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a number of rows (or 'all')") from None
    if n < 1:
        raise click.BadParameter(f"{value!r}: compare at least 1 row per shape (or 'all' for every row)")
    return n


def _plugins(_ctx, _param, value: tuple[str, ...]) -> tuple[str, ...]:
    """``--plugin`` is eager: its modules register their variants before --variant is checked."""
    from pa_bench.problem import plugins

    for name in value:
        plugins.load(name)
    return tuple(value)


def _profile_flag(ctx: click.Context, _param, value: bool) -> None:
    if value:
        ctx.meta["pa_bench.profile"] = True


OPTIONS: dict[str, Callable] = {
    "config_path": click.option(
        "--config", "config_path", type=click.Path(dir_okay=False),
        help="Config YAML or a name under configs/ (default: configs/pr2092.yaml; prompt: "
             "configs/prompt98k.yaml)."),
    "shapes": click.option(
        "--shapes", metavar="LIST",
        help="Comma list of CTXxQ shapes (32Kx1024,2.1Kx256,0x1536); beats the config."),
    "variants": click.option(
        "--variant", "variants", metavar="LIST", callback=_variants, multiple=True,
        help="Comma list of variants (repeatable): " + ", ".join(variant_names()) + "."),
    "backend": click.option(
        "--backend", type=click.Choice(["auto", "cuda", "numpy"]), default="auto", show_default=True,
        help="cuda needs CuPy and an NVIDIA GPU; numpy runs the numerics model on the CPU "
             "(parity only, timing rows skipped with the reason)."),
    "layout": click.option("--layout", type=click.Choice(["paged", "contiguous"]), help="KV cache layout."),
    "page": click.option("--page", type=int, help="Keys per page (power of two >= 16)."),
    "heads": click.option("--heads", metavar="HQ/HKV", callback=_heads,
                          help="Query heads / KV heads, e.g. 32/8."),
    "head_dim": click.option("--head-dim", type=int, help="Head dimension (64 or 128)."),
    "data": click.option("--data", metavar="KIND|FILE.npz",
                         help="normal, realistic, or an .npz of captured Q/K/V (not for prompt)."),
    "seed": click.option("--seed", type=int, help="Seed of the generated data and sampled rows."),
    "force_turing": click.option("--force-turing", is_flag=True, default=None,
                                 help="Run v1/v2t on the sm_75 path (m16n8k8 MMAs) on any GPU."),
    "results_root": click.option("--results", "results_root", type=click.Path(file_okay=False),
                                 default=DEFAULT_RESULTS, show_default=True,
                                 help="Where run directories go."),
    "resume": click.option(
        "--resume", metavar="RUN",
        help="Carry on an interrupted run (a run directory or id); finished rows are kept."),
    "as_json": click.option("--json", "as_json", is_flag=True,
                            help="Print the results as JSON instead of tables."),
    "wide": click.option("--wide", is_flag=True,
                         help="Print every column of the tables (default: those that fit 100 columns)."),
    "sample_rows": click.option(
        "--sample-rows", metavar="N|all", callback=_sample_rows,
        help="Query rows compared with FP64 per shape, seeded (default: all on cuda, "
             "parity.numpy_sample_rows on numpy)."),
    "hot": click.option("--hot", is_flag=True, default=None,
                        help="Time back-to-back launches (no L2 flush)."),
    "max_seconds": click.option("--max-seconds", type=float, metavar="S",
                                help="Timing budget per shape (all variants together)."),
    "plugins": click.option(
        "--plugin", "plugins", metavar="MODULE|FILE.py", multiple=True, is_eager=True, callback=_plugins,
        help="Load a plug-in that registers variants (a module name or a .py file; repeatable; "
             "docs/PLUGINS.md)."),
    "deadline": click.option(
        "--deadline", type=click.FloatRange(min=0, min_open=True), metavar="S",
        help="Seconds any one GPU wait may take before the run stops as hung, exit code 3 "
             "(default: 30 s plus the work at 5 TFLOP/s)."),
    "retry_failed": click.option(
        "--retry-failed", is_flag=True,
        help="With --resume: run again the rows whose kernel hung (they are kept otherwise)."),
    "processes": click.option(
        "--processes", type=click.IntRange(min=1), metavar="N",
        help="N fresh worker processes, one after another on this GPU, each a whole timing of "
             "the shapes; one merged run whose rows carry each process's median and the "
             "interval across processes (docs/TIMING.md)."),
    "profile": click.option(
        "--profile", is_flag=True, expose_value=False, callback=_profile_flag,
        help="Write a cProfile of the run to <run dir>/profile.pstats and print the wall and "
             "phase seconds (or set PA_BENCH_PROFILE=1 or =FILE)."),
}
PROBLEM = ("variants", "backend", "layout", "page", "heads", "head_dim", "data", "seed",
           "force_turing", "results_root", "as_json", "wide")
SWEEP = ("config_path", "plugins", "shapes", *PROBLEM, "resume", "retry_failed", "deadline",
         "profile")  # parity, time and run
_FIELDS = {f.name for f in fields(RunOptions)}


def with_options(*names: str) -> Callable:
    """Declare the shared options ``names`` (OPTIONS) on a command, which gets them as one
    :class:`RunOptions` first argument; a ``config_arg`` argument (``run CONFIG``) is its
    ``config_path``."""
    def decorate(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def command(**kwargs):
            given = {n: kwargs.pop(n) for n in list(kwargs) if n in _FIELDS}
            arg = kwargs.pop("config_arg", None)
            if arg and given.get("config_path") and Path(arg) != Path(given["config_path"]):
                raise click.UsageError("give the config either as CONFIG or with --config, not both")
            given["config_path"] = arg or given.get("config_path")
            return fn(RunOptions(**given), **kwargs)

        for name in reversed(names):
            command = OPTIONS[name](command)
        return command

    return decorate


# --------------------------------------------------------------------------- building objects


def _command_line() -> list[str]:
    """The command as typed (``pa-bench ...``), for meta.json."""
    ctx = click.get_current_context(silent=True)
    obj = ctx.find_root().obj if ctx is not None else None
    if isinstance(obj, dict) and obj.get("argv"):
        return list(obj["argv"])
    return ["pa-bench", *sys.argv[1:]]


def _run_command(mode: str, config, backend, opts: RunOptions, **kwargs) -> Path:
    """The runner's walk for ``mode`` with a progress display (and ``--profile``'s cProfile)."""
    from pa_bench import runner
    from pa_bench.profiling import RunProfile, profile_target

    walk = {"parity": runner.run_parity, "time": runner.run_timing, "run": runner.run_all}[mode]
    progress = console.RichProgress()
    ctx = click.get_current_context(silent=True)
    profile = RunProfile(profile_target(bool(ctx is not None and ctx.meta.get("pa_bench.profile"))))
    path = None
    try:
        with profile:
            path = walk(config, backend, results_root=opts.results_root, resume_run=opts.resume,
                        sample_rows=opts.sample_rows, progress=progress, command=_command_line(),
                        retry_failed=opts.retry_failed, **kwargs)
        return path
    except KeyboardInterrupt as exc:
        path = run_dir_of(exc)
        raise
    finally:
        progress.stop()
        if profile.target is not None:
            _write_profile(profile, path)


def _write_profile(profile, run_dir: Path | None) -> None:
    """The cProfile file and the run's wall and phase seconds, on stderr."""
    from pa_bench.phases import phase_summary
    from pa_bench.store.results import open_run

    written = profile.write(run_dir)
    if written is not None:
        console.note(f"profile: {written} (python -m pstats {written})")
    if run_dir is not None:
        summary = phase_summary(open_run(run_dir).read_meta())
        if summary:
            console.note(summary)


def _finish(mode: str, run_path: Path, config, opts: RunOptions) -> None:
    """The run as JSON or as tables, where it is, and exit 1 if a row failed."""
    from pa_bench.store.results import open_run

    run_dir = open_run(run_path)
    records, meta = run_dir.records(), run_dir.meta()
    summary = meta.prompt or {}
    if opts.as_json:
        console.print_json({"run": str(run_path), **({"prompt": summary} if mode == "prompt" else {}),
                            "records": [r.to_dict() for r in records]})
    else:
        timed = mode == "time" or (mode == "run" and any(r.ms_median is not None for r in records))
        console.show_run(records, meta.backend, config, parity=mode != "time", timing=timed,
                         wide=opts.wide)
        if mode == "prompt":
            console.show_prompt(summary, meta.backend.get("gpu"), wide=opts.wide)
    console.note(f"run directory: {run_path} (report: {run_path / 'report.md'})")
    problems = console.failures(records, summary)
    if problems:
        raise CliFailure("; ".join(problems))


# --------------------------------------------------------------------------- commands


@cli.command()
@with_options(*SWEEP, "sample_rows")
@click.option("--save-outputs", type=click.Path(file_okay=False), metavar="DIR",
              help="Write each variant's output rows, the FP64 reference rows and rows.npy per shape.")
def parity(opts: RunOptions, save_outputs):
    """Error of every variant against an FP64 reference, judged against the numerics model."""
    config = load_run_config(opts, console.note)
    path = _run_command("parity", config, build_backend(opts.backend, config, console.note), opts,
                        save_outputs=save_outputs)
    if save_outputs:
        console.note(f"outputs written under {save_outputs}")
    _finish("parity", path, config, opts)


def _in_processes(mode: str, config, opts: RunOptions) -> Path:
    """``--processes N``: N worker processes one after another, merged (pa_bench.devices)."""
    from pa_bench import devices as devices_mod

    progress = console.RichProgress()
    try:
        return devices_mod.run_processes(config, opts.processes, mode=mode, backend=opts.backend,
                                         results_root=opts.results_root,
                                         sample_rows=opts.sample_rows if mode == "run" else None,
                                         progress=progress, command=_command_line())
    finally:
        progress.stop()


def _no_processes_with(opts: RunOptions, **others) -> None:
    given = [name for name, value in others.items() if value is not None]
    if opts.resume is not None:
        given.insert(0, "--resume")
    if opts.processes is not None and given:
        raise click.UsageError(f"--processes runs whole runs in fresh workers: give it without {given[0]}")


@cli.command("time")
@with_options(*SWEEP, "hot", "max_seconds", "processes")
def time_cmd(opts: RunOptions):
    """Time per chunk (CUDA events, L2 flushed before each launch; variants interleaved)."""
    _no_processes_with(opts)
    config = load_run_config(opts, console.note)
    if opts.processes is not None and opts.processes > 1:
        build_backend(opts.backend, config, console.note, needs_timing=True)  # fails here, not N times
        path = _in_processes("time", config, opts)
    else:
        path = _run_command("time", config, build_backend(opts.backend, config, console.note, needs_timing=True), opts)
    _finish("time", path, config, opts)


@cli.command()
@click.argument("config_arg", metavar="[CONFIG]", required=False, type=click.Path(dir_okay=False))
@with_options(*SWEEP, "sample_rows", "hot", "max_seconds", "processes")
@click.option("--shard", metavar="I/N",
              help="Run only shard I of N (I is 0-based, 0..N-1: "
                   "--shard $SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT under --array=0-(N-1)); "
                   "shapes are dealt by cost; join the shards with 'pa-bench merge'.")
@click.option("--devices", metavar="LIST|all",
              help="One worker process per GPU of this host (0,1,... or all), each pinned with "
                   "CUDA_VISIBLE_DEVICES and running one shard; one merged run directory.")
def run(opts: RunOptions, shard, devices):
    """Parity and timing of every shape x variant of CONFIG (default configs/pr2092.yaml).

    Without a GPU it falls back to the numpy backend: parity on sampled rows, timing rows
    skipped with the reason.
    """
    from pa_bench.shard import parse_shard

    shard = parse_shard(shard) if shard is not None else None
    if devices is not None and (shard is not None or opts.resume is not None):
        raise click.UsageError("--devices runs every shard itself: give it without "
                               f"{'--shard' if shard is not None else '--resume'}")
    _no_processes_with(opts, **{"--shard": shard, "--devices": devices})
    config = load_run_config(opts, console.note)
    if opts.processes is not None and opts.processes > 1:
        path = _in_processes("run", config, opts)
    elif devices is not None:
        from pa_bench import devices as devices_mod

        chosen, progress = devices_mod.resolve(devices), console.RichProgress()
        try:
            path = devices_mod.run_on_devices(config, chosen, backend=opts.backend,
                                              results_root=opts.results_root,
                                              sample_rows=opts.sample_rows, progress=progress,
                                              command=_command_line())
        finally:
            progress.stop()
    else:
        path = _run_command("run", config, build_backend(opts.backend, config, console.note), opts, shard=shard)
    _finish("run", path, config, opts)


def _results_option(help_text: str) -> Callable:
    return click.option("--results", "results_root", type=click.Path(file_okay=False),
                        default=DEFAULT_RESULTS, show_default=True, help=help_text)


@cli.command()
@click.argument("runs", nargs=-1, metavar="[RUN]...")
@click.option("-o", "--output", type=click.Path(dir_okay=False),
              help="Write the markdown here (default: report.md inside the run).")
@_results_option("Where runs are looked up.")
@click.option("--no-plots", is_flag=True, help="Do not draw the PNG plots.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the written paths (report and PNG plots) as JSON.")
def report(runs, output, results_root, no_plots, as_json):
    """Markdown report of stored runs (default: the newest under results/); no GPU needed.

    The report is written into the run (or -o FILE) and printed on stdout; a committed
    reference run (results/reference/...) is only printed, unless -o names a file.
    """
    from pa_bench.present import report as report_mod

    found = resolve_runs(runs, results_root, 1)
    if output and len(found) > 1:
        raise click.UsageError("-o takes one run; without -o each run gets its own report.md")
    written = []
    for run_dir in found:
        done = report_mod.render_report(run_dir, output, plots=not no_plots)
        written.append({"run": str(run_dir.path), "report": done.path and str(done.path),
                        "plots": [str(p) for p in done.plots]})
        if not as_json:
            click.echo(done.text)
        console.note(done.note)
    if as_json:
        console.print_json(written)


@cli.command()
@click.argument("runs", nargs=-1, required=True, metavar="RUN...")
@click.option("-o", "--output", type=click.Path(file_okay=False), metavar="RUN",
              help="The merged run's directory (new or empty; default: a new run under --results).")
@_results_option("Where runs are looked up and made.")
@click.option("--no-report", is_flag=True, help="Do not write report.md into the merged run.")
def merge(runs, output, results_root, no_report):
    """One run from shard runs (--shard I/N): same config, seed and kernel sources, or refused.

    Every row keeps its own GPU, arch and device; a row held by two runs must be identical.
    """
    from pa_bench.store import merge as merge_mod
    from pa_bench.store.results import new_run_dir, open_run

    parts = [open_run(r, root=results_root) for r in runs]
    if output is not None:
        out = merge_mod.prepare_output(output)
    else:
        out = new_run_dir(results_root, parts[0].meta().config.get("name") or "run", "merged")
    try:
        merge_mod.merge_runs(parts, out, command=_command_line())
    except BaseException:
        if out.path.is_dir() and not any(out.path.iterdir()):
            out.path.rmdir()  # a refused merge leaves no empty run behind
        raise
    console.note(f"merged {len(parts)} runs, {len(out.records())} rows: {out.path}")
    if not no_report:
        from pa_bench.present import report as report_mod

        report_mod.write_report(out)
        console.note(f"report: {out.path / 'report.md'}")


@cli.command()
@click.argument("runs", nargs=-1, metavar="[RUN_A RUN_B]")
@_results_option("Where runs are looked up.")
@click.option("--min-change", type=float, default=0.01, show_default=True,
              help="Smallest relative change that can count as faster/slower.")
@click.option("--fail-on-slowdown", is_flag=True,
              help="Exit 1 if a row is slower beyond noise or its parity went from pass to fail.")
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON.")
@click.option("--wide", is_flag=True, help="The change and its interval in columns of their own.")
@click.option("--cycles", is_flag=True,
              help="Compare SM cycles (time x the clock each sample ran at), not times: runs "
                   "from two GPUs of one kind whose clocks differ.")
def compare(runs, results_root, min_change, fail_on_slowdown, as_json, wide, cycles):
    """A/B of two runs: change per shape x variant with a 95% interval (default: the two newest)."""
    from pa_bench.present import compare as compare_mod

    if len(runs) not in (0, 2):
        raise click.UsageError("compare takes two runs (A then B), or none for the two newest")
    run_a, run_b = resolve_runs(runs, results_root, 2)
    df = compare_mod.compare_runs(run_a, run_b, min_change=min_change, cycles=cycles)
    warnings = list(df.attrs.get("warnings", []))
    if as_json:   # the warnings are in the document; stderr says them to whoever reads
        console.print_json({"a": str(run_a.path), "b": str(run_b.path), "warnings": warnings,
                            "rows": df.to_dict(orient="records")})
        for w in warnings:
            console.note(f"warning: {w}")
    else:         # the table's block prints them above the rows
        click.echo(f"A: {run_a.path}\nB: {run_b.path}")
        console.show_compare(df, wide=wide)
    if fail_on_slowdown and compare_mod.regressions(df):
        raise CliFailure("; ".join(compare_mod.regressions(df)))


@cli.command()
@click.option("--arch", "archs", multiple=True, metavar="SM_XX[,..]",
              help="Archs to compile for (default sm_75, sm_80, sm_86, sm_89, sm_90).")
@click.option("--head-dim", type=int, default=128, show_default=True)
@click.option("--force-turing", is_flag=True, help="The forced sm_75 path (m16n8k8) builds.")
@click.option("--json", "as_json", is_flag=True, help="Print the table as JSON.")
@click.option("--wide", is_flag=True, help="One row per build, every column (default: fits 80 columns).")
def kernels(archs, head_dim, force_turing, as_json, wide):
    """Variants x archs: CTA shape, registers, shared memory and spills (needs nvcc, no GPU)."""
    from pa_bench.backends import kernel_info

    arch_list = [a for item in archs for a in _comma_list(item) or []] or None
    rows = kernel_info.kernel_table(arch_list, head_dim=head_dim, force_turing=force_turing)
    if as_json:
        console.print_json(rows)
    elif wide:
        from pa_bench.present.kernel_rows import format_table

        click.echo(format_table(rows))
    else:
        console.show_kernels(rows)
    if rows and not any(r.get("compiled") for r in rows):
        raise CliFailure(f"no kernel built ({len(rows)} tried); the first: {rows[0]['variant']} "
                         f"{rows[0]['arch']}: {fmt.one_line(rows[0].get('reason') or 'no reason')}")


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print the environment as JSON.")
def env(as_json):
    """GPU, driver, CUDA, CuPy, compiler: what a bug report needs."""
    from pa_bench.present import envinfo

    d = envinfo.environment()
    if as_json:
        console.print_json(d)
    else:
        click.echo(envinfo.format_environment(d))


@cli.command()
@with_options("config_path", *PROBLEM, "sample_rows", "hot", "max_seconds")
@click.option("--tokens", metavar="N", help="Prompt length: 98K (K = 1024) or a number; beats the config.")
@click.option("--chunk", metavar="N", help="Tokens per chunk (the last chunk takes what is left).")
@click.option("--measure", metavar="N|all",
              help="Chunks to time (at least); the others are interpolated along context.")
def prompt(opts: RunOptions, tokens, chunk, measure):
    """Attention of a whole prompt read in chunks: total time, tok/s, speed-up vs v1.

    Times some chunks (the others interpolated along context, the interpolation's error
    reported) and checks parity on the first, middle and last chunks. Default config:
    configs/prompt98k.yaml (the PR's 98K-token prompt in 1024-token chunks).
    """
    from pa_bench import prompt as prompt_mod

    pc = prompt_mod.load_prompt_config(
        opts.config_path, tokens=tokens, chunk=chunk, measure=measure,
        variants=None if opts.variants is None else list(opts.variants), **opts.overrides())
    be = build_backend(opts.backend, pc.config, console.note)
    progress = console.RichProgress()
    try:
        path = prompt_mod.run_prompt(pc, be, results_root=opts.results_root,
                                     sample_rows=opts.sample_rows, progress=progress,
                                     command=_command_line())
    finally:
        progress.stop()
    _finish("prompt", path, pc.config, opts)


__all__ = ["cli", "main"]
