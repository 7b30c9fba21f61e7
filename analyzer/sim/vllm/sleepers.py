"""Sleeping decoders of the concurrent replay (`concurrent.py`).

A running request that decodes at positions where no cache group acts (`layout.decode_events`) is
not visited each step: it sleeps, and decodes one token in every step it is scheduled in.
It is caught up (its fields advanced by the steps since it slept) when it is woken before the
step at its next event position or its last token, when it is preempted, or when the budget
leaves it out of a step. While everything running sleeps and nobody waits, whole runs of
steps are only clock ticks (`_quiet_steps`).
"""

from __future__ import annotations

from bisect import bisect_right

from analyzer.sim.vllm.flight import Flight


def steps_to_events(events: frozenset[int], block_size: int) -> list[int]:
    """Per position r in a block: the decode steps from r to the next event position (0 at
    an event; cyclic, into the next block; `block_size` where there is none). One sweep back
    over the block (every position is an event where no shortcut is admitted: a min over the
    events for each position cost 17 ms a replay at 528-token blocks)."""
    if not events:
        return [block_size] * block_size
    steps = [0] * block_size
    following = min(events) + block_size  # the first event of the next block
    for r in range(block_size - 1, -1, -1):
        if r in events:
            following = r
        steps[r] = following - r
    return steps


def _order(entry: tuple) -> int:
    return entry[0].order


class SleepingDecoders:
    """The ConcurrentReplay methods that keep its sleepers; they use its `running`,
    `active`, `wake`, `waiting`, step counters, clock and time model."""

    def _quiet_steps(self, horizon_s: float) -> int:
        """Run the next steps at once while every running request sleeps (nobody waits, and
        each starts before `horizon_s`, the next arrival). The clock still adds each step's
        time, one at a time (the same doubles). Returns the number of steps run."""
        running = self.running
        if self.waiting or self.active or not running or len(running) > self.budget:
            return 0
        if self.depth > 1:
            return self._quiet_steps_async(horizon_s)
        count = min(f.wake_step for f in running) - self.num_steps
        n = len(running)
        done = 0
        if self.step_model is None:
            step_s = self.step_base_s + self.step_token_s * n
            while done < count and self.clock < horizon_s:
                self.clock = self.clock + step_s
                done += 1
        else:  # each decode's context grows a token a step
            price, base = self.step_model.step_s, self.asleep_base
            while done < count and self.clock < horizon_s:
                self.clock = self.clock + price((), n, base + n * (self.num_steps + done))
                done += 1
        self.num_steps += done
        self.num_tokens += done * len(running)
        self.num_ended += done
        self.tokens_ended += done * len(running)
        return done

    def _quiet_steps_async(self, horizon_s: float) -> int:
        """`_quiet_steps` under async scheduling: while every running request sleeps and no
        step in flight has a request of its own, schedule sleeper-only steps (two in flight,
        back to back on the GPU) and end the oldest, the clock at each end; a step is
        scheduled only before `horizon_s` and before any sleeper is due to wake."""
        running, flying = self.running, self.in_flight
        if len(flying) > 1 or any(record[1] for record in flying):
            return 0
        last = min(f.wake_step for f in running)
        n = len(running)
        done = 0
        while self.num_steps < last and self.clock < horizon_s:
            if self.step_model is None:
                step_s = self.step_base_s + self.step_token_s * n
            else:
                step_s = self.step_model.step_s((), n, self.asleep_base + n * self.num_steps)
            end_s = max(self.clock, self.gpu_free_s) + step_s
            self.gpu_free_s = end_s
            self.num_steps += 1
            self.num_tokens += n
            flying.append((end_s, [], [], n, self.num_steps))
            done += 1
            if len(flying) < self.depth:
                continue  # the engine schedules again before it waits
            if flying[0][0] > horizon_s:
                break  # its end comes after what may arrive: the usual loop ends it
            end_s, _, _, tokens, _ = flying.popleft()
            self.clock = end_s
            self.num_ended += 1
            self.tokens_ended += tokens
        return done

    def _quiet_run(self, f: Flight) -> int:
        """How many of `f`'s next steps are quiet decode steps that do not finish it."""
        if not f.decoding:  # prefilling, or its first decode step not yet taken
            return 0
        req = f.req
        to_event = self.to_event[req.computed % self.layout.block_size]
        # Async: the outputs in flight are counted (its last step may be asleep: it is woken
        # before the next one is scheduled, and that step's output is processed awake)
        return min(to_event, f.max_tokens - f.num_output - max(1, f.in_flight))

    def _sleep(self, f: Flight) -> None:
        """`f` just sampled: let it sleep through its next quiet decode steps, if any. A
        sleeper decodes one token in every step it is scheduled in; it is woken (simulated
        again) before the step at its next event position or its last token."""
        steps = self._quiet_run(f)
        if steps <= 0:
            return
        del self.active[f]
        f.asleep = True
        f.synced_step = self.num_steps
        self._asleep(f, 1)
        f.wake_step = self.num_steps + steps
        self.wake.setdefault(f.wake_step, []).append(f)

    def _catch_up(self, f: Flight) -> None:
        """A sleeper's fields as of now: one token decoded in each step since it slept.
        Async: computed counts the steps scheduled since, the outputs those ended; the steps
        still in flight take `f` in their records (their outputs come as an awake one's)."""
        if self.depth > 1:
            self._catch_up_async(f)
            return
        steps = self.num_steps - f.synced_step
        if steps:
            req = f.req
            req.computed += steps
            req.num_tokens += steps
            f.num_output += steps
            f.chunks.extend([1] * steps)
            f.synced_step = self.num_steps
            self._show_hashes(req)

    def _catch_up_async(self, f: Flight) -> None:
        slept = f.synced_step
        steps = self.num_steps - slept
        if not steps:
            return
        ended = max(0, self.num_ended - slept)
        req = f.req
        req.computed += steps
        f.chunks.extend([1] * steps)
        req.num_tokens += ended
        f.num_output += ended
        f.in_flight += steps - ended
        f.placeholders += steps - ended
        for record in self.in_flight:
            if record[4] > slept:  # its outputs in the step's order (running order)
                entries = record[1]
                at = bisect_right(entries, f.order, key=_order)
                entries.insert(at, (f, 1, True))
        f.synced_step = self.num_steps
        if req.computed > f.scheduled_high:  # scheduled while asleep (its next step may not be)
            f.scheduled_high = req.computed
        self._show_hashes(req)

    def _wake_up(self) -> None:
        """Simulate again the sleepers due before this step (stale entries are skipped)."""
        now = self.num_steps
        for f in self.wake.pop(now, ()):
            if f.asleep and f.wake_step == now:
                self._wake(f)
                self.active[f] = None

    def _wake(self, f: Flight) -> None:
        """`f` is simulated again from now: caught up, out of the sleepers' sums."""
        self._catch_up(f)
        f.asleep = False
        self._asleep(f, -1)

    def _asleep(self, f: Flight, sign: int) -> None:
        """`f` falls asleep (1) or wakes (-1): the sleepers' contexts, kept as one sum for a
        step model: a sleeper's context at step s is computed - synced_step + s, a figure
        its catching up leaves as it is (`asleep_base` sums it, `num_asleep` counts them)."""
        self.asleep_base += sign * (f.req.computed - f.synced_step)
        self.num_asleep += sign
