"""pa-bench prompt on a real GPU (`pytest -m gpu`): a small prompt end to end on the cuda backend,
every variant timed on its timed chunks, totals that add up, parity on three chunks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

from gpu_env import require_cupy_gpu  # noqa: E402  (tests/gpu/gpu_env.py)

cp = require_cupy_gpu()

from pa_bench.store.prompt_rows import read_prompt_csv  # noqa: E402


def test_a_small_prompt_on_the_gpu(invoke, tmp_path):
    result = invoke("prompt", "--backend", "cuda", "--tokens", "8.5K", "--chunk", "1024",
                    "--measure", "5", "--variant", "v1,v2t", "--max-seconds", "0.5",
                    "--results", tmp_path, "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    prompt = out["prompt"]
    assert prompt["chunks"] == 9 and 8 in prompt["measured"]  # the partial chunk is timed
    totals = {t["variant"]: t for t in prompt["totals"]}
    rows = read_prompt_csv(Path(out["run"]))
    for v in ("v1", "v2t"):
        t = totals[v]
        assert t["total_ms"] > 0, t
        assert t["total_ms"] == pytest.approx(sum(r.ms for r in rows if r.variant == v))
        assert t["tokens_per_s"] == pytest.approx(8704 / (t["total_ms"] / 1e3))
    assert totals["v2t"]["speedup_lo"] <= totals["v2t"]["speedup_hi"]
    assert all(r["parity_pass"] for r in out["records"])
    assert {r["shape"] for r in out["records"]} == {"0x1024", "4096x1024", "8192x512"}
