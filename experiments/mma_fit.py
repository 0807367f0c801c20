"""Fit the MMA accumulation model to recorded tensor-core results (experiments/mma_dump.py).

    python experiments/mma_fit.py [NPZ ...]     (default: tests/data/mma_h200.npz)

For each recorded shape (m16n8k16, m16n8k8 pairs) it tries block-FMA variants: terms per block
(16, 8, 4), alignment bits below fp32's last place for the products and for C, and prints the
share of elements each gives bit for bit, best first. pa_bench.numerics.mma is 16 terms, 2 bits
for both (docs/NUMERICS.md section 6).
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import numpy as np

from pa_bench.numerics.mma import round_toward_zero_f32

DEFAULT = Path(__file__).resolve().parent.parent / "tests" / "data" / "mma_h200.npz"


def block(c, prods, prod_bits: int, c_bits: int):
    """One block FMA: products [k, ...] (exact float64) and c [...] aligned to their largest
    exponent, truncated ``prod_bits`` / ``c_bits`` below fp32's last place there, summed exactly,
    rounded toward zero to fp32."""
    c64 = c.astype(np.float64)
    _, e = np.frexp(np.maximum(np.max(np.abs(prods), axis=0), np.abs(c64)))
    inv_p = np.ldexp(np.ones_like(c64), 24 + prod_bits - e)
    inv_c = np.ldexp(np.ones_like(c64), 24 + c_bits - e)
    return round_toward_zero_f32(np.trunc(prods * inv_p).sum(axis=0) / inv_p + np.trunc(c64 * inv_c) / inv_c)


def emulate(a, b, c, terms: int, prod_bits: int, c_bits: int):
    """d = c + a @ b per problem ([n,16,16] f16, [n,16,8] f16, [n,16,8] f32), in blocks of
    ``terms`` products chained through the accumulator."""
    pa = np.swapaxes(a, -1, -2).astype(np.float64)[..., :, :, None]
    pb = b.astype(np.float64)[..., :, None, :]
    acc = c.copy()
    for k0 in range(0, 16, terms):
        acc = block(acc, np.moveaxis(pa[:, k0:k0 + terms] * pb[:, k0:k0 + terms], 1, 0), prod_bits, c_bits)
    return acc


def recorded(path: Path):
    z = np.load(path)
    if "k16_a" in z:                       # tests/data/mma_h200.npz: both shapes in one file
        return {k: tuple(z[f"k{k}_{x}"] for x in "abcd") for k in (16, 8)}
    k = 8 if path.stem.endswith("k8") else 16   # experiments/mma_dump.py: one file per shape
    return {k: tuple(z[x] for x in "abcd")}


def main(argv: list[str]) -> int:
    for path in [Path(p) for p in argv] or [DEFAULT]:
        for k, (a, b, c, d) in recorded(path).items():
            results = []
            for terms in (t for t in (16, 8, 4) if t <= k):
                for pb, cb in itertools.product((1, 2, 3, 4), (1, 2, 3, 4, 24)):
                    w = emulate(a, b, c, terms, pb, cb)
                    results.append((float(np.mean(d.view(np.uint32) == w.view(np.uint32))), terms, pb, cb))
            results.sort(reverse=True)
            print(f"{path.name} m16n8k{k} ({len(a)} MMAs):")
            for share, terms, pb, cb in results[:6]:
                print(f"  {share:8.4%}  {terms}-term blocks, products {pb} bits, C {cb} bits")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
