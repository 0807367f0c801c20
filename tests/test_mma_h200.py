"""The MMA accumulation model (pa_bench.numerics.mma) against what an H200's tensor cores gave.

tests/data/mma_h200.npz holds single mma.sync results recorded on the H200 by
experiments/mma_dump.py: 384 m16n8k16 and 384 m16n8k8-pair MMAs, a third each of
attention-like operands (signed C of any size, 20 % zero probabilities), C = 0, and B >= 0. The
model is not bit-exact (docs/NUMERICS.md, "How close the emulation is"); these tests hold it to
the bound stated there, so a change to the model that moves it away from the hardware fails.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pa_bench.numerics import mma as M

DATA = np.load(Path(__file__).parent / "data" / "mma_h200.npz")


def recorded(k):
    a, b, c, d = (DATA[f"k{k}_{x}"] for x in "abcd")
    return a, b, c, d


def ulps_of_largest_term(a, b, c, x):
    """|x| in units of fp32's last place at the largest of each element's 16 products and C."""
    prods = np.abs(np.swapaxes(a, -1, -2).astype(np.float64)[..., :, :, None]
                   * b.astype(np.float64)[..., :, None, :]).max(axis=1)
    _, e = np.frexp(np.maximum(prods, np.abs(c.astype(np.float64))))
    return np.abs(x) / np.ldexp(1.0, e - 24)


@pytest.mark.parametrize("k", [16, 8])
def test_the_emulation_is_within_the_stated_bound_of_the_h200s_bits(k):
    a, b, c, d = recorded(k)
    emu = M.mma_accumulate(c, a.astype(np.float32), b.astype(np.float32), k_group=k)
    same = np.mean(d.view(np.uint32) == emu.view(np.uint32))
    assert same >= 0.99, f"only {same:.4%} of elements bitwise equal"
    off = ulps_of_largest_term(a, b, c, d.astype(np.float64) - emu.astype(np.float64))
    assert off.max() <= 8, f"{off.max()} ulps of the largest term apart"


@pytest.mark.parametrize("k", [16, 8])
def test_the_emulation_errs_as_much_as_the_hardware_and_round_to_nearest_does_not(k):
    a, b, c, d = recorded(k)
    exact = c.astype(np.float64) + np.matmul(a.astype(np.float64), b.astype(np.float64))
    emu = M.mma_accumulate(c, a.astype(np.float32), b.astype(np.float32), k_group=k)
    hw_err = ulps_of_largest_term(a, b, c, d - exact).mean()
    emu_err = ulps_of_largest_term(a, b, c, emu - exact).mean()
    assert abs(emu_err - hw_err) <= 0.05 * hw_err, (emu_err, hw_err)
    rn = exact.astype(np.float32)        # one round-to-nearest of the exact sum: the ideal
    assert np.mean(d.view(np.uint32) == rn.view(np.uint32)) < 0.8
    assert ulps_of_largest_term(a, b, c, rn - exact).mean() < 0.6 * hw_err   # about half
