"""`hpa metrics` of a run with a host KV tier: vLLM's names for the GPU and host hits, hpa's
for the waits, and the families only where the run had a tier."""

from __future__ import annotations

import pytest

from analyzer.pipeline.metrics import prometheus_metrics
from analyzer.pipeline.replay import run_replay
from analyzer.sim.dispatch import make_policy
from analyzer.store.host_tier import has_host_tier
from tests.host_trace import BASE, TIER, host_trace_db

parser = pytest.importorskip("prometheus_client.parser")

HOST_FAMILIES = {
    "vllm:external_prefix_cache_hits",
    "vllm:prompt_tokens_cached_by_source",
    "hpa_host_tier_loads",
    "hpa_host_tier_wait_steps",
    "hpa_host_tier_wait_seconds",
    "hpa_host_tier_lost_tokens",
    "hpa_host_tier_never_stored_tokens",
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Run 1 without a tier, run 2 with one, run 3 with one of 4 slots that stores nothing."""
    db = host_trace_db(tmp_path_factory.mktemp("prom_host"))
    run_replay(make_policy(BASE), db_path=db)
    run_replay(make_policy({**BASE, **TIER}), db_path=db)
    run_replay(make_policy({**BASE, "host_tier_chunks": 4}), db_path=db)
    return db


def _samples(db, run) -> dict[tuple, float]:
    text = prometheus_metrics(db_path=db, run=run).text
    out = {}
    for fam in parser.text_string_to_metric_families(text):
        for s in fam.samples:
            cause = s.labels.get("cause", s.labels.get("kind"))
            out[(fam.name, s.labels.get("source"), cause)] = s.value
    return out


@pytest.mark.parametrize(
    ("run", "expected"),
    [
        (1, {("vllm:prefix_cache_hits", None, None): 0}),
        (
            2,
            {
                ("vllm:prefix_cache_hits", None, None): 0,  # the GPU's own: none here
                ("vllm:external_prefix_cache_hits", None, None): 128,
                ("vllm:prompt_tokens_cached_by_source", "device", None): 0,
                ("vllm:prompt_tokens_cached_by_source", "host", None): 128,
                ("hpa_host_tier_loads", None, None): 2,
                ("hpa_host_tier_wait_steps", None, None): 2,
                ("hpa_host_tier_wait_seconds", None, None): 0,
                ("hpa_prefix_cache_lost_tokens", None, "eviction"): 0,
                ("hpa_host_tier_lost_tokens", None, "evicted"): 0,
                ("hpa_host_tier_lost_tokens", None, "never_stored"): 0,
            },
        ),
        (
            3,
            {
                ("vllm:external_prefix_cache_hits", None, None): 0,
                ("hpa_host_tier_lost_tokens", None, "evicted"): 0,
                ("hpa_host_tier_lost_tokens", None, "never_stored"): 128,
                ("hpa_prefix_cache_lost_tokens", None, "eviction"): 128,
                # by kind: its offers found no slot (the lever: the tier's size)
                ("hpa_host_tier_never_stored_tokens", None, "no_slot"): 128,
                ("hpa_host_tier_never_stored_tokens", None, "decode"): 0,
                ("hpa_host_tier_never_stored_tokens", None, "sparse"): 0,
            },
        ),
    ],
)
def test_host_tier_figures_under_vllm_names(runs, run, expected):
    samples = _samples(runs, run)
    assert {k: samples[k] for k in expected} == expected
    families = {name for name, _, _ in samples}
    assert (families & HOST_FAMILIES) == (HOST_FAMILIES if run > 1 else set())
    # GPU hits + host hits + every cause = queries
    lost = sum(v for (n, _, c), v in samples.items() if n == "hpa_prefix_cache_lost_tokens")
    hits = samples[("vllm:prefix_cache_hits", None, None)]
    host = samples.get(("vllm:external_prefix_cache_hits", None, None), 0)
    assert hits + host + lost == samples[("vllm:prefix_cache_queries", None, None)] == 400
    kinds = sum(v for (n, _, _), v in samples.items() if n == "hpa_host_tier_never_stored_tokens")
    assert kinds == samples.get(("hpa_host_tier_lost_tokens", None, "never_stored"), 0)


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        (None, False),
        ({}, False),
        ({"host_tier_gib": 0}, False),
        ({"host_tier_gib": 0.5}, True),
        ('{"host_tier_chunks": 32}', True),
        ('{"engine": "vllm", "num_blocks": 8}', False),
    ],
)
def test_has_host_tier(policy, expected):
    assert has_host_tier(policy) is expected
