"""Engine sglang (MambaRadixCache): hand-built cases of where states are kept, what is evicted
and what the next request hits, config errors, and invariants against an unbounded oracle."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analyzer.errors import ConfigError
from analyzer.sim.dispatch import make_policy, replay
from analyzer.sim.records import SimRequest
from analyzer.sim.sglang import SGLangReplay
from analyzer.sim.sglang.unified import UnifiedRadixCache
from tests.sim.engine_checks import cat, oracle_matches, req, toks
from tests.sim.strategies import traces


def run(requests, **values):
    return list(replay(requests, make_policy({"engine": "sglang", "block_size": 4, **values})))


S = toks(1, 21)  # a 20-token shared prefix
OUT = toks(500, 506)  # 6 output tokens: 20 + 6 - 1 = 25 tokens computed
BRANCHES = [req("a", cat(S, toks(100, 108))), req("b", cat(S, toks(200, 208)))]
BRANCHES.append(req("c", cat(S, toks(300, 308))))
TURNS = [req("t1", S, OUT), req("t2", cat(S, OUT, toks(600, 605)))]
SWA = {"groups": ["full_attention", "sliding_window"], "sliding_window": 8}
UNI = {"groups": ["full_attention", "sliding_window", "mamba"], "sliding_window": 8}
EB = {"sglang_strategy": "extra_buffer"}
CASES = [
    # no_buffer keeps a state at every chunk end: b shares 18 tokens with a, a's chunk
    # (8 tokens) ended at 16, so b hits 16; without chunking a's only states are at 20 and 25.
    (
        "no_buffer_chunk_end",
        [req("a", cat(S[:18], toks(100, 102))), req("b", cat(S[:18], toks(200, 210)))],
        {"max_num_batched_tokens": 8},
        [0, 16],
        [0, 16],
    ),
    (
        "no_buffer_no_chunks",
        [req("a", cat(S[:18], toks(100, 102))), req("b", cat(S[:18], toks(200, 210)))],
        {},
        [0, 0],
        [0, 16],
    ),
    # The next turn: no_buffer cached the whole sequence to its last page (24 of 25 tokens);
    # extra_buffer only to its last C-aligned point of the extend (C = 8: 16), the tail's KV
    # is freed, so attention matches 16 too.
    ("no_buffer_turn", TURNS, {}, [0, 24], [0, 24]),
    (
        "extra_buffer_turn_loses_tail",
        TURNS,
        {"sglang_strategy": "extra_buffer", "sglang_chunk_tokens": 8},
        [0, 16],
        [0, 16],
    ),
    # A decode track every lcm(8, 8) = 8 tokens: the state at 24 (inside the outputs) is kept.
    (
        "extra_buffer_decode_track",
        TURNS,
        {"sglang_strategy": "extra_buffer", "sglang_chunk_tokens": 8, "sglang_track_interval": 8},
        [0, 24],
        [0, 24],
    ),
    # Branch point: a's state is at 24 (28 // 8 * 8); b matches 20 with no state -> its
    # branch point floor_8(20) = 16 wins in its extend, so c hits 16. no_buffer never acts on
    # the branch point: every state sits at a sequence end, c misses.
    (
        "extra_buffer_branch_point",
        BRANCHES,
        {"sglang_strategy": "extra_buffer", "sglang_chunk_tokens": 8},
        [0, 0, 16],
        [0, 20, 20],
    ),
    ("no_buffer_ignores_branch_point", BRANCHES, {}, [0, 0, 0], [0, 20, 20]),
    # FA + SWA on the unified cache, W = 8: a request frees its slid-out SWA KV only at a
    # checkpoint of an unfinished request and in decode, so a, finished with its one prefill
    # chunk, is live throughout: b and c hit 20 (SGLang's own cache agrees, at page 4).
    ("swa_finished_prefill_stays_live", BRANCHES, SWA, [0, 20, 20], [0, 20, 20]),
    # The next turn ends on a live run [12, 24) >= W: it hits.
    ("swa_turn_hits", TURNS, SWA, [0, 24], [0, 24]),
    # The SWA branch point, W = 4, chunks of 16: a's checkpoint at 16 frees [0, 8), a
    # tombstone. b shares 6 tokens: KV matches 4 but no window there, so b's first insert
    # stops at 4 with its window live, and c hits 4 (SGLang's own cache agrees, at page 4).
    (
        "swa_branch_point",
        [
            req("a", BRANCHES[0].prompt_token_ids),
            req("b", cat(BRANCHES[0].prompt_token_ids[:6], toks(300, 322))),
            req("c", cat(BRANCHES[0].prompt_token_ids[:6], toks(400, 422))),
        ],
        {**SWA, "sliding_window": 4, "max_num_batched_tokens": 16},
        [0, 0, 4],
        [0, 4, 4],
    ),
    # A window longer than every sequence: no tombstone, the hit is the match.
    ("swa_wide_window", BRANCHES, {**SWA, "sliding_window": 64}, [0, 20, 20], [0, 20, 20]),
    # Unified cache (full + SWA + Mamba, W = 8): the next turn ends on a live window holding a
    # state (20 and 24: the chunk end and the finished sequence).
    ("unified_turn_hits", TURNS, UNI, [0, 24], [0, 24]),
    # A wide window validates everything; the Mamba validator still needs a state: no_buffer
    # keeps none at 20. extra_buffer (C = 4): b's branch point 20 is both its Mamba track and
    # its SWA branch, one insert there with the state: c hits 20.
    ("unified_needs_a_state", BRANCHES, {**UNI, "sliding_window": 64}, [0, 0, 0], [0, 20, 20]),
    (
        "unified_branch_point",
        BRANCHES,
        {**UNI, "sliding_window": 64, **EB, "sglang_chunk_tokens": 4},
        [0, 0, 20],
        [0, 20, 20],
    ),
    # W = 8: a's insert left [0, 20) a tombstone. b's SWA branch insert at 20 publishes the
    # window [12, 20) (tombstone revived) before the chunk frees it; with extra_buffer C = 4
    # the state goes there too and c hits 20.
    # no_buffer: the insert at 20 carries no state (b's is at its end), c misses.
    ("unified_swa_branch_no_state", BRANCHES, UNI, [0, 0, 0], [0, 20, 20]),
    (
        "unified_swa_branch_with_state",
        BRANCHES,
        {**UNI, **EB, "sglang_chunk_tokens": 4},
        [0, 0, 20],
        [0, 20, 20],
    ),
    # C = 8: the Mamba track 16 is shallower than the SWA branch 20, so the insert goes to 16
    # with the state and publishes the window [8, 16): c hits 16.
    (
        "unified_track_before_swa_branch",
        BRANCHES,
        {**UNI, **EB, "sglang_chunk_tokens": 8},
        [0, 0, 16],
        [0, 20, 20],
    ),
    # Plain RadixCache (no recurrent group): the hit is the whole match.
    ("full_attention_only", BRANCHES, {"groups": ["full_attention"]}, [0, 20, 20], [0, 20, 20]),
]


@pytest.mark.parametrize(("name", "requests", "values", "hits", "matches"), CASES)
def test_worked_cases(name, requests, values, hits, matches):
    results = run(requests, **values)
    assert [r.hit_tokens for r in results] == hits, name
    assert [r.attention_match_tokens for r in results] == matches, name
    for r in results:
        miss = r.attention_match_tokens - r.hit_tokens
        assert r.sparse_retention_miss_tokens == miss
        assert r.junction_tokens == (r.attention_match_tokens if miss else 0)


def test_chunks_follow_the_page_aligned_budget_then_decode():
    (r,) = run([req("a", toks(1, 30), toks(40, 44))], max_num_batched_tokens=10)
    assert r.chunks == (8, 8, 8, 5, 1, 1, 1)


def test_kv_lru_evicts_the_least_recent_leaf():
    # Pool of 40 tokens. a and b take 16 each; c (= a + 4) refreshes a and adds a leaf.
    # d needs 24 tokens: b (least recent) then c's leaf go. a + 4 still hits 16; b + 4 misses.
    a, b, d = toks(1, 17), toks(100, 116), toks(200, 224)
    reqs = [req("a", a), req("b", b), req("c", cat(a, toks(50, 54)))]
    reqs += [req("d", d), req("a2", cat(a, toks(60, 64))), req("b2", cat(b, toks(70, 74)))]
    results = run(reqs, num_blocks=40, block_size=1)
    assert [r.hit_tokens for r in results] == [0, 0, 16, 0, 16, 0]
    assert results[5].attention_match_tokens == 0
    # Pages of 4 (10 pages): SGLang's paged allocator evicts for the extend plus one page
    # (alloc_paged_token_slots_extend), 28 tokens where 4 are free: b, c's leaf, then a.
    results = run(reqs, num_blocks=10)
    assert [r.hit_tokens for r in results] == [0, 0, 16, 0, 0, 0]


def test_paged_decode_evicts_a_page_every_step():
    # Pool of 8 pages of 4. a caches 16 tokens (4 pages); b's prompt of 12 tokens leaves one
    # page free after its extend (demand 16: nothing evicted). Its 4 decode steps each evict
    # for one page while none is free: its first step finds the free page, the second (at
    # 13 tokens, inside its last page) finds none and evicts a's leaf; at page 1 the
    # decode steps need only their own slots and a stays.
    a, b = toks(1, 17), toks(100, 112)
    reqs = [req("a", a), req("b", b, toks(300, 305)), req("a2", cat(a, toks(60, 64)))]
    assert [r.hit_tokens for r in run(reqs, num_blocks=8)] == [0, 0, 0]
    paged_one = run(reqs, num_blocks=32, block_size=1)
    assert [r.hit_tokens for r in paged_one] == [0, 0, 16]


def test_state_lru_tombstones_an_internal_node():
    # 3 state slots (1 held by the running request): a's chunk states at 8, 16, 24, and 32,
    # its end, where the live state is donated; the one at 8 is tombstoned to store 24. b
    # shares 10 tokens: KV matches 8, the state there was evicted, so the miss counts as
    # evicted; with unbounded states b hits 8 (SGLang's own cache agrees at page 1).
    a = toks(1, 33)
    b = cat(a[:10], toks(100, 110))
    bounded = run([req("a", a), req("b", b)], max_num_batched_tokens=8, sglang_num_states=3)
    assert [(r.hit_tokens, r.attention_match_tokens) for r in bounded] == [(0, 0), (0, 8)]
    assert bounded[1].sparse_retention_miss_evicted_tokens == 8
    assert bounded[1].sparse_retention_miss_never_kept_tokens == 0
    free = run([req("a", a), req("b", b)], max_num_batched_tokens=8)
    assert [r.hit_tokens for r in free] == [0, 8]


def test_leaf_state_eviction_deletes_the_leaf_and_keeps_its_parent():
    # b's match splits a's edge at 20: a tombstone with a's and b's leaves below. 3 slots
    # (1 held by the running request). A fresh request that finishes with its prefill donates
    # its live state, so c evicts nothing: a resent matches 24. d's state does evict the
    # least recent, a's leaf: the leaf and its KV go, and the tombstone above stays (SGLang's
    # unified cache deletes a node only when its full KV goes), so a resent matches 20.
    # SGLang's own cache gives the same at page 1 (27 and 20 tokens).
    a = BRANCHES[0].prompt_token_ids
    fresh = [req(x, toks(900 + 100 * i, 940 + 100 * i)) for i, x in enumerate("cd")]
    one = run(BRANCHES[:2] + fresh[:1] + [req("a2", a)], sglang_num_states=3)
    assert (one[-1].hit_tokens, one[-1].attention_match_tokens) == (0, 24)
    both = run(BRANCHES[:2] + fresh + [req("a2", a)], sglang_num_states=3)
    assert (both[-1].hit_tokens, both[-1].attention_match_tokens) == (0, 20)
    free = run(BRANCHES[:2] + fresh + [req("a2", a)])
    # Unbounded: KV matches 24 but the only state is at 28 (a resent cannot hit its own end).
    assert (free[-1].hit_tokens, free[-1].attention_match_tokens) == (0, 24)


def test_swa_lru_deletes_a_leaf_and_its_kv():
    # W = 16, SWA pool 0.3 x 80 = 24 tokens. a (12) and b (a's first 8 + 4) are all live: 16
    # SWA tokens. c's extend asks for its 12 tokens plus a page (16) where 8 are free: the
    # least recent live node is a's leaf, deleted with its KV; then the split [0, 8), older
    # than b's leaf (an insert refreshes its own node last), an internal node: its SWA KV
    # goes, its full KV stays. a + 4 matches 8 and hits nothing.
    a = toks(1, 13)
    reqs = [req("a", a), req("b", cat(a[:8], toks(100, 104))), req("c", toks(200, 212))]
    reqs.append(req("a2", cat(a, toks(300, 304))))
    values = {**SWA, "sliding_window": 16, "num_blocks": 20}
    bounded = run(reqs, **values, sglang_swa_full_tokens_ratio=0.3)
    assert [(r.hit_tokens, r.attention_match_tokens) for r in bounded] == [
        (0, 0), (8, 8), (0, 0), (0, 8),
    ]  # fmt: skip
    assert run(reqs, **values)[-1].hit_tokens == 12  # SWA pool 0.8 x 80 = 64: nothing evicted
    (tiny,) = run([req("x", toks(1, 30))], **values, sglang_swa_full_tokens_ratio=0.1)
    assert tiny.error == "SWA pool of 8 tokens too small for this request"


def test_swa_decode_frees_before_it_allocates():
    # W = 8, SWA pool 0.5 x 400 = 200 tokens. b (8) is cached; a decodes 199 tokens after its
    # 8: from its second step it frees what slid out once 128 more tokens have, before the
    # step allocates, so it never holds more than 128 + a page of SWA and b stays.
    b = toks(1000, 1008)
    reqs = [req("b", b), req("a", toks(1, 9), toks(500, 700)), req("b2", cat(b, toks(9, 13)))]
    values = {**SWA, "num_blocks": 100, "sglang_swa_full_tokens_ratio": 0.5}
    assert [r.hit_tokens for r in run(reqs, **values)] == [0, 0, 8]


def test_swa_eviction_cursor_starts_at_zero():
    # W = 16. b hits a's 8 tokens and decodes 149 after its 12 (its checkpoint at 12 frees
    # nothing: 11 - 16 < 1). SGLang's eviction cursor starts at 0, not at the hit: its first
    # decode free comes once 128 tokens have slid out past 0 (at 144, freeing below 128), not
    # past the hit (at 152, below 136).
    policy = make_policy({"engine": "sglang", "block_size": 4, **SWA, "sliding_window": 16})
    engine = SGLangReplay(policy)
    a = toks(1, 9)
    engine.replay_one(req("a", a))
    engine.replay_one(req("b", cat(a, toks(100, 104)), toks(500, 650)))
    ends, node = [], engine.swa.cache.tree.root
    while node.children:
        (node,) = node.children.values()
        ends.append((node.end * 4, node.state))
    assert ends == [(8, True), (12, True), (128, False), (144, True), (160, True)]


def test_a_revived_window_joins_the_swa_lru():
    # All three groups, W = 8. a decodes 199 tokens past its 8: its cached sequence is a
    # tombstone from 8 to 192. b shares a's first 100 tokens, hits 8 (a's state there) and
    # computes the rest in one chunk, so its insert revives [8, 100) (it holds that SWA KV),
    # far above its end (140): the revived node enters the SWA order when it is published,
    # so every live window can be evicted.
    engine = SGLangReplay(make_policy({"engine": "sglang", "block_size": 4, **UNI}))
    a, out = toks(1, 9), toks(500, 700)
    engine.replay_one(req("a", a, out))
    r = engine.replay_one(req("b", cat(a, out[:92], toks(900, 940))))
    assert (r.hit_tokens, r.attention_match_tokens) == (8, 100)
    cache = engine.swa.cache
    (top,) = cache.tree.root.children.values()
    (revived,) = top.children.values()
    assert (revived.end, revived.state) == (25, True)
    while cache._evict_state():
        pass
    assert cache.states == 0


def test_a_prompt_the_swa_pool_never_holds_is_cut_into_chunks():
    # W = 8, SWA pool 0.2 x 400 = 80 tokens, a 100-token prompt: its peak SWA reservation
    # (92 past one window + 8 + a page of 4) never fits, so SGLang's prefill budget cuts its
    # first chunk to the pool less the decode headroom (1 token + a page), in whole pages: 72.
    values = {**SWA, "num_blocks": 100, "sglang_swa_full_tokens_ratio": 0.2}
    (r,) = run([req("a", toks(1, 101))], **values)
    assert (r.error, r.chunks) == (None, (72, 28))


def _unified_after(a, outputs=None, **values) -> SGLangReplay:
    policy = make_policy({"engine": "sglang", "block_size": 4, **UNI, **values})
    engine = SGLangReplay(policy)
    engine.replay_one(req("a", a) if outputs is None else req("a", a, outputs))
    return engine


def test_unified_state_lru_drops_only_the_state():
    # 3 state slots (1 for the running request), W = 64, chunks of 8: a's states at 8, 16, 24
    # (a decodes after its prompt, so its last chunk is checkpointed while it holds its
    # slot); the one at 8 goes to store 24 (internal: state only, its SWA KV stays). b shares
    # 10 tokens: KV matches 8 with a live window but no state: hit 0, the miss "evicted".
    a = toks(1, 25)
    engine = _unified_after(
        a, [7, 7], sliding_window=64, max_num_batched_tokens=8, sglang_num_states=3
    )
    (top,) = engine.swa.cache.tree.root.children.values()
    assert (top.end, top.state, top.mamba, engine.swa.cache.mamba_states) == (2, True, False, 2)
    r = engine.replay_one(req("b", cat(a[:10], toks(100, 110))))
    assert (r.hit_tokens, r.attention_match_tokens) == (0, 8)
    assert r.sparse_retention_miss_evicted_tokens == 8


def test_unified_swa_eviction_cascades_to_the_state():
    # W = 8, chunks of 8: a's inserts at 8, 16, 24 each publish their window, so all 24 tokens
    # are live with states at 8, 16, 24. An SWA eviction of the internal node [0, 8) (what the
    # SWA LRU picks first: the oldest window) drops its SWA KV and, by the cascade
    # SWA > MAMBA, its state; its full KV stays: b matches 8 and hits 0 ("evicted").
    a = toks(1, 25)
    engine = _unified_after(a, max_num_batched_tokens=8)
    cache = engine.swa.cache
    (top,) = cache.tree.root.children.values()
    assert (top.end, top.state, top.mamba) == (2, True, True)
    assert (cache.states, cache.mamba_states) == (6, 3)
    assert cache._evict_state() and cache.tree.root.children[top.pages[0]] is top
    assert (top.state, top.mamba, cache.states, cache.mamba_states) == (False, False, 4, 2)
    r = engine.replay_one(req("b", cat(a[:10], toks(100, 110))))
    assert (r.hit_tokens, r.attention_match_tokens) == (0, 8)
    assert r.sparse_retention_miss_evicted_tokens == 8


def test_a_new_swa_leaf_is_split_to_one_window():
    # W = 8, one 24-token chunk: the request frees nothing while it computes, so its whole
    # insert is live; SGLang caps the new leaf at one window (8 tokens), the older 16 its
    # parent. The SWA LRU takes the parent first (just older than the leaf): an internal
    # node, tombstoned, its full KV kept; b, sharing 20 tokens, still matches them.
    policy = make_policy({"engine": "sglang", "block_size": 4, **SWA})
    engine = SGLangReplay(policy)
    a = toks(1, 25)
    engine.replay_one(req("a", a))
    cache = engine.swa.cache
    (top,) = cache.tree.root.children.values()
    (leaf,) = top.children.values()
    assert (top.end, leaf.end, top.state, leaf.state, cache.states) == (4, 6, True, True, 6)
    assert cache._evict_state()
    assert (top.state, leaf.state, cache.tree.num_pages, cache.states) == (False, True, 6, 2)
    r = engine.replay_one(req("b", cat(a[:20], toks(100, 110))))
    assert (r.hit_tokens, r.attention_match_tokens) == (0, 20)


def test_unified_prefill_frees_no_window_while_it_computes():
    # All three groups, W = 8: a 24-token prompt in one chunk that finishes with it caches
    # its whole window (6 live pages) and its state at 24. 32 tokens in chunks of 16 with
    # outputs: each checkpoint first frees what slid out before the key's last token, keeping
    # ceil_P(W) and what the tree holds: 4 at 16 ([0, 4) a tombstone), 20 at 32 ([16, 20)).
    engine = _unified_after(toks(1, 25))
    cache = engine.swa.cache
    assert (cache.states, cache.mamba_states) == (6, 1)
    engine = _unified_after(toks(1, 33), [7, 7], max_num_batched_tokens=16)
    cache = engine.swa.cache
    assert (cache.tree.num_pages, cache.states, cache.mamba_states) == (8, 6, 2)


def test_unified_decode_keeps_the_window_behind_the_last_state():
    # All three groups, extra_buffer, W = 8, decode states every 16 tokens. a: 24 prompt
    # tokens, 199 decoded. Its one decode free (at 148, 128 tokens past what it freed) would
    # free below 140 (148 - 8), but SGLang keeps the window behind the last tracked state
    # (144 - 8 = 136, swa_retain_floor): the sequence cached to 208 is live from 136.
    values = {**EB, "sliding_window": 8, "sglang_chunk_tokens": 8, "sglang_track_interval": 16}
    engine = _unified_after(toks(1, 25), toks(500, 700), **values)
    nodes = []
    node = engine.swa.cache.tree.root
    while node.children:
        (node,) = node.children.values()
        nodes.append((node.end * 4, node.state))
    assert nodes[-3:] == [(136, False), (200, True), (208, True)]


@pytest.mark.parametrize("groups", [SWA, UNI])
def test_full_eviction_keeps_a_parent_left_a_leaf(groups):
    # a and b branch at 20 (W = 64: all live): the split [0, 20) has SWA KV but no state.
    # Evicting both leaves leaves it a leaf, which stays with its KV: SGLang's unified cache
    # deletes a node only when its full KV goes (the legacy SWARadixCache deleted it).
    policy = make_policy({"engine": "sglang", "block_size": 4, **groups, "sliding_window": 64})
    engine = SGLangReplay(policy)
    for r in BRANCHES[:2]:
        engine.replay_one(r)
    cache = engine.swa.cache
    assert cache._evict_full() and cache._evict_full()
    assert cache.tree.num_pages == 5 and cache.states == 5


def test_namespaces_hash_ids_and_errors():
    assert [r.hit_tokens for r in run([req("a", S), req("b", S, namespace="x")])] == [0, 0]
    a = SimRequest("a", block_hash_ids=[1, 2, 3], trace_block_size=4, prompt_tokens=12)
    b = SimRequest("b", block_hash_ids=[1, 2, 9], trace_block_size=4, prompt_tokens=12)
    assert [r.hit_tokens for r in run([a, b], max_num_batched_tokens=8)] == [0, 8]
    big, empty = run([req("x", toks(1, 50)), req("e", [])], num_blocks=10)
    assert big.error == "KV pool of 40 tokens < 49 tokens of this request" and big.chunks == ()
    assert empty.error == "empty prompt"


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"spec_decode": "eagle_drop"}, "'spec_decode'"),
        ({"sglang_chunk_tokens": 6}, "'sglang_chunk_tokens'"),
        ({"sglang_num_states": 2}, "'sglang_num_states': no_buffer needs at least 3"),
        ({"sglang_strategy": "extra_buffer", "sglang_num_states": 4}, "at least 5"),
        ({"prefix_match_unit": 2}, "'prefix_match_unit'"),
        ({"retention_interval": 8}, "'retention_interval'"),
        ({"sglang_strategy": "lazy"}, "'sglang_strategy': 'lazy' is not one of"),
    ],
)
def test_config_errors_name_the_key(values, message):
    with pytest.raises(ConfigError, match=message):
        run([req("a", S)], **values)


@st.composite
def sglang_policies(draw):
    page = draw(st.sampled_from([1, 2, 4]))
    values = {"engine": "sglang", "block_size": page}
    values["groups"] = draw(
        st.sampled_from(
            [
                ["full_attention"],
                ["full_attention", "mamba"],
                ["full_attention", "sliding_window"],
                ["full_attention", "sliding_window", "mamba"],
            ]
        )
    )
    if "sliding_window" in values["groups"]:
        values["sliding_window"] = draw(st.integers(1, 12))
        values["sglang_swa_full_tokens_ratio"] = draw(st.sampled_from([0.3, 0.8, 1.0]))
    values["sglang_strategy"] = draw(st.sampled_from(["no_buffer", "extra_buffer"]))
    values["sglang_chunk_tokens"] = page * draw(st.integers(1, 3))
    values["sglang_track_interval"] = draw(st.integers(1, 12))
    values["max_num_batched_tokens"] = draw(st.none() | st.integers(1, 16))
    values["num_blocks"] = draw(st.none() | st.integers(2, 40))
    values["sglang_num_states"] = draw(st.none() | st.integers(5, 9))
    return make_policy(values)


@settings(max_examples=150, deadline=None)
@given(trace=traces(), policy=sglang_policies())
def test_invariants_against_an_unbounded_oracle(trace, policy):
    results = list(replay(trace, policy))
    assert results == list(replay(trace, policy))  # deterministic
    oracle = oracle_matches(trace, policy.block_size)
    for r, o, q in zip(results, oracle, trace, strict=True):
        if r.error is not None:
            continue
        assert 0 <= r.hit_tokens <= r.attention_match_tokens <= o
        assert r.attention_match_tokens == r.attention_match_after_spec_tokens
        assert r.hit_tokens % policy.block_size == 0 == r.attention_match_tokens % policy.block_size
        assert r.sparse_retention_miss_tokens == r.attention_match_tokens - r.hit_tokens
        assert r.sparse_retention_miss_evicted_tokens >= 0
        assert r.sparse_retention_miss_never_kept_tokens >= 0
        assert (
            r.sparse_retention_miss_evicted_tokens + r.sparse_retention_miss_never_kept_tokens
            == r.sparse_retention_miss_tokens
        )
        decode = max(q.num_output_tokens - 1, 0)
        assert sum(r.chunks) == r.prompt_tokens - r.hit_tokens + decode
        if policy.num_blocks is None and policy.option("sglang_num_states") is None:
            assert r.sparse_retention_miss_evicted_tokens == 0


@settings(max_examples=100, deadline=None)
@given(trace=traces(), policy=sglang_policies())
def test_pools_never_overflow_and_the_tree_adds_up(trace, policy):
    engine = SGLangReplay(policy)
    cache = engine.cache if engine.swa is None else engine.swa.cache
    for request in trace:
        engine.replay_one(request)
        assert cache.private_tokens == 0 and cache.reserved == 0
        if cache.kv_tokens is not None:
            assert cache.used_kv() <= cache.kv_tokens
        nodes = _nodes(cache.tree.root)
        assert sum(len(n.pages) for n in nodes) == cache.tree.num_pages
        assert all(n.lock == 0 and n.state_lock == 0 for n in nodes)
        if engine.swa is not None:
            assert cache.private_swa == 0
            assert sum(len(n.pages) for n in nodes if n.state) == cache.states
            assert cache.swa_tokens is None or cache.used_swa() <= cache.swa_tokens
            if isinstance(cache, UnifiedRadixCache):
                assert sum(n.mamba for n in nodes) == cache.mamba_states
                assert cache.mamba_slots is None or cache.mamba_states <= cache.mamba_slots
            else:
                assert not any(n.mamba for n in nodes)
        elif cache.stateful:
            assert sum(n.state for n in nodes) == cache.states
            assert cache.num_states is None or cache.states <= cache.num_states


def _nodes(root):
    out, stack = [], list(root.children.values())
    while stack:
        node = stack.pop()
        out.append(node)
        stack.extend(node.children.values())
    return out
