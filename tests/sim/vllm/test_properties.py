"""Invariants of the replay on random traces and policies (hypothesis)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from analyzer.sim.dispatch import make_policy
from analyzer.sim.records import SimRequest, result_columns
from analyzer.sim.vllm import VllmReplay, replay, replay_from_shared
from analyzer.sim.vllm.compiled.fast import attention_results
from analyzer.sim.vllm.layout import make_layout
from tests.sim.engine_checks import _common, _computed, oracle_matches
from tests.sim.strategies import policies, traces

FAST = settings(max_examples=150, deadline=None)


@FAST
@given(traces(), policies())
def test_figures_are_ordered_and_split(requests, policy_counts):
    policy, counts = policy_counts
    for req, r in zip(requests, replay(requests, policy, num_groups=counts), strict=True):
        cap = max(req.num_prompt_tokens - 1, 0)
        assert 0 <= r.hit_tokens <= r.attention_match_after_spec_tokens
        assert r.attention_match_after_spec_tokens <= r.attention_match_tokens <= cap
        assert r.sparse_retention_miss_tokens == (
            r.attention_match_after_spec_tokens - r.hit_tokens
        )
        assert (
            r.sparse_retention_miss_never_kept_tokens + r.sparse_retention_miss_evicted_tokens
        ) == r.sparse_retention_miss_tokens
        assert r.sparse_retention_miss_evicted_tokens >= 0
        assert r.junction_tokens == (
            r.attention_match_after_spec_tokens if r.sparse_retention_miss_tokens else 0
        )
        if r.error is None:
            decode = max(req.num_output_tokens, 1) - 1
            assert sum(r.chunks) >= req.num_prompt_tokens - r.hit_tokens + decode


@FAST
@given(traces(), st.sampled_from([2, 4, 8]))
def test_attention_only_hit_is_the_floored_shared_prefix(requests, block):
    policy = make_policy({"block_size": block, "groups": ["full_attention"]})
    hits = [r.hit_tokens for r in replay(requests, policy)]
    assert hits == oracle_matches(requests, block)  # the shared prefix, capped and floored


@FAST
@given(traces(), policies(bounded=False), st.integers(1, 2))
def test_a_pool_that_never_fills_changes_nothing(requests, policy_counts, copies):
    policy, _ = policy_counts
    counts = {g: copies for g in policy.groups}
    unbounded = list(replay(requests, policy, num_groups=counts))
    roomy = make_policy({**_values(policy), "num_blocks": 5_000})
    results = list(replay(requests, roomy, num_groups=counts))
    # nothing was evicted, so what was ever cached is what is resident (where recorded)
    for r in results:
        assert r.cached_ever_tokens in (None, r.attention_match_tokens)
    assert [r._replace(cached_ever_tokens=None) for r in results] == unbounded


@FAST
@given(traces(), policies())
def test_deterministic(requests, policy_counts):
    policy, counts = policy_counts
    first = list(replay(requests, policy, num_groups=counts))
    assert list(replay(requests, policy, num_groups=counts)) == first


@FAST
@given(traces(max_requests=14), policies(bounded=False, spec=False))
def test_fast_path_equals_block_level_replay(requests, policy_counts):
    policy, _ = policy_counts
    fast = list(replay(requests, policy))  # the entry point: closed form or compiled here
    blocks = list(VllmReplay(policy).run(requests))  # the reference
    assert fast == blocks


def _values(policy) -> dict:
    return {
        k: getattr(policy, k)
        for k in (
            "groups",
            "block_size",
            "prefix_match_unit",
            "retention_interval",
            "sliding_window",
            "max_num_batched_tokens",
            "spec_decode",
        )
    }


def _as_hash_ids(requests, trace_block: int) -> tuple[list, list]:
    """The same requests as token requests and as a hash-id trace (outputs as counts)."""
    ids: dict = {}
    tokens, hashed = [], []
    for r in requests:
        p = list(r.prompt_token_ids)
        outputs = r.num_output_tokens
        chain = [
            ids.setdefault((r.namespace, tuple(p[: i + trace_block])), len(ids))
            for i in range(0, len(p), trace_block)
        ]
        tokens.append(SimRequest(r.request_id, p, None, outputs, r.namespace))
        hashed.append(
            SimRequest(r.request_id, None, None, outputs, r.namespace, chain, trace_block, len(p))
        )
    return tokens, hashed


@FAST
@given(traces(), policies(spec=False), st.sampled_from([1, 2]))
def test_hash_id_trace_equals_token_trace(requests, policy_counts, trace_block):
    policy, counts = policy_counts
    if policy.hash_block_tokens % trace_block:
        return
    tokens, hashed = _as_hash_ids(requests, trace_block)
    assert list(replay(hashed, policy, num_groups=counts)) == list(
        replay(tokens, policy, num_groups=counts)
    )


def _shared(requests) -> list[int]:
    """Per request: its prompt's longest prefix shared with what an earlier request of its
    namespace computed (uncapped), by brute force."""
    seen, out = [], []
    for req in requests:
        prompt = list(req.prompt_token_ids)
        out.append(max((_common(s, prompt) for ns, s in seen if ns == req.namespace), default=0))
        seen.append((req.namespace, _computed(req)))
    return out


@FAST
@given(traces(), st.sampled_from([1, 2, 4, 8]), st.sampled_from([None, 3, 8]))
def test_full_attention_results_from_shared_prefixes_are_the_replay(requests, block, budget):
    policy = make_policy(
        {"block_size": block, "groups": ["full_attention"], "max_num_batched_tokens": budget}
    )
    want = list(replay(requests, policy))
    layout = make_layout(policy, None)
    assert attention_results(layout, requests, _shared(requests)) == want  # chunks included
    ids = [r.request_id for r in requests]
    prompt = [r.num_prompt_tokens for r in requests]
    got = replay_from_shared(policy)(ids, prompt, _shared(requests))
    columns = result_columns(want)
    del columns["chunks"]  # the steps: no table keeps them
    assert {k: list(v) for k, v in got.items()} == columns
