"""Long-context accuracy with key segments on and forced off (#12): the experiment that isolates
why the kernels lost accuracy with context while the numerics model did not.

    python scripts/long_context_check.py --out long_context.csv          # about 1-2 minutes on the H200

For each shape (contexts 64K, 256K and 1M x 64 and 256 queries; normal data, D=128, paged 64;
heads 8/8 and 32/8) and each of v1, v2 and v2t it prints the max abs error against the FP64
reference on 16 sampled rows of
  * the kernel, the numerics model of the same arithmetic, and their ratio, with key segments as
    the rule sets them (pa_bench.numerics.model.segment_keys: 65,536-key segments above 64K);
  * the same with segments forced off (backend.segments = False: one mma.sync accumulation chain
    over the whole context for every variant; v2/v2t's split keys stay off above 64K, as the
    model's rule says, so no variant splits the chain in either mode);
  * torch-sdpa's error on the same rows, for scale (blank without torch).
Segments change nothing at 64K (both modes are the same launch), so a 64K row is computed once.
If the ratio falls back into [0.5, 2] with segments on while it grows with context with them off,
the long accumulation chain is the cause. It also checks v2t == v2 bitwise in both modes.

Inputs: one make_inputs per (context, queries) with 32/8 heads; the 8/8 problem reuses its K/V
and its query heads 0, 4, ..., 28 (query head 4h read KV head h there, as head h does at 8/8), so
the 1M inputs are drawn once. The CSV (--out) has one row per shape x heads x mode x variant.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import inspect
import sys
import time

import numpy as np

from pa_bench.backends.cuda import CudaBackend
from pa_bench.numerics import model as M
from pa_bench.numerics.metrics import parity_floor
from pa_bench.numerics.reference import sample_rows
from pa_bench.problem.inputs import make_inputs
from pa_bench.problem.plan import Problem
from pa_bench.problem.shapes import parse_shape

VARIANTS = ("v1", "v2", "v2t")
HEADS = ((8, 8), (32, 8))
COLUMNS = ("shape", "heads", "segments", "n_seg", "split_keys", "variant", "kernel_err", "model_err", "ratio",
           "sdpa_err", "passes", "v2t_eq_v2")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def model_error(backend, inputs, arrays, variant: str, rows, ref, cache: dict, mma_k: int) -> float:
    """Max abs error of the numerics model of ``variant``'s arithmetic as the backend launches it now
    (tile, split keys, segments, MMA k), computed once per distinct arithmetic."""
    pb = inputs.problem
    params = inspect.signature(M.model_attention).parameters
    kw = {"split_keys": backend.split_keys(variant, pb)}
    if "segment_keys" in params:
        kw["segment_keys"] = backend.segment_keys(variant, pb)
    if "mma_k" in params:
        kw["mma_k"] = mma_k
    key = (M.tile_keys(variant),) + tuple(sorted(kw.items()))
    if key not in cache:
        out = M.model_attention(arrays, M.tile_keys(variant), rows, **kw)
        out = backend.cp.asnumpy(out) if not isinstance(out, np.ndarray) else out
        cache[key] = float(np.max(np.abs(out.astype(np.float64) - ref)))
    return cache[key]


def sdpa_error(inputs, rows, ref) -> float | None:
    try:
        from pa_bench.backends.torch_peer import TorchPeer

        out = TorchPeer(inputs).output()[:, rows, :]
    except Exception as exc:  # no torch, or flash cannot run the shape
        log(f"  torch-sdpa: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
        return None
    return float(np.max(np.abs(out.astype(np.float64) - ref)))


def check_shape(backend, inputs, n_rows: int, sdpa: bool) -> list[dict]:
    pb = inputs.problem
    mma_k = 8 if backend.describe()["mma"] == "m16n8k8" else 16
    rows = sample_rows(pb.queries, n_rows, seed=pb.seed)
    ref = np.asarray(backend.reference(inputs, rows, quantised=True), dtype=np.float64)
    floor = parity_floor(ref)
    prep = backend.prepare(inputs)
    arrays = M.model_arrays(inputs, backend.cp)
    peer = sdpa_error(inputs, rows, ref) if sdpa else None
    cache: dict = {}
    out = []
    modes = (None, False) if M.segment_keys(pb.context) else (None,)
    try:
        for mode in modes:
            backend.segments = mode
            hashes, lines = {}, []
            for v in VARIANTS:
                res = backend.compute(prep, v, rows)
                kerr = float(np.max(np.abs(res.out.astype(np.float64) - ref)))
                merr = model_error(backend, inputs, arrays, v, rows, ref, cache, mma_k)
                geo = backend.geometry(v, pb)
                hashes[v] = res.full_hash
                ok = res.canary_ok and res.deterministic and kerr <= 2 * merr + floor
                lines.append({"shape": pb.shape.label, "heads": f"{pb.heads_q}/{pb.heads_kv}",
                              "segments": "off" if mode is False else ("on" if geo.segment_keys else "none"),
                              "n_seg": geo.segments, "split_keys": geo.split_keys, "variant": v,
                              "kernel_err": kerr, "model_err": merr, "ratio": kerr / merr if merr else float("inf"),
                              "sdpa_err": peer, "passes": bool(ok)})
            for ln in lines:
                ln["v2t_eq_v2"] = hashes["v2t"] == hashes["v2"]
            out += lines
    finally:
        backend.segments = None
        backend.release(prep)
    return out


def fmt(x) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.3g}" if x == x and abs(x) != float("inf") else str(x)
    return str(x)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="CSV file to write")
    ap.add_argument("--contexts", default="64K,256K,1024K")
    ap.add_argument("--queries", default="64,256")
    ap.add_argument("--rows", type=int, default=16, help="sampled query rows per shape")
    ap.add_argument("--no-sdpa", action="store_true", help="skip the torch-sdpa column")
    args = ap.parse_args()

    backend = CudaBackend()
    log(f"{backend.describe()['gpu']}, mma {backend.describe()['mma']}")
    start = time.perf_counter()
    results = []
    for ctx in args.contexts.split(","):
        for nq in args.queries.split(","):
            t0 = time.perf_counter()
            shape = parse_shape(f"{ctx}x{nq}")
            big = make_inputs(Problem(shape, heads_q=32, heads_kv=8, head_dim=128, layout="paged", page=64,
                                      data="normal", seed=0))
            big = dataclasses.replace(big, k_float=None, v_float=None)   # only the quantised reference is used
            log(f"{shape.label}: inputs {time.perf_counter() - t0:.1f} s")
            for hq, hkv in HEADS:
                if hq == big.problem.heads_q:
                    inputs = big
                else:
                    pb = dataclasses.replace(big.problem, heads_q=hq, heads_kv=hkv)
                    inputs = dataclasses.replace(big, problem=pb, q=np.ascontiguousarray(big.q[:: big.problem.heads_q // hq]))
                t1 = time.perf_counter()
                results += check_shape(backend, inputs, args.rows, not args.no_sdpa)
                log(f"{shape.label} {hq}/{hkv}: {time.perf_counter() - t1:.1f} s")
            del big, inputs

    widths = {c: max(len(c), *(len(fmt(r[c])) for r in results)) for c in COLUMNS}
    print("  ".join(c.ljust(widths[c]) for c in COLUMNS))
    for r in results:
        print("  ".join(fmt(r[c]).ljust(widths[c]) for c in COLUMNS))
    with open(args.out, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(results)
    bad = [r for r in results if r["segments"] != "off" and (not r["passes"] or not 0.5 <= r["ratio"] <= 2)]
    print(f"\n{len(results)} rows in {time.perf_counter() - start:.0f} s -> {args.out}; "
          f"{len(bad)} row(s) with segments as the rule sets them outside ratio [0.5, 2] or failing parity")


if __name__ == "__main__":
    main()
