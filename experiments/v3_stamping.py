"""What the scripts that stamp a copy of v3 share (``v3_timeline.py``, ``v3_steps.py``): the copy
of kernels/ whose hooks (kernels/v3_hooks.cuh) they define, the problem they stamp, v3 launched from the copy's own module
(so that a ``__device__`` array of stamps in it can be read back), and its time between events."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path


HOOKS = "v3_hooks.cuh"
STAMP_POINTS = ("cta_start", "producer_end", "consumer_end", "producer_start", "top", "landed", "empty", "stored", "arrived", "barrier")
WG_POINTS = ("consumer_start", "q_ready", "turn_top", "turn_full", "turn_open", "fenced", "s_issued", "issued", "s_done", "softmax",
             "pv_done", "first_softmax", "last_turn", "last_pv")


def stamp_hooks(prefix: str, bodies: dict[str, str]) -> str:
    """C++ that defines v3's stamp hooks as one macro a point, ``<prefix>_<point>(n)`` (PA_V3_STAMP)
    and ``<prefix>_wg_<point>(wg, tid, n)`` (PA_V3_STAMP_WG), each expanding to its body from
    ``bodies`` (statements, written where the point is; nothing where it has none). A body for a
    point the kernel does not have fails loudly."""
    unknown = sorted(set(bodies) - set(STAMP_POINTS) - set(WG_POINTS))
    if unknown:
        raise SystemExit(f"v3_stamping: no stamp point {', '.join(unknown)} in kernels/v3_hooks.cuh; update the script")
    lines = [f"#define PA_V3_STAMP(point, n) {prefix}_##point(n)",
             f"#define PA_V3_STAMP_WG(point, wg, tid, n) {prefix}_wg_##point(wg, tid, n)"]
    lines += [f"#define {prefix}_{p}(n) {bodies.get(p, '')}".rstrip() for p in STAMP_POINTS]
    lines += [f"#define {prefix}_wg_{p}(wg, tid, n) {bodies.get(p, '')}".rstrip() for p in WG_POINTS]
    return "\n".join(lines) + "\n"


def hooked_kernels(src: Path, prefix: str, hooks: str) -> Path:
    """A fresh copy of the kernels directory ``src`` whose v3_hooks.cuh starts with ``hooks`` (C++
    that defines hook macros before the defaults)."""
    kd = Path(tempfile.mkdtemp(prefix=prefix)) / "kernels"
    shutil.copytree(src, kd)
    (kd / HOOKS).write_text(hooks + (kd / HOOKS).read_text())
    return kd


def problem(shape: str):
    """The PR's problem at ``shape``: 32/8 heads, D 128, paged 64, normal data, fp32 output."""
    import pa_bench

    return pa_bench.make_problem(shape, heads_q=32, heads_kv=8, head_dim=128, layout="paged", page=64,
                                 data="normal", seed=0, out_dtype="float32")


def stamp_pins():
    """The launch the stamps fit: 128-row CTAs (the stamps' registers fit two consumer
    warpgroups, 216 each, not three, 152); the rest the policy's."""
    import pa_bench

    return pa_bench.Pins(rows=128)


def module_launch(session, pins=None):
    """(v3's module, a launcher): v3 built once more on the session's problem and made the kernel
    its launcher runs (and pa_combine), so that the module's stamps are the launch's."""
    return session.module_launcher("v3", launch=pins)


def sm90_sessions(shapes: list[str]):
    """Each shape's session on one cuda backend, or exit 2 where the GPU is not sm_90 (v3's)."""
    import pa_bench

    last = None
    for shape in shapes:
        s = pa_bench.session(problem(shape)) if last is None else last.another(problem(shape))
        if last is None and s.describe()["arch"] != "sm_90":
            print(f"v3 runs on sm_90a only; this GPU is {s.describe()['arch']}")
            s.close()
            raise SystemExit(2)
        last = s
        yield s


def event_times_us(cp, launch, warm: int = 20, n: int = 50) -> list[float]:
    """``n`` times of ``launch()`` between CUDA events, in us, after ``warm`` launches."""
    for _ in range(warm):
        launch()
    times = []
    for _ in range(n):
        e0, e1 = cp.cuda.Event(), cp.cuda.Event()
        e0.record()
        launch()
        e1.record()
        e1.synchronize()
        times.append(cp.cuda.get_elapsed_time(e0, e1) * 1e3)
    return times


def stamped_launch(cp, stamps, launch):
    """The stamps of one more launch: ``stamps`` (the module's array) zeroed, ``launch()`` once,
    read back as int64."""
    import numpy as np

    stamps.fill(0)
    launch()
    cp.cuda.Device().synchronize()
    return cp.asnumpy(stamps).astype(np.int64)


def keep(out: Path | None, stem: str, t, text: str) -> None:
    """``stem``.npy (the stamps) and ``stem``.txt (their summary) in ``out``, where given."""
    if out is None:
        return
    import numpy as np

    np.save(out / f"{stem}.npy", t)
    (out / f"{stem}.txt").write_text(text + "\n")
