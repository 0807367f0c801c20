"""Error metrics on hand-made arrays and the parity rule."""

import math
import warnings

import numpy as np
import pytest

from pa_bench.numerics.metrics import (ParityMetrics, err_ratio, error_metrics, evaluate_parity,
                              judge_parity, parity_floor)


def test_metrics_on_hand_made_arrays():
    ref = np.array([[3.0, 4.0], [0.0, 0.0]])  # |ref| = 5
    out = np.array([[3.0, 4.0], [0.0, 0.5]], dtype=np.float32)
    m = error_metrics(out, ref)
    assert set(m) == {"max_abs_err", "rel_l2_err", "nmse", "cosine", "nan_inf"}
    assert m["max_abs_err"] == 0.5
    assert m["nmse"] == pytest.approx(0.25 / 25)
    assert m["rel_l2_err"] == pytest.approx(0.1)
    assert m["cosine"] == pytest.approx(25 / (5 * math.sqrt(25.25)))
    assert m["nan_inf"] == 0
    assert all(isinstance(m[k], float) for k in ("max_abs_err", "rel_l2_err", "nmse", "cosine"))
    assert isinstance(m["nan_inf"], int)


def test_identical_and_opposite():
    ref = np.linspace(-1, 1, 12).reshape(2, 2, 3)
    same = error_metrics(ref.astype(np.float32), ref)
    assert same["max_abs_err"] == pytest.approx(0, abs=1e-7) and same["cosine"] == pytest.approx(1)
    opposite = error_metrics(-ref, ref)
    assert opposite["cosine"] == pytest.approx(-1) and opposite["nmse"] == pytest.approx(4)
    zeros = error_metrics(np.zeros(3), np.zeros(3))
    assert zeros == {"max_abs_err": 0.0, "rel_l2_err": 0.0, "nmse": 0.0, "cosine": 1.0,
                     "nan_inf": 0}


def test_nan_and_inf_are_counted_without_warnings():
    ref = np.ones((2, 3))
    out = np.ones((2, 3), dtype=np.float32)
    out[0, 1] = np.nan
    out[1, 2] = np.inf
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m = error_metrics(out, ref)
        floor = parity_floor(ref)
    assert m["nan_inf"] == 2
    assert m["max_abs_err"] == math.inf and m["nmse"] == math.inf and math.isnan(m["cosine"])
    assert floor > 0


def test_shape_mismatch_is_an_error():
    with pytest.raises(ValueError, match="shape"):
        error_metrics(np.zeros((2, 3)), np.zeros((3, 2)))


def test_parity_floor_is_four_fp32_ulps_of_the_largest_output():
    ref = np.array([0.5, -3.0, 1.0])
    assert parity_floor(ref) == 4 * float(np.spacing(np.float32(3.0)))
    assert parity_floor(ref) == 4 * 2.0 ** -22
    assert parity_floor(np.zeros(4)) > 0  # tiny, but a zero model error still has slack


def test_judge_parity_boundary():
    model, floor = 1e-5, 4 * float(np.spacing(np.float32(3.0)))
    bound = 2 * model + floor
    ok, why = judge_parity(bound, model, floor, 0, True)
    assert ok and "<=" in why
    ok, why = judge_parity(np.nextafter(bound, 1), model, floor, 0, True)
    assert not ok and ">" in why


def test_judge_parity_failures():
    assert judge_parity(0.0, 1e-5, 1e-7, nan_inf=3, canary_ok=True) == (
        False, "3 NaN/Inf value(s) in the output")
    ok, why = judge_parity(0.0, 1e-5, 1e-7, nan_inf=0, canary_ok=False)
    assert not ok and "guard" in why
    assert judge_parity(0.0, 1e-5, 1e-7, 0, None)[0]  # canaries not checked: no failure
    assert not judge_parity(math.inf, 1e-5, 1e-7, 0, True)[0]
    assert not judge_parity(math.nan, 1e-5, 1e-7, 0, True)[0]
    assert not judge_parity(1e-6, None, 1e-7, 0, True)[0]


def test_zero_model_error_does_not_fail_an_exact_kernel():
    ref = np.array([1.0, 2.0, 3.0])
    floor = parity_floor(ref)
    out = (ref + np.spacing(np.float32(3.0))).astype(np.float32)  # one ulp off: exact in fp32 terms
    err = error_metrics(out, ref)["max_abs_err"]
    assert judge_parity(err, 0.0, floor, 0, True)[0]
    assert not judge_parity(10 * floor, 0.0, floor, 0, True)[0]


def test_err_ratio():
    assert err_ratio(2e-6, 1e-6) == pytest.approx(2)
    assert err_ratio(0.0, 0.0) == 1.0
    assert err_ratio(1e-9, 0.0) == math.inf
    assert err_ratio(1e-9, None) is None


def test_evaluate_parity_combines_everything():
    ref = np.array([[1.0, 2.0], [3.0, 4.0]])
    model = ref + 1e-4
    good = evaluate_parity(ref + 1.5e-4, ref, model_out=model)
    assert isinstance(good, ParityMetrics) and good.parity_pass
    assert good.model_max_abs_err == pytest.approx(1e-4)
    assert good.err_ratio == pytest.approx(1.5)
    bad = evaluate_parity(ref + 3e-4, ref, model_out=model)
    assert not bad.parity_pass and bad.max_abs_err == pytest.approx(3e-4)
    nan = ref.copy()
    nan[0, 0] = np.nan
    assert not evaluate_parity(nan, ref, model_err=1.0).parity_pass
    assert not evaluate_parity(ref, ref, model_err=1e-4, canary_ok=False).parity_pass
    assert set(good.as_dict()) >= {"max_abs_err", "rel_l2_err", "nmse", "cosine", "nan_inf"}
