"""Concurrent replay of vLLM 0.33: every request through one scheduler on a simulated clock.

The loop of vLLM's synchronous engine core (`schedule()`, the model, `update_from_output()`),
with its `Scheduler`'s rules (what `oracle/vllm_oracle.py --concurrent` drives):

    clock = 0
    loop: add the requests that have arrived (arrival <= clock), in arrival order
          nothing running or waiting: jump to the next arrival (or stop)
          schedule: the running requests first (admission order), each min(remaining,
                    budget) tokens, preempting the most recently admitted one when its
                    blocks do not fit; then, unless that preempted, the waiting ones
                    (FCFS, a prefix lookup each, stop at the first that does not fit)
          every request whose prompt (and outputs) is now computed samples one token
          clock += step_base_ms / 1e3 + step_token_us / 1e6 x tokens scheduled
          finished requests free their blocks (still cached)

Blocks are hashed into the cache when their chunk is scheduled, so a request admitted later
in a step hits what was scheduled before it. Times are seconds; lengths tokens.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import replace

from analyzer.config.policy import Policy
from analyzer.config.step_models import step_model
from analyzer.errors import ConfigError
from analyzer.sim.common.block_hash import request_hashes
from analyzer.sim.records import SimRequest, SimResult
from analyzer.sim.vllm.coordinator import Coordinator, replay_boundaries
from analyzer.sim.vllm.flight import Admission, Flight
from analyzer.sim.vllm.managers import ReqState
from analyzer.sim.vllm.reference import VllmReplay
from analyzer.sim.vllm.replica import ReplicaClock
from analyzer.sim.vllm.scheduled import ScheduledPrefixes
from analyzer.sim.vllm.scheduler import mamba_split
from analyzer.sim.vllm.sleepers import SleepingDecoders, steps_to_events
from analyzer.sim.vllm.step_ends import StepEnds
from analyzer.sim.watch import current_watch


class ConcurrentReplay(ReplicaClock, SleepingDecoders, StepEnds, VllmReplay):
    """One replica's scheduler and cache; `run` yields one result per request, in the
    order the requests were given."""

    check_memo = False  # tests: recompute every kept lookup and admission, assert equal
    host_tier_modelled = False  # a host KV tier's replay (host_concurrent.py) sets it

    def __init__(self, policy: Policy, *, num_groups: dict[str, int] | None = None) -> None:
        super().__init__(policy, num_groups=num_groups)
        if self.layout.host_tier is not None and not self.host_tier_modelled:
            raise ConfigError("policy key 'host_tier_gib': not modelled on schedule concurrent")
        budget = policy.step_token_budget
        if budget != self.layout.max_num_batched_tokens:
            self.layout = replace(self.layout, max_num_batched_tokens=budget)
            self.coord = Coordinator(self.layout)
        self.coord.schedule_concurrently()
        # vLLM's AsyncScheduler: two steps in flight (the next one scheduled while the GPU
        # runs this one). A drafter keeps the synchronous loop (docs/engines.md).
        self.depth = 2 if policy.async_scheduling and not self.layout.speculative else 1
        events = set(self._events)
        if self.depth > 1:  # a decode's block is hashed one step later: at the next position
            events |= {(e + 1) % self.layout.block_size for e in self._events}
        self.events = frozenset(events)
        # Per position in a block: decode steps until one at an event position.
        self.to_event = steps_to_events(self.events, self.layout.block_size)
        self.quiet = not self.layout.speculative  # a drafter re-caches at every sample
        # The step's time from the model and the GPU (None: step_base + step_token x tokens),
        # which prices each decode by its context (the sleepers' in one sum).
        self.step_model = step_model(policy)
        self.asleep_base = 0  # the sleepers' contexts (sleepers.py `_asleep`)
        self.num_asleep = 0
        self.hash_block = self.layout.hash_block_size
        self.hash_lookahead = self.layout.hash_lookahead
        self.budget = budget
        self.block_size = self.layout.block_size
        self.has_mamba = self.layout.has_mamba
        self.max_num_seqs = policy.max_num_seqs
        self.step_base_s = policy.step_base_ms / 1000
        self.step_token_s = policy.step_token_us / 1e6
        self.time_scale = policy.time_scale
        self.clock = 0.0
        self.preempted = False  # the current step preempted a request
        self.skipped_now: list[Flight] = []  # sleepers the current step left out
        self.num_steps = 0
        self.num_tokens = 0  # scheduled so far, over every step
        self.num_ended = 0  # steps whose outputs were processed, and their tokens
        self.tokens_ended = 0
        self.running: list[Flight] = []  # admission order
        # The running requests simulated step by step; the others are asleep: decoding at
        # quiet positions, advanced only when next looked at (`_catch_up`).
        self.active: dict[Flight, None] = {}
        self.wake: dict[int, list[Flight]] = {}  # step count -> sleepers to wake before it
        self.flights: list[Flight] = []
        self.waiting: deque[Flight] = deque()
        self.arrivals: deque[Flight] = deque()  # routed here, queued at the next step start
        # The steps in flight, oldest first: (end, scheduled, skipped, tokens, step number);
        # the GPU runs them one after another (free at `gpu_free_s`)
        self.in_flight: deque[tuple] = deque()
        self.gpu_free_s = 0.0
        self.blocked = False  # a schedule found nothing while a step runs: wait for it
        self.admissions = 0  # admissions so far (a flight's `order`)
        # A fleet's replica: (flight, first token or finished, time) as its steps end, for
        # the router's hooks (None: nobody listens)
        self.hooks: list[tuple[Flight, bool, float]] | None = None
        # A plan's watch on first tokens (`sim/watch.py`; None: the replay runs to its end)
        self.watch = current_watch()

    def run(self, requests: Iterable[SimRequest]) -> Iterator[SimResult]:
        flights = self.start(list(requests))
        for f in sorted(flights, key=lambda f: (f.arrival_s, f.index)):
            self.arrivals.append(f)
        while (event := self.next_event()) is not None:
            kind, at_s = event
            if kind == "start":
                self.start_step(at_s)
            else:
                self.end_step()
        for f in flights:
            yield f.result()

    @property
    def step_end_s(self) -> float | None:
        """When the oldest step in flight ends (its outputs are processed); None: none is."""
        return self.in_flight[0][0] if self.in_flight else None

    def ttft_terms(self) -> list[tuple[float, int, int] | None]:
        """Per request (after `run`): its TTFT as lead_s + step_base_s x steps + step_token_s x
        tokens, that is (lead_s, steps, tokens): the steps from its arrival's to its first
        token's, the tokens they scheduled, and the rest of the step it arrived in. None when
        it got no token. Linear in the time model for this schedule (`hpa calibrate`)."""
        out = []
        for f in self.flights:
            if f.first_token_s is None:
                out.append(None)
                continue
            _, _, added_s = f.added
            out.append((added_s - f.arrival_s, *f.to_first))
        return out

    def _scheduled_prefixes(self) -> ScheduledPrefixes:
        """What the earlier requests had scheduled (after every request was hashed: the
        parents where hash chains branch are then known)."""
        attention = self.coord.spec_groups[0][0]
        groups, gid = self.coord.pool.num_groups, attention.gid
        layout = self.layout
        whole_blocks = layout.hash_block_size == layout.block_size
        branches = {parent for parent, _ in self.interner.ids} if whole_blocks else None
        return ScheduledPrefixes(
            layout,
            attention.ever,
            (groups, gid),
            branches,
        )

    def _scheduled_tokens(self, f: Flight) -> int:
        """Tokens of `f`'s sequence scheduled so far, this step's included (asked while the
        waiting requests are admitted); a request that finished counts them all."""
        if f.finished_s is not None and f.num_output >= f.max_tokens:
            return f.req.prompt + f.max_tokens
        if f.asleep:  # caught up: one token a step since it slept, and this step's
            now = f.req.computed + self.num_steps - f.synced_step
            return max(f.scheduled_high, now + (f not in self.skipped_now))
        return f.scheduled_high

    def _flights(self, requests: list[SimRequest]) -> list[Flight]:
        stamps = [r.timestamp_s for r in requests]
        if any(t is None for t in stamps):
            missing = next(r.request_id for r in requests if r.timestamp_s is None)
            raise ConfigError(
                f"request {missing!r} has no timestamp; schedule 'concurrent' needs every "
                "request's arrival time (use schedule 'serial')"
            )
        t0 = min(stamps, default=0.0)
        scale = self.time_scale
        return [self._flight(k, r, (r.timestamp_s - t0) * scale) for k, r in enumerate(requests)]

    def _flight(self, index: int, sim: SimRequest, arrival_s: float) -> Flight:
        layout = self.layout
        prompt = sim.num_prompt_tokens
        source, plain = request_hashes(
            self.interner, sim, layout.hash_block_size, layout.hash_lookahead
        )
        req = ReqState(prompt, source, plain)
        self._show_hashes(req)
        base = replay_boundaries(prompt, layout.block_size, layout.eagle_drop)
        return Flight(index, sim, arrival_s, req, max(1, sim.num_output_tokens), base)

    # -- one step ------------------------------------------------------------------------------

    def _start_step(self) -> None:
        """Schedule one step at the clock; its outputs wait for `end_step` (at
        `step_end_s`). A step that scheduled nothing takes no time and has no end."""
        coord = self.coord
        self._wake_up()
        coord.new_step()
        scheduled: list[tuple[Flight, int]] = []
        budget, sleepers, skipped = self._schedule_running(scheduled)
        self.skipped_now = skipped
        if budget >= 0:
            self._schedule_waiting(scheduled, budget, self.clock)
        coord.end_step()
        work = self._connector_step(scheduled)
        if not scheduled and not sleepers and not work:
            if self.in_flight:
                self.blocked = True  # nothing to add until a step's outputs come back
            elif budget >= 0 and not self.running and self.waiting and not self._held():
                self._abort(self.waiting.popleft())
            return  # an empty step takes no time
        total = sum(n for _, n in scheduled) + sleepers
        if self.step_model is None:
            step_s = self.step_base_s + self.step_token_s * total
        else:
            step_s = self._priced(scheduled, sleepers, skipped)
        end_s = self._step_end_s(max(self.clock, self.gpu_free_s), step_s)
        self.gpu_free_s = end_s
        self.num_steps += 1
        self.num_tokens += total
        if self.depth == 1:
            self.in_flight.append((end_s, scheduled, skipped, total, self.num_steps))
            return
        # vLLM advances the computed tokens at once; the outputs come at the end. A sleeper
        # the budget left out wakes (simulated again from here).
        self.in_flight.append((end_s, self._advance(scheduled), [], total, self.num_steps))
        for f in skipped:  # caught up already (`_schedule_running`)
            self._wake(f)
            self.active[f] = None

    # -- a connector's hooks (a host KV tier: host_concurrent.py) --------------------------------

    def _connector_step(self, scheduled: list[tuple[Flight, int]]) -> bool:
        """The step's connector work once it is scheduled (vLLM `build_connector_meta`):
        whether there is any, which makes a step that scheduled nothing run anyway."""
        return False

    def _held(self) -> bool:
        """Whether requests outside the running ones hold pool blocks (a connector's loads):
        a request that does not fit may then fit once they have run."""
        return False

    def _connector_busy(self) -> bool:
        """Whether a connector has work that keeps the engine stepping with nothing to
        schedule (transfers in flight, finished requests to flush)."""
        return False

    def _step_end_s(self, start_s: float, step_s: float) -> float:
        """When a step starting at `start_s` that takes `step_s` ends."""
        return start_s + step_s

    def _finishing(self, f: Flight) -> None:
        """`f` finished (its blocks are about to be freed)."""

    def _outputs(self) -> None:
        """The oldest step's outputs were processed (a connector's transfers report)."""

    def _priced(self, scheduled: list[tuple[Flight, int]], sleepers: int, skipped) -> float:
        """The step's time by the step model: its prefill chunks (new tokens, tokens already
        computed before them) and its decodes (how many, their contexts in all: the sleepers'
        from their sum, less those the budget left out, caught up)."""
        prefill = []
        decodes = sleepers
        context = self.asleep_base + self.num_asleep * self.num_steps
        context -= sum(f.req.computed for f in skipped)
        for f, n in scheduled:
            done = f.req.computed
            if n == 1 and done >= f.req.num_tokens - 1:
                decodes += 1
                context += done
            else:
                prefill.append((n, done))
        return self.step_model.step_s(prefill, decodes, context)

    def _schedule_running(
        self, scheduled: list[tuple[Flight, int]]
    ) -> tuple[int, int, list[Flight]]:
        """Schedule the running requests in admission order: (the budget left, or -1 when a
        request was preempted (no waiting request is admitted in that step); the sleepers
        scheduled, a token each; the sleepers the budget left out, caught up)."""
        budget, done, sleepers = self.budget, 0, 0
        self.prefill_scheduled = self.preempted = False
        running, active = self.running, self.active
        order = running[:] if len(active) == len(running) else sorted(active, key=running.index)
        for f in order:
            if f not in active:
                continue  # preempted earlier in this step
            i = running.index(f)
            asleep = i - done  # the sleepers before f
            if asleep >= budget:
                break
            sleepers, budget, done = sleepers + asleep, budget - asleep, i + 1
            taken = self._schedule_one(f, scheduled, budget)
            if taken is None:
                break
            budget -= taken
        rest = min(max(len(running) - done, 0), budget)
        sleepers, budget, done = sleepers + rest, budget - rest, done + rest
        skipped = [f for f in running[done:] if f.asleep]
        for f in skipped:
            self._catch_up(f)
        return (-1 if self.preempted else budget), sleepers, skipped

    def _schedule_one(self, f: Flight, scheduled: list[tuple[Flight, int]], budget: int):
        """Schedule running request `f` within `budget` tokens: the tokens it took, or None
        when it was preempted itself."""
        req = f.req
        computed, B = req.computed, self.block_size
        if f.placeholders and computed + 2 - f.placeholders >= req.prompt + f.max_tokens:
            return 0  # async: the step in flight samples its last token; not scheduled
        if f.decoding:
            if computed % B not in self.events:
                scheduled.append((f, 1))  # a decode step no group acts at: skip the cache
                if computed >= f.scheduled_high:
                    f.scheduled_high = computed + 1  # inside a block already kept
                return 1
            n = 1
        else:
            n = min(req.num_tokens + f.placeholders - computed, budget)
            if self.has_mamba:
                n = mamba_split(self.layout, req, computed, n)
            if n == 0:
                return 0
            if n == 1 and computed >= max(req.prompt, req.num_tokens + f.placeholders - 1):
                if f.decode_from is None:
                    f.decode_from = computed
                # decoding: its next quiet steps skip the cache (above), once the prefill's
                # tokens are processed (async: a step later; what they release goes then)
                f.decoding = computed - f.in_flight >= f.decode_from
        if not self._allocate(f, n):
            return None
        self._scheduled(f, computed, n)
        self.prefill_scheduled = self.prefill_scheduled or f.prefill_chunk
        scheduled.append((f, n))
        return n

    def _scheduled(self, f: Flight, start_tokens: int, n: int) -> None:
        """`f` was scheduled tokens [start, start + n) of its sequence in this step."""
        end = start_tokens + n
        if end > f.scheduled_high:
            f.scheduled_high = end
        if end > f.kept_blocks * self.block_size:  # it reached a block not kept yet
            self.prefixes.record(f, start_tokens, end)

    def _allocate(self, f: Flight, n: int) -> bool:
        """vLLM's running-request allocation: preempt the last running request until `f`'s
        `n` tokens fit, or `f` itself was preempted (False)."""
        coord = self.coord
        decode = coord.plain and n == 1 and f.decoding
        while True:
            coord.bind(f.req)
            fits = (
                coord.decode(f.req)
                if decode
                else coord.step(f.req, n, 0, None, f.boundaries, f.in_flight)
            )
            if fits:
                return True
            victim = self.running.pop()
            self._preempt(victim)
            self.preempted = True  # no waiting request is admitted in this step
            if victim is f:
                # Alone it had the whole pool: it can never finish (synchronous loop; with a
                # step in flight its blocks may yet come free: `_start_step` aborts a head
                # that does not fit once nothing runs, as vLLM's engine does)
                if not self.running and not self.in_flight and not self._held():
                    self._abort(self.waiting.popleft())
                return False

    def _schedule_waiting(
        self, scheduled: list[tuple[Flight, int]], budget: int, start_s: float
    ) -> None:
        waiting, running = self.waiting, self.running
        batched = bool(scheduled)  # running requests are in this step's batch
        while budget > 0 and waiting and len(running) < self.max_num_seqs:
            f = waiting[0]
            req = f.req
            self.coord.bind(req)
            hit, longest, found = self._lookup(f)
            req.junction = longest if longest > hit else 0
            f.set_junction(req.junction)
            n, pad = self._admission_tokens(req, hit, budget, batched)
            if n == 0:
                break
            admission = self._memo_admission(f, hit, longest, found)
            # Blocks the earlier requests had scheduled, before this admission hashes its own.
            blocks = self.prefixes.scheduled_blocks(f, longest) if f.first is None else 0
            if not self.coord.step(req, n, hit, self.coord.hit_blocks(found), f.boundaries):
                break
            if f.first is None:
                shared = self.prefixes.shared(f, blocks, self._scheduled_tokens)
                admission = admission._replace(shared_scheduled_tokens=shared)
            waiting.popleft()
            self.admissions += 1
            f.order = self.admissions
            running.append(f)
            self.active[f] = None
            f.admitted(admission, start_s, self.num_steps)
            if f.held_blocks is None and self.coord.pool.bounded:
                f.held_blocks = self.layout.num_blocks - 1 - self.coord.pool.num_free()
            f.pad = pad
            req.computed = hit
            self._scheduled(f, hit, n)
            scheduled.append((f, n))
            budget -= n

    def _admission_tokens(
        self, req: ReqState, hit: int, budget: int, batched: bool
    ) -> tuple[int, int]:
        """(tokens an admission schedules, draft slots padded among them); 0 = none fit.

        A speculative decoder pads a one-token admission with a draft slot, unless a running
        prefill is in the batch (vLLM: nothing scheduled and no hit also means no pad)."""
        layout = self.layout
        wanted = req.num_tokens - hit
        pad = (
            layout.speculative
            and wanted == 1
            and not self.prefill_scheduled
            and (batched or hit > 0)
        )
        if pad and budget < 2:
            return 0, 0
        n = 2 if pad else min(wanted, budget)
        if layout.has_mamba:
            n = mamba_split(layout, req, hit, n)
        if pad and n != 2:
            n, pad = 1, False
        return n, int(pad)

    def _lookup(self, f: Flight) -> tuple:
        """The waiting request's lookup (`Coordinator.lookup`), kept while the pool's map is
        unchanged (`BlockPool.version`). vLLM looks the head of the queue up again at every
        step until it fits; on long prompts with sparse states each lookup scans hundreds of
        blocks, and a head that waits for thousands of steps made that most of a replay."""
        req = f.req
        key = (self.coord.pool.version, req.num_tokens, f.first is None)
        memo = f.lookup_memo
        if memo is not None and memo[0] == key:
            if self.check_memo:
                assert memo[1] == self.coord.lookup(req.hashes, req.num_tokens - 1), f.index
            return memo[1]
        found = self.coord.lookup(req.hashes, req.num_tokens - 1)
        f.lookup_memo = (key, found, None)
        return found

    def _memo_admission(self, f: Flight, hit: int, longest: int, found: list) -> Admission:
        """`_admission`, kept with the lookup it follows (a function of the same state)."""
        key, lookup, admission = f.lookup_memo
        if admission is None:
            admission = self._admission(f, hit, longest, found)
            f.lookup_memo = (key, lookup, admission)
        elif self.check_memo:
            assert admission == self._admission(f, hit, longest, found), f.index
        return admission

    def _admission(self, f: Flight, hit: int, longest: int, found: list) -> Admission:
        """The lookup's figures, before the hit is adopted (diagnostics read the cache as
        the lookup saw it)."""
        req = f.req
        if f.first is not None:
            return Admission(hit, req.num_tokens, longest, 0, longest, req.junction, 0)
        attention = self._attention_match(req, longest)
        evicted = self._evicted(req, hit, longest, found) if longest > hit else 0
        # shared_scheduled_tokens: set once the admission succeeds (_schedule_waiting).
        return Admission(hit, req.num_tokens, longest, evicted, attention, req.junction, 0)
