"""Engine llamacpp: checkpoint placement, restore rule, invalidation, FIFO, invariants."""

from __future__ import annotations

from collections import deque

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analyzer.errors import ConfigError
from analyzer.sim.dispatch import hit_alignment, make_policy, replay
from analyzer.sim.llamacpp import LlamacppReplay
from analyzer.sim.records import SimRequest
from tests.sim.engine_checks import check_end_to_end, check_invariants
from tests.sim.strategies import traces

T = np.arange(1, 20000, dtype=np.int32)  # distinct token ids
HISTORY = (0, 3000)  # system prompt + earlier turns


def _policy(**values):
    return make_policy({"engine": "llamacpp", "block_size": 1, **values})


def _run(requests, **values):
    return list(replay(requests, _policy(**values)))


def _req(name, *parts, **kw):
    return SimRequest(name, np.concatenate([T[a:b] for a, b in parts]), **kw)


@pytest.mark.parametrize(
    ("n_batch", "n_ubatch", "reprefill"),
    [(2048, 512, 516), (64, 64, 64), (1024, 1024, 1024), (256, 512, 256)],
)
def test_a_new_short_user_turn_reprefills_one_ubatch_plus_the_difference(
    n_batch, n_ubatch, reprefill
):
    # Field report: turn 2 replaces a short 40-token user message by a 70-token one; the deep
    # checkpoint sits min(n_batch, n_ubatch + 4) before turn 1's prompt end, inside the
    # shared history, the one at end - 4 beyond it.
    first = _req("t1", HISTORY, (5000, 5040), output_tokens=50)
    second = _req("t2", HISTORY, (6000, 6070), output_tokens=20)
    r = _run([first, second], llamacpp_n_batch=n_batch, llamacpp_n_ubatch=n_ubatch)
    assert r[1].attention_match_tokens == 3000
    assert 3070 - r[1].hit_tokens == reprefill + 30
    assert r[1].sparse_retention_miss_never_kept_tokens == r[1].sparse_retention_miss_tokens


def test_placement_and_min_step():
    slot_of = LlamacppReplay(_policy())
    r = slot_of.replay_one(_req("a", (0, 3100)))
    assert r.chunks == (2048, 536, 512, 4)  # breaks at n - 516 and n - 4
    assert slot_of.slot.checkpoints == [2584, 3096]
    sparse = LlamacppReplay(_policy(llamacpp_min_step=8192))
    sparse.replay_one(_req("a", (0, 3100)))
    assert sparse.slot.checkpoints == [2584]  # n - 4 is too close
    for n_ubatch, checkpoints in [(8, [12, 16]), (4, [16])]:
        tiny = _policy(llamacpp_n_batch=8, llamacpp_n_ubatch=n_ubatch, llamacpp_min_step=0)
        engine = LlamacppReplay(tiny)
        assert engine.replay_one(_req("b", (0, 20))).chunks == (8, 4, 4, 4)
        # Taken at the start of a batch that ends within n_ubatch of the end (or the last).
        assert engine.slot.checkpoints == checkpoints


def test_live_state_continuation_and_full_match():
    first = _req("a", (0, 1000), output_token_ids=T[1000:1100])
    follow = _req("b", (0, 1099), (8000, 8050))  # prompt + outputs - 1, then more
    resend = _req("c", (0, 1099))  # a prefix of the memory: one token must be computed
    r = _run([first, follow, resend])
    assert (r[1].hit_tokens, r[1].attention_match_tokens) == (1099, 1099)
    assert r[1].chunks == (46, 4)
    # Checkpoints: a took 484 and 996; b's batch starts 1099 and 1145 are within min_step
    # (256) of 996. The resend may use one <= 1098 only.
    assert (r[2].attention_match_tokens, r[2].hit_tokens) == (1098, 996)
    assert r[2].sparse_retention_miss_tokens == 102


def test_checkpoints_beyond_the_reuse_point_are_invalidated():
    m1 = _req("m1", HISTORY, (5000, 6000))  # checkpoints 3484, 3996
    m2 = _req("m2", HISTORY, (7000, 8200))  # LCP 3000: no checkpoint <= 3000, hit 0
    m3 = _req("m3", HISTORY, (7000, 7600), (9000, 9100))  # LCP 3600 with m2
    r = _run([m1, m2, m3])
    assert [x.hit_tokens for x in r] == [0, 0, 0]  # m1's 3484 was dropped when m2 reset
    assert r[2].attention_match_tokens == 3600


def test_fifo_drops_the_oldest_and_counts_it_evicted():
    first = _req("t1", HISTORY, (5000, 5100))
    second = _req("t2", HISTORY, (6000, 6130))
    r = _run([first, second], llamacpp_max_checkpoints=1)
    assert r[1].hit_tokens == 0  # only 3096 is kept, beyond the LCP of 3000
    assert r[1].sparse_retention_miss_evicted_tokens == 2584
    assert r[1].sparse_retention_miss_never_kept_tokens == 3000 - 2584


def test_attention_only_truncates_anywhere():
    first = _req("t1", HISTORY, (5000, 5100))
    second = _req("t2", HISTORY, (6000, 6130))
    engine = LlamacppReplay(_policy(groups=["full_attention"]))
    r = [engine.replay_one(x) for x in (first, second)]
    assert r[1].hit_tokens == r[1].attention_match_tokens == 3000
    assert engine.slot.checkpoints == []


def test_one_slot_namespaces_never_match_and_hash_ids():
    a = _req("a", HISTORY, (5000, 5100))
    salted = _req("s", HISTORY, (5000, 5100), namespace="salt")
    again = _req("a2", HISTORY, (6000, 6100))
    r = _run([a, salted, again])
    assert [x.attention_match_tokens for x in r] == [0, 0, 0]  # the salted request took the slot
    r = _run([a, salted, again], llamacpp_cache_tokens=None)
    assert [x.attention_match_tokens for x in r] == [0, 0, 3000]  # a's state came back
    assert r[2].hit_tokens == 3100 - 516
    h1 = SimRequest("h1", block_hash_ids=[1, 2, 3], trace_block_size=16, prompt_tokens=40)
    h2 = SimRequest("h2", block_hash_ids=[1, 2, 4, 5], trace_block_size=16, prompt_tokens=60)
    # Two equal trace blocks of 16 tokens: LCP 32. h1 (40 tokens, batches of 8) took
    # checkpoints at 32 and 36, the starts of its batches ending within n_ubatch of its end.
    r = _run([h1, h2], llamacpp_n_batch=8, llamacpp_n_ubatch=8, llamacpp_min_step=0)
    assert r[0].chunks == (8, 8, 8, 8, 4, 4)
    assert (r[1].attention_match_tokens, r[1].hit_tokens) == (32, 32)
    r = _run([h1, h2], llamacpp_n_batch=8, llamacpp_n_ubatch=4, llamacpp_min_step=0)
    assert (r[1].attention_match_tokens, r[1].hit_tokens) == (32, 0)  # only 36 was taken


def test_host_prompt_cache_brings_back_interleaved_conversations():
    a1 = _req("a1", (0, 2000), output_token_ids=T[2000:2101])
    b1 = _req("b1", (3000, 5000), output_token_ids=T[5000:5101])
    a2 = _req("a2", (0, 2100), (9000, 9200))  # a1's prompt + outputs - 1, then more
    b2 = _req("b2", (3000, 5100), (9500, 9600))
    plain = _run([a1, b1, a2, b2])
    assert [x.hit_tokens for x in plain] == [0, 0, 0, 0]  # one slot, always the other one
    cached = _run([a1, b1, a2, b2], llamacpp_cache_tokens=None)
    assert [x.hit_tokens for x in cached] == [0, 0, 2100, 2100]  # live states restored
    # Room for 2,100 cached tokens: a state is loaded (leaving the cache) before the oldest
    # are trimmed, so alternating between two conversations still works ...
    small = _run([a1, b1, a2, b2], llamacpp_cache_tokens=2100)
    assert [x.hit_tokens for x in small] == [0, 0, 2100, 2100]
    # ... but a third conversation in between pushes a1's state out, then b1's.
    c = _req("c", (7000, 8000))
    assert [x.hit_tokens for x in _run([a1, b1, c, a2, b2], llamacpp_cache_tokens=2100)] == [0] * 5
    roomy = _run([a1, b1, c, a2, b2], llamacpp_cache_tokens=6000)
    assert [x.hit_tokens for x in roomy] == [0, 0, 0, 2100, 2100]
    assert roomy[3].attention_match_tokens == 2100


def test_host_cache_keeps_a_similar_slot_and_skips_contained_states():
    engine = LlamacppReplay(_policy(llamacpp_cache_tokens=None))
    engine.replay_one(_req("a", HISTORY, (5000, 5040)))
    engine.replay_one(_req("b", HISTORY, (6000, 6040)))  # LCP 3000 / 3040: kept, not saved
    assert engine.cache.states == deque()
    engine.replay_one(_req("c", (10000, 10100)))  # LRU choice: b's state is saved
    assert [s.tokens for s in engine.cache.states] == [3040]


def test_slots_keep_interleaved_conversations_apart():
    a1 = _req("a1", (0, 2000), output_token_ids=T[2000:2101])
    b1 = _req("b1", (3000, 5000), output_token_ids=T[5000:5101])
    a2 = _req("a2", (0, 2100), (9000, 9200))
    b2 = _req("b2", (3000, 5100), (9500, 9600))
    c = _req("c", (7000, 8000))
    # Two slots: each conversation returns to the slot holding its live state.
    assert [x.hit_tokens for x in _run([a1, b1, a2, b2], llamacpp_slots=2)] == [0, 0, 2100, 2100]
    # A third, unrelated request takes the least recently used slot (a1's); a2 then finds no
    # similar slot and takes the least recently used one (b1's), so b2 misses too. With three
    # slots nothing is displaced.
    two = _run([a1, b1, c, a2, b2], llamacpp_slots=2)
    assert [x.hit_tokens for x in two] == [0, 0, 0, 0, 0]
    three = _run([a1, b1, c, a2, b2], llamacpp_slots=3)
    assert [x.hit_tokens for x in three] == [0, 0, 0, 2100, 2100]


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"num_blocks": 100}, "'num_blocks'"),
        ({"llamacpp_slots": 0}, "'llamacpp_slots'"),
        ({"spec_decode": "eagle_lookahead"}, "'spec_decode'"),
        ({"groups": ["full_attention", "sliding_window"], "sliding_window": 8}, "'groups'"),
        ({"llamacpp_min_step": -1}, "'llamacpp_min_step'"),
        ({"llamacpp_cache_tokens": -1}, "'llamacpp_cache_tokens'"),
    ],
)
def test_config_errors(values, message):
    with pytest.raises(ConfigError, match=message):
        _run([_req("a", (0, 8))], **values)


def test_alignment_is_one_token_whatever_the_block():
    assert hit_alignment(_policy(block_size=544)) == 1


@settings(max_examples=150, deadline=None)
@given(
    traces(),
    st.integers(1, 12),
    st.integers(1, 12),
    st.integers(0, 6),
    st.integers(1, 4),
    st.sampled_from([["full_attention", "mamba"], ["full_attention"]]),
    st.sampled_from([0, None, 30]),
    st.integers(1, 3),
)
def test_invariants(requests, n_batch, n_ubatch, min_step, max_ckpts, groups, cache, slots):
    policy = _policy(
        llamacpp_slots=slots,
        llamacpp_cache_tokens=cache,
        llamacpp_n_batch=n_batch,
        llamacpp_n_ubatch=n_ubatch,
        llamacpp_min_step=min_step,
        llamacpp_max_checkpoints=max_ckpts,
        groups=groups,
    )
    results = check_invariants(requests, policy, 1)
    assert all(r.error is None for r in results)
    assert all(c <= n_batch for r in results for c in r.chunks)


def test_end_to_end(tmp_path):
    check_end_to_end(tmp_path, {"engine": "llamacpp", "block_size": 1}, "llamacpp-default")
