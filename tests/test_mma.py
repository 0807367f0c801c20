"""The emulation of mma.sync's fp32 accumulation (pa_bench.numerics.mma)."""

import numpy as np
import pytest

from pa_bench.numerics import mma as M


def probe_terms(n, signed=False):
    """shared/probes/mma_rounding.py's data: the products a_k * b_k of its n first MMAs."""
    rng = np.random.default_rng(0)
    size = 1 << 18
    a = (rng.random(size) * 0.25 + 0.01).astype(np.float16)
    b = rng.standard_normal(size).astype(np.float16)
    b = b if signed else np.abs(b)
    return (a.astype(np.float64) * b.astype(np.float64))[:n]


def chain(prods, extra_bits=M.EXTRA_BITS):
    c = np.zeros(1, np.float32)
    for p in prods:
        c = M.block_fma(c, np.full((1, 16), p), extra_bits=extra_bits)
    return float(c[0])


def test_the_emulation_reproduces_the_h200_probe_after_1024_mmas():
    prods = probe_terms(1024)
    exact = 16 * prods.sum()
    rel = (chain(prods) - exact) / exact
    assert rel == pytest.approx(-8.8e-5, rel=0.03)        # the H200's figure (SPEC section 1)
    # the extra-bits setting is what the figure pins down: 0 or 1 extra bits drift 4x or 2x more
    assert (chain(prods, extra_bits=0) - exact) / exact == pytest.approx(4 * rel, rel=0.05)
    assert (chain(prods, extra_bits=1) - exact) / exact == pytest.approx(2 * rel, rel=0.05)


def test_a_fresh_accumulator_added_to_nearest_does_not_drift():
    prods = probe_terms(1024)
    exact = 16 * prods.sum()
    c = np.float32(0)
    for p in prods:
        c = np.float32(c + M.block_fma(np.zeros(1, np.float32), np.full((1, 16), p))[0])
    assert abs((float(c) - exact) / exact) < 2e-6


def test_block_fma_is_exact_when_the_sum_fits_and_truncates_toward_zero_otherwise():
    c = np.array([1.0, -1.0], np.float32)
    small = np.array([[2.0**-20] * 16, [-(2.0**-20)] * 16])     # fits: 1 + 16 * 2^-20
    assert M.block_fma(c, small).tolist() == [1 + 2.0**-16, -(1 + 2.0**-16)]
    tiny = np.array([[2.0**-26] * 16, [-(2.0**-26)] * 16])      # each term below the 2^-25 grid
    assert M.block_fma(c, tiny).tolist() == [1.0, -1.0]
    third = np.array([[1 / 3] + [0.0] * 15])                    # 4/3 rounded toward zero
    got = M.block_fma(np.ones(1, np.float32), third)[0]
    assert got < np.float32(4 / 3) and np.nextafter(got, np.float32(2)) == np.float32(4 / 3)


def test_block_fma_does_not_depend_on_the_order_of_the_products():
    rng = np.random.default_rng(1)
    p16 = rng.standard_normal((64, 16)).astype(np.float16).astype(np.float64)
    v = rng.integers(-127, 128, (64, 16)).astype(np.float64)
    prods = p16 * v
    c = rng.standard_normal(64).astype(np.float32) * np.float32(100)
    perm = rng.permutation(16)
    assert M.block_fma(c, prods.copy()).tobytes() == M.block_fma(c, prods[:, perm]).tobytes()


@pytest.mark.parametrize("k_group", [16, 8])
def test_mma_accumulate_is_close_to_exact_and_never_above_it_for_positive_terms(k_group):
    rng = np.random.default_rng(2)
    p16 = (rng.random((3, 5, 16)) * 0.5).astype(np.float16).astype(np.float32)
    v = rng.integers(0, 128, (3, 16, 8)).astype(np.int8)
    acc = np.zeros((3, 5, 8), np.float32)
    exact = np.zeros((3, 5, 8))
    for _ in range(200):
        acc = M.mma_accumulate(acc, p16, v, k_group=k_group)
        exact += np.matmul(p16.astype(np.float64), v.astype(np.float64))
    assert np.all(acc <= exact)
    assert np.abs(acc - exact).max() <= 200 * 3 * np.spacing(np.float32(exact.max()))
    rn = np.zeros((3, 5, 8), np.float32)
    for _ in range(200):
        rn = M.rn_accumulate(rn, p16, v)
    assert np.abs(rn - exact).max() < np.abs(acc - exact).max()
