"""Run single mma.sync instructions on the GPU and save operands and results, to fit the
accumulation model (pa_bench.numerics.mma) offline.

    python experiments/mma_dump.py OUT_DIR [--n 1024]

Writes OUT_DIR/mma_k16.npz and OUT_DIR/mma_k8.npz, each with arrays a [N,16,16] f16, b [N,16,8]
f16, c [N,16,8] f32 and d (the tensor cores' result) for three operand kinds stacked along N:
attention-like (signed C of any size, 20 % zero probabilities), C = 0, and B >= 0. The kernel
and the attention-like operands are tests/gpu/test_mma_emulation_gpu.py's.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def main(argv: list[str]) -> int:
    import cupy as cp

    out = Path(argv[0])
    n = int(argv[argv.index("--n") + 1]) if "--n" in argv else 1024
    spec = importlib.util.spec_from_file_location("t", HERE.parent / "tests" / "gpu" / "test_mma_emulation_gpu.py")
    t = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(t)
    fn = cp.RawModule(code=t.SRC, options=("-std=c++17",)).get_function("one_mma")
    out.mkdir(parents=True, exist_ok=True)
    for k8 in (False, True):
        parts = []
        for kind in range(3):
            a, b, c = t.operands(n, 100 * k8 + kind)
            if kind == 1:
                c[:] = 0
            if kind == 2:
                b = np.abs(b)
            parts.append((a, b, c))
        a, b, c = (np.concatenate(x) for x in zip(*parts))
        d = cp.zeros(c.shape, cp.float32)
        fn((len(a),), (32,), (cp.asarray(a), cp.asarray(b), cp.asarray(c), d, np.int32(k8)))
        np.savez_compressed(out / f"mma_k{8 if k8 else 16}.npz", a=a, b=b, c=c, d=cp.asnumpy(d))
        print(f"k{8 if k8 else 16}: {len(a)} MMAs saved")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
