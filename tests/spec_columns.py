"""The records.csv columns other tools may rely on (the README's "Output columns"), written out
independently of pa_bench.store.records."""

SPEC_COLUMNS = (
    "config shape context queries heads_q heads_kv head_dim layout page data "
    "variant backend gpu arch status reason "
    "ms_median ms_min ms_max ms_rel_spread samples tflops kv_gbps sm_clock_mhz throttled "
    "stop_reason clock_source host_bound "
    "max_abs_err rel_l2_err nmse model_max_abs_err err_ratio parity_pass sampled_rows "
    "quant_max_abs_err deterministic ref_ms ref_err"
).split()
