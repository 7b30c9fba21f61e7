"""Engine trtllm: snapshot placement, commit limit, hit rule, leaf-LRU eviction, invariants."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analyzer.errors import ConfigError
from analyzer.sim.dispatch import hit_alignment, make_policy, replay
from analyzer.sim.records import SimRequest
from analyzer.sim.trtllm import snapshot_points
from tests.sim.engine_checks import check_end_to_end, check_invariants
from tests.sim.strategies import traces

T = np.arange(1, 1000, dtype=np.int32)  # distinct token ids; T[a:b] never meets T[c:d]


def _policy(**values):
    return make_policy({"engine": "trtllm", "block_size": 4, "trtllm_interval": 8, **values})


def _run(requests, **values):
    return list(replay(requests, _policy(**values)))


def _req(name, *parts, **kw):
    return SimRequest(name, np.concatenate([T[a:b] for a, b in parts]), **kw)


@pytest.mark.parametrize(
    ("prompt", "save_last", "points"),
    [
        (20, False, [8, 16, 20]),  # aligned end: a real snapshot
        (22, False, [8, 16]),  # unaligned end: a chunk stop only
        (22, True, [8, 16, 20]),  # save-last: the last full block
        (8, False, [8]),
        (3, True, []),
    ],
)
def test_snapshot_points(prompt, save_last, points):
    assert snapshot_points(prompt, 4, 8, save_last) == points


def test_placement_hit_and_commit_limit():
    a = _req("a", (0, 20))  # snapshots at 8, 16, 20; blocks 1-5 committed
    b = _req("b", (0, 18), (100, 106))  # shares 4 full blocks; 16 has a snapshot
    c = _req("c", (0, 12), (200, 210))  # shares 3 blocks; deepest snapshot at 8
    d = _req("d", (0, 12), (200, 210), (300, 310))  # c committed only up to 16 (22 unaligned)
    r = _run([a, b, c, d])
    assert [(x.hit_tokens, x.attention_match_tokens) for x in r] == [
        (0, 0),
        (16, 16),
        (8, 12),
        (16, 16),
    ]
    assert r[0].chunks == (8, 8, 4)  # chunks stop at every snapshot point
    assert r[1].chunks == (8,)
    assert r[2].chunks == (8, 6)
    assert r[2].sparse_retention_miss_never_kept_tokens == 4 and r[2].junction_tokens == 12
    assert r[3].chunks == (8, 8)  # 16 -> 24 -> 32 (the stop at 24 is an interval point)


def test_save_last_extends_the_commit_limit():
    c = _req("c", (0, 22))
    again = _req("c2", (0, 22), (50, 60))
    assert [x.hit_tokens for x in _run([c, again])] == [0, 16]
    r = _run([c, again], trtllm_save_last=True)
    assert [x.hit_tokens for x in r] == [0, 20]
    assert r[0].chunks == (8, 8, 4, 2)


def test_outputs_are_not_committed_on_a_hybrid_model():
    a = _req("a", (0, 16), output_token_ids=T[16:30])
    follow = _req("f", (0, 30), (400, 404))  # prompt = a's prompt + outputs + more
    r = _run([a, follow])
    assert r[0].chunks == (8, 8) + (1,) * 13
    assert (r[1].hit_tokens, r[1].attention_match_tokens) == (16, 16)
    # Without mamba every full block of prompt + outputs - 1 = 29 tokens is reused.
    plain = _run([a, follow], groups=["full_attention"])
    assert (plain[1].hit_tokens, plain[1].attention_match_tokens) == (28, 28)
    assert plain[1].chunks == (6,)  # no forced stops without snapshots


def test_budget_and_stops_combine_and_cap():
    a = _req("a", (0, 20))
    r = _run([a, a], max_num_batched_tokens=6)
    assert r[0].chunks == (6, 2, 6, 2, 4)
    # The same prompt again: the cap (prompt - 1 = 19) leaves 4 blocks; snapshot at 16.
    assert (r[1].hit_tokens, r[1].chunks) == (16, (4,))


def test_leaf_lru_eviction_and_evicted_states():
    # Pool of 7 blocks; interval 8. a (12 tokens): blocks a1 a2 a3, snapshots at 8 and 12.
    a = _req("a", (0, 12))
    other = _req("o", (500, 504))  # 1 block + snapshot + 1 live state = 3 blocks
    b = _req("b", (0, 16))  # hits 8, re-commits a3 without a snapshot, snapshot at 16
    c = _req("c", (0, 12), (600, 602))  # a3 is back but its snapshot was evicted once
    r = _run([a, other, b, c], num_blocks=7)
    assert [x.error for x in r] == [None] * 4
    assert [x.hit_tokens for x in r] == [0, 0, 8, 8]
    assert r[3].attention_match_tokens == 12
    assert r[3].sparse_retention_miss_evicted_tokens == 4
    assert r[3].sparse_retention_miss_never_kept_tokens == 0
    # Unbounded: nothing is ever evicted, c hits a's snapshot at 12.
    assert _run([a, other, b, c])[3].hit_tokens == 12


def test_lru_order_keeps_the_recent_prefix():
    x, y = _req("x", (0, 8)), _req("y", (100, 108))
    z = _req("z", (200, 208))
    # Each 8-token prompt: 2 blocks + 1 snapshot (8) kept, 4 held while running.
    r = _run([x, y, _req("x2", (0, 8), (50, 52)), z, _req("x3", (0, 8), (60, 62))], num_blocks=7)
    assert [q.hit_tokens for q in r] == [0, 0, 8, 0, 8]  # z evicted y (older), not x


def test_pool_too_small_is_an_error_result():
    r = _run([_req("big", (0, 40)), _req("s", (0, 4))], num_blocks=6)
    assert r[0].error is not None and "cannot hold" in r[0].error
    assert (r[0].hit_tokens, r[0].chunks) == (0, ())
    assert r[1].error is None


def test_hash_ids_namespaces_and_empty():
    a = SimRequest("a", block_hash_ids=[1, 2, 3, 4], trace_block_size=4, prompt_tokens=16)
    b = SimRequest("b", block_hash_ids=[1, 2, 3, 9], trace_block_size=4, prompt_tokens=16)
    salted = SimRequest("s", T[:16], namespace="x")
    r = _run([a, b, _req("t", (0, 16)), salted, _req("t2", (0, 16)), SimRequest("e", [])])
    assert [x.hit_tokens for x in r[:5]] == [0, 8, 0, 0, 8]
    assert r[5].error == "empty prompt"


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"trtllm_interval": 6}, "'trtllm_interval': 6 must be a multiple of block_size 4"),
        ({"spec_decode": "eagle_drop"}, "'spec_decode'"),
        ({"groups": ["full_attention", "sliding_window"], "sliding_window": 8}, "'groups'"),
        ({"retention_interval": None}, "'retention_interval'"),
        ({"prefix_match_unit": 2}, "'prefix_match_unit'"),
        ({"llamacpp_n_batch": 8}, "applies to engine llamacpp"),
    ],
)
def test_config_errors(values, message):
    with pytest.raises(ConfigError, match=message):
        _run([_req("a", (0, 8))], **values)


def test_alignment_is_the_block():
    assert hit_alignment(_policy()) == 4


@settings(max_examples=120, deadline=None)
@given(
    traces(),
    st.sampled_from([2, 4]),
    st.sampled_from([1, 2, 3]),
    st.sampled_from([None, 8, 12, 30]),
    st.booleans(),
    st.sampled_from([["full_attention", "mamba"], ["full_attention"]]),
)
def test_invariants(requests, block, k, num_blocks, save_last, groups):
    policy = make_policy(
        {
            "engine": "trtllm",
            "block_size": block,
            "trtllm_interval": k * block,
            "trtllm_save_last": save_last,
            "num_blocks": num_blocks,
            "groups": groups,
        }
    )
    results = check_invariants(requests, policy, block)
    if num_blocks is None:
        assert all(r.error is None for r in results)


def test_end_to_end(tmp_path):
    check_end_to_end(tmp_path, {"engine": "trtllm", "block_size": 32}, "trtllm-default")
