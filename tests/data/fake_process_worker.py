"""A stand-in for one ``--processes`` worker on a machine without a GPU: a run directory of the
plan with known timing samples, written through the real store, as ``pa-bench run|time`` writes
one. ``python fake_process_worker.py CONFIG WORKER ROOT MODE SLOW [DRAW]`` where SLOW is a JSON object
{"variant": fraction}: that variant's samples are that fraction slower in this worker. The
samples of row i are 0.1 * (i + 1) ms x (1 + SLOW) x (1 + 0.002 z), z drawn with the seed
(1000 * worker + i, DRAW), and every worker's median moved by WORKER_SHIFT[worker]."""

import json
import sys

import numpy as np

from pa_bench.measure import stats
from pa_bench.problem.config import load_config
from pa_bench.problem.plan import make_plan
from pa_bench.store import results as R
from pa_bench.store.records import Record

WORKER_SHIFT = (0.0, 0.001, -0.001, 0.0005)


def main(config_path: str, worker: str, root: str, mode: str, slow: str, noise: str = "0") -> None:
    k, slow_by, draw = int(worker), json.loads(slow), int(noise)
    config = load_config(config_path)
    plan = make_plan(config)
    run = R.new_run_dir(root, config.name, "cuda")
    run.write_meta({"mode": mode, "status": "running", "config": config.to_dict(),
                    "seed": config.seed, "sample_rows": None,
                    "backend": {"backend": "cuda", "gpu": "Fake GPU"}})
    i = 0
    for p in plan.problems:
        for v in plan.variants:
            rng = np.random.default_rng([1000 * k + i, draw])
            centre = 0.1 * (i + 1) * (1 + WORKER_SHIFT[k % len(WORKER_SHIFT)]) * (1 + slow_by.get(v, 0.0))
            x = centre * (1 + 0.002 * rng.standard_normal(200 + 10 * k))
            st = stats.summarize(x)
            lo, hi = stats.median_interval(x)
            rec = Record(shape=p.shape.written, variant=v, backend="cuda", gpu="Fake GPU",
                         status="ok", ms_median=st.median, ms_min=st.min, ms_max=st.max,
                         ms_q1=st.q1, ms_q3=st.q3, ms_rel_spread=st.rel_stdev, samples=st.count,
                         ms_ci_lo=lo, ms_ci_hi=hi, ci_kind="samples", stop_reason="noise",
                         tflops=1.0 / st.median, clock_source="sm-cycles",
                         sm_clock_mhz=1800.0 + k, throttled=0,
                         parity_pass=True if mode == "run" else None)
            run.save_record(rec)
            run.save_samples(p.shape.written, v, list(x), [1800.0 + k] * len(x))
            i += 1
    run.update_meta(status="complete", wall_seconds=1.5, phase_seconds={"timing": 1.0})
    print(json.dumps({"run": str(run.path)}))


if __name__ == "__main__":
    main(*sys.argv[1:7])
