"""A fleet on one clock: replicas that keep their own scheduler, routed live.

The shape of vidur's global scheduler over replica schedulers: every replica of one model
revision is a `ConcurrentReplay` (vLLM 0.33's scheduler and cache, `sim/vllm/concurrent.py`)
that exposes its next step start and end; this loop keeps them on one simulated clock and asks
the router (`sim/routers`) where each request goes as it arrives.

The clock, exactly. Each replica runs the concurrent loop: at a step start c it queues its
arrivals with arrival <= c, schedules, and the step's outputs are processed at c + its
duration. The fleet takes events in time order; at equal times step ends come first (every
replica), then arrivals (each routed as it comes, in arrival order), then step starts. So an
arrival at t is routed after every replica has processed its step ends at times <= t and its
step starts at times < t; it joins the chosen replica's queue and is admitted at that
replica's next step start >= t (an idle replica starts one at t, after every arrival at t has
been routed). Runs of quiet decode steps (`sleepers.py`) stop before the next arrival
anywhere. With one replica this is the concurrent replay itself, step for step.

What a router reads: each replica's load (`ReplicaLoad`), exact at the arrival instant, or
as scraped at the last multiple of `router_refresh_s` (state after the step ends at and the
starts before that instant); what a replica's pool holds (`cached_blocks`, its KV events,
without lag); and its own state, kept from the hooks the fleet calls as each routed request
gets its first token and finishes (in time order, before the next arrival is routed).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from analyzer.config.policy import Policy
from analyzer.sim.common.collector import collector_paused
from analyzer.sim.records import SimRequest, SimResult
from analyzer.sim.routers import make_router
from analyzer.sim.routers.base import ReplicaLoad, Request
from analyzer.sim.vllm import concurrent_replay
from analyzer.sim.vllm.concurrent import ConcurrentReplay
from analyzer.sim.vllm.replica import INF


@dataclass(frozen=True)
class FleetRun:
    """A fleet replay: per request (in the order given) its result, the replica it was
    routed to and that replica's load as the router saw it when it chose."""

    results: list[SimResult]
    replicas: list[int]
    loads: list[ReplicaLoad]


class _View:
    """The router's view (`routers.base.FleetView`)."""

    def __init__(self, replicas: list[ConcurrentReplay], refresh_s: float) -> None:
        self.replicas = replicas
        self.num_replicas = len(replicas)
        self.now_s = 0.0
        self.refresh_s = refresh_s
        self.scraped: list[ReplicaLoad] | None = None
        self.scraped_at_s = -INF

    def load(self, replica: int) -> ReplicaLoad:
        if self.scraped is not None:
            return self.scraped[replica]
        return self.replicas[replica].load()

    def cached_blocks(self, replica: int, blocks: Sequence[int]) -> int:
        return self.replicas[replica].cached_blocks(blocks)

    def scrape(self, t_s: float) -> None:
        """The scrape at `t_s` (every replica advanced to it) reads the load as it is."""
        self.scraped = [r.load() for r in self.replicas]
        self.scraped_at_s = t_s


def replay_fleet(
    requests: Sequence[SimRequest],
    policy: Policy,
    *,
    num_groups: dict[str, int] | None = None,
    conversation_ids: Sequence[str | None] | None = None,
    trace_replicas: Sequence[str | None] | None = None,
) -> FleetRun:
    """Replay `requests` (one model revision, arrival order) on `policy.replicas` replicas
    of vLLM's scheduler, each routed as it arrives by `policy.routing`.

    Replicas meet only where a request is routed (or the router's view is scraped): between
    two such instants each replica runs on alone, its step ends up to the instant and its
    step starts before it; the router then hears of the first tokens and finishes in time
    order, and routes."""
    with collector_paused():
        return _fleet(requests, policy, num_groups, conversation_ids, trace_replicas)


def _fleet(requests, policy: Policy, num_groups, conversation_ids, trace_replicas) -> FleetRun:
    n = len(requests)
    # each replica's scheduler and cache, with its host KV tier where the policy has one
    replicas = [concurrent_replay(policy, num_groups=num_groups) for _ in range(policy.replicas)]
    first = replicas[0]
    flights = first.start(list(requests))
    for r in replicas:
        if r is not first:
            r.share(first)
        r.flights = []
        r.hooks = []
    knobs = dict(policy.router_options)
    router = make_router(policy.routing, policy.replicas, knobs)
    view = _View(replicas, knobs.get("router_refresh_s", 0.0))
    convs = conversation_ids or [None] * n
    traced = trace_replicas or [None] * n
    pending = sorted(flights, key=lambda f: (f.arrival_s, f.index))
    seen: list[Request | None] = [None] * n
    chosen = [0] * n
    loads: list[ReplicaLoad | None] = [None] * n
    _run(replicas, router, view, pending, (first, convs, traced), (seen, chosen, loads))
    return FleetRun([f.result() for f in flights], chosen, loads)


def _run(replicas, router, view: _View, pending: list, about: tuple, out: tuple) -> None:
    """Route the `pending` flights (arrival order) as they arrive; run every replica out."""
    first, convs, traced = about
    seen, chosen, loads = out
    n = len(pending)
    at = 0
    while at < n:
        t_s = pending[at].arrival_s
        if view.refresh_s > 0:
            due_s = math.floor(t_s / view.refresh_s) * view.refresh_s
            if due_s > view.scraped_at_s:  # the last scrape before this arrival
                _advance(replicas, due_s, router, seen)
                view.scrape(due_s)
        _advance(replicas, t_s, router, seen)
        view.now_s = t_s
        while at < n and pending[at].arrival_s == t_s:
            f = pending[at]
            at += 1
            req = _request(f, first, convs, traced)
            seen[f.index] = req
            k = router.route(req, view)
            loads[f.index] = view.load(k)
            chosen[f.index] = k
            replicas[k].push(f)
    _advance(replicas, INF, router, seen)


def _advance(replicas: list[ConcurrentReplay], t_s: float, router, seen) -> None:
    """Every replica processes its step ends at times <= `t_s` and its step starts before
    it; then the router hears what its requests did, in time order (replica order at equal
    times)."""
    heard = []
    for k, r in enumerate(replicas):
        r.advance_to(t_s)
        if r.hooks:
            heard += [(when, k, finished, f) for f, finished, when in r.hooks]
            r.hooks.clear()
    heard.sort(key=lambda e: (e[0], e[1]))
    for when, k, finished, f in heard:
        if finished:
            router.on_finished(seen[f.index], k, when)
        else:
            router.on_first_token(seen[f.index], k, when)


def _request(f, replica: ConcurrentReplay, convs, traced) -> Request:
    sim = f.sim
    return Request(
        index=f.index,
        request_id=sim.request_id,
        arrival_s=f.arrival_s,
        prompt_tokens=f.req.prompt,
        output_tokens=f.max_tokens,
        blocks=replica.router_blocks(f),
        block_size=replica.block_size,
        conversation_id=convs[f.index],
        trace_replica=traced[f.index],
        namespace=sim.namespace,
    )
