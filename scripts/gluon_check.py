"""Check and time kernels/gluon_pa.py on a GPU beside the Triton table's launch and v3.

    python3 scripts/gluon_check.py --shapes 32Kx1024,64Kx512 --launches 128-1,64-1-168 --out gluon.json

A launch is BLOCK_N-STAGES[-maxnreg] (pa_gluon) or wBLOCK_N[p][l][-maxnreg] (pa_gluon_wide). For each shape of configs/pr2092.yaml it builds the inputs, the
FP64 reference of 32 sampled rows and the numerics model at each launch's tile size
(scripts/triton_tune.py's Shape), runs each launch twice into guarded buffers (parity by pa-bench's
rule, canaries, bitwise determinism), then times the launches that passed, the Triton variant's
planned launch and v3 with pa-bench's interleaved timer. Needs Triton 3.6's Gluon.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import triton_tune as T  # noqa: E402

from pa_bench.backends import triton_runner  # noqa: E402


def gluon_module():
    spec = importlib.util.spec_from_file_location("gluon_pa", ROOT / "kernels" / "gluon_pa.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["gluon_pa"] = mod
    spec.loader.exec_module(mod)
    return mod


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="32Kx1024,64Kx512,2.1Kx256,0x1536")
    ap.add_argument("--launches", default="128-1,64-1-168,64-3")
    ap.add_argument("--out", default="gluon_check.json")
    ap.add_argument("--config", default=str(ROOT / "configs" / "pr2092.yaml"), help="the shapes' config")
    ap.add_argument("--no-time", action="store_true", help="check only (e.g. under compute-sanitizer)")
    ap.add_argument("--max-seconds", type=float, default=1.5, help="wall-clock timing budget per shape")
    args = ap.parse_args(argv)
    import torch

    from pa_bench.backends.cuda import CudaBackend
    from pa_bench.measure import timing
    from pa_bench.numerics.metrics import error_metrics, judge_parity, parity_floor
    from pa_bench.problem.config import load_config
    from pa_bench.problem.plan import make_plan

    G = gluon_module()
    launches = args.launches.split(",")
    backend = CudaBackend()
    cp = backend.cp
    out = {}
    for pb in make_plan(load_config(args.config), shapes=args.shapes or None).problems:
        sh = T.Shape(backend, pb, 32)
        a = {k: torch.as_tensor(v, device="cuda") for k, v in sh.arrays().items()}
        hp = 4
        p_scale, qk = float(sh.inputs.p_scale), float(sh.inputs.qk_scale_log2)
        rows, fns = {}, {}
        for spec in launches:
            wide = spec.startswith("w")
            if wide:    # wBLOCK_N[p][l][-maxnreg]: pa_gluon_wide, 128 rows, 8 warps (p: P.V reads P from
                        # shared memory; l: P.V issued after the wait for S, not with S)
                head, *rest = spec[1:].split("-")
                late = head.endswith("l")
                head = head.rstrip("l")
                psm = head.endswith("p")
                bn, mr = int(head.rstrip("p")), int(rest[0]) if rest else 0
                kern, bm, warps = G.pa_gluon_wide, G.WIDE_M, G.WIDE_WARPS
                extra = {"P_SMEM": psm, "EARLY_PV": not late}
                name = f"gluon-wide-n{bn}" + ("-psmem" if psm else "") + ("-late" if late else "") + (f"-r{mr}" if mr else "")
            else:       # BLOCK_N-STAGES[-maxnreg]: pa_gluon, 64 rows, 4 warps
                bn, st, mr = (int(x) for x in (spec.split("-") + ["0"])[:3])
                kern, bm, warps, extra = G.pa_gluon, G.BLOCK_M, G.NUM_WARPS, {"STAGES": st}
                name = f"gluon-n{bn}-s{st}" + (f"-r{mr}" if mr else "")
            nrb = -(-pb.queries // (bm // hp))
            grid = (pb.heads_q // hp, nrb)
            bufs = [cp.empty(sh.n + 2 * T.GUARD, dtype=sh.dtype) for _ in range(2)]

            def launcher(buf, bn=bn, mr=mr, kern=kern, bm=bm, warps=warps, extra=extra, nrb=nrb, grid=grid):
                o = torch.as_tensor(buf[T.GUARD:-T.GUARD], device="cuda")
                call = (a["q"], a["k"], a["v"], a["ks"], a["vs"], a["table"], o, pb.queries, pb.context,
                        pb.heads_kv, nrb, qk, p_scale, 1.0 / p_scale)
                kw = dict(D=pb.head_dim, GROUP=pb.heads_q // pb.heads_kv, HP=hp, BLOCK_M=bm, BLOCK_N=bn,
                          PAGE_SHIFT=pb.page.bit_length() - 1, num_warps=warps, **extra)
                if mr:
                    kw["maxnreg"] = mr
                return lambda: kern[grid](*call, **kw)

            row = {}
            try:
                t0 = time.perf_counter()
                for b in bufs:
                    sh._fill(b)
                    launcher(b)()
                    cp.cuda.runtime.deviceSynchronize()
                row["build_s"] = round(time.perf_counter() - t0, 1)
                word = cp.uint16 if sh.dtype == cp.float16 else cp.uint32
                guards = sh._intact(bufs[0]) and sh._intact(bufs[1])
                body = bufs[0][T.GUARD:-T.GUARD]
                det = bool(cp.array_equal(body.view(word), bufs[1][T.GUARD:-T.GUARD].view(word)))
                sel = cp.asnumpy(body.reshape(pb.heads_q, pb.queries, pb.head_dim)[:, cp.asarray(sh.rows), :])
                err = error_metrics(sel.astype(np.float32), sh.ref)
                model_err = error_metrics(sh.model(bn), sh.ref)["max_abs_err"]
                ok, why = judge_parity(err["max_abs_err"], model_err, parity_floor(sh.ref), err["nan_inf"], guards)
                row.update(max_abs_err=err["max_abs_err"], model_err=model_err, parity=ok, why=why,
                           guards=guards, deterministic=det)
                if ok and det:
                    fns[name] = launcher(bufs[0])
            except Exception as exc:   # a launch that does not build or run: a row, not the end
                row["error"] = triton_runner._error_line(exc)
            rows[name] = row
            print(pb.shape.label, name, json.dumps(row), flush=True)
        if args.no_time:
            out[pb.shape.label] = {"launches": rows}
            sh.release()
            Path(args.out).write_text(json.dumps(out, indent=1))
            continue
        var = triton_runner.TritonVariant(sh.inputs, arrays=sh.arrays(), device="cuda",
                                          sm_count=int(backend.props["multiProcessorCount"]))
        tb = cp.empty(sh.n + 2 * T.GUARD, dtype=sh.dtype)
        fns["triton " + var.config.name] = var.launcher(tb[T.GUARD:])
        fns["v3"] = backend.launcher(sh.prep, "v3")
        res = timing.time_interleaved(fns, T.Settings(min_seconds=0.2, max_seconds=args.max_seconds),
                                      timer=backend.timer(), clock=timing.ClockReader(backend.device.id))
        meds = {k: float(np.median(r.samples_ms)) for k, r in res.items()}
        out[pb.shape.label] = {"launches": rows, "ms": {k: round(v, 5) for k, v in meds.items()},
                               "tflops": {k: round(pb.flops / (v * 1e-3) / 1e12, 1) for k, v in meds.items()},
                               "samples": {k: len(r.samples_ms) for k, r in res.items()}}
        print(pb.shape.label, json.dumps(out[pb.shape.label]["ms"]), flush=True)
        sh.release()
        Path(args.out).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
