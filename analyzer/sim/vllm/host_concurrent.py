"""The concurrent replay with a host KV tier (vLLM 0.33's OffloadingConnector, `offload.py`)
on the simulated clock, as vLLM's scheduler drives its connector:

- waiting requests are taken as vLLM does: first those holding blocks for a load (one whose
  load is in resumes: its loaded blocks join the GPU prefix cache and it is scheduled from
  there; one still loading is skipped), then the waiting queue; a GPU hit the host tier
  extends admits the request with its blocks allocated and its load issued (it computes
  nothing and takes no budget; it is skipped), only if the whole sequence fits beside what
  the prefills in flight still need; a lookup that meets a key still being stored or loaded
  skips the request this step;
- each scheduled step offers what it computes (the Mamba states first, then the chunks of
  each request in schedule order, then those of the requests finished at the last outputs,
  whose recency is then committed); a step's stores land with the next step's outputs;
- a load lands with the outputs of the first step that ends once its bytes have crossed the
  link (`host_bandwidth_gbps`; with no model to size them, in the step that issued it); a
  step with connector work but nothing scheduled still runs (the engine keeps stepping) and
  lasts until the first load in flight lands. A step that scheduled tokens is priced by them
  alone, loads in flight or not (vLLM's connector loads asynchronously), one that preempted
  included: vLLM skips the waiting requests there but runs the running ones it kept.

Quiet decode steps sleep as without a tier (`sleepers.py`), on the GPU side's own decode
events (the decode-events gate refuses a host tier: that decision is taken here). A decode
step at a position where no cache group acts (not the last token of a block, so no chunk
completes) offers nothing, records no computed chunk, hashes no Mamba state and allocates no
block; a request sleeps only when its offers are caught up (`Connector.offers` false: no
dropped offer to retry, which another request's step could let through), and whole runs of
sleeper-only steps are clock ticks only while the connector has no work (no load in flight
or landed, no store in flight, no finished request to offer). `every_step` keeps the plain
step-by-step replay, the reference the tests hold this one to. Async scheduling is not
modelled with a tier.
"""

from __future__ import annotations

from collections import deque
from dataclasses import replace

from analyzer.config.policy import Policy
from analyzer.errors import ConfigError
from analyzer.sim.vllm.block_pool import NULL
from analyzer.sim.vllm.concurrent import ConcurrentReplay
from analyzer.sim.vllm.flight import Flight
from analyzer.sim.vllm.gates import events
from analyzer.sim.vllm.layout import FULL
from analyzer.sim.vllm.offload import Connector, Offload
from analyzer.sim.vllm.sleepers import steps_to_events


def check_host_schedule(policy: Policy) -> None:
    """A host tier on the concurrent schedule needs vLLM's synchronous loop."""
    if policy.async_scheduling:
        raise ConfigError(
            "policy key 'host_tier_gib': a host tier is not modelled with async_scheduling "
            "(two steps in flight); set async_scheduling false"
        )


class HostTierConcurrent(ConcurrentReplay):
    """`ConcurrentReplay` with the host tier (one replica)."""

    host_tier_modelled = True
    every_step = False  # tests: simulate every decode step (the step-by-step reference)

    def __init__(self, policy: Policy, *, num_groups: dict[str, int] | None = None) -> None:
        check_host_schedule(policy)
        super().__init__(policy, num_groups=num_groups)
        if not self.every_step:
            self._sleep_on(events(replace(self.layout, host_tier=None)))
        self.conn = Connector(self.layout, self.coord, self.layout.host_tier)
        self.holding: deque[Flight] = deque()  # vLLM kv_holding_waiting: loading or loaded
        self.finished_now: list[tuple[Flight, list[list[int]]]] = []  # to offer, tables
        self.jobs: list[list[int]] = []  # this step's store jobs
        self.skipped_holding: list[Flight] = []  # skipped in this pass (vLLM's order kept)
        self.flushed: list[list[int]] = []  # finished requests' stores landing this step
        self.allocated_now: set[int] = set()  # blocks handed out in this step
        self._scheduled_any = False  # the step scheduled tokens (the model runs for them)
        self.coord.pool.handed_out = self.allocated_now  # the pool notes what it hands out

    def _flight(self, index, sim, arrival_s) -> Flight:
        f = super()._flight(index, sim, arrival_s)
        f.host = Offload(len(self.coord.managers))
        return f

    def _sleep_on(self, gpu_events: tuple[int, ...]) -> None:
        """Let decoders sleep between the GPU side's decode events. They include the last
        position of a block (B - 1), the only one where a decode step completes a chunk
        (to record, and to offer without prompt-only) or hashes a Mamba state."""
        assert self.block_size - 1 in gpu_events, gpu_events
        self.events = frozenset(gpu_events)
        self.to_event = steps_to_events(self.events, self.block_size)

    # -- when steps run --------------------------------------------------------------------

    def _connector_busy(self) -> bool:
        return bool(self.holding or self.finished_now or self.conn.in_flight or self.jobs)

    def _held(self) -> bool:
        return bool(self.holding)

    def _quiet_run(self, f: Flight) -> int:
        """A decoder sleeps only with its offers caught up: one dropped for want of a slot is
        retried every step (what another request's step frees may let it through). Until
        its next event its horizon stays in the same chunk, so `offers` stays false."""
        steps = super()._quiet_run(f)
        if steps > 0 and self.conn.offers(f.req, f.host, f.req.computed + 1):
            return 0
        return steps

    def _quiet_steps(self, horizon_s: float) -> int:
        """Sleeper-only steps as clock ticks, only while the connector has nothing to do
        (a load, a store in flight, a finished request's offer each needs its step)."""
        if self._connector_busy():
            return 0
        return super()._quiet_steps(horizon_s)

    def _schedule_running(self, scheduled):
        """The running requests' pass. What it scheduled (sleepers included) makes the step
        one the model runs, whether or not the waiting pass follows: a step that preempted
        skips it, yet runs the requests it kept."""
        budget, sleepers, skipped = super()._schedule_running(scheduled)
        self._scheduled_any = bool(scheduled) or sleepers > 0
        return budget, sleepers, skipped

    def next_start_s(self) -> float | None:
        if self.blocked or len(self.in_flight) >= self.depth:
            return None
        if self._connector_busy():
            return self.clock
        return super().next_start_s()

    def _step_end_s(self, start_s: float, step_s: float) -> float:
        """A step's end; one that runs only while loads cross the link lasts until the first
        of them lands (the engine waits on its transfers)."""
        end = start_s + step_s
        if not self._scheduled_any and self.holding:
            loads = [f.host.done_s for f in self.holding if f.host.keys is not None]
            if loads:
                end = max(end, min(loads))
        return end

    # -- the waiting requests -----------------------------------------------------------------

    def _schedule_waiting(self, scheduled, budget: int, start_s: float) -> None:
        running = self.running
        skipped_holding: list[Flight] = []
        self.skipped_holding = skipped_holding
        skipped_waiting: list[Flight] = []
        batched = bool(scheduled)
        while budget > 0 and len(running) < self.max_num_seqs:
            queue = self.holding if self.holding else self.waiting
            if not queue:
                break
            f = queue[0]
            off = f.host
            if off.keys is not None:  # its load is still crossing
                skipped_holding.append(queue.popleft())
                continue
            if queue is self.holding:
                off.awaiting = False  # reached with its load in: vLLM's status is WAITING
                taken = self._resume(f, scheduled, budget, start_s, batched)
            else:
                taken = self._admit_waiting(f, scheduled, budget, start_s, batched)
            if taken is None:
                break
            if taken < 0:  # a load issued, or a lookup deferred
                (skipped_holding if taken == -1 else skipped_waiting).append(queue.popleft())
                continue
            budget -= taken
        self.holding.extendleft(reversed(skipped_holding))
        self.waiting.extendleft(reversed(skipped_waiting))
        self._scheduled_any = self._scheduled_any or bool(scheduled)

    def _admit_waiting(self, f: Flight, scheduled, budget: int, start_s: float, batched):
        """A waiting request's admission: tokens scheduled; -1 a load issued, -2 the host
        lookup deferred; None nothing more is admitted this step."""
        req, off, coord = f.req, f.host, self.coord
        coord.bind(req)
        hit, longest, found = self._lookup(f)
        req.junction = longest if longest > hit else 0
        f.set_junction(req.junction)
        off.next_chunk = [0] * len(off.next_chunk)  # a fresh start offers every chunk
        ext = self.conn.lookup(req, hit)
        if ext is None:
            return -2
        admission = self._memo_admission(f, hit, longest, found)
        if ext:
            rows = coord.hit_blocks(found)
            if not coord.admit_loading(req, hit, ext, rows, self._reserved(f)):
                return None
            if f.first is None:
                self.conn.explain(req, off, hit, ext)
            self._issue(f, hit, ext, admission, start_s)
            return -1
        n, pad = self._admission_tokens(req, hit, budget, batched)
        if n == 0:
            return None
        blocks = self.prefixes.scheduled_blocks(f, longest) if f.first is None else 0
        if not coord.step(req, n, hit, coord.hit_blocks(found), f.boundaries):
            return None
        if f.first is None:
            admission = admission._replace(
                shared_scheduled_tokens=self.prefixes.shared(f, blocks, self._scheduled_tokens)
            )
            self.conn.explain(req, off, hit, ext)
        self.waiting.popleft()
        self._join(f, admission, start_s, hit, n, scheduled)
        f.pad = pad
        return n

    def _reserved(self, f: Flight) -> int:
        """Blocks the prefills in flight still need to hold their whole sequences (vLLM
        `_inflight_prefill_reserved_blocks`, which a load admission leaves free): running
        requests whose prefill is unfinished (those admitted in this step only if this
        step does not finish it) and the other loads."""
        if not self.coord.pool.bounded:
            return 0
        coord, reserved = self.coord, 0
        now = self.admitted_now
        holding = {*self.holding, *self.skipped_holding}  # loads issued in this pass too
        for g in [*self.running, *holding]:
            req = g.req
            if g in now:
                prefilling = req.computed + now[g] < req.num_tokens
            else:
                prefilling = g in holding or g.prefill_chunk
            if g is f or not prefilling:
                continue
            coord.bind(req)
            full = req.num_tokens
            reserved += sum(
                m.blocks_needed([], full, req.computed, 0, full, True) for m in coord.managers
            )
        coord.bind(f.req)
        return reserved

    def _issue(self, f: Flight, hit: int, ext: int, admission, start_s: float) -> None:
        """The load is issued: the request holds its blocks and waits."""
        off = f.host
        self._note_table()
        keys = self.conn.load(f.req, off, hit, ext)
        off.keys = keys
        off.awaiting = True
        off.issued_s = start_s
        off.done_s = start_s + self.conn.spec.load_s(len(keys))
        if f.first is None:
            off.host_hit = ext
        f.req.computed = hit + ext
        f.lookup_memo = (None, None, admission)  # the admission's figures, for the resume

    def _resume(self, f: Flight, scheduled, budget: int, start_s: float, batched):
        """A request whose load is in: its blocks join the GPU prefix cache (once), then it
        is scheduled from there like a waiting request with computed tokens."""
        req, coord = f.req, self.coord
        coord.bind(req)
        if f.lookup_memo is not None and f.lookup_memo[0] is None:  # the load just landed
            admission = f.lookup_memo[2]
            off = f.host
            off.wait_s = (off.wait_s or 0.0) + start_s - off.issued_s
            coord.cache(req, req.computed, f.boundaries)
            self.conn.take_handoffs(f.host)
            if req.computed >= req.num_tokens:
                req.computed = req.num_tokens - 1
            f.lookup_memo = ("loaded", None, admission)
        admission = f.lookup_memo[2]
        n, pad = self._admission_tokens(req, req.computed, budget, batched)
        if n == 0:
            return None
        empty: list[list[int]] = [[] for _ in coord.managers]
        if not coord.step(req, n, 0, empty, f.boundaries):
            return None
        self.holding.popleft()
        f.lookup_memo = None
        self._join(f, admission, start_s, req.computed, n, scheduled)
        return n

    def _join(self, f: Flight, admission, start_s: float, computed: int, n: int, scheduled):
        """`f` joins the running requests with `n` tokens from `computed` this step."""
        self.conn.take_handoffs(f.host)
        self._note_table()
        self.admissions += 1
        f.order = self.admissions
        self.running.append(f)
        self.active[f] = None
        f.admitted(admission, start_s, self.num_steps)
        if f.held_blocks is None and self.coord.pool.bounded:
            f.held_blocks = self.layout.num_blocks - 1 - self.coord.pool.num_free()
        f.req.computed = computed
        self._scheduled(f, computed, n)
        scheduled.append((f, n))
        self.admitted_now[f] = n

    # -- the running requests, their ends -----------------------------------------------------

    def _allocate(self, f: Flight, n: int) -> bool:
        fits = super()._allocate(f, n)
        if fits:
            self.conn.take_handoffs(f.host)
        return fits

    def _finishing(self, f: Flight) -> None:
        """A finished request's tables are kept for its last offer, then what it no longer
        reads is released before the rest (vLLM `_connector_finished`)."""
        self.finished_now.append((f, [list(m.blocks) for m in self.coord.managers]))
        self.coord.release_skipped(f.req)

    def _connector_step(self, scheduled) -> bool:
        """vLLM `build_connector_meta`: the Mamba states hashed this step, then each
        scheduled request's chunks, then the finished requests' (their recency committed)."""
        conn, jobs = self.conn, []
        for f, _ in scheduled:
            if f.host.handoffs:
                conn.offer_states(f.req, f.host, jobs)
        for f, n in scheduled:
            if conn.offers(f.req, f.host, f.req.computed + n):  # (binding costs)
                self.coord.bind(f.req)
                conn.offer_chunks(f.req, f.host, f.req.computed + n, f.boundaries, jobs)
        self.flushed = []
        for f, tables in self.finished_now:
            req = f.req
            horizon = max(req.prompt, req.num_tokens - 1)
            before = len(jobs)
            conn.offer_chunks(req, f.host, horizon, f.boundaries, jobs, tables)
            if len(jobs) > before and self._reused_now(f, jobs[-1], tables):
                self.flushed.append(jobs.pop())
        for f, _ in self.finished_now:
            conn.tier.finish(f.host.access)
        loading = any(f.host.keys is not None for f in self.holding)
        stuck = not (scheduled or loading or self.running or self.preempted)
        if stuck and self.holding:  # the waiting pass ran and the head could not resume
            self._give_up(self.holding.popleft())
        had = bool(self.finished_now or loading or conn.in_flight)
        self.finished_now = []
        self.jobs = jobs
        for f in self.holding:  # vLLM counts WAITING_FOR_REMOTE_KVS: landed, not reached yet too
            if f.host.awaiting:
                f.host.wait_steps += 1
        return had or bool(jobs or self.flushed)

    def _reused_now(self, f: Flight, keys: list[int], tables: list[list[int]]) -> bool:
        """Whether a finished request's store reads a full-attention block that this step
        handed to a request again: vLLM flushes that job, so it lands with this step's
        outputs (the worker copies it before the block is overwritten)."""
        position, c = f.host.access.position, self.layout.block_size
        kinds = self.layout.group_types
        for key in keys:
            tokens, gid = position[key]
            if kinds[gid] == FULL and tables[gid][tokens // c - 1] in self.allocated_now:
                return True
        return False

    def _give_up(self, f: Flight) -> None:
        """A request whose load landed and whose sequence does not fit though nothing runs
        or loads: it may never (vLLM's scheduler stalls there); its blocks are freed and it
        is aborted, as a waiting head that cannot fit alone is (`StepEnds._abort`)."""
        self.coord.bind(f.req)
        self.coord.free()
        f.lookup_memo = None
        self._abort(f)

    def _outputs(self) -> None:
        """The step's outputs: the stores of the step before land, and this step's flushed
        ones; loads whose bytes have crossed by now land (their requests resume at the
        next schedule)."""
        self.conn.end_step(self.jobs)
        self.jobs = []
        for keys in self.flushed:
            self.conn.tier.complete_store(keys)
        self.flushed = []
        for f in self.holding:
            off = f.host
            if off.keys is not None and off.done_s <= self.clock:
                self.conn.loaded(off.keys)
                off.loaded_keys = len(off.keys)
                off.keys = None

    def _start_step(self) -> None:
        self._scheduled_any = False
        self.admitted_now: dict[Flight, int] = {}
        self.allocated_now.clear()
        super()._start_step()

    def _note_table(self) -> None:
        """A request admitted or resumed this step: vLLM's connector sees its whole table
        as allocated in the step (its GPU-hit blocks included)."""
        for m in self.coord.managers:
            self.allocated_now.update(b for b in m.blocks if b != NULL)
