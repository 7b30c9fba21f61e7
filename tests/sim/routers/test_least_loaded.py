"""least_loaded: vLLM 0.33.0 DPLBAsyncMPClient.get_core_engine_for_request."""

from __future__ import annotations

import pytest

from analyzer.sim.routers.base import Ties
from analyzer.sim.routers.least_loaded import LeastLoadedRouter, engine_score
from tests.sim.routers.conftest import FakeView, chain, load, req

# (waiting, running, kv_usage, inflight) -> score. From vllm v0.33.0
# vllm/v1/engine/core_client.py get_core_engine_for_request and its comments: the score is
# max(inflight, waiting + running); waiting costs extra "from 0 at <=50% usage to 3x
# waiting at 100%" (waiting * 6 * (usage - 0.5)).
SCORES = [
    ((0, 0, 0.0, 0), 0.0),
    ((2, 3, 0.0, 0), 5.0),
    ((2, 3, 0.5, 0), 5.0),  # no penalty at <= 50 %
    ((2, 3, 0.75, 0), 8.0),
    ((2, 3, 1.0, 0), 11.0),  # 3x waiting on top at 100 %
    ((0, 3, 1.0, 0), 3.0),  # no waiting, no penalty
    ((2, 3, 0.0, 7), 7.0),  # the exact in-flight floor
    ((2, 3, 1.0, 7), 13.0),
]


@pytest.mark.parametrize(("args", "expected"), SCORES)
def test_engine_score(args, expected):
    assert engine_score(*args) == pytest.approx(expected)


def router(n: int, refresh_s: float = 0.0) -> LeastLoadedRouter:
    return LeastLoadedRouter(n, {"router_refresh_s": refresh_s}, Ties(None))


def test_lowest_score_wins():
    view = FakeView([load(waiting=3), load(running=1), load(waiting=1, running=1)])
    assert router(3).route(req(0, chain(0, 1)), view) == 1


def test_strict_less_keeps_the_first_in_scan_order():
    # scores 2, 1, 1: from start 0 the first 1 (replica 1) wins; from start 2, replica 2
    r = router(3)
    view = FakeView([load(running=2), load(running=1), load(running=1)])
    assert r.route(req(0), view) == 1
    r.inflight = [0, 0, 0]
    assert r.route(req(1), view) == 1  # start 1
    r.inflight = [0, 0, 0]
    assert r.route(req(2), view) == 2  # start 2: replica 2 comes before replica 1


def test_inflight_floor_spreads_a_burst():
    # an exact view that has not seen the routed requests yet: the in-flight count spreads
    r = router(2)
    view = FakeView([load(), load()])
    assert [r.route(req(i), view) for i in range(4)] == [0, 1, 0, 1]
    r.on_finished(req(0), 0, 1.0)
    r.on_finished(req(2), 0, 1.0)
    assert r.inflight == [0, 2]


def test_optimistic_waiting_increment_until_the_next_scrape():
    # stale snapshot: replica 0 idle at 100 % KV, replica 1 running 2 at 0 % KV
    view = FakeView([load(used_blocks=100), load(running=2, used_blocks=0)], now_s=0.5)
    r = router(2, refresh_s=1.0)
    assert r.route(req(0), view) == 0
    # replica 0 now counts one optimistic waiting request: max(1, 1) + 1 * 6 * 0.5 = 4 > 2
    assert r.route(req(1), view) == 1
    assert r.local_waiting == [1, 1]
    view.now_s = 1.2  # a new scrape replaces the snapshot and the increments
    r.route(req(2), view)
    assert sum(r.local_waiting) == 1


def test_exact_view_keeps_no_increment():
    view = FakeView([load(used_blocks=100), load(running=2)])
    r = router(2, refresh_s=0.0)
    assert r.route(req(0), view) == 0
    assert r.route(req(1), view) == 0  # score max(1, 0) = 1 < 2: no optimistic waiting
    assert r.local_waiting == [0, 0]
