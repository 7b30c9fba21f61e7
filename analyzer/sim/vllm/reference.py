"""Serial replay of vLLM 0.33's hybrid prefix cache: records in, per-request results out.

Each request, in arrival order, after the previous one finished (what vLLM's counters show
when requests do not overlap, and what `oracle/vllm_oracle.py` drives):

    lookup (cap prompt - 1)  ->  admit: first chunk (+ adopt the hit)  ->  further chunks
    ->  decode through the output tokens (one token per step)  ->  free, group by group

Decode only does something at a few positions per block (allocation, window release, a block
becoming full), so the steps in between are skipped: the work per request is O(blocks).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from analyzer.config.policy import Policy
from analyzer.sim.common.block_hash import HashInterner, request_hashes
from analyzer.sim.records import SimRequest, SimResult
from analyzer.sim.vllm.coordinator import Coordinator, replay_boundaries
from analyzer.sim.vllm.gates import events
from analyzer.sim.vllm.layout import CacheLayout, make_layout
from analyzer.sim.vllm.managers import FullAttentionManager, ReqState
from analyzer.sim.vllm.scheduler import chunk_tokens

NOT_SCHEDULABLE = "not schedulable (KV cache too small: {} blocks?)"


def failed(request_id: str, prompt: int, error: str) -> SimResult:
    """The result of a request vLLM never admitted: no counters, no chunks."""
    return SimResult(request_id, prompt, 0, 0, 0, 0, 0, 0, 0, (), error)


@dataclass(frozen=True)
class LookedUp:
    """A request after its lookup in the GPU cache: its hit (and the blocks found), the
    longest full-attention match, the attention-only match, what eviction took, the
    positions whose states the replay keeps and what the pool had ever cached of it."""

    req: ReqState
    hit: int
    longest: int
    found: list
    attention: int
    evicted: int
    boundaries: list[int]
    cached_ever: int | None = None


class VllmReplay:
    """One cache (one replica) replaying requests serially, block by block: the reference
    every fast path (`compiled/`) equals; `run` yields one result each."""

    def __init__(self, policy: Policy, *, num_groups: dict[str, int] | None = None) -> None:
        self.layout: CacheLayout = make_layout(policy, num_groups)
        self.interner = HashInterner(ahead=True)  # the replay compares ids, never orders them
        self.coord = Coordinator(self.layout)
        self._events = events(self.layout)  # every position where its gate refuses
        self._evicted_keys = self._track_evicted()

    def run(self, requests: Iterable[SimRequest]) -> Iterator[SimResult]:
        for request in requests:
            yield self.replay_one(request)

    # -- one request ---------------------------------------------------------------------------

    def replay_one(self, sim: SimRequest) -> SimResult:
        looked = self._look_up(sim, cached_ever=True)
        if isinstance(looked, SimResult):
            return looked
        req, hit, found, boundaries = looked.req, looked.hit, looked.found, looked.boundaries
        chunks: list[int] = []
        error = self._admit(req, hit, found, boundaries, chunks)
        if error is None:
            error = self._prefill_and_decode(req, sim.num_output_tokens, boundaries, chunks)
        self.coord.free()
        return self._result(sim, looked, chunks, error, cached_ever_tokens=looked.cached_ever)

    def _look_up(self, sim: SimRequest, *, cached_ever: bool = False) -> LookedUp | SimResult:
        """The request's hashes and its lookup in the GPU cache (a failed result for an
        empty prompt); with `cached_ever` what the pool had ever cached of it, where the
        pool keeps that record."""
        layout, coord = self.layout, self.coord
        prompt = sim.num_prompt_tokens
        if prompt < 1:
            return failed(sim.request_id, prompt, "empty prompt")
        source, plain = request_hashes(
            self.interner, sim, layout.hash_block_size, layout.hash_lookahead
        )
        req = ReqState(prompt, source, plain)
        self._show_hashes(req)
        hit, longest, found = coord.lookup(req.hashes, prompt - 1)
        attention = self._attention_match(req, longest)
        ever = None
        if cached_ever and self._evicted_keys is not None:
            ever = self._cached_ever(req, attention)
        evicted = self._evicted(req, hit, longest, found) if longest > hit else 0
        req.junction = longest if longest > hit else 0
        boundaries = replay_boundaries(prompt, layout.block_size, layout.eagle_drop)
        if req.junction:
            boundaries.append(req.junction)
        return LookedUp(req, hit, longest, found, attention, evicted, boundaries, ever)

    def _result(
        self, sim: SimRequest, looked: LookedUp, chunks: list[int], error: str | None, **more
    ) -> SimResult:
        """The request's result once it ran (`more`: the fields only some replays set)."""
        prompt = sim.num_prompt_tokens
        if error is not None and not chunks:
            return failed(sim.request_id, prompt, error)
        miss = looked.longest - looked.hit
        return SimResult(
            sim.request_id,
            prompt,
            looked.hit,
            miss,
            miss - looked.evicted,
            looked.evicted,
            looked.attention,
            looked.longest,
            looked.req.junction,
            tuple(chunks),
            error,
            **more,
        )

    def _track_evicted(self) -> set[int] | None:
        """The pool's record of evicted keys, in a bounded pool with sub-block hits: there a
        prompt's partial block may never have been cached by anyone, which is granularity,
        not eviction (the waterfall's L3); what was ever cached and not given up for another
        reason is what is resident plus what was evicted. Whole-block hits need no record
        (a shared whole block was cached by the request it is shared with), nor do
        lookahead hashes (not kept)."""
        layout = self.layout
        fine = layout.alignment < layout.block_size
        if layout.num_blocks is None or not fine or layout.hash_lookahead or layout.eagle_drop:
            return None
        self.coord.pool.evicted = set()
        return self.coord.pool.evicted

    def _cached_ever(self, req: ReqState, resident: int) -> int:
        """Tokens of the prompt whose full-attention entries would be resident had the pool
        never evicted, matched and capped like `_attention_match` (>= `resident`)."""
        layout = self.layout
        evicted, groups = self._evicted_keys, self.coord.pool.num_groups
        cached = self.coord.pool.cached
        gid = self.coord.spec_groups[0][0].gid
        B, H = layout.block_size, layout.hash_block_size
        whole = resident // B  # resident blocks: probe from the first one after them
        skip = whole * (B // H)

        def probe(h: int):
            key = h * groups + gid
            return () if key in cached or key in evicted else None

        cap = req.prompt - 1  # as the lookup matches (no lookahead: no probe past it)
        limit = min(cap, len(req.hashes) * H) - whole * B
        hit, _ = FullAttentionManager.longest_hit(probe, req.hashes[skip:], limit, False, layout)
        return max(hit + whole * B, resident)

    def _admit(
        self, req: ReqState, hit: int, found: list, boundaries: list[int], chunks: list[int]
    ) -> str | None:
        """The admission step: the first chunk, with the hit adopted. None = admitted."""
        layout = self.layout
        wanted = req.prompt - hit
        # A speculative decoder pads a one-token step with a draft slot (rejected later).
        pad = layout.speculative and wanted == 1 and hit > 0
        n = chunk_tokens(layout, req, hit, 2 if pad else wanted)
        if pad and n != 2:
            n, pad = 1, False
        if n == 0:
            return NOT_SCHEDULABLE.format(layout.num_blocks)
        if not self.coord.step(req, n, hit, self.coord.hit_blocks(found), boundaries):
            return NOT_SCHEDULABLE.format(layout.num_blocks)
        chunks.append(n)
        self._stepped(req, hit + n)
        req.computed = hit + n - pad
        return None

    def _prefill_and_decode(
        self, req: ReqState, outputs: int, boundaries: list[int], chunks: list[int]
    ) -> str | None:
        """Remaining prefill chunks, then the decode steps; None = finished normally."""
        layout, coord = self.layout, self.coord
        while req.computed < req.num_tokens:
            n = chunk_tokens(layout, req, req.computed, req.num_tokens - req.computed)
            if n == 0 or not coord.step(req, n, boundaries=boundaries):
                return NOT_SCHEDULABLE.format(layout.num_blocks)
            chunks.append(n)
            self._stepped(req, req.computed + n)
            req.computed += n
        self._sampled(req, boundaries)
        # The prefill sampled output token 1; each decode step computes one and samples one.
        steps = max(outputs, 1) - 1
        first = req.computed
        for c in _event_positions(first, first + steps, self._events, layout.block_size):
            req.computed = c
            req.num_tokens = c + 1
            self._show_hashes(req)
            fits = coord.decode(req) if coord.plain else coord.step(req, 1, boundaries=boundaries)
            if not fits:
                chunks.extend([1] * (c - first))
                return NOT_SCHEDULABLE.format(layout.num_blocks)
            self._stepped(req, c + 1)
            req.computed = c + 1
            self._sampled(req, boundaries)
        chunks.extend([1] * steps)
        return None

    def _sampled(self, req: ReqState, boundaries: list[int]) -> None:
        """A step sampled a token: it joins the request (its hashes may now exist). With a
        speculative decoder vLLM caches the computed blocks once more right then."""
        req.num_tokens = req.computed + 1
        self._show_hashes(req)
        if self.layout.speculative:
            self.coord.cache(req, req.computed, boundaries)

    # -- helpers -----------------------------------------------------------------------------

    def _stepped(self, req: ReqState, horizon: int) -> None:
        """A step scheduled `req` up to `horizon` tokens (a host tier acts here)."""

    def _show_hashes(self, req: ReqState) -> None:
        """The hashes vLLM has at `req.num_tokens` tokens: blocks whose lookahead exists."""
        layout = self.layout
        count = (req.num_tokens - layout.hash_lookahead) // layout.hash_block_size
        if count > len(req.hashes):
            req.source.extend(count)

    def _attention_match(self, req: ReqState, longest: int) -> int:
        """Full attention's match with plain hashes (no lookahead, no drop), cap prompt - 1.

        Probed up to one unit past the cap, like the EAGLE lookup, so a sub-block entry at
        the prompt's end is seen; the result is then capped and aligned:
            fine, H=1, prompt 59, entry at 59: probe to 59 -> min(59, 58) = 58
        """
        layout, coord = self.layout, self.coord
        if req.plain is None and not layout.eagle_drop:
            return longest  # the lookup's attention side already is exactly that
        members = coord.spec_groups[0]
        H, align = layout.hash_block_size, layout.alignment
        if req.plain is None:
            probe, hashes = coord._probe(members), req.hashes
        else:
            hashes = req.plain_source.extend(req.prompt // H)
            probe = coord._probe(members, coord.pool.shadow_count)
        cap = req.prompt - 1
        limit = min(cap + align, len(hashes) * H)
        hit, _ = FullAttentionManager.longest_hit(probe, hashes, limit, False, layout)
        hit = min(hit, cap)
        return hit - hit % align

    def _evicted(self, req: ReqState, hit: int, longest: int, found: list) -> int:
        """Tokens of the miss due to eviction: the hit again, as if no sparse state (Mamba
        state, window block) had ever been evicted, minus the real hit."""
        coord = self.coord
        if not coord.pool.sparse_removals:
            return 0
        indexes = [None] + [_union(m.ever for m in members) for members in coord.spec_groups[1:]]
        first = (longest, list(found[0]))
        ever_hit, _, _ = coord.lookup(req.hashes, req.prompt - 1, indexes, first)
        return ever_hit - hit


def _union(sets) -> set[int]:
    sets = list(sets)
    return sets[0] if len(sets) == 1 else set().union(*sets)


def _event_positions(first: int, end: int, events: tuple[int, ...], block: int):
    """Decode positions in [first, end) worth simulating: `first`, then those whose offset
    in their block is in `events` (sorted). O(blocks), not O(tokens)."""
    if first >= end:
        return
    yield first
    for base in range(first - first % block, end, block):
        for r in events:
            c = base + r
            if c >= end:
                return
            if c > first:
                yield c
