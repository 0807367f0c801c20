"""The variants registry: its facts, and that a newly registered variant is accepted end to end
(config, plan, numpy backend, records, report) without touching any other module."""

from __future__ import annotations

import pytest

from pa_bench import variants as registry
from pa_bench.backends import kernels as K
from pa_bench.problem.config import load_config


@pytest.fixture
def toy():
    """A user's kernel: registered for the test, gone afterwards."""
    entry = registry.register(registry.Variant(
        "toy", registry.CUDA_KERNEL, "a user's kernel", source="toy.cu", min_arch=80,
        arch_needs="cp.async", tile_keys=32, threads=64, cta="64 threads"))
    yield entry
    registry.unregister("toy")


def test_table_order_and_kinds():
    pr = ("v1", "v2", "v2t", "torch-sdpa", "torch-sdpa+dequant")
    assert [n for n in registry.names() if n in pr] == list(pr)  # others may sit between them
    assert registry.names("kernel")[:3] == ("v1", "v2", "v2t")
    assert not set(pr[3:]) & set(registry.names("kernel"))
    assert set(registry.names(registry.PEER)) >= {"torch-sdpa", "torch-sdpa+dequant"}
    assert registry.in_order(["mine", "torch-sdpa", "v2t", "v1", "v2t"]) == ["v1", "v2t", "torch-sdpa", "mine"]
    assert registry.get("v2t").bitwise_twin == "v2"
    assert [v.name for v in registry.cuda_kernels() if v.splits_keys] == ["v2", "v2t"]


def test_arch_facts_give_one_line_reasons():
    assert registry.get("v1").arch_reason(75) is None
    assert registry.get("v2").arch_reason(75) == "v2 needs sm_80+ (cp.async), not sm_75"
    assert "needs sm_75+" in registry.get("v1").arch_reason(70)
    only90 = registry.Variant("h", registry.CUDA_KERNEL, "x", source="h.cu", min_arch=90, max_arch=90,
                              arch_suffix="a", arch_needs="wgmma", tile_keys=64)
    assert only90.arch_reason(80) == "h needs sm_90a (wgmma), not sm_80"
    assert only90.arch_reason(100) == "h runs on sm_90a only, not sm_100"
    assert only90.nvcc_arch(90) == "sm_90a"
    assert K.build_unsupported("v2", 90, True, 128).startswith("v2 has no Turing path")


def test_registry_rejects_bad_entries():
    with pytest.raises(ValueError, match="kind"):
        registry.Variant("x", "fpga", "x")
    with pytest.raises(ValueError, match="tile_keys"):
        registry.Variant("x", registry.TRITON_KERNEL, "x")
    with pytest.raises(ValueError, match="already registered"):
        registry.register(registry.get("v1"))
    with pytest.raises(KeyError, match="unknown variant 'nope'"):
        registry.get("nope")


def test_a_registered_variant_runs_through_config_plan_runner_and_report(smoke_yaml, toy, tmp_path):
    from pa_bench import runner
    from pa_bench.backends.numpy import NumpyBackend
    from pa_bench.present.report import build_report
    from pa_bench.problem.plan import make_plan
    from pa_bench.store.results import open_run

    cfg = load_config(smoke_yaml).with_overrides(shapes="64x16", variants="toy,v1", heads_q=2, heads_kv=1,
                                            head_dim=64)
    plan = make_plan(cfg)
    assert plan.kernel_variants == ["toy", "v1"] and [c.variant for c in plan.cases()] == ["toy", "v1"]
    assert K.kernel_path("toy").name == "toy.cu"
    path = runner.run_parity(cfg, NumpyBackend(), results_root=tmp_path, write_report=False)
    recs = {r.variant: r for r in open_run(path).records()}
    assert recs["toy"].status == "ok" and recs["toy"].parity_pass is True
    report = build_report(path, plots=False)
    table = report[report.index("### "):]
    assert table.index("| v1 |") < table.index("| toy |")  # table order: the registry's


def test_an_unregistered_variant_is_refused_by_the_config(smoke_yaml):
    from pa_bench.errors import ConfigError

    with pytest.raises(ConfigError, match="'toy'"):
        load_config(smoke_yaml).with_overrides(variants="toy")


def test_the_readme_variant_table_names_every_registered_variant():
    # the README's "what it is" table is where a new user meets the variants: it must name
    # every registered one, and no other
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    head = readme.index("| variant | what it is | runs on |")
    table = readme[head:readme.index("\n\n", head)]
    named = set(re.findall(r"`([\w+-]+)`", "\n".join(line.split("|")[1] for line in table.splitlines()[2:])))
    assert named == set(registry.names()), f"README table: {sorted(named)}; registry: {sorted(registry.names())}"
