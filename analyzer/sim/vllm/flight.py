"""One request in the concurrent replay: where it is, what its admissions found, its times.

Times are seconds on the simulated clock; lengths tokens.
"""

from __future__ import annotations

from typing import NamedTuple

from analyzer.sim.records import SimRequest, SimResult
from analyzer.sim.vllm.managers import ReqState


class Admission(NamedTuple):
    """What one admission's lookup found (vLLM `get_computed_blocks`)."""

    hit_tokens: int
    queried_tokens: int  # the sequence looked up: prompt, + outputs after a preemption
    longest_tokens: int  # the attention-side match (hit + sparse-retention miss)
    evicted_tokens: int  # of the miss: lost to evicted sparse states
    attention_tokens: int  # full attention's plain match (no lookahead, no drop)
    junction_tokens: int
    shared_scheduled_tokens: int  # prefix shared with what the earlier requests had scheduled


class Flight:
    """A request from arrival to finish. `first` is its first admission (the figures a
    request is reported with); later admissions follow preemptions."""

    __slots__ = (
        "index",
        "sim",
        "arrival_s",
        "req",
        "max_tokens",
        "base_boundaries",
        "boundaries",
        "num_output",
        "first",
        "first_scheduled_s",
        "first_step",
        "first_token_s",
        "finished_s",
        "num_preemptions",
        "hit_total_tokens",
        "recomputed_tokens",
        "computed_at_preemption",
        "decoding",
        "scheduled_high",
        "kept_blocks",
        "asleep",
        "synced_step",
        "wake_step",
        "prefill_chunk",
        "pad",
        "added",
        "held_blocks",
        "to_first",
        "chunks",
        "error",
        "lookup_memo",
        "placeholders",
        "in_flight",
        "stale",
        "decode_from",
        "order",
        "host",
    )

    def __init__(
        self,
        index: int,
        sim: SimRequest,
        arrival_s: float,
        req: ReqState,
        max_tokens: int,
        boundaries: list[int],
    ) -> None:
        self.index = index
        self.sim = sim
        self.arrival_s = arrival_s
        self.req = req
        self.max_tokens = max_tokens  # it finishes after this many sampled tokens
        self.base_boundaries = boundaries
        self.boundaries = boundaries
        self.num_output = 0
        self.first: Admission | None = None
        self.first_scheduled_s: float | None = None
        self.first_step: int | None = None
        self.first_token_s: float | None = None
        self.finished_s: float | None = None
        self.num_preemptions = 0
        self.hit_total_tokens = 0
        self.recomputed_tokens = 0
        self.computed_at_preemption = 0
        self.decoding = False  # a decode step was simulated since the last admission
        self.scheduled_high = 0  # most tokens of its sequence ever scheduled (explicitly)
        self.kept_blocks = 0  # blocks kept by ScheduledPrefixes.record so far
        # Asleep (concurrent replay): its fields are those after step `synced_step`; it is
        # simulated again before step `wake_step` + 1.
        self.asleep = False
        self.synced_step = 0
        self.wake_step = 0
        self.prefill_chunk = False  # its last step left its prefill unfinished
        self.pad = 0  # draft slots padded into this step's tokens (rejected after it)
        self.added: tuple[int, int, float] = (0, 0, 0.0)  # steps, tokens, clock when queued
        self.to_first: tuple[int, int] = (0, 0)  # steps and their tokens until its 1st token
        self.held_blocks: int | None = None  # pool blocks in use right after its admission
        self.chunks: list[int] = []
        # (pool version and lookup length, the lookup, its Admission or None): see
        # ConcurrentReplay._lookup
        self.lookup_memo: tuple | None = None
        self.error: str | None = None
        # Async scheduling (vLLM's AsyncScheduler): outputs the GPU is still sampling for it,
        # its tokens in the steps in flight, and those of them a preemption made stale.
        self.placeholders = 0
        self.in_flight = 0
        self.stale = 0
        self.decode_from: int | None = None  # its length at its first decode since admission
        self.order = 0  # when it joined the running requests (their order: admission order)
        self.host = None  # its host-tier state (offload.Offload) when the cache has a tier

    def set_junction(self, junction: int) -> None:
        """The lookup's shared-prefix boundary joins the positions whose state is kept."""
        base = self.base_boundaries
        self.boundaries = [*base, junction] if junction else base

    def admitted(self, admission: Admission, start_s: float, step: int) -> None:
        # A kept lookup serves only the wait for this admission (its key says first or
        # resumed): dropped, its hit rows are freed instead of living to the replay's end.
        self.lookup_memo = None
        self.decoding = False
        self.decode_from = None
        if self.first is None:
            self.first = admission
            self.first_scheduled_s = start_s
            self.first_step = step
        else:
            lost = self.computed_at_preemption - admission.hit_tokens
            self.recomputed_tokens += max(lost, 0)
        self.hit_total_tokens += admission.hit_tokens

    def preempted(self) -> None:
        """Its blocks were freed: it starts again from a fresh lookup (a step in flight still
        delivers its output, stale: appended, nothing cached)."""
        self.computed_at_preemption = self.req.computed
        self.req.computed = 0
        self.num_preemptions += 1
        self.stale = self.in_flight
        self.placeholders = 0

    def result(self) -> SimResult:
        prompt = self.req.prompt
        first = self.first
        if first is None:
            return SimResult(
                self.sim.request_id,
                prompt,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                (),
                self.error or "never scheduled",
                arrival_s=self.arrival_s,
                finished_s=self.finished_s,
                hit_total_tokens=0,
            )
        miss = first.longest_tokens - first.hit_tokens
        return SimResult(
            self.sim.request_id,
            prompt,
            first.hit_tokens,
            miss,
            miss - first.evicted_tokens,
            first.evicted_tokens,
            first.attention_tokens,
            first.longest_tokens,
            first.junction_tokens,
            tuple(self.chunks),
            self.error,
            arrival_s=self.arrival_s,
            shared_scheduled_tokens=first.shared_scheduled_tokens,
            first_scheduled_s=self.first_scheduled_s,
            first_token_s=self.first_token_s,
            finished_s=self.finished_s,
            num_preemptions=self.num_preemptions,
            hit_total_tokens=self.hit_total_tokens,
            recomputed_tokens=self.recomputed_tokens,
            held_blocks=self.held_blocks,
            **({} if self.host is None else self.host.figures()),
        )
