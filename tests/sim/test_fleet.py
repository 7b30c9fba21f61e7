"""The fleet on one clock (`analyzer.sim.fleet`): one replica is the concurrent replay itself;
events at equal times run step ends, then arrivals, then step starts; a router hears of first
tokens and finishes before the next arrival; a stale view is the last scrape's."""

from __future__ import annotations

import pytest

import analyzer.sim.fleet as fleet
from analyzer.sim.dispatch import make_policy
from analyzer.sim.records import SimRequest
from analyzer.sim.routers.base import Router, Ties
from analyzer.sim.vllm import replay
from tests.sim.vllm.test_concurrent_golden import CASES, GOLDEN, _requests

FA = {
    "engine": "vllm",
    "groups": ["full_attention"],
    "block_size": 16,
    "schedule": "concurrent",
    "step_base_ms": 10.0,
    "step_token_us": 0.0,
}


@pytest.mark.skipif(not CASES, reason="no concurrent goldens")
@pytest.mark.parametrize("name", sorted(CASES))
def test_one_replica_is_the_concurrent_replay(name):
    case = CASES[name]
    requests = _requests(GOLDEN / case["trace"])
    alone = list(replay(requests, make_policy(case["policy"])))
    for routing in ("least_loaded", "dynamo", "llm-d", "sglang", "chwbl", "prefix_aware"):
        policy = make_policy({**case["policy"], "routing": routing, "replicas": 1})
        run = fleet.replay_fleet(requests, policy)
        assert run.results == alone, routing  # every field, times to the last bit
        assert run.replicas == [0] * len(requests)


class Recorder(Router):
    """Sends request i to replica `plan[i]` and records what it saw and heard."""

    plan: list[int] = []

    def __init__(self, num_replicas, knobs, ties):
        super().__init__(num_replicas, knobs, ties)
        self.log: list[tuple] = []
        Recorder.last = self

    def route(self, request, view):
        loads = [view.load(r) for r in range(view.num_replicas)]
        self.log.append(
            ("route", request.index, view.now_s, [(x.num_waiting, x.num_running) for x in loads])
        )
        return self.plan[request.index]

    def on_first_token(self, request, replica, t_s):
        self.log.append(("first", request.index, replica, t_s))

    def on_finished(self, request, replica, t_s):
        self.log.append(("finished", request.index, replica, t_s))


@pytest.fixture
def recorder(monkeypatch):
    monkeypatch.setattr(fleet, "make_router", lambda name, n, knobs: Recorder(n, knobs, Ties(None)))
    return Recorder


def _req(i: int, t: float, prompt: int = 32, outputs: int = 1) -> SimRequest:
    tokens = list(range(1000 * i, 1000 * i + prompt))
    return SimRequest(f"r{i}", tokens, output_tokens=outputs, timestamp_s=t)


def test_equal_times_end_then_route_then_start(recorder):
    # r0 prefills at [0, 0.01) on replica 0 and finishes at its end; r1 arrives mid-step,
    # r2 exactly at the end: it sees r0 gone, and r0's finish was heard before it was routed.
    recorder.plan = [0, 1, 0]
    policy = make_policy({**FA, "replicas": 2, "routing": "least_loaded"})
    run = fleet.replay_fleet([_req(0, 0.0), _req(1, 0.005), _req(2, 0.01)], policy)
    log = recorder.last.log
    assert log[0] == ("route", 0, 0.0, [(0, 0), (0, 0)])
    assert log[1] == ("route", 1, 0.005, [(0, 1), (0, 0)])  # admitted at its step start
    assert log[2][:2] == ("first", 0) and log[3][:2] == ("finished", 0)
    assert log[4] == ("route", 2, 0.01, [(0, 0), (0, 1)])  # r0 finished at 0.01; r1 runs
    r2 = run.results[2]
    assert r2.first_scheduled_s == pytest.approx(0.01)  # replica 0 starts its step at 0.01
    assert run.results[1].first_scheduled_s == pytest.approx(0.005)  # idle: starts at once
    assert run.replicas == [0, 1, 0]


def test_arrivals_at_one_instant_are_routed_one_by_one(recorder):
    recorder.plan = [0, 0, 1]
    policy = make_policy({**FA, "replicas": 2, "routing": "least_loaded"})
    fleet.replay_fleet([_req(0, 0.0), _req(1, 0.0), _req(2, 0.0)], policy)
    routes = [e for e in recorder.last.log if e[0] == "route"]
    # each sees the ones routed before it waiting; none started yet (starts come last)
    assert [e[3] for e in routes] == [[(0, 0), (0, 0)], [(1, 0), (0, 0)], [(2, 0), (0, 0)]]


def test_a_stale_view_is_the_last_scrape(recorder):
    recorder.plan = [0, 0, 0]
    values = {**FA, "replicas": 2, "routing": "least_loaded", "router_refresh_s": 0.05}
    policy = make_policy(values)
    fleet.replay_fleet([_req(0, 0.0), _req(1, 0.02), _req(2, 0.06)], policy)
    routes = [e for e in recorder.last.log if e[0] == "route"]
    assert routes[0][3] == [(0, 0), (0, 0)]  # scraped at 0, before r0 came
    assert routes[1][3] == [(0, 0), (0, 0)]  # still the scrape at 0: r0 is not seen
    assert routes[2][3] == [(0, 0), (0, 0)]  # scraped at 0.05: r0 and r1 long finished


def test_hooks_come_in_time_order_before_the_next_route(recorder):
    recorder.plan = [0, 1, 0, 1]
    policy = make_policy({**FA, "replicas": 2, "routing": "least_loaded"})
    reqs = [_req(0, 0.0, outputs=3), _req(1, 0.001, outputs=2), _req(2, 0.5), _req(3, 0.5)]
    fleet.replay_fleet(reqs, policy)
    log = recorder.last.log
    heard = [e for e in log if e[0] != "route"]
    assert [e[3] for e in heard] == sorted(e[3] for e in heard)
    assert {(e[0], e[1]) for e in heard} == {
        (k, i) for i in range(4) for k in ("first", "finished")
    }
    at = log.index(next(e for e in log if e[0] == "route" and e[1] == 2))
    assert {e[1] for e in log[:at] if e[0] == "finished"} == {0, 1}  # both done by 0.5


class RoundRobin(Router):
    """A live router that reads nothing: request i to replica i mod n."""

    def route(self, request, view):
        return request.index % self.num_replicas


@pytest.mark.skipif(not CASES, reason="no concurrent goldens")
@pytest.mark.parametrize("name", sorted(CASES))
def test_replicas_that_share_nothing_replay_as_alone(name, monkeypatch):
    """Routed by a rule that reads nothing, each replica of the fleet replays what it got
    exactly as a concurrent replay of those requests alone (hits, chunks, preemptions), its
    times shifted by its first arrival."""
    monkeypatch.setattr(
        fleet, "make_router", lambda name, n, knobs: RoundRobin(n, knobs, Ties(None))
    )
    case = CASES[name]
    requests = _requests(GOLDEN / case["trace"])
    policy = make_policy({**case["policy"], "routing": "least_loaded", "replicas": 3})
    run = fleet.replay_fleet(requests, policy)
    scale = policy.time_scale
    t0 = min(r.timestamp_s for r in requests)
    for k in range(3):
        mine = [i for i in range(len(requests)) if i % 3 == k]
        if not mine:
            continue
        alone = list(replay([requests[i] for i in mine], make_policy(case["policy"])))
        shift = (min(requests[i].timestamp_s for i in mine) - t0) * scale
        for i, want in zip(mine, alone, strict=True):
            got = run.results[i]
            assert got._replace(
                arrival_s=None, first_scheduled_s=None, first_token_s=None, finished_s=None
            ) == want._replace(
                arrival_s=None, first_scheduled_s=None, first_token_s=None, finished_s=None
            ), (name, i)
            for field in ("arrival_s", "first_scheduled_s", "first_token_s", "finished_s"):
                a, b = getattr(got, field), getattr(want, field)
                assert (a is None) == (b is None)
                if a is not None:
                    assert a == pytest.approx(b + shift, abs=1e-6), (name, i, field)
