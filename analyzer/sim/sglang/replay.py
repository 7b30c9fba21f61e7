"""Serial replay of SGLang's radix caches: MambaRadixCache and the plain RadixCache here,
SWARadixCache (swa.py) and the unified cache (unified.py) through their own serve (see the
package docstring). Units: tokens unless a name says pages (page = block_size tokens)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from analyzer.config.policy import Policy
from analyzer.sim.common.block_hash import HashInterner, request_hashes
from analyzer.sim.common.serial import SerialReplay, budget_chunks, empty_result
from analyzer.sim.common.tree import Node, deepest_stored
from analyzer.sim.records import SimRequest, SimResult, match_result
from analyzer.sim.sglang.cache import MambaRadixCache
from analyzer.sim.sglang.placement import (
    RESERVED_SLOTS,
    branch_point,
    final_depth,
    geometry,
    track_point,
)
from analyzer.sim.sglang.swa import SWAReplay
from analyzer.sim.sglang.unified import UnifiedReplay


class SGLangReplay(SerialReplay):
    """One replica's cache, replayed request by request (each finishes before the next)."""

    def __init__(self, policy: Policy) -> None:
        self.geo = g = geometry(policy)
        self.cache = MambaRadixCache(g.page, g.kv_tokens, g.num_states, g.stateful)
        self.swa: SWAReplay | None = None
        if g.window is not None and g.stateful:
            self.swa = UnifiedReplay(g)
        elif g.window is not None:
            self.swa = SWAReplay(g.page, g.window, g.budget, g.kv_tokens, g.swa_tokens)
        self.interner = HashInterner()
        self.stored: set[int] = set()  # keys of pages that ever ended a node with a state

    def replay_one(self, sim: SimRequest) -> SimResult:
        prompt = sim.num_prompt_tokens
        if prompt < 1:
            return empty_result(sim, "empty prompt")
        g, cache = self.geo, self.cache
        total = sim.num_computed_tokens
        if g.kv_tokens is not None and total > g.kv_tokens:
            reason = f"KV pool of {g.kv_tokens} tokens < {total} tokens of this request"
            return empty_result(sim, reason)
        keys = request_hashes(self.interner, sim, g.page, 0)[0].extend(total // g.page)
        error = None
        if self.swa is not None:
            hit, kept, matched, chunks, error = self.swa.serve(keys, prompt, total)
        else:
            path, matched = cache.match(keys[: (prompt - 1) // g.page], touch=False)
            node = cache.hit_node(path)
            cache.touch_to(path, node)
            cache.touch_state(node)
            hit = node.end
            kept = deepest_stored(keys, hit, matched, self.stored) if g.stateful else hit
            chunks = self._serve(keys, node, prompt, total, matched * g.page)
        p = g.page
        return match_result(
            sim.request_id,
            prompt,
            hit_tokens=hit * p,
            kept_tokens=kept * p,
            match_tokens=matched * p,
            chunks=tuple(chunks) + (1,) * (total - prompt),
            error=error,
        )

    def _serve(self, keys: list[int], node: Node, prompt: int, total: int, kv_hit: int):
        """Prefill, decode and caching of one request from its hit `node`; returns the
        prefill chunks."""
        g, cache = self.geo, self.cache
        run = _Running(self, keys, node)
        reserve = RESERVED_SLOTS[g.strategy] if g.stateful else 0
        for _ in range(reserve):
            cache.alloc_state()
            cache.reserved += 1
        pos = node.end * g.page
        branch = branch_point(g, kv_hit, pos)
        chunks = budget_chunks(pos, (), prompt, g.budget)
        # A request that finishes with its prefill keeps its last chunk's state at release
        # (no_buffer: the live slot; extra_buffer: the ping-pong slot holding the track),
        # handed to the tree, not copied into a new slot while the request still holds its own
        finishes = total == prompt
        last_track = None
        for c in chunks:
            ok = cache.alloc_kv(c, pos)
            assert ok, "a request that fits the pool always finds evictable KV"
            track = track_point(g, pos, c, branch)
            pos += c
            if track is not None and finishes and pos == prompt:
                last_track = track
            elif track is not None:
                run.cache_at(track)
        ok = cache.alloc_decode(prompt, total - prompt)  # decode: one slot per fed token
        assert ok, "a request that fits the pool always finds evictable KV"
        cache.reserved -= reserve  # the live / ping-pong slot is donated to the tree
        tracked = run.tracked if last_track is None else max(run.tracked, last_track)
        run.cache_at(final_depth(g, prompt, total, tracked))
        cache.private_tokens = 0  # the unaligned / untracked tail's KV is freed
        cache.lock(run.node, -1)
        return chunks


class _Running:
    """The running request's position in the tree: its locked node and tracked depth."""

    def __init__(self, replay: SGLangReplay, keys: list[int], node: Node) -> None:
        self.replay = replay
        self.keys = keys
        self.node = node
        self.tracked = node.end * replay.geo.page  # tokens owned by the tree so far
        replay.cache.lock(node, +1)

    def cache_at(self, depth: int) -> None:
        """Insert the sequence up to `depth` tokens with a state there (cache_(un)finished_req)."""
        if depth <= self.tracked:
            return
        replay = self.replay
        cache = replay.cache
        if replay.geo.stateful:
            cache.alloc_state()
        node = cache.insert(self.keys[: depth // replay.geo.page], self.tracked)
        cache.add_state(node, replay.stored)
        cache.lock(node, +1)
        cache.lock(self.node, -1)
        self.node = node
        self.tracked = depth


def replay(
    requests: Iterable[SimRequest], policy: Policy, *, num_groups: dict[str, int] | None = None
) -> Iterator[SimResult]:
    """Replay `requests` (arrival order, one cache) under SGLang's radix cache. `num_groups`
    is accepted for a uniform signature: the KV pool is `num_blocks` pages of block_size."""
    return SGLangReplay(policy).run(requests)
