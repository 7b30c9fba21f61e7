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
from analyzer.sim.records import SimRequest, SimResult
from analyzer.sim.routers import make_router
from analyzer.sim.routers.base import ReplicaLoad, Request
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
        self.next_scrape_s = 0.0 if refresh_s > 0 else INF

    def load(self, replica: int) -> ReplicaLoad:
        if self.scraped is not None:
            return self.scraped[replica]
        return self.replicas[replica].load()

    def cached_blocks(self, replica: int, blocks: Sequence[int]) -> int:
        return self.replicas[replica].cached_blocks(blocks)

    def scrape_before(self, t_s: float, inclusive: bool) -> None:
        """An event at `t_s` is next: the scrape due at or before it (strictly before, for a
        step end: the scrape at an end's instant sees it) reads the state as it is now."""
        due = self.next_scrape_s
        if not (due < t_s or (inclusive and due <= t_s)):
            return
        self.scraped = [r.load() for r in self.replicas]
        # the state holds until this event: the next scrape that can differ is at or after it
        k = math.floor(t_s / self.refresh_s)
        if k * self.refresh_s < t_s or (inclusive and k * self.refresh_s <= t_s):
            k += 1
        self.next_scrape_s = k * self.refresh_s


def replay_fleet(
    requests: Sequence[SimRequest],
    policy: Policy,
    *,
    num_groups: dict[str, int] | None = None,
    conversation_ids: Sequence[str | None] | None = None,
    trace_replicas: Sequence[str | None] | None = None,
) -> FleetRun:
    """Replay `requests` (one model revision, arrival order) on `policy.replicas` replicas
    of vLLM's scheduler, each routed as it arrives by `policy.routing`."""
    n = len(requests)
    replicas = [ConcurrentReplay(policy, num_groups=num_groups) for _ in range(policy.replicas)]
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
    at = 0
    # Each replica's next step end and next step start (INF: none), kept as they change.
    ends = [INF] * len(replicas)
    starts = [INF] * len(replicas)

    def refresh(k: int) -> None:
        r = replicas[k]
        end = r.step_end_s
        if end is not None:
            ends[k], starts[k] = end, INF
        else:
            start = r.next_start_s()
            ends[k], starts[k] = INF, (INF if start is None else start)

    stale = view.refresh_s > 0
    while True:
        t_arrival = pending[at].arrival_s if at < n else INF
        t_end, t_start = min(ends), min(starts)
        if t_end <= t_arrival and t_end <= t_start:
            if t_end == INF:
                break
            if stale:
                view.scrape_before(t_end, inclusive=False)
            for k, end in enumerate(ends):
                if end == t_end:
                    replicas[k].end_step()
                    refresh(k)
            _heard(replicas, router, seen)
        elif t_arrival <= t_start:
            if stale:
                view.scrape_before(t_arrival, inclusive=True)
            view.now_s = t_arrival
            while at < n and pending[at].arrival_s == t_arrival:
                f = pending[at]
                at += 1
                req = _request(f, first, convs, traced)
                seen[f.index] = req
                k = router.route(req, view)
                loads[f.index] = view.load(k)
                chosen[f.index] = k
                replicas[k].push(f)
                refresh(k)
        else:
            if stale:
                view.scrape_before(t_start, inclusive=True)
            horizon = pending[at].arrival_s if at < n else INF
            for k, start in enumerate(starts):
                if start == t_start:
                    replicas[k].start_step(t_start, horizon)
                    refresh(k)
            _heard(replicas, router, seen)  # requests aborted as their step was scheduled
    return FleetRun([f.result() for f in flights], chosen, loads)


def _heard(replicas: list[ConcurrentReplay], router, seen) -> None:
    """Tell the router what its requests did since it last heard (replica order)."""
    for k, r in enumerate(replicas):
        if r.hooks:
            for f, finished, when in r.hooks:
                if finished:
                    router.on_finished(seen[f.index], k, when)
                else:
                    router.on_first_token(seen[f.index], k, when)
            r.hooks.clear()


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
