"""dynamo: the KV router's worker cost (ai-dynamo 1.6.1 lib/kv-router)."""

from __future__ import annotations

import math

import pytest

from analyzer.sim.routers.base import Ties
from analyzer.sim.routers.dynamo import (
    DynamoRouter,
    raw_prefill_blocks,
    softmax_pick,
    worker_logit,
)
from tests.sim.routers.conftest import FakeView, chain, idle, load, req


def test_doc_example():
    # ai-dynamo/dynamo docs/router/kv_cache_routing.md worked example: a 10-block request,
    # cached 2/5/8 blocks, decode 10/5/9 blocks -> prefill 8/5/2 -> cost 18/10/11 -> worker 2
    costs = [worker_logit(10.0, c, d, 0) for c, d in [(2, 10), (5, 5), (8, 9)]]
    assert costs == [18.0, 10.0, 11.0]
    assert costs.index(min(costs)) == 1


# lib/kv-router/src/scheduling/selector/default.rs unit tests, as numbers:
# (active prefill tokens, ISL, cached tokens, overlap blocks, decode blocks, active requests,
#  block size, knobs) -> logit
LOGITS = [
    # test_worker_logit_clamps_non_decode_overlap_credit: (16 + 64 - 96 + 96) / 16 = 7 raw
    # blocks, credit 6 -> 1, scale 2 -> 2, decode 2 active + 3 additional -> 7.0
    ((16, 64, 96, 6, 5, 0, 16), {"prefill_load_scale": 2.0}, 7.0),
    # test_worker_logit_can_charge_active_requests: ISL 0, decode 100, 4 requests
    ((0, 0, 0, 0, 100, 4, 16), {}, 100.0),
    ((0, 0, 0, 0, 100, 4, 16), {"active_request_weight": 32.0}, 228.0),
    # test_prefill_load_scale_applies_after_overlap_credits: ISL 64, block 16, scale 2:
    # warm worker (2 cached blocks, 3 decode) 2 * 2 + 3 = 7 < cold 2 * 4 + 0 = 8
    ((0, 64, 32, 2, 3, 0, 16), {"prefill_load_scale": 2.0}, 7.0),
    ((0, 64, 0, 0, 0, 0, 16), {"prefill_load_scale": 2.0}, 8.0),
    # test_overlap_credit_above_one_can_prefer_colocated_worker: ISL 128, warm worker 4
    # cached blocks and 5 decode blocks: 4 + 5 = 9 > cold 8 at credit 1; 2 + 5 = 7 at 1.5
    ((0, 128, 64, 4, 5, 0, 16), {}, 9.0),
    ((0, 128, 0, 0, 0, 0, 16), {}, 8.0),
    ((0, 128, 64, 4, 5, 0, 16), {"overlap_credit": 1.5}, 7.0),
]


@pytest.mark.parametrize(("args", "kw", "expected"), LOGITS)
def test_worker_logit(args, kw, expected):
    active, isl, cached, overlap, decode, requests, size = args
    raw = raw_prefill_blocks(active, isl, cached, size)
    assert worker_logit(raw, overlap, decode, requests, **kw) == expected


def test_raw_prefill_is_tokens_over_block_size():
    # no ceil: 100 tokens in blocks of 16 are 6.25 blocks
    assert raw_prefill_blocks(0, 100, 0, 16) == 6.25
    assert raw_prefill_blocks(40, 100, 32, 16) == 8.75


def test_softmax_pick():
    # default.rs softmax_sample_index: p ~ exp(-(c - min) / ((max - min) * T))
    p0 = 1.0 / (1.0 + math.exp(-1.0))
    assert softmax_pick([0.0, 10.0], 1.0, p0 - 0.01) == 0
    assert softmax_pick([0.0, 10.0], 1.0, p0 + 0.01) == 1
    assert softmax_pick([5.0, 5.0, 5.0], 1.0, 0.6) == 1  # all equal: uniform


def router(n: int, **knobs) -> DynamoRouter:
    return DynamoRouter(n, {"router_seed": None, **knobs}, Ties(None))


def test_state_follows_the_hooks():
    r = router(2)
    a = req(0, chain(0, 4), prompt_tokens=70)  # 4 full blocks + 6 tokens
    view = FakeView([load(), load()], cached=[{0, 1}, set()])
    # worker 0: raw 70/16 = 4.375 - 2 cached -> 2.375 + 4 decode; worker 1: 4.375 + 4
    logits, overlaps = r.logits(a, view)
    assert logits == [6.375, 8.375] and overlaps == [2, 0]
    assert r.route(a, view) == 0
    assert r.prefill_tokens == [70 - 32, 0]  # the cached overlap is not prefill load
    assert r.active_requests == [1, 0] and len(r.active_blocks[0]) == 4
    # a request sharing 3 blocks: only its 2 new blocks add to worker 0's decode blocks
    b = req(1, chain(0, 3) + (50, 51), prompt_tokens=80)
    logits, _ = r.logits(b, FakeView([load(), load()]))
    assert logits[0] == (38 + 80) / 16 + 4 + 2
    assert logits[1] == 80 / 16 + 5
    r.on_first_token(a, 0, 1.0)
    assert r.prefill_tokens == [0, 0]
    r.on_finished(a, 0, 2.0)
    assert r.active_blocks[0] == {} and r.active_requests == [0, 0]


def test_abort_before_first_token_releases_prefill():
    r = router(2)
    a = req(0, chain(0, 2))
    k = r.route(a, idle(2))
    r.on_finished(a, k, 1.0)
    assert r.prefill_tokens == [0, 0] and r.active_blocks[k] == {}


def test_ties_and_temperature():
    assert router(3).route(req(0, chain(0, 2)), idle(3)) == 0
    seeded = {DynamoRouter(3, {}, Ties(s)).route(req(0, chain(0, 2)), idle(3)) for s in range(20)}
    assert len(seeded) > 1
    hot = DynamoRouter(2, {"dynamo_temperature": 1.0}, Ties(3))
    view = FakeView([load(), load()], cached=[set(), set(chain(0, 8))])
    picks = [hot.route(req(i, chain(0, 8)), view) for i in range(50)]
    assert 0 in picks and 1 in picks
