"""prefix_aware: hpa's own rule (no upstream test vectors: the vectors are the rule's)."""

from __future__ import annotations

import pytest

from analyzer.sim.routers.base import Ties
from analyzer.sim.routers.prefix_aware import PrefixAwareRouter
from tests.sim.routers.conftest import FakeView, chain, idle, load, req


def router(n: int, weight: float = 1.0, seed=None) -> PrefixAwareRouter:
    return PrefixAwareRouter(n, {"prefix_aware_load_weight": weight}, Ties(seed))


# (blocks sent to replica 0, to replica 1, waiting prompt tokens 0/1, weight) -> costs
# request: blocks 0..9, block_size 16
CASES = [
    ((), (), (0, 0), 1.0, [10.0, 10.0]),
    (chain(0, 4), (), (0, 0), 1.0, [6.0, 10.0]),
    (chain(0, 4), chain(0, 8), (0, 0), 1.0, [6.0, 2.0]),
    (chain(0, 4), chain(0, 8), (0, 160), 1.0, [6.0, 12.0]),  # 10 queued blocks on replica 1
    (chain(0, 4), chain(0, 8), (0, 160), 0.0, [6.0, 2.0]),  # load-blind
    (chain(0, 4), chain(0, 8), (32, 160), 0.5, [7.0, 7.0]),
]


@pytest.mark.parametrize(("sent0", "sent1", "queued", "weight", "expected"), CASES)
def test_costs(sent0, sent1, queued, weight, expected):
    r = router(2, weight)
    r.sent = [set(sent0), set(sent1)]
    view = FakeView([load(waiting_tokens=q) for q in queued])
    assert r.costs_blocks(req(0, chain(0, 10)), view) == expected


def test_follows_its_prefix_and_remembers_it():
    r = router(3)
    a, b = chain(0, 6), chain(100, 6)
    steps = [  # (prompt, waiting prompt tokens per replica, expected pick)
        (a, (0, 0, 0), 0),
        (b, (96, 0, 0), 1),  # replica 0's queue costs 6 blocks: tie 1, 2 -> 1
        (a, (96, 96, 0), 0),  # 0 + 6 on replica 0 ties 6 + 0 on replica 2 -> 0
        (b[:4] + (7, 8), (96, 96, 0), 2),  # 2 + 6 on replica 1 loses to 6 + 0
    ]
    for i, (prompt, queued, expected) in enumerate(steps):
        view = FakeView([load(waiting_tokens=q) for q in queued])
        assert r.route(req(i, prompt), view) == expected
    assert r.sent[1] == set(b)
    assert r.sent[2] == set(b[:4]) | {7, 8}


def test_a_diverging_middle_block_ends_the_match():
    r = router(2)
    r.sent = [{0, 1, 2, 3}, set()]
    # the request shares block 0 only, then diverges: matched 1
    assert r.costs_blocks(req(0, (0, 50, 51)), idle(2)) == [2.0, 3.0]


def test_ties_seeded_vs_lowest_index():
    assert router(4).route(req(0, chain(0, 3)), idle(4)) == 0
    picks = {router(4, seed=s).route(req(0, chain(0, 3)), idle(4)) for s in range(20)}
    assert len(picks) > 1
