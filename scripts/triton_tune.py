"""Tune the triton variant on a GPU: every candidate configuration on the PR's shapes, checked and timed.

    python3 scripts/triton_tune.py --out results/triton-tune          # the PR's four shapes
    python3 scripts/triton_tune.py --shapes 32Kx1024 --candidates m128-w8-s5-asm-tile,m64-w4-s5-asm-tma
    python3 scripts/triton_tune.py --list                              # the candidates (no GPU needed)
    python3 scripts/triton_tune.py --apply results/triton-tune/triton_tune.json   # commit its choices

For each shape of the config (configs/pr2092.yaml: 32/8 heads, D 128, paged 64, normal data) and
each candidate of kernels/triton_pa.py (``candidates(full=True)``: each structure switch alone,
the fast ones at several launch parameters, 128-key tiles at 64 rows x 4 warps and at 128 rows x 8
warps) it
  * builds and runs it (a candidate that fails to compile or run is a row with its one-line error);
  * checks it: the output's guard regions, two launches bitwise equal, sampled rows against FP64
    (pa_bench.numerics.reference) by the parity rule with the numerics model of its tile size
    (``block_n``: a 128-key candidate against the model of 128-key tiles), and the whole output
    bitwise against the default configuration's (the first candidate) where the arithmetic is
    meant to be the same (``bitwise_vs_default`` is n/a elsewhere); a candidate whose binary is
    another's is not timed twice;
  * times every candidate that passed, and v2 for comparison, interleaved with pa-bench's own GPU
    timer (pa_bench.measure.timing: L2 flushed, GPU time only) under a short budget.
It prints a table per shape, writes ``triton_tune.csv`` and ``triton_tune.json`` under ``--out``,
and prints the fastest per shape and the ``TUNED`` entry of pa_bench/backends/triton_runner.py
that a run then uses on this GPU (the fastest candidate that passed, 128-key tiles included: a run
judges its parity against the model of its configuration's tile size, as the tune does);
``--apply`` writes that entry from a run's triton_tune.json into triton_runner.py (no GPU needed).
No new candidate is compiled once ``--budget-s`` has passed (those rows say so); it exits 0 even
when candidates fail.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # this tree's pa_bench and kernels/

import pa_bench  # noqa: E402
from pa_bench.backends import triton_runner  # noqa: E402 - the runner whose TUNED table this fills

GUARD = 4096                 # canary elements before and after each output (16-byte aligned)
CANARY_F32 = 0xFFC0DEAD      # NaN payloads no kernel writes
CANARY_F16 = 0xFDEA
COLUMNS = ("shape", "candidate", "status", "ms", "tflops", "vs_default", "max_abs_err", "model_err", "parity",
           "bitwise_vs_default", "arithmetic", "registers", "spills", "shared_bytes", "compile_s", "note")


def timing_settings(min_seconds: float, max_seconds: float) -> dict:
    """The timing of the candidates (pa_bench.Session.time_calls): cold samples, a short budget,
    each sample after another candidate's (no prime), one sample of each per round."""
    return dict(hot=False, warmup=3, min_seconds=min_seconds, max_seconds=max_seconds, max_noise=0.005,
                min_samples=10, max_samples=2000, prime=False, round_samples=1, placements=1)


def cupy_module():
    import cupy

    return cupy


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="configs/pr2092.yaml", help="config whose shapes and problem to use")
    ap.add_argument("--shapes", default=None, help="comma-separated shapes (default: the config's)")
    ap.add_argument("--candidates", default=None,
                    help="comma-separated configuration names (default: triton_pa.candidates(full=True) per shape)")
    ap.add_argument("--out", default=None, help="directory for triton_tune.csv and triton_tune.json")
    ap.add_argument("--rows", type=int, default=32, help="query rows checked against FP64 (default 32)")
    ap.add_argument("--budget-s", type=float, default=180.0,
                    help="no new candidate is compiled after this many seconds (default 180)")
    ap.add_argument("--min-seconds", type=float, default=0.2, help="GPU time per candidate before it may stop")
    ap.add_argument("--max-seconds", type=float, default=1.5, help="wall-clock timing budget per shape")
    ap.add_argument("--no-v2", action="store_true", help="do not time v2 beside the candidates")
    ap.add_argument("--list", action="store_true", help="print the candidates per shape and exit (no GPU)")
    ap.add_argument("--sm-count", type=int, default=None, help="SMs assumed by --list (default: the GPU's, else 132)")
    ap.add_argument("--apply", default=None, metavar="JSON",
                    help="write the TUNED entry of a run's triton_tune.json into pa_bench/backends/triton_runner.py")
    args = ap.parse_args(argv)
    if args.rows < 1 or args.budget_s <= 0 or args.min_seconds < 0 or args.max_seconds <= 0:
        ap.error("--rows, --budget-s and --max-seconds must be positive")
    return args


def problems(args):
    config = pa_bench.load_config(args.config, shapes=args.shapes or None)
    return [pa_bench.make_problem(shape, config) for shape in config.shapes]


def enumerate_candidates(problem, sm_count: int | None, names: str | None = None) -> list:
    """The configurations to try on ``problem``: ``names`` (comma-separated; the default
    configuration is put first if missing), else kernels/triton_pa.py's full candidate list.
    Names that cannot run this layout are left out; a name that is no configuration is an error."""
    mod = triton_runner.kernel_module()
    pb = problem
    paged = pb.layout == "paged"
    default = mod.default_config(pb.head_dim, pb.heads_q // pb.heads_kv, pb.queries, pb.heads_q, sm_count)
    if not names:
        return mod.candidates(head_dim=pb.head_dim, paged=paged, page=pb.page, queries=pb.queries,
                              heads_q=pb.heads_q, heads_kv=pb.heads_kv, sm_count=sm_count, full=True)
    cfgs = [mod.Config.parse(n) for n in names.split(",") if n.strip()]
    cfgs = [default] + [c for c in cfgs if c != default]
    return [c for c in cfgs if c.unsupported(paged=paged, page=pb.page) is None]


def arithmetic(cfg) -> str:
    return "same" if cfg.same_arithmetic else f"tile {cfg.block_n} (changes tile_keys)"


def switch_representatives(cfgs) -> list:
    """One configuration per value of each structure switch (the first that has it): what the
    interpreter test runs."""
    seen, out = set(), []
    for cfg in cfgs:
        keys = {("convert", cfg.convert), ("loads", cfg.loads), ("k_trans", cfg.k_trans),
                ("loop_stages", bool(cfg.loop_stages)), ("warp_specialize", cfg.warp_specialize),
                ("block_n", cfg.block_n), ("d_halves", cfg.d_halves)}
        if keys - seen:
            seen |= keys
            out.append(cfg)
    return out


# --------------------------------------------------------------------------- the CPU check


def cpu_check(inputs, cfg, default_out=None) -> dict:
    """One configuration in Triton's interpreter against FP64 and the numerics model of its tile
    size (set TRITON_INTERPRET=1 first): {max_abs_err, model_err, parity, why, bitwise, out}."""
    import torch

    from pa_bench.numerics.model import model_attention
    from pa_bench.numerics.reference import reference_attention

    pb = inputs.problem
    var = triton_runner.TritonVariant(inputs, device="cpu", config=cfg)
    n = pb.heads_q * pb.queries * pb.head_dim
    dtype = torch.float16 if pb.out_dtype == "float16" else torch.float32
    buf = torch.full((n + GUARD,), -12345.0, dtype=dtype)
    var.launcher(buf)()
    guards = bool((buf[n:] == -12345.0).all())
    out = buf[:n].float().numpy().reshape(pb.heads_q, pb.queries, pb.head_dim).copy()
    ref = reference_attention(inputs.q, inputs.k_i8, inputs.v_i8, pb.context, pb.softmax_scale,
                              k_scale=inputs.k_scale, v_scale=inputs.v_scale)
    model = model_attention(inputs, cfg.block_n)
    pm = pa_bench.parity_verdict(out, ref, model, canary_ok=guards)
    bitwise = None if default_out is None else bool(np.array_equal(out.view(np.uint32), default_out.view(np.uint32)))
    return {"max_abs_err": pm.max_abs_err, "model_err": pm.model_max_abs_err, "parity": pm.parity_pass,
            "why": pm.reason, "bitwise": bitwise, "out": out}


# --------------------------------------------------------------------------- the GPU run


class Shape:
    """One shape on the GPU: inputs, the FP64 reference of sampled rows, models per tile size."""

    device = "cuda"          # where the variant's tensors live (the tests run the interpreter on the CPU)

    def __init__(self, session, rows: int):
        self.session, self.problem = session, session.problem
        self.inputs = session.inputs
        self.rows = session.sample_rows(rows, seed=1)
        self.ref = session.reference(self.rows)
        self._models = {}
        self.cp = cp = cupy_module()
        problem = self.problem
        self.n = problem.heads_q * problem.queries * problem.head_dim
        self.dtype = cp.float16 if problem.out_dtype == "float16" else cp.float32
        self.bufs = [cp.empty(self.n + 2 * GUARD, dtype=self.dtype) for _ in range(2)]
        self.default_out = None

    def model(self, tile: int):
        if tile not in self._models:
            # the arithmetic of a tile of ``tile`` keys, no split, no P.V chain, the exact maximum
            self._models[tile] = self.session.model("triton", self.rows, tile_keys=tile, split_keys=0,
                                                    pv_chain_keys=0, max_slack=None)
        return self._models[tile]

    def arrays(self) -> dict:
        return self.session.kernel_arrays()

    def _fill(self, buf) -> None:
        cp = self.cp
        if buf.dtype == cp.float16:
            buf.view(cp.uint16).fill(CANARY_F16)
        else:
            buf.view(cp.uint32).fill(CANARY_F32)

    def _intact(self, buf) -> bool:
        cp = self.cp
        bits = buf.view(cp.uint16 if buf.dtype == cp.float16 else cp.uint32)
        pat = CANARY_F16 if buf.dtype == cp.float16 else CANARY_F32
        return (bool((bits[:GUARD] == pat).all()) and bool((bits[-GUARD:] == pat).all())
                and not bool((bits[GUARD:-GUARD] == pat).any()))

    def check(self, cfg, sm_count: int, seen_binaries: dict, is_default: bool) -> tuple[dict, object]:
        """Build, run and check one candidate (``is_default``: the default configuration, whose
        output the others are compared with bitwise): (its row, the launcher to time or None)."""
        cp, pb = self.cp, self.problem
        row = {"shape": pb.shape.label, "candidate": cfg.name, "arithmetic": arithmetic(cfg)}
        try:
            t0 = time.perf_counter()
            var = triton_runner.TritonVariant(self.inputs, arrays=self.arrays(), device=self.device,
                                              sm_count=sm_count, config=cfg)
            run_a = var.launcher(self.bufs[0][GUARD:])
            self._fill(self.bufs[0])
            kernel = run_a()
            cp.cuda.runtime.deviceSynchronize()
            row["compile_s"] = round(time.perf_counter() - t0, 2)
            row.update(triton_runner.kernel_info(kernel))
            self._fill(self.bufs[1])
            var.launcher(self.bufs[1][GUARD:])()
            cp.cuda.runtime.deviceSynchronize()
        except Exception as exc:   # a candidate that does not compile, fit or run: a row, not a crash
            row.update(status="failed", note=triton_runner._error_line(exc))
            return row, None
        word = cp.uint16 if self.dtype == cp.float16 else cp.uint32
        body = self.bufs[0][GUARD:-GUARD]
        guards = self._intact(self.bufs[0]) and self._intact(self.bufs[1])
        deterministic = bool(cp.array_equal(body.view(word), self.bufs[1][GUARD:-GUARD].view(word)))
        out = cp.asnumpy(body.reshape(pb.heads_q, pb.queries, pb.head_dim)[:, cp.asarray(self.rows), :]).astype(np.float32)
        pm = pa_bench.parity_verdict(out, self.ref, self.model(cfg.block_n), canary_ok=guards)
        ok, why, model_err = pm.parity_pass, pm.reason, pm.model_max_abs_err
        if is_default:
            self.default_out = body.copy()
            bitwise = True
        elif self.default_out is None:
            bitwise = None                          # the default did not run
        else:
            bitwise = bool(cp.array_equal(body.view(word), self.default_out.view(word)))
        row.update(max_abs_err=pm.max_abs_err, model_err=model_err, parity="PASS" if ok else "FAIL",
                   bitwise_vs_default=bitwise if cfg.same_arithmetic and bitwise is not None else "n/a")
        notes = [] if ok else [why]
        if not deterministic:
            notes.append("two launches differ")
        twin = seen_binaries.get(row.get("binary_sha256"))
        if twin:
            row.update(status=f"same binary as {twin}", note="; ".join(notes))
            return row, None
        if row.get("binary_sha256"):
            seen_binaries[row["binary_sha256"]] = cfg.name
        row.update(status="ok" if ok and deterministic else "failed", note="; ".join(notes))
        return row, (var.launcher(self.bufs[0][GUARD:]) if ok and deterministic else None)

    def release(self) -> None:
        self.session.close()


class Watchdog:
    """A deadline on every wait for the GPU: past it, ``on_hang(label)`` writes what was measured
    and the process exits (a hung kernel cannot be interrupted from the host)."""

    def __init__(self, on_hang):
        self.on_hang = on_hang
        self._deadline = None
        self._label = ""
        self._lock = threading.Lock()
        threading.Thread(target=self._watch, name="triton-tune-watchdog", daemon=True).start()

    def arm(self, label: str, seconds: float) -> None:
        with self._lock:
            self._label, self._deadline = label, time.monotonic() + seconds

    def disarm(self) -> None:
        with self._lock:
            self._deadline = None

    def _watch(self) -> None:
        while True:
            time.sleep(0.5)
            with self._lock:
                late = self._deadline is not None and time.monotonic() > self._deadline
                label = self._label
                if late:
                    self._deadline = None
            if late:
                self.on_hang(label)
                os._exit(3)


def run_shape(open_session, problem, cfgs, args, started: float, sm_count: int, rows: list, watchdog=None) -> None:
    """One shape: every candidate checked, those that passed (and v2) timed; rows appended to
    ``rows``. ``open_session(problem)``: the problem's pa_bench.Session."""
    arm = watchdog.arm if watchdog else (lambda label, seconds: None)
    disarm = watchdog.disarm if watchdog else (lambda: None)
    t0 = time.perf_counter()
    arm(f"{problem.shape.label}: inputs and the FP64 reference", 600)
    shape = Shape(open_session(problem), args.rows)
    disarm()
    print(f"\n{problem.shape.label}: {problem.context} x {problem.queries}, {problem.heads_q}/{problem.heads_kv} heads, "
          f"D={problem.head_dim}, {problem.layout} {problem.page}, {problem.data}; inputs and FP64 reference of "
          f"{len(shape.rows)} rows {time.perf_counter() - t0:.1f} s", flush=True)
    first = len(rows)
    fns, seen = {}, {}
    try:
        for i, cfg in enumerate(cfgs):
            if i and time.perf_counter() - started > args.budget_s:
                rows.append({"shape": problem.shape.label, "candidate": cfg.name, "arithmetic": arithmetic(cfg),
                             "status": "skipped", "note": f"time budget ({args.budget_s:.0f} s) spent"})
                continue
            arm(f"{problem.shape.label} {cfg.name}", 120)     # compile and two launches
            row, fn = shape.check(cfg, sm_count, seen, is_default=i == 0)
            disarm()
            rows.append(row)
            if fn is not None:
                fns[cfg.name] = fn
        if not args.no_v2 and shape.session.unsupported("v2", timing=True) is None:
            try:
                fns["v2"] = shape.session.launcher("v2")
            except Exception as exc:
                print(f"  v2 not timed: {triton_runner._error_line(exc)}")
        if fns:
            arm(f"{problem.shape.label}: timing", args.max_seconds + 120)
            results = shape.session.time_calls(fns, **timing_settings(args.min_seconds, args.max_seconds))
            disarm()
            meds = {name: float(np.median(r.samples_ms)) for name, r in results.items()}
            mine = rows[first:]
            default_ms = meds.get(mine[0]["candidate"]) if mine else None
            for row in mine:
                ms = meds.get(row["candidate"])
                if ms is not None:
                    row.update(ms=round(ms, 5), tflops=round(problem.flops / (ms * 1e-3) / 1e12, 1),
                               samples=len(results[row["candidate"]].samples_ms))
                    if default_ms:
                        row["vs_default"] = round(default_ms / ms, 3)
            if "v2" in meds:
                rows.append({"shape": problem.shape.label, "candidate": "v2", "status": "reference",
                             "ms": round(meds["v2"], 5),
                             "tflops": round(problem.flops / (meds["v2"] * 1e-3) / 1e12, 1),
                             "vs_default": round(default_ms / meds["v2"], 3) if default_ms else None,
                             "samples": len(results["v2"].samples_ms), "arithmetic": "cuda kernel"})
    finally:
        disarm()
        try:
            shape.release()
        except Exception:   # a context a candidate broke: the next shape says so
            pass
    print_table(rows[first:])


def print_table(rows) -> None:
    head = f"  {'candidate':<30} {'ms':>9} {'TFLOP/s':>8} {'x dflt':>7} {'max err':>9} {'model':>9} {'parity':>6} " \
           f"{'bitwise':>7} {'regs':>4} {'spill':>5}  status"
    print(head)
    for r in sorted(rows, key=lambda r: (r.get("ms") is None, r.get("ms") or 0)):
        def f(key, fmt):
            v = r.get(key)
            return format(v, fmt) if isinstance(v, (int, float)) and not isinstance(v, bool) else str(v if v is not None else "-")
        print(f"  {r['candidate']:<30} {f('ms', '9.4f'):>9} {f('tflops', '8.1f'):>8} {f('vs_default', '7.2f'):>7} "
              f"{f('max_abs_err', '9.2e'):>9} {f('model_err', '9.2e'):>9} {str(r.get('parity', '-')):>6} "
              f"{str(r.get('bitwise_vs_default', '-')):>7} {f('registers', '4d'):>4} {f('spills', '5d'):>5}  "
              f"{r.get('status', '')}{': ' + r['note'] if r.get('note') else ''}")


def best_per_shape(rows) -> dict:
    """{shape: fastest row} among candidates that passed, whatever their tile size: a run's numerics
    model follows the configuration the table names (``triton_runner.planned_tile_keys``), so a
    128-key candidate is held to the model of 128-key tiles there as here."""
    best = {}
    for r in rows:
        if r.get("status") == "ok" and r.get("ms") is not None and r.get("candidate") != "v2":
            if r["shape"] not in best or r["ms"] < best[r["shape"]]["ms"]:
                best[r["shape"]] = r
    return best


def table_entry(gpu: str, best: dict, classes: dict, source: str | None = None) -> str:
    """The TUNED dict of triton_runner.py with this GPU's entries added (Python source); ``source``
    names the run the figures in its comments come from."""
    merged = {g: dict(v) for g, v in triton_runner.TUNED.items()}
    notes = {}
    for shape, r in best.items():
        merged.setdefault(gpu, {})[classes[shape]] = r["candidate"]
        notes[(gpu, classes[shape])] = f"{shape}: {r['ms']:.4g} ms, {r.get('vs_default') or 0:.2f}x the default"
    lines = ["TUNED: dict[str, dict[str, str]] = {"]
    for g in sorted(merged):
        lines.append(f"    {g!r}: {{")
        if g == gpu and source:
            lines.append(f"        # scripts/triton_tune.py, {source}")
        for cls in sorted(merged[g]):
            note = notes.get((g, cls))
            lines.append(f"        {cls!r}: {merged[g][cls]!r},{'  # ' + note if note else ''}")
        lines.append("    },")
    lines.append("}")
    return "\n".join(lines)


RUNNER_FILE = Path(__file__).resolve().parents[1] / "pa_bench" / "backends" / "triton_runner.py"
TABLE_START = "TUNED: dict[str, dict[str, str]] = {"


def apply_entry(source: str, entry: str) -> str:
    """``source`` (triton_runner.py's text) with its TUNED assignment replaced by ``entry``."""
    if not entry.startswith(TABLE_START):
        raise ValueError("the run's tuned_entry is not a TUNED table")
    start = source.find(TABLE_START)
    if start < 0:
        raise ValueError(f"{RUNNER_FILE.name} has no line starting {TABLE_START!r}")
    line_end = source.index("\n", start)
    if source[start:line_end].rstrip() == TABLE_START + "}":
        end = line_end                        # the empty table: one line
    else:
        close = source.find("\n}\n", start)
        if close < 0:
            raise ValueError(f"{RUNNER_FILE.name}: the TUNED table has no closing brace at the start of a line")
        end = close + 2                       # through the closing brace
    return source[:start] + entry + source[end:]


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.apply:
        try:
            entry = json.loads(Path(args.apply).read_text())["tuned_entry"]
            text = apply_entry(RUNNER_FILE.read_text(), entry)
        except (OSError, ValueError, KeyError) as exc:
            print(f"error: --apply {args.apply}: {exc}", file=sys.stderr)
            return 2
        RUNNER_FILE.write_text(text)
        print(f"wrote the TUNED table of {args.apply} into {RUNNER_FILE}:\n{entry}")
        return 0
    try:
        pbs = problems(args)
        sm_list = args.sm_count or 132
        cands = {pb.shape.label: enumerate_candidates(pb, sm_list, args.candidates) for pb in pbs}
    except Exception as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.list:
        for pb in pbs:
            print(f"{pb.shape.label} ({triton_runner.problem_class(pb)}): "
                  f"{len(cands[pb.shape.label])} candidates, {args.sm_count or 132} SMs assumed")
            for cfg in cands[pb.shape.label]:
                print(f"  {cfg.name:<32} {arithmetic(cfg)}")
        return 0
    reason = triton_runner.unavailable_reason()
    if reason:
        print(f"error: triton cannot run here: {reason}", file=sys.stderr)
        return 2
    started = time.perf_counter()
    first = pa_bench.session(pbs[0])
    first.close()   # its inputs: each shape opens its own session on the same backend
    import torch

    return run_all(first.another, torch.cuda.get_device_name(), int(first.describe()["sm_count"]), pbs, args,
                   started)


class Outputs:
    """What the run has measured so far, written to --out after every shape (and on a hang)."""

    def __init__(self, args, meta: dict, started: float):
        self.args, self.meta, self.started = args, meta, started
        self.rows: list[dict] = []
        self.classes: dict[str, str] = {}

    def entry(self) -> str:
        src = f"{self.args.out}/triton_tune.json" if self.args.out else None
        return table_entry(self.meta["gpu"], best_per_shape(self.rows), self.classes, src)

    def write(self) -> None:
        if not self.args.out:
            return
        out = Path(self.args.out)
        out.mkdir(parents=True, exist_ok=True)
        with open(out / "triton_tune.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(COLUMNS) + ["samples", "binary_sha256"], extrasaction="ignore")
            w.writeheader()
            w.writerows(self.rows)
        best = best_per_shape(self.rows)
        (out / "triton_tune.json").write_text(json.dumps(
            {"meta": self.meta, "classes": self.classes, "rows": self.rows,
             "best": {s: r["candidate"] for s, r in best.items()}, "tuned_entry": self.entry(),
             "seconds": round(time.perf_counter() - self.started, 1)}, indent=1, default=str))

    def hung(self, label: str) -> None:
        shape, _, cand = label.partition(" ")
        self.rows.append({"shape": shape.rstrip(":"), "candidate": cand or label, "status": "failed",
                          "note": "hung: no result before the watchdog's deadline; the run stopped here"})
        print(f"error: {label}: the GPU gave no result before the deadline; writing what was measured and exiting",
              flush=True)
        self.write()


def run_all(open_session, gpu: str, sms: int, pbs, args, started: float, watch: bool = True) -> int:
    """Every shape's candidates, each shape on ``open_session(problem)``; prints the fastest and
    the table entry, writes --out."""
    meta = {"gpu": gpu, "sm_count": sms, **triton_runner.meta(), "args": vars(args)}
    print(f"{gpu} ({sms} SMs); triton {meta.get('triton')}, torch {meta.get('torch')}; kernels/triton_pa.py "
          f"{meta['source_sha256']}")
    outputs = Outputs(args, meta, started)
    watchdog = Watchdog(outputs.hung) if watch else None
    for pb in pbs:
        outputs.classes[pb.shape.label] = triton_runner.problem_class(pb)
        try:
            run_shape(open_session, pb, enumerate_candidates(pb, sms, args.candidates), args, started, sms,
                      outputs.rows, watchdog)
        except Exception as exc:   # the shape could not be set up (memory, a CUDA context a candidate broke)
            print(f"  {pb.shape.label} stopped: {triton_runner._error_line(exc)}")
            outputs.rows.append({"shape": pb.shape.label, "candidate": "-", "status": "failed",
                                 "note": triton_runner._error_line(exc)})
        outputs.write()
    rows = outputs.rows
    best = best_per_shape(rows)
    print("\nfastest per shape (passed):")
    for shape, r in best.items():
        v2 = next((x for x in rows if x["shape"] == shape and x["candidate"] == "v2"), None)
        print(f"  {shape:<10} {r['candidate']:<30} {r['ms']:.4f} ms  {r['tflops']} TFLOP/s  "
              f"{r.get('vs_default')}x the default" + (f"  ({v2['ms'] / r['ms']:.2f}x v2)" if v2 else ""))
    print("\nthe table entry (pa_bench/backends/triton_runner.py, TUNED):\n" + outputs.entry())
    print(f"\n{time.perf_counter() - started:.0f} s in all")
    if args.out:
        print(f"wrote {Path(args.out) / 'triton_tune.csv'} and {Path(args.out) / 'triton_tune.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
