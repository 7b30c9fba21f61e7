"""llm-d default profile: scorers, approximate index, picker, affinity filter."""

from __future__ import annotations

import pytest

from analyzer.sim.routers.base import Ties
from analyzer.sim.routers.llmd import (
    ApproxPrefixIndex,
    LlmdRouter,
    kv_scores,
    prompt_hashes,
    queue_scores,
)
from tests.sim.routers.conftest import FakeView, chain, idle, load, req

# llm-d-inference-scheduler 520af478
# pkg/epp/framework/plugins/scheduling/scorer/queuedepth/queue_test.go TestQueueScorer
QUEUE = [
    ([10, 5, 0], [0.0, 0.5, 1.0]),  # "Different queue sizes"
    ([5, 5], [1.0, 1.0]),  # "Same queue sizes"
    ([0, 0], [1.0, 1.0]),  # "Zero queue sizes"
]
# .../scorer/kvcacheutilization/kvcache_utilization_test.go
KV = [
    ([0.8, 0.5, 0.0], [0.2, 0.5, 1.0]),  # "Different KV cache utilization"
    ([0.6, 0.6], [0.4, 0.4]),  # "Same KV cache utilization"
    ([0.0, 0.0], [1.0, 1.0]),  # "Zero KV cache utilization"
    ([1.0, 0.5], [0.0, 0.5]),  # "Full KV cache utilization"
]


@pytest.mark.parametrize(("waiting", "expected"), QUEUE)
def test_queue_scorer(waiting, expected):
    assert queue_scores(waiting) == pytest.approx(expected)


@pytest.mark.parametrize(("usage", "expected"), KV)
def test_kv_utilization_scorer(usage, expected):
    assert kv_scores(usage) == pytest.approx(expected)


def test_indexer_lru_capacity():
    # .../dataproducer/approximateprefix/indexer_test.go TestIndexer_AddAndGet: a server
    # with 2 GPU blocks holds 2 hashes; a third evicts the first
    index = ApproxPrefixIndex()
    for h in (1, 2, 3):
        index.add([h], 0, 2)
    assert len(index.lrus[0]) == 2
    assert 1 not in index.holders
    assert index.holders[3] == {0}
    assert not index.holders.get(4)


def test_prompt_hashes_count_the_partial_tail():
    # .../approximateprefix/plugin_test.go TestProduce: "aaaabbbb" in blocks of 4 -> 2
    # hashes; TestPrefixPluginCompletion: "aaaaaa" -> 2 (one full block and the tail)
    assert len(prompt_hashes(req(0, (1, 2), block_size=4), 256)) == 2
    tail = prompt_hashes(req(1, (1,), prompt_tokens=6, block_size=4), 256)
    assert len(tail) == 2 and tail[0] == 1
    assert prompt_hashes(req(2, (), prompt_tokens=3, block_size=4), 256) == []  # < one block
    assert (
        len(prompt_hashes(req(3, chain(0, 300), prompt_tokens=300 * 4 + 2, block_size=4), 256))
        == 256
    )


def test_completion_then_partial_match():
    # TestPrefixPluginCompletion: after "aaaaaa" went to pod1, "aaaabbbb" matches 1 of 2
    # blocks there and none elsewhere
    r = LlmdRouter(3, {"router_seed": None}, Ties(None))
    assert r.route(req(0, (1,), prompt_tokens=6, block_size=4), idle(3)) == 0
    prefix, hashes = r.prefix_scores(req(1, (1, 2), block_size=4), idle(3))
    assert prefix == [0.5, 0.0, 0.0]
    assert len(hashes) == 2


def test_match_counts_until_no_endpoint_holds_the_block():
    index = ApproxPrefixIndex()
    index.add([1, 2, 3], 0, 100)
    index.add([1, 2, 3, 4], 1, 100)
    index.add([4], 2, 100)  # replica 2 holds block 4 but not 1..3: still counts it
    assert index.match([1, 2, 3, 4, 5], 3) == [3, 4, 1]


def test_lru_evicts_the_prompt_head_first():
    index = ApproxPrefixIndex()
    index.add([1, 2, 3], 0, 4)
    index.add([10, 11], 0, 4)  # touches 10, 11 after 1, 2, 3: evicts 1
    assert 1 not in index.holders and index.holders[2] == {0}
    assert index.match([1, 2, 3], 1) == [0]  # the head is gone: nothing matches


def test_weighted_sum_and_max_score():
    r = LlmdRouter(3, {}, Ties(None))
    r.index.add([1, 2, 3, 4], 2, 100)
    view = FakeView(
        [load(waiting=0, used_blocks=10), load(waiting=4, used_blocks=0), load(waiting=2)]
    )
    cands, totals, _ = r.scores(req(0, (1, 2, 3, 4)), view)
    # queue 1, 0, 0.5; kv 0.9, 1.0, 1.0; prefix 0, 0, 1 -> 2 + 1.8, 2, 1 + 2 + 3
    assert totals == pytest.approx([3.8, 2.0, 6.0])
    assert r.route(req(0, (1, 2, 3, 4)), view) == 2


def test_precise_prefix_is_consecutive_cached_over_full_blocks():
    r = LlmdRouter(2, {"llmd_prefix": "precise"}, Ties(None))
    view = FakeView([load(), load()], cached=[{1, 2}, {1, 2, 3, 4}])
    prefix, _ = r.prefix_scores(req(0, (1, 2, 3, 4)), view)
    assert prefix == [0.5, 1.0]


def test_lru_capacity_follows_the_replica_pool():
    r = LlmdRouter(2, {}, Ties(None))
    r.route(req(0, (1, 2)), FakeView([load(total_blocks=None), load(total_blocks=None)]))
    assert r.index.capacity[0] == 31_250
    r = LlmdRouter(2, {}, Ties(None))
    r.route(req(0, (1, 2)), FakeView([load(total_blocks=64), load()]))
    assert r.index.capacity[0] == 64
    r = LlmdRouter(2, {"llmd_lru_blocks": 8}, Ties(None))
    r.route(req(0, (1, 2)), idle(2))
    assert r.index.capacity[0] == 8


def test_affinity_filter_keeps_sticky_endpoints():
    # prefixcacheaffinity/plugin.go Filter: only endpoints scoring >= threshold remain, and
    # the queue scorer then normalises over them alone
    knobs = {"llmd_affinity_threshold": 0.8, "llmd_exploration": 0.0}
    r = LlmdRouter(3, knobs, Ties(None))
    r.index.add([1, 2, 3, 4, 5], 1, 100)
    view = FakeView([load(waiting=0), load(waiting=50, used_blocks=100), load(waiting=0)])
    cands, _, _ = r.scores(req(0, (1, 2, 3, 4, 5)), view)
    assert cands == [1]
    assert r.route(req(0, (1, 2, 3, 4, 5)), view) == 1
    unfiltered = LlmdRouter(3, {}, Ties(None))
    unfiltered.index.add([1, 2, 3, 4, 5], 1, 100)
    assert unfiltered.route(req(0, (1, 2, 3, 4, 5)), view) == 0  # 2 + 2 + 0 beats 0 + 0 + 3


def test_affinity_filter_explores():
    knobs = {"llmd_affinity_threshold": 0.8, "llmd_exploration": 1.0}
    r = LlmdRouter(3, knobs, Ties(0))
    r.index.add([1, 2], 1, 100)
    cands, _, _ = r.scores(req(0, (1, 2)), idle(3))
    assert cands == [0, 1, 2]
