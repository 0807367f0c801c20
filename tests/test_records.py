"""The tidy record: the documented column names, exact CSV round trip, DataFrame conversion."""

import io
import math

import numpy as np
import pytest

from pa_bench.errors import RunError
from pa_bench.store.records import (
    COLUMNS,
    FIELD_TYPES,
    Record,
    frame_to_records,
    read_csv,
    records_to_frame,
    write_csv,
)
from spec_columns import SPEC_COLUMNS

EXTRAS = (
    "ms_q1 ms_q3 ms_ci_lo ms_ci_hi ci_kind processes ms_proc_medians ms_xproc_lo ms_xproc_hi speedup_vs_v1 speedup_lo speedup_hi cosine nan_inf canary_ok diff_vs_v1 "
    "diff_vs_v2 out_dtype softmax_scale seed mma force_turing label device_index device_uuid impl input_round_err budget_pass "
    "schema_version"
).split()


def full_record() -> Record:
    return Record(
        config="pr2092", shape="32Kx1024", context=32768, queries=1024, heads_q=32, heads_kv=8,
        head_dim=128, layout="paged", page=64, data="realistic", variant="v2t", backend="cuda",
        gpu='NVIDIA H200, "SXM" 141GB', arch="sm_90", status="ok", reason=None,
        ms_median=7.612345678901234, ms_min=7.5, ms_max=8.25, ms_rel_spread=0.0031, samples=120,
        tflops=145.2, kv_gbps=1234.5, sm_clock_mhz=1980.0, throttled=0,
        max_abs_err=3.7e-6, rel_l2_err=1.1e-7, nmse=1.2e-14, model_max_abs_err=2.9e-6,
        err_ratio=1.2758620689655173, parity_pass=True, sampled_rows=None,
        quant_max_abs_err=0.0123, deterministic=False, ref_ms=7.6, ref_err=3.7e-6,
        ms_q1=7.55, ms_q3=7.7, speedup_vs_v1=1.71, speedup_lo=1.70, speedup_hi=1.72,
        cosine=0.9999999999, nan_inf=0, canary_ok=True, diff_vs_v1=1.5e-6, diff_vs_v2=0.0,
        out_dtype="float32", softmax_scale=1 / math.sqrt(128), seed=0, mma="m16n8k16",
        force_turing=False, label=None,
    )


def test_columns_are_spec_then_extras_in_order():
    assert list(COLUMNS) == SPEC_COLUMNS + EXTRAS


def test_defaults_and_key():
    r = Record(shape="2.1Kx256", variant="v1")
    assert r.key() == ("2.1Kx256", "v1")
    assert r.status == "ok"
    assert all(getattr(r, c) is None for c in COLUMNS if c not in ("shape", "variant", "status", "schema_version"))
    assert FIELD_TYPES["samples"] is int and FIELD_TYPES["throttled"] is int
    assert FIELD_TYPES["parity_pass"] is bool and FIELD_TYPES["ms_median"] is float


def test_csv_round_trip_exact(tmp_path):
    recs = [
        full_record(),
        Record(shape="0x1536", label="1.5K", variant="v2", status="skipped",
               reason="v2 needs sm_80 (cp.async); this GPU is sm_75", parity_pass=None,
               deterministic=True, sampled_rows=64, max_abs_err=float("nan"), ms_max=math.inf),
    ]
    path = tmp_path / "records.csv"
    write_csv(recs, path)
    back = read_csv(path)
    assert len(back) == 2
    a, b = back
    assert a == recs[0]  # every float bit-exact (repr), bools and None kept
    assert a.ms_median == 7.612345678901234 and isinstance(a.samples, int)
    assert a.deterministic is False and a.parity_pass is True and a.reason is None
    assert b.label == "1.5K" and b.status == "skipped" and b.reason.startswith("v2 needs")
    assert b.parity_pass is None and b.deterministic is True and b.sampled_rows == 64
    assert math.isnan(b.max_abs_err) and b.ms_max == math.inf  # nan kept distinct from empty
    assert b.ms_median is None


def test_csv_cells_are_empty_for_none_and_readable_names(tmp_path):
    buf = io.StringIO()
    write_csv([Record(shape="1Kx256", variant="v1", parity_pass=True, samples=3)], buf)
    header, row = buf.getvalue().splitlines()
    assert header.split(",") == list(COLUMNS)
    cells = dict(zip(COLUMNS, row.split(",")))
    assert cells["parity_pass"] == "True" and cells["samples"] == "3"
    assert cells["ms_median"] == "" and cells["reason"] == ""


def test_numpy_values_are_coerced(tmp_path):
    r = Record(shape="1Kx256", variant="v1", ms_median=np.float32(1.5), samples=np.int64(7),
               parity_pass=np.bool_(True))
    buf = io.StringIO()
    write_csv([r], buf)
    buf.seek(0)
    (back,) = read_csv(buf)
    assert back.ms_median == 1.5 and back.samples == 7 and back.parity_pass is True
    assert type(back.samples) is int and type(back.parity_pass) is bool


def test_read_ignores_unknown_and_missing_columns(tmp_path):
    p = tmp_path / "r.csv"
    p.write_text("shape,variant,future_column,ms_median\n32Kx1024,v1,zzz,13.0\n")
    (r,) = read_csv(p)
    assert r.key() == ("32Kx1024", "v1") and r.ms_median == 13.0 and r.status == "ok"


def test_read_bad_values_raise_clear_errors(tmp_path):
    p = tmp_path / "r.csv"
    p.write_text("shape,variant,samples\n32Kx1024,v1,many\n")
    with pytest.raises(RunError, match="samples"):
        read_csv(p)
    p.write_text("shape,variant\n,v1\n")
    with pytest.raises(RunError, match="shape"):
        read_csv(p)
    with pytest.raises(RunError, match="cannot read"):
        read_csv(tmp_path / "missing.csv")


def test_frame_round_trip():
    recs = [full_record(), Record(shape="0x1536", variant="v1", status="failed", reason="boom",
                                  parity_pass=False, samples=None)]
    df = records_to_frame(recs)
    assert list(df.columns) == list(COLUMNS)
    assert len(df) == 2
    assert str(df["samples"].dtype) == "Int64" and str(df["parity_pass"].dtype) == "boolean"
    assert df["ms_median"].dtype == np.float64 and math.isnan(df["ms_median"][1])
    back = frame_to_records(df)
    assert back == recs


def test_empty_frame_has_columns():
    df = records_to_frame([])
    assert list(df.columns) == list(COLUMNS) and len(df) == 0
    assert frame_to_records(df) == []
