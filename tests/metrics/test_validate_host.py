"""`hpa validate` of a run with a host KV tier: vLLM's prefix_cache_hits counter holds the
GPU's hits alone, so it is compared with the GPU's part of the replay's hits."""

from __future__ import annotations

import pytest

from analyzer.pipeline.replay import run_replay
from analyzer.pipeline.validate import validate
from analyzer.sim.dispatch import make_policy
from tests.host_trace import BASE, TIER, host_trace_db

COUNTERS = "# TYPE vllm:prefix_cache_queries_total counter\n" \
    "vllm:prefix_cache_queries_total 400.0\n" \
    "# TYPE vllm:prefix_cache_hits_total counter\n" \
    "vllm:prefix_cache_hits_total 0.0\n"  # fmt: skip


@pytest.mark.parametrize(
    ("tier", "predicted"),
    [
        ({}, 0),  # no tier: the hit, as before
        (TIER, 0),  # 128 tokens hit, all from the host: the GPU's part is 0
    ],
)
def test_counter_compares_the_gpu_hits(tmp_path, tier, predicted):
    db = host_trace_db(tmp_path)
    run_replay(make_policy({**BASE, **tier}), db_path=db)
    metrics = tmp_path / "metrics.txt"
    metrics.write_text(COUNTERS)
    rows = validate(db_path=db, metrics=metrics).rows.to_pylist()
    hits = next(r for r in rows if r["source"] == "vllm:prefix_cache_hits")
    assert (hits["observed_tokens"], hits["predicted_tokens"]) == (0, predicted)
