"""The concurrent replay as one replica of a fleet (`analyzer.sim.fleet`): a scheduler with
a clock that says when its next step starts and ends, queues what is routed to it, and
reports its load and what its pool holds.

`ConcurrentReplay.run` drives one replica alone with these same methods, so a fleet of one is
the concurrent replay step for step.
"""

from __future__ import annotations

from analyzer.sim.records import SimRequest
from analyzer.sim.routers.base import ReplicaLoad
from analyzer.sim.vllm.flight import Flight

INF = float("inf")


class ReplicaClock:
    """The ConcurrentReplay methods a fleet drives; they use its queues, clock, pool and
    `_start_step` (the step's scheduling; `end_step` processes its outputs)."""

    def start(self, requests: list[SimRequest]) -> list[Flight]:
        """The flights of `requests` (arrival times from the earliest one), hashed; this
        replica then serves those `push`ed to it. A fleet starts one replica with every request
        (the others share its interner: `share`)."""
        flights = self.flights = self._flights(requests)
        self.prefixes = self._scheduled_prefixes()
        return flights

    def share(self, first: ReplicaClock) -> None:
        """Serve flights `first` made: its interner's ids (the ids are content: equal ids,
        equal prefixes, in every replica's pool) and what they had hashed."""
        self.interner = first.interner
        self.flights = []
        self.prefixes = self._scheduled_prefixes()

    def push(self, f: Flight) -> None:
        """A request routed here at its arrival; it joins the waiting queue at the next step
        start (vLLM adds it to `waiting` at once; it is scheduled no sooner)."""
        self.arrivals.append(f)
        if self.hooks is not None:  # a fleet's replica: it serves those routed to it
            self.flights.append(f)

    def next_start_s(self) -> float | None:
        """When this replica's next step is scheduled: at once when it has requests and room
        in flight (one step, two with async scheduling, none after a schedule that found
        nothing while a step runs), at the next arrival routed to it when idle, else None."""
        if self.blocked or len(self.in_flight) >= self.depth:
            return None
        if self.running or self.waiting:
            return self.clock
        if self.arrivals and not self.in_flight:
            return max(self.clock, self.arrivals[0].arrival_s)
        return None

    def next_event(self) -> tuple[str, float] | None:
        """("start", when) or ("end", when) for what this replica does next, None: nothing.
        A schedule due no later than the next step end comes first (vLLM's engine schedules
        before it waits)."""
        start_s, end_s = self.next_start_s(), self.step_end_s
        if start_s is not None and (end_s is None or start_s <= end_s):
            return "start", start_s
        return None if end_s is None else ("end", end_s)

    def start_step(self, start_s: float, horizon_s: float | None = None) -> None:
        """At `start_s` (`next_start_s`): queue the arrivals due, then run quiet steps (only
        while they start before `horizon_s`, the next arrival anywhere; default: the next one
        pushed here) or schedule one step; `step_end_s` is the oldest step in flight's end."""
        self.clock = start_s
        arrivals = self.arrivals
        while arrivals and arrivals[0].arrival_s <= self.clock:
            f = arrivals.popleft()
            f.added = (self.num_ended, self.tokens_ended, self.clock)
            self.waiting.append(f)
        if not self.running and not self.waiting and not self._connector_busy():
            return
        if horizon_s is None:
            horizon_s = arrivals[0].arrival_s if arrivals else INF
        if not self._quiet_steps(horizon_s):
            self._start_step()

    def advance_to(self, t_s: float) -> None:
        """Run on alone up to `t_s`: every step end at times <= t_s and every schedule
        before it (one at t_s waits for what is routed here at t_s); a schedule due no later
        than the next step end comes first (`next_event`)."""
        while (event := self.next_event()) is not None:
            kind, at_s = event
            if kind == "start":
                if at_s >= t_s:
                    return
                self.start_step(at_s, t_s)
            else:
                if at_s > t_s:
                    return
                self.end_step()

    def load(self) -> ReplicaLoad:
        """What this replica's metrics report now: requests waiting (with those routed here
        and not yet queued) and running, the prompt tokens the waiting still have to compute,
        its pool's blocks in use and usable (vLLM's usage leaves the null block out)."""
        waiting = [*self.waiting, *self.arrivals]
        pool = self.coord.pool
        total = self.layout.num_blocks - 1 if pool.bounded else None
        if pool.bounded:
            used = total - pool.num_free()
        else:  # no free queue to count: the running requests' attention blocks
            B = self.block_size
            used = sum(-(-f.req.computed // B) for f in self.running)
        return ReplicaLoad(
            len(waiting),
            len(self.running),
            sum(f.req.num_tokens - f.req.computed for f in waiting),
            used,
            total,
        )

    def cached_blocks(self, blocks) -> int:
        """How many leading blocks of a prompt (full-attention block ids, `Request.blocks`)
        this replica's pool holds now."""
        attention = self.coord.spec_groups[0][0]
        groups, gid = self.coord.pool.num_groups, attention.gid
        get = self.coord.pool.cached.get
        n = 0
        for h in blocks:
            if get(h * groups + gid) is None:
                break
            n += 1
        return n

    def router_blocks(self, f: Flight) -> tuple[int, ...]:
        """`f`'s prompt as a router sees it: the ids of its full blocks (those its pool keys
        full attention's blocks with)."""
        B, s = self.block_size, self.layout.block_size // self.layout.hash_block_size
        ids = f.req.hashes
        count = min(f.req.prompt // B, len(ids) // s)
        return tuple(ids[s - 1 : count * s : s])
