"""configs/long.yaml: loads, and holds the long-context shapes on sampled rows."""

from pathlib import Path

from pa_bench.launch import segment_keys
from pa_bench.problem.config import load_config

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "long.yaml"


def test_long_config_loads_with_its_shapes_and_sampled_rows():
    cfg = load_config(CONFIG)
    assert [(s.context, s.queries) for s in cfg.shapes] == [
        (c * 1024, q) for c in (64, 256, 1024) for q in (64, 256)]
    assert (cfg.heads_q, cfg.heads_kv, cfg.head_dim) == (32, 8, 128)
    assert {"v1", "v2", "v2t"} <= set(cfg.variants)
    assert cfg.parity.sample_rows == 16
    # every shape past 64K keys runs key segments; 64K itself is one segment
    assert [segment_keys(s.context) for s in cfg.shapes] == [0, 0] + [65536] * 4
