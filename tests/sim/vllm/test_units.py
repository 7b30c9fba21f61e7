"""Pieces of the vLLM replay: hashing, the pool's free-queue order, layouts, edge cases."""

from __future__ import annotations

import numpy as np
import pytest

from analyzer.errors import ConfigError
from analyzer.sim.common.block_hash import HashInterner, request_hashes
from analyzer.sim.dispatch import make_policy
from analyzer.sim.records import SimRequest
from analyzer.sim.vllm import VllmReplay, replay
from analyzer.sim.vllm.block_pool import BlockPool
from analyzer.sim.vllm.coordinator import MANAGERS, Coordinator
from analyzer.sim.vllm.layout import make_layout
from tests.sim.conftest import shared_prefix_requests

FA_MAMBA = {"block_size": 4, "groups": ["full_attention", "mamba"]}


def test_hash_ids_are_exact_prefix_identity():
    interner = HashInterner()
    a = SimRequest("a", np.array([1, 2, 3, 4, 5, 6, 7, 8], dtype=np.int32))
    b = SimRequest("b", [1, 2, 3, 4, 5, 6, 7, 9])  # a list works the same
    c = SimRequest("c", np.array([1, 2, 3, 4, 5, 6, 7, 8], dtype=np.int64))
    ids = [request_hashes(interner, r, 4, 0)[0].extend(2) for r in (a, b, c)]
    assert ids[0][0] == ids[1][0] == ids[2][0]
    assert ids[0][1] != ids[1][1]
    assert ids[0] == ids[2]  # dtype does not matter


def test_namespace_isolates_from_block_zero():
    same = np.arange(1, 17, dtype=np.int32)
    requests = [
        SimRequest("a", same),
        SimRequest("b", same, namespace="salt"),
        SimRequest("c", same, namespace="salt"),
    ]
    policy = make_policy({"block_size": 4, "groups": ["full_attention"]})
    assert [r.hit_tokens for r in replay(requests, policy)] == [0, 0, 12]


def test_lookahead_hash_needs_the_next_token():
    """EAGLE lookahead: the block ending at 8 matches only if token 8 agrees too."""
    interner = HashInterner()
    a = SimRequest("a", [1, 2, 3, 4, 5, 6, 7, 8, 9])
    b = SimRequest("b", [1, 2, 3, 4, 5, 6, 7, 8, 0])
    ha = request_hashes(interner, a, 4, 1)[0].extend(2)
    hb = request_hashes(interner, b, 4, 1)[0].extend(2)
    assert ha[0] == hb[0] and ha[1] != hb[1]


def test_hash_id_trace_replays_like_tokens():
    """Hash-id requests (one chained id per 2-token trace block) hit like the token trace."""
    prompts = [
        [1, 2, 3, 4, 5, 6, 7, 8, 9, 10],
        [1, 2, 3, 4, 5, 6, 7, 8, 0, 0],
        [1, 2, 3, 4, 9, 9, 9, 9, 9],
    ]
    ids: dict[tuple, int] = {}

    def chain(p):
        return [ids.setdefault(tuple(p[: i + 2]), len(ids)) for i in range(0, len(p), 2)]

    tokens = [SimRequest(f"t{i}", p) for i, p in enumerate(prompts)]
    hashed = [
        SimRequest(f"h{i}", block_hash_ids=chain(p), trace_block_size=2, prompt_tokens=len(p))
        for i, p in enumerate(prompts)
    ]
    for values, hits in (
        ({"block_size": 4, "groups": ["full_attention"]}, [0, 8, 4]),
        (FA_MAMBA, [0, 8, 0]),
    ):  # no Mamba state at 4
        policy = make_policy(values)
        assert [r.hit_tokens for r in replay(tokens, policy)] == hits
        assert [r.hit_tokens for r in replay(hashed, policy)] == hits


def test_hash_id_trace_needs_a_compatible_match_unit():
    request = SimRequest("h", block_hash_ids=[1, 2], trace_block_size=16)
    with pytest.raises(ConfigError, match="multiple of 16"):
        list(replay([request], make_policy({"block_size": 24, "groups": ["full_attention"]})))


def test_hash_id_trace_length_must_fit_its_blocks():
    request = SimRequest("h", block_hash_ids=[1, 2], trace_block_size=16, prompt_tokens=40)
    with pytest.raises(ConfigError, match="cannot hold 40"):
        list(replay([request], make_policy({"block_size": 16, "groups": ["full_attention"]})))


def test_free_queue_order():
    """Unhashed blocks go to the head (reused first), hashed ones to the tail (LRU)."""
    pool = BlockPool(6, 1)
    assert pool.new_blocks(3) == [1, 2, 3]
    pool.insert(10, 2, 4)
    pool.free_blocks([3, 2, 1])  # tail first, as a finished request frees
    assert list(pool.free) == [3, 1, 4, 5, 2]
    taken = pool.new_blocks(5)
    assert taken == [3, 1, 4, 5, 2] and pool.get(10) is None  # the last one evicted its hash


def test_touch_pins_until_freed():
    pool = BlockPool(4, 1)
    [block] = pool.new_blocks(1)
    pool.insert(7, block, 4)
    pool.free_blocks([block])
    pool.touch([block])
    assert block not in pool.free and pool.get(7) == block
    pool.free_blocks([block])
    assert list(pool.free)[-1] == block


def test_long_decode_is_not_per_token_work():
    """200k output tokens: only a few positions per block are simulated."""
    policy = make_policy({"block_size": 544, "num_blocks": 1000, "retention_interval": None})
    request = SimRequest("long", np.arange(1, 1000, dtype=np.int32), output_tokens=200_000)
    [result] = list(VllmReplay(policy).run([request]))
    assert result.error is None
    assert result.chunks == (544, 455) + (1,) * (200_000 - 1)


def test_pool_too_small_is_reported_not_raised():
    policy = make_policy({**FA_MAMBA, "num_blocks": 3})
    results = list(replay([SimRequest("big", np.arange(1, 41, dtype=np.int32))], policy))
    assert results[0].error and results[0].chunks == () and results[0].hit_tokens == 0


def test_copies_of_a_group_only_matter_with_a_capacity():
    requests = shared_prefix_requests(2, 3, 40, 20)
    policy = make_policy({**FA_MAMBA, "retention_interval": None})
    base = list(replay(requests, policy))
    assert list(replay(requests, policy, num_groups={"mamba": 3})) == base
    with pytest.raises(ConfigError, match="num_groups"):
        make_layout(policy, {"sliding_window": 2})


def test_eviction_splits_the_miss():
    """Chunked prefill keeps Mamba states at 16 and 32, freed (LRU) while the request runs,
    so they are evicted before its attention blocks: b's miss of 32 is all 'evicted'; with a
    larger pool b hits. Checked with vLLM's scheduler (oracle/): same hits, misses, chunks."""
    shared = list(range(1, 33))
    requests = [
        SimRequest("a", shared + list(range(100, 120))),
        SimRequest("x", list(range(200, 224))),
        SimRequest("b", shared + list(range(300, 308))),
    ]
    values = {
        "block_size": 16,
        "groups": ["full_attention", "mamba"],
        "retention_interval": None,
        "max_num_batched_tokens": 16,
    }
    a, _, b = replay(requests, make_policy({**values, "num_blocks": 8}))
    assert a.chunks == (16, 16, 16, 4)
    assert (b.hit_tokens, b.sparse_retention_miss_tokens) == (0, 32)
    assert (b.sparse_retention_miss_evicted_tokens, b.sparse_retention_miss_never_kept_tokens) == (
        32,
        0,
    )
    *_, b = replay(requests, make_policy({**values, "num_blocks": 10}))
    assert (b.hit_tokens, b.sparse_retention_miss_tokens, b.chunks) == (32, 0, (8,))


@pytest.mark.parametrize("kind", sorted(MANAGERS))
def test_swap_moves_every_request_field(kind):
    """A manager's bound request is swapped field by field (spelled out for speed): every
    REQUEST_FIELDS entry leaves, in order, and comes back."""
    window = {"sliding_window": 8} if kind == "sliding_window" else {}
    groups = ["full_attention", kind] if kind != "full_attention" else [kind]
    policy = make_policy({"block_size": 4, "groups": groups, "num_blocks": 9, **window})
    layout = make_layout(policy)
    manager = Coordinator(layout).managers[-1]
    first = tuple(object() for _ in manager.REQUEST_FIELDS)
    for name, value in zip(manager.REQUEST_FIELDS, first, strict=True):
        setattr(manager, name, value)
    assert manager.swap(None) == first  # unbound: a new request, fields reset
    assert manager.blocks == [] and manager.ncached == 0
    second = manager.swap(first)
    assert tuple(getattr(manager, name) for name in manager.REQUEST_FIELDS) == first
    assert manager.swap(second) == first
