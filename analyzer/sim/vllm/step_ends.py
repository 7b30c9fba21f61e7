"""How a step of the concurrent replay (`concurrent.py`) ends: its outputs (tokens sampled,
requests finished and their blocks freed), preemptions and aborts; with async scheduling
(vLLM's AsyncScheduler) the computed tokens advancing as a step is scheduled and the outputs
arriving a step later.
"""

from __future__ import annotations

from analyzer.sim.vllm.flight import Flight
from analyzer.sim.vllm.reference import NOT_SCHEDULABLE
from analyzer.words import plural


class StepEnds:
    """The ConcurrentReplay methods that end a step; they use its queues, clock, coordinator,
    the steps in flight and the sleepers' (`sleepers.py`)."""

    def end_step(self) -> None:
        """The oldest step in flight ends: the clock moves to its end and its outputs are
        processed (tokens sampled, requests finished and their blocks freed)."""
        end_s, scheduled, skipped, total, _ = self.in_flight.popleft()
        self.clock = end_s
        self.blocked = False
        self.num_ended += 1
        self.tokens_ended += total
        for f in skipped:  # left out of this step: asleep as before, one step later
            self.asleep_base -= 1  # its context: one token fewer than the step count says
            f.synced_step = self.num_steps
            f.wake_step += 1
            self.wake.setdefault(f.wake_step, []).append(f)
        if self.depth == 1:
            for f, n in scheduled:
                req = f.req
                req.computed += n
                f.chunks.append(n)
                if req.computed < req.num_tokens:
                    f.prefill_chunk = True
                    continue
                f.prefill_chunk = False
                req.computed -= f.pad  # the padded draft slot is rejected
                f.pad = 0
                self._sample(f)
                if self.quiet and f in self.active:
                    self._sleep(f)
            self._outputs()
            return
        for f, n, samples in scheduled:
            f.in_flight -= n
            if f.stale:  # preempted since: its output still arrives, nothing is cached
                f.stale -= n
                if samples:
                    self._sample(f, stale=True)
            elif samples:
                f.placeholders -= 1
                self._sample(f)
                if self.quiet and f in self.active and f.in_flight == 1:
                    self._sleep(f)  # in the next step (asleep from the one after)

    def _advance(self, scheduled: list[tuple[Flight, int]]) -> list[tuple[Flight, int, bool]]:
        """Async scheduling: the step's requests advance their computed tokens as it is
        scheduled (vLLM's `_update_after_schedule`); (flight, tokens, whether the step samples
        for it: its prompt and the outputs in flight are all computed then)."""
        out = []
        for f, n in scheduled:
            req = f.req
            req.computed += n
            f.chunks.append(n)
            f.in_flight += n
            samples = req.computed >= req.num_tokens + f.placeholders
            f.prefill_chunk = not samples
            if samples:
                f.placeholders += 1
            out.append((f, n, samples))
        return out

    def _cache_outputs(self, f: Flight) -> None:
        """Async: the output just appended may complete a block of a request that no step in
        flight has (finishing, or left out by the budget): vLLM's `update_from_output`
        hashes it now (a request in the next step had it hashed as that step was scheduled)."""
        req = f.req
        self.coord.bind(req)
        self.coord.cache(req, min(req.computed, req.num_tokens), f.boundaries)

    # -- outputs, preemption, aborts ---------------------------------------------------------

    def _sample(self, f: Flight, stale: bool = False) -> None:
        """The step sampled a token for `f`: it joins the sequence; the last one finishes it.
        Async: the token joins the known ones (`num_tokens`, computed already counts it); a
        `stale` one (sampled before `f` was preempted) is appended, nothing else."""
        req = f.req
        f.num_output += 1
        if f.first_token_s is None:
            f.first_token_s = self.clock
            steps, tokens, _ = f.added
            f.to_first = (self.num_ended - steps, self.tokens_ended - tokens)
            if self.hooks is not None:
                self.hooks.append((f, False, self.clock))
            if self.watch is not None:
                self.watch.first_token(f.sim.request_id, self.clock - f.arrival_s)
        if self.depth > 1:
            req.num_tokens += 1
            if (req.num_tokens - self.hash_lookahead) // self.hash_block > len(req.hashes):
                self._show_hashes(req)
            if not stale and f.in_flight == 0 and not f.asleep:
                self._cache_outputs(f)
        elif self.quiet:
            req.num_tokens = req.computed + 1
            if (req.num_tokens - self.hash_lookahead) // self.hash_block > len(req.hashes):
                self._show_hashes(req)
        else:
            self.coord.bind(req)  # a drafter re-caches the request's blocks
            self._sampled(req, f.boundaries)
        if f.num_output >= f.max_tokens:
            f.finished_s = self.clock
            if self.hooks is not None:
                self.hooks.append((f, True, self.clock))
            if stale:  # preempted: waiting, its blocks freed already
                self.waiting.remove(f)
                return
            self.running.remove(f)
            del self.active[f]
            self.coord.bind(req)
            self._finishing(f)
            self.coord.free()

    def _preempt(self, f: Flight) -> None:
        """Free `f`'s blocks (they stay cached) and put it first in the waiting queue."""
        if f.asleep:
            self._wake(f)
        else:
            del self.active[f]
        self.coord.bind(f.req)
        self.coord.free()
        f.preempted()
        self.waiting.appendleft(f)

    def _abort(self, f: Flight) -> None:
        """A request that cannot fit even alone: vLLM's engine aborts it (a preempted one too:
        its sequence grew by its outputs; its first admission's figures stay)."""
        f.finished_s = self.clock
        if self.hooks is not None:
            self.hooks.append((f, True, self.clock))
        if f.first is None:
            f.error = NOT_SCHEDULABLE.format(self.layout.num_blocks)
        else:
            f.error = (
                f"aborted after {plural(f.num_preemptions, 'preemption')}: its "
                f"{f.req.num_tokens}-token "
                f"sequence no longer fits the pool ({self.layout.num_blocks} blocks)"
            )
