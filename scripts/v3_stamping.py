"""What the scripts that stamp a copy of v3 share (``v3_timeline.py``, ``v3_steps.py``): the copy
of kernels/ with an edited v3.cu, the problem they stamp, v3 launched from the copy's own module
(so that a ``__device__`` array of stamps in it can be read back), and its time between events."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Callable


def edited_kernels(src: Path, prefix: str, edit: Callable[[str], str]) -> Path:
    """A fresh copy of the kernels directory ``src`` whose v3.cu is ``edit(v3.cu)``."""
    kd = Path(tempfile.mkdtemp(prefix=prefix)) / "kernels"
    shutil.copytree(src, kd)
    (kd / "v3.cu").write_text(edit((kd / "v3.cu").read_text()))
    return kd


def problem(shape: str):
    """The PR's problem at ``shape``: 32/8 heads, D 128, paged 64, normal data, fp32 output."""
    from pa_bench.problem.plan import Problem
    from pa_bench.problem.shapes import parse_shape

    return Problem(parse_shape(shape), heads_q=32, heads_kv=8, head_dim=128, layout="paged", page=64,
                   data="normal", seed=0, out_dtype="float32")


def module_launch(be, pb):
    """(prepared inputs, v3's module, a launcher): v3 built once and registered with the cuda
    backend ``be``, so that the launcher runs this module's kernel (and pa_combine)."""
    from pa_bench.problem.inputs import make_inputs

    prep = be.prepare(make_inputs(pb))
    build = be.build("v3", pb)
    mod, fn = be._module(build)
    be.adopt(build, mod, fn)
    return prep, mod, be.launcher(prep, "v3")


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
