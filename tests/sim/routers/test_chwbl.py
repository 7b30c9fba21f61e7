"""chwbl: KubeAI internal/loadbalancer/balance_chwbl.go."""

from __future__ import annotations

import pytest

from analyzer.sim.routers.base import Ties
from analyzer.sim.routers.chwbl import ChwblRouter, hash64, load_ok
from tests.sim.routers.conftest import chain, idle, req

# chwblLoadOK(load, total, n, factor): load <= (total + 1) / n * factor, any load when idle
LOAD_OK = [
    ((0, 0, 2, 1.25), True),
    ((5, 0, 2, 1.25), True),  # total 0 short-circuits
    ((10, 20, 2, 1.5), True),  # 10 <= 15.75
    ((31, 41, 2, 1.5), True),  # 31 <= 31.5
    ((32, 42, 2, 1.5), True),  # 32 <= 32.25
    ((33, 43, 2, 1.5), True),  # 33 <= 33.0: the bound itself is allowed
    ((33, 42, 2, 1.5), False),  # 33 > 32.25
    ((1, 1, 4, 1.25), False),  # 1 > 0.625: the endpoint's own load has no "+1"
]


@pytest.mark.parametrize(("args", "expected"), LOAD_OK)
def test_load_ok(args, expected):
    assert load_ok(*args) is expected


def router(n: int, **knobs) -> ChwblRouter:
    return ChwblRouter(n, knobs, Ties(None))


def test_kubeai_prefix_hash_strategy_steps():
    # kubeai internal/loadbalancer/load_balancer_test.go "prefix hash strategy": two pods
    # with 10 in flight each, meanLoadPercentage 150, replication 1, every request keyed to
    # pod-a-1's ring point. 1 + 20 requests all go to pod-a-1; of the next 4, 3 go to
    # pod-a-1 and 1 to pod-a-2; then 20 keyed to pod-a-2 all go to pod-a-2.
    r = router(2, chwbl_load_factor=1.5, chwbl_replication=1)
    r.inflight, r.total = [10, 10], 20
    point = {owner: h for h, owner in zip(r.ring_hashes, r.ring_owners, strict=True)}

    def send(key_hash: int, count: int) -> list[int]:
        out = []
        for _ in range(count):
            k = r.pick(key_hash)
            r.inflight[k] += 1
            r.total += 1
            out.append(k)
        return out

    assert send(point[0], 21) == [0] * 21
    assert sorted(send(point[0], 4)) == [0, 0, 0, 1]
    assert send(point[1], 20) == [1] * 20


def test_same_prefix_same_replica_and_bounded_load():
    r = router(4)
    prompt = chain(0, 8)
    first = req(0, prompt)
    k = r.route(first, idle(4))
    r.on_finished(first, k, 1.0)
    assert r.route(req(1, prompt[:1] + (99,)), idle(4)) == k  # key: the first block
    # keep sending one key: no replica exceeds 1.25 x the mean (+1) of in-flight requests
    for i in range(2, 200):
        r.route(req(i, prompt), idle(4))
        assert max(r.inflight) <= 1.25 * (r.total + 1) / 4 + 1


def test_finished_requests_free_their_slot():
    r = router(2)
    a = req(0, chain(0, 2))
    k = r.route(a, idle(2))
    r.on_finished(a, k, 1.0)
    assert r.inflight == [0, 0] and r.total == 0


def test_ring_is_deterministic():
    assert hash64("0-0") == hash64("0-0")
    assert router(3).ring_hashes == router(3).ring_hashes
    assert len(router(3).ring_hashes) == 3 * 256
