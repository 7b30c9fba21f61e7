"""Engine suffix_replay: page-boundary hits, replayed suffix, leaf-LRU pages, invariants."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analyzer.errors import ConfigError
from analyzer.sim.dispatch import hit_alignment, make_policy, replay
from analyzer.sim.records import SimRequest
from tests.sim.engine_checks import check_end_to_end, check_invariants
from tests.sim.strategies import traces

T = np.arange(1, 1000, dtype=np.int32)  # distinct token ids


def _policy(**values):
    return make_policy(
        {"engine": "suffix_replay", "block_size": 4, "suffix_replay_tokens": 6, **values}
    )


def _run(requests, **values):
    return list(replay(requests, _policy(**values)))


def _req(name, *parts, **kw):
    return SimRequest(name, np.concatenate([T[a:b] for a, b in parts]), **kw)


@pytest.mark.parametrize(
    ("shared", "budget", "groups", "expected"),
    [
        # (hit, replay = sparse miss, attention match)
        (18, 6, ["full_attention", "mamba"], (10, 6, 16)),
        (5, 6, ["full_attention", "mamba"], (0, 4, 4)),  # the budget covers the whole match
        (18, 0, ["full_attention", "mamba"], (16, 0, 16)),  # no replay: zeroed-state reuse
        (18, 6, ["full_attention"], (16, 0, 16)),  # nothing recurrent to rebuild
        (3, 6, ["full_attention", "mamba"], (0, 0, 0)),  # under one page
    ],
)
def test_hit_is_the_page_match_minus_the_replayed_suffix(shared, budget, groups, expected):
    first = _req("a", (0, 20))
    second = _req("b", (0, shared), (100, 124 - shared))
    r = _run([first, second], suffix_replay_tokens=budget, groups=groups)[1]
    assert (r.hit_tokens, r.replay_tokens, r.attention_match_tokens) == expected
    hit, replayed, match = expected
    assert r.sparse_retention_miss_tokens == r.sparse_retention_miss_never_kept_tokens == replayed
    assert r.sparse_retention_miss_evicted_tokens == 0
    assert r.junction_tokens == (match if replayed else 0)
    assert r.chunks == (24 - hit,)


def test_outputs_are_cached_and_budget_chunks():
    a = _req("a", (0, 8), output_token_ids=T[8:20])  # 8 + 12 - 1 = 19 computed: 4 pages
    follow = _req("f", (0, 20), (300, 310))
    r = _run([a, follow], max_num_batched_tokens=5)
    assert r[0].chunks == (5, 3) + (1,) * 11
    assert (r[1].attention_match_tokens, r[1].hit_tokens, r[1].replay_tokens) == (16, 10, 6)
    assert r[1].chunks == (5, 5, 5, 5)


def test_leaf_lru_eviction():
    x, y, z = _req("x", (0, 8)), _req("y", (100, 108)), _req("z", (200, 208))
    x2 = _req("x2", (0, 8), (50, 52))
    r = _run([x, y, x2, z, _req("x3", (0, 8), (60, 62)), _req("y2", (100, 108))], num_blocks=4)
    assert [q.attention_match_tokens for q in r] == [0, 0, 8, 0, 8, 0]
    assert [q.error for q in r] == [None] * 6
    unbounded = _run([x, y, x2, z, _req("x3", (0, 8), (60, 62)), _req("y2", (100, 108))])
    assert unbounded[5].attention_match_tokens == 4  # capped at prompt - 1, floored


def test_pool_too_small_hash_ids_namespaces_and_empty():
    r = _run([_req("big", (0, 40))], num_blocks=4)
    assert "cannot hold" in r[0].error and r[0].chunks == ()
    a = SimRequest("a", block_hash_ids=[1, 2, 3], trace_block_size=4, prompt_tokens=12)
    b = SimRequest("b", block_hash_ids=[1, 2, 5], trace_block_size=4, prompt_tokens=12)
    salted = SimRequest("s", block_hash_ids=[1, 2, 5], trace_block_size=4, namespace="x")
    r = _run([a, b, salted, SimRequest("e", [])])
    assert [(x.attention_match_tokens, x.hit_tokens) for x in r[:3]] == [(0, 0), (8, 2), (0, 0)]
    assert r[3].error == "empty prompt"


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"spec_decode": "eagle_drop"}, "'spec_decode'"),
        ({"groups": ["full_attention", "sliding_window"], "sliding_window": 8}, "'groups'"),
        ({"prefix_match_unit": 2}, "'prefix_match_unit'"),
        ({"suffix_replay_tokens": -1}, "'suffix_replay_tokens'"),
    ],
)
def test_config_errors(values, message):
    with pytest.raises(ConfigError, match=message):
        _run([_req("a", (0, 8))], **values)


def test_alignment_is_the_page():
    assert hit_alignment(_policy()) == 4


@settings(max_examples=120, deadline=None)
@given(traces(), st.sampled_from([2, 4]), st.integers(0, 12), st.sampled_from([None, 6, 20]))
def test_invariants(requests, block, budget, num_blocks):
    policy = _policy(block_size=block, suffix_replay_tokens=budget, num_blocks=num_blocks)
    for r in check_invariants(requests, policy, block):
        assert r.replay_tokens == r.sparse_retention_miss_tokens <= budget


def test_end_to_end(tmp_path):
    check_end_to_end(
        tmp_path, {"engine": "suffix_replay", "block_size": 32}, "suffix_replay-default"
    )
