"""Engine marconi: admission at branch points and sequence ends, whole-edge hits, FLOP-aware
eviction, config errors, and invariants against an unbounded oracle."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analyzer.errors import ConfigError
from analyzer.sim.dispatch import make_policy, replay
from analyzer.sim.marconi import MarconiReplay
from analyzer.sim.marconi.flops import CostModel, cost_model
from analyzer.sim.marconi.replay import ALPHA_GRID
from analyzer.sim.records import SimRequest
from tests.sim.engine_checks import cat, oracle_matches, req, toks
from tests.sim.sglang.test_sglang import _nodes
from tests.sim.strategies import traces


def run(requests, **values):
    return list(replay(requests, make_policy({"engine": "marconi", "block_size": 4, **values})))


S = toks(1, 21)  # a 20-token shared prefix
INPUTS = [req(x, cat(S, toks(100 * i, 100 * i + 8))) for i, x in enumerate("abcd", 1)]
TURNS = [req("t1", S, toks(500, 506)), req("t2", cat(S, toks(500, 506), toks(600, 605)))]
CASES = [
    # A purely-input prefix: the 2nd occurrence misses (its speculative insertion finds the
    # branch at 20 and checkpoints it), the 3rd and later hit there.
    ("input_prefix_third_hits", INPUTS, {}, [0, 0, 20, 20], [0, 20, 20, 20]),
    # Conversation history hits on the next turn: 20 + 6 - 1 = 25 computed, 24 cached.
    ("history_hits_at_once", TURNS, {}, [0, 24], [0, 24]),
    # Whole edges only: b's prompt ends inside a's edge (no branch in the prompt), so no
    # checkpoint; its outputs diverge at 24 and that split has no state either.
    (
        "partial_edge_never_hits",
        [req("a", cat(S, toks(100, 112))), req("b", S[:19], toks(700, 720))],
        {},
        [0, 0],
        [0, 16],
    ),
    # Namespaces never share.
    ("namespaces", [req("a", S), req("b", S, namespace="x")], {}, [0, 0], [0, 0]),
]


@pytest.mark.parametrize(("name", "requests", "values", "hits", "matches"), CASES)
def test_worked_cases(name, requests, values, hits, matches):
    results = run(requests, **values)
    assert [r.hit_tokens for r in results] == hits, name
    assert [r.attention_match_tokens for r in results] == matches, name
    for r in results:
        miss = r.attention_match_tokens - r.hit_tokens
        assert r.sparse_retention_miss_tokens == miss == r.sparse_retention_miss_never_kept_tokens
        assert r.junction_tokens == (r.attention_match_tokens if miss else 0)


LONG, SHORT = toks(1, 201), toks(300, 308)


@pytest.mark.parametrize(("alpha", "long_hit"), [(0.0, 0), (0.5, 0), (2.0, 200)])
def test_flop_aware_eviction_keeps_the_long_prefix(alpha, long_hit):
    # Pool 56 blocks: the 200-token prefix (50 pages + 1 state) then a recent 8-token leaf
    # (2 + 1); a new 8-token request needs 3 more, so one goes. With two candidates the
    # normalised scores are long = alpha x 1 (old, efficient), short = 1 (recent, cheap):
    # LRU (alpha 0, or alpha < 1) evicts the long prefix, alpha > 1 the short leaf.
    reqs = [req("long", LONG), req("short", SHORT), req("new", toks(400, 408))]
    reqs.append(req("long2", cat(LONG, toks(900, 904))))
    results = run(reqs, num_blocks=56, marconi_alpha=alpha)
    assert results[3].hit_tokens == long_hit
    assert results[3].sparse_retention_miss_evicted_tokens == 0


def test_single_child_eviction_frees_the_state_and_merges_the_kv():
    # a, b branch at 20 (node with a state, two leaves). d evicts a's leaf (LRU at alpha 0);
    # e then evicts the branch node, now single-child: its state goes and its edge merges
    # into b's leaf, so c matches the KV (20) but no whole edge: hit 0, the miss "evicted".
    fresh = [req(x, toks(900 + 100 * i, 908 + 100 * i)) for i, x in enumerate("de")]
    reqs = INPUTS[:2] + fresh + INPUTS[2:3]
    results = run(reqs, num_blocks=14, marconi_alpha=0.0)
    c = results[-1]
    assert (c.hit_tokens, c.attention_match_tokens) == (0, 20)
    assert c.sparse_retention_miss_evicted_tokens == 20
    assert run(reqs, marconi_alpha=0.0)[-1].hit_tokens == 20


def test_cost_model_and_state_charge():
    costs, blocks = cost_model(make_policy({"engine": "marconi", "model": "qwen3-next-80b-a3b"}))
    assert (costs.attn_layers, costs.ssm_layers, costs.mlp_layers, blocks) == (12, 36, 48, 3)
    costs, blocks = cost_model(make_policy({"engine": "marconi", "block_size": 16}))
    assert costs == CostModel() and blocks == 1  # no preset: Marconi's 7B, 1 block a state
    default = CostModel()
    assert default.state_bytes == 1_116_160 and default.kv_bytes == 16_384
    # Longer edges save more per byte while the state dominates memory.
    assert default.flops_saved(200, 200) / default.memory_bytes(200) > (
        default.flops_saved(8, 8) / default.memory_bytes(8)
    )


def test_chunks_hash_ids_and_errors():
    (r,) = run([req("a", toks(1, 30), toks(40, 44))], max_num_batched_tokens=10)
    assert r.chunks == (10, 10, 9, 1, 1, 1)
    ids = [
        SimRequest(x, block_hash_ids=[1, 2, t], trace_block_size=4)
        for x, t in zip("abc", (3, 4, 5), strict=True)
    ]
    assert [x.hit_tokens for x in run(ids)] == [0, 0, 8]
    big, empty = run([req("x", toks(1, 50)), req("e", [])], num_blocks=10)
    assert big.error == "pool of 10 blocks < 13 blocks of this request" and big.chunks == ()
    assert empty.error == "empty prompt"


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"groups": ["full_attention"]}, "'groups': engine marconi models full_attention"),
        ({"spec_decode": "eagle_lookahead"}, "'spec_decode'"),
        ({"prefix_match_unit": 2}, "'prefix_match_unit'"),
        ({"retention_interval": 8}, "'retention_interval'"),
        (
            {"marconi_alpha": "fast"},
            "'marconi_alpha': expected a number >= 0 and <= 2,147,483,647 or 'auto'",
        ),
        (
            {"marconi_bootstrap": 0},
            "'marconi_bootstrap': expected an integer >= 1 and <= 2,147,483,647",
        ),
        ({"sglang_strategy": "no_buffer"}, "applies to engine sglang, not marconi"),
    ],
)
def test_config_errors_name_the_key(values, message):
    with pytest.raises(ConfigError, match=message):
        run([req("a", S)], **values)


@st.composite
def marconi_policies(draw):
    values = {"engine": "marconi", "block_size": draw(st.sampled_from([1, 2, 4]))}
    values["max_num_batched_tokens"] = draw(st.none() | st.integers(1, 16))
    values["num_blocks"] = draw(st.none() | st.integers(2, 40))
    values["marconi_alpha"] = draw(st.sampled_from([0.0, 0.5, 1.0, 3.0, "auto"]))
    values["marconi_bootstrap"] = draw(st.integers(1, 3))
    return make_policy(values)


@settings(max_examples=150, deadline=None)
@given(trace=traces(), policy=marconi_policies())
def test_invariants_against_an_unbounded_oracle(trace, policy):
    results = list(replay(trace, policy))
    assert results == list(replay(trace, policy))  # deterministic
    oracle = oracle_matches(trace, policy.block_size)
    for r, o, q in zip(results, oracle, trace, strict=True):
        if r.error is not None:
            continue
        assert 0 <= r.hit_tokens <= r.attention_match_tokens <= o
        assert r.hit_tokens % policy.block_size == 0
        assert (
            min(r.sparse_retention_miss_evicted_tokens, r.sparse_retention_miss_never_kept_tokens)
            >= 0
        )
        assert (
            r.sparse_retention_miss_evicted_tokens + r.sparse_retention_miss_never_kept_tokens
            == r.sparse_retention_miss_tokens
            == r.attention_match_tokens - r.hit_tokens
        )
        assert sum(r.chunks) == r.prompt_tokens - r.hit_tokens + max(q.num_output_tokens - 1, 0)
        if policy.num_blocks is None:
            assert r.sparse_retention_miss_evicted_tokens == 0


@settings(max_examples=100, deadline=None)
@given(trace=traces(), policy=marconi_policies())
def test_pool_never_overflows_and_the_tree_adds_up(trace, policy):
    engine = MarconiReplay(policy)
    cache = engine.cache
    for request in trace:
        engine.replay_one(request)
        nodes = _nodes(cache.tree.root)
        assert sum(len(n.pages) for n in nodes) == cache.tree.num_pages
        assert sum(n.state for n in nodes) == cache.states
        assert all(n.state for n in nodes if not n.children)  # leaves hold a state
        if cache.capacity is not None:
            assert cache.used() <= cache.capacity


def test_an_insert_that_finds_no_room_leaves_no_stateless_leaf():
    """Found by the property above: q3 evicts q1's branch to make room, still does not fit
    in 6 pages, and is not cached; the stateless node it was to extend must not stay a
    leaf (it holds pages no request can reuse)."""
    policy = make_policy(
        {"engine": "marconi", "block_size": 1, "num_blocks": 6, "marconi_alpha": 0.0}
    )
    engine = MarconiReplay(policy)
    trace = [
        SimRequest("q0", prompt_token_ids=[0, 0, 0]),
        SimRequest("q1", prompt_token_ids=[0], output_token_ids=[0, 1, 0]),
        SimRequest("q2", prompt_token_ids=[0]),
        SimRequest("q3", prompt_token_ids=[0, 0, 0, 0, 0]),
    ]
    for request in trace:
        engine.replay_one(request)
        nodes = _nodes(engine.cache.tree.root)
        assert all(n.state for n in nodes if not n.children)
        assert sum(len(n.pages) for n in nodes) == engine.cache.tree.num_pages


def test_evictions_that_strand_the_node_an_insert_splits_leave_no_stateless_leaf():
    """Found by the property above in CI: q6 ([1] + 3 outputs) splits the stateless node
    [1, 0 x 12] at its first page; making room evicts both of that node's children, which
    leaves it a stateless leaf, protected because the insert splits it. It must be folded
    (and the insert walk again), not split into a stateless 12-page leaf."""
    policy = make_policy(
        {
            "engine": "marconi",
            "block_size": 1,
            "num_blocks": 21,
            "marconi_alpha": 0.0,
            "marconi_bootstrap": 1,
        }
    )
    engine = MarconiReplay(policy)
    trace = [
        SimRequest("q0", prompt_token_ids=[0]),
        SimRequest("q1", prompt_token_ids=[0]),
        SimRequest("q2", prompt_token_ids=[1] + [0] * 13),
        SimRequest("q3", prompt_token_ids=[0]),
        SimRequest("q4", prompt_token_ids=[0]),
        SimRequest("q5", prompt_token_ids=[1] + [0] * 12, output_token_ids=[1, 0, 0, 0, 0, 0]),
        SimRequest("q6", prompt_token_ids=[1], output_tokens=3),
    ]
    for request in trace:
        engine.replay_one(request)
        nodes = _nodes(engine.cache.tree.root)
        assert all(n.state for n in nodes if not n.children)
        assert sum(len(n.pages) for n in nodes) == engine.cache.tree.num_pages
        assert engine.cache.used() <= 21


# Alpha auto-tuning. Pool 56 blocks (block 4, Marconi's 7B: a state is 1 block): x1 (3),
# long (51), then x2 needs 3 more: the first eviction (alpha 0 = LRU) drops x1, after 3
# requests. With marconi_bootstrap 1 the window is the next 3: x3 forces a choice between
# long (old, efficient) and x2 (recent, cheap); long2 hits 200 only if long stayed, which
# takes alpha > 1 (two candidates: scores long = alpha, x2 = 1, ties to the older).
X = [req(f"x{i}", toks(1000 * i, 1000 * i + 8)) for i in range(1, 5)]
TUNE = [X[0], req("long", LONG), X[1], X[2], req("long2", cat(LONG, toks(900, 904))), X[3]]
TUNE_VALUES = {"num_blocks": 56, "marconi_alpha": "auto", "marconi_bootstrap": 1}


def tuned(requests, **values):
    policy = make_policy({"engine": "marconi", "block_size": 4, **values})
    engine = MarconiReplay(policy)
    return list(engine.run(requests)), engine


def test_auto_alpha_adopts_the_most_flops_saved_on_the_window():
    results, engine = tuned(TUNE, **TUNE_VALUES)
    t = engine.tuning
    assert (t.after_requests, t.window_requests, t.alpha) == (3, 3, 1.1)
    full = CostModel().flops_saved(200, 200)
    assert t.flops_saved == (0.0,) * 11 + (full,) * 10  # alpha 0 .. 1.0 lose long
    assert results[4].hit_tokens == 200 and engine.cache.alpha == 1.1
    # The choice is reported once, on the window's first request.
    assert [r.note is not None for r in results] == [False, False, False, True, False, False]
    assert results[3].note.startswith("marconi_alpha auto chose 1.1: the first eviction came ")
    # A fixed alpha 1 (the default) loses it; the same trace unbounded never tunes.
    assert run(TUNE, num_blocks=56)[4].hit_tokens == 0
    _, free = tuned(TUNE, marconi_alpha="auto")
    assert free.tuning is None and free.cache.alpha == 0.0


@pytest.mark.parametrize(
    ("bootstrap", "pulled", "window"),
    [(1, 6, 3), (2, 9, 6), (5, 9, 6)],  # the window stops at the trace's end
)
def test_auto_alpha_reads_only_the_window_ahead(bootstrap, pulled, window):
    consumed = []

    def source():
        for r in [*TUNE, *X[:3]]:
            consumed.append(r.request_id)
            yield r

    values = {**TUNE_VALUES, "marconi_bootstrap": bootstrap}
    policy = make_policy({"engine": "marconi", "block_size": 4, **values})
    engine = MarconiReplay(policy)
    stream = engine.run(source())
    got = [next(stream) for _ in range(4)]  # up to the window's first result
    assert [r.request_id for r in got] == ["x1", "long", "x2", "x3"]
    assert len(consumed) == pulled and engine.tuning.window_requests == window
    assert len(list(stream)) == 9 - 4


@settings(max_examples=100, deadline=None)
@given(
    trace=traces(),
    blocks=st.integers(4, 30),
    bootstrap=st.integers(1, 3),
    page=st.sampled_from([1, 2, 4]),
)
def test_auto_alpha_trials_are_pure_copies(trace, blocks, bootstrap, page):
    values = {"num_blocks": blocks, "marconi_alpha": "auto", "marconi_bootstrap": bootstrap}
    policy = make_policy({"engine": "marconi", "block_size": page, **values})
    engine = MarconiReplay(policy)
    results = list(engine.run(trace))
    assert results == list(replay(trace, policy))  # deterministic
    t = engine.tuning
    if t is None:  # never evicted: alpha 0 (LRU) throughout, the same as a fixed 0
        assert results == list(
            replay(trace, make_policy({**policy_values(policy), "marconi_alpha": 0.0}))
        )
        return
    assert t.alpha in ALPHA_GRID and t.flops_saved[ALPHA_GRID.index(t.alpha)] == max(t.flops_saved)
    assert t.window_requests == min(bootstrap * t.after_requests, len(trace) - t.after_requests)
    # The real replay of the window at the adopted alpha saves exactly what its trial did:
    # the trials started from the same snapshot and left the real cache untouched.
    costs = engine.cache.costs
    window = results[t.after_requests : t.after_requests + t.window_requests]
    assert sum(costs.flops_saved(r.hit_tokens, r.hit_tokens) for r in window) == max(t.flops_saved)
    # Before the first eviction alpha plays no part: the same as any fixed alpha.
    fixed = list(replay(trace, make_policy({**policy_values(policy), "marconi_alpha": 2.0})))
    assert results[: t.after_requests] == fixed[: t.after_requests]


def policy_values(policy) -> dict:
    return json.loads(policy.to_json())
