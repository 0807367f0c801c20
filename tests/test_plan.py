"""Problems, cases and plans from a config and command-line overrides."""

import math

import pytest

from pa_bench.problem.config import DEFAULT_CONFIG, load_config
from pa_bench.errors import ConfigError, ShapeError
from pa_bench.problem.plan import Case, Plan, Problem, make_plan
from pa_bench.problem.shapes import parse_shape


def naive_flops(d, hq, ctx, nq):
    return sum(4 * d * hq * (ctx + i + 1) for i in range(nq))


@pytest.mark.parametrize("shape", ["32Kx1024", "64Kx512", "0x1536", "2.1Kx256", "1023x113"])
def test_flops_are_exact_causal_counts(shape):
    s = parse_shape(shape)
    p = Problem(s, heads_q=32, heads_kv=8, head_dim=128)
    assert p.flops == naive_flops(128, 32, s.context, s.queries)
    assert isinstance(p.flops, int)
    assert p.keys == s.context + s.queries and (p.context, p.queries) == (s.context, s.queries)
    assert p.kv_bytes == 8 * p.keys * (2 * 128 + 8)


def test_problem_defaults_and_derived_values():
    p = Problem(parse_shape("1023x113"), heads_q=4, heads_kv=2, head_dim=64, page=16)
    assert p.softmax_scale == pytest.approx(1 / 8) and p.group == 2
    assert p.n_pages == math.ceil(1136 / 16)
    assert Problem(parse_shape("1x1"), head_dim=64, softmax_scale=0.5).softmax_scale == 0.5
    assert p.params()["context"] == 1023 and p.label == "1023x113"
    assert p.device_bytes > p.kv_bytes  # paged pool is about twice the cache
    hash(p)  # problems are frozen and hashable


@pytest.mark.parametrize("kw", [
    {"heads_q": 6, "heads_kv": 4}, {"layout": "weird"}, {"data": "npz"}, {"head_dim": 0},
    {"out_dtype": "int8"},
])
def test_problem_rejects_bad_parameters(kw):
    with pytest.raises(ConfigError):
        Problem(parse_shape("1x1"), **kw)


def test_make_plan_from_pr_config_is_shape_major():
    plan = make_plan(load_config(DEFAULT_CONFIG))
    n = len(plan.variants)
    assert isinstance(plan, Plan) and n == 10 and len(plan) == 4 * n
    cases = list(plan.cases())
    assert [c.variant for c in cases[:n]] == list(plan.variants)
    assert all(c.problem is plan.problems[0] for c in cases[:n])
    assert [c.problem.label for c in cases[::n]] == ["32Kx1024", "64Kx512", "1.5K", "2.1Kx256"]
    p = plan.problems[2]
    assert (p.context, p.queries, p.heads_q, p.heads_kv, p.head_dim, p.layout, p.page, p.data) == (
        0, 1536, 32, 8, 128, "paged", 64, "normal")
    assert p.softmax_scale == pytest.approx(128 ** -0.5)
    assert plan.kernel_variants == ["v1", "v2", "v2t", "v3", "triton"]
    assert plan.peer_variants == ["torch-sdpa", "torch-sdpa-flash", "torch-sdpa-cudnn", "torch-sdpa+dequant",
                                  "torch-flex"]
    assert Case(p, "v2t").key == "1.5K|v2t" and Case(p, "v2t").is_kernel
    assert Case(p, "torch-sdpa").is_peer


def test_make_plan_overrides_beat_the_config():
    config = load_config(DEFAULT_CONFIG)
    plan = make_plan(config, shapes="0x1536,1023x113", variants="v2t")
    assert plan.variants == ["v2t"]
    # A shape the config already has keeps its label (and its reference figures).
    assert [p.label for p in plan.problems] == ["1.5K", "1023x113"]
    assert plan.config.ref_figure(plan.problems[0].shape, "v2t").err == 4.5e-6
    assert make_plan(config, shapes="1.5K").problems[0].queries == 1536
    assert make_plan(config, shapes=[parse_shape("1Kx3")], variants=["v1", "v2"]).variants == [
        "v1", "v2"]


def test_make_plan_bad_overrides():
    config = load_config(DEFAULT_CONFIG)
    with pytest.raises(ShapeError, match="'12Q'"):
        make_plan(config, shapes="12Q")
    with pytest.raises(ConfigError, match="'v9'"):
        make_plan(config, variants="v9")
