"""Serial replay of SGLang's MambaRadixCache (see the package docstring). Units: tokens
unless a name says pages (page = block_size tokens)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from analyzer.errors import ConfigError
from analyzer.sim.policy import Policy
from analyzer.sim.records import SimRequest, SimResult
from analyzer.sim.sglang.cache import MambaRadixCache
from analyzer.sim.sglang.swa import SWAReplay
from analyzer.sim.tree import (
    Node,
    check_page_engine,
    computed_tokens,
    deepest_stored,
    prefill_chunks,
)
from analyzer.sim.vllm.hashing import HashInterner, request_hashes

# State slots a running request holds besides the tree's: its live state, plus the two
# ping-pong track slots of extra_buffer.
RESERVED_SLOTS = {"no_buffer": 1, "extra_buffer": 3}


@dataclass(frozen=True)
class Geometry:
    """The policy resolved for this engine: page and grids in tokens."""

    page: int
    strategy: str
    grid: int  # extra_buffer prefill track grid C = max(chunk, page)
    decode_grid: int  # extra_buffer decode track grid lcm(C, track interval)
    budget: int | None  # prefill chunk, page aligned
    kv_tokens: int | None
    num_states: int | None
    stateful: bool
    window: int | None  # sliding window W (SWARadixCache), else None
    swa_tokens: int | None  # the SWA KV pool


def geometry(policy: Policy) -> Geometry:
    """Validate the policy for SGLang and resolve its grids (ConfigError naming the key)."""
    if policy.engine != "sglang":
        raise ConfigError(f"the sglang replay cannot run engine {policy.engine!r}")
    check_page_engine(policy, "sglang_strategy")
    if policy.groups == ("full_attention", "sliding_window", "mamba"):
        raise ConfigError(
            "policy key 'groups': engine sglang models full_attention with one of mamba "
            "(MambaRadixCache) or sliding_window (SWARadixCache), not both"
        )
    page = policy.block_size
    chunk = policy.option("sglang_chunk_tokens")
    grid = max(chunk, page)
    if grid % page:
        raise ConfigError(
            f"policy key 'sglang_chunk_tokens': {chunk} must be a multiple of block_size "
            f"{page} when larger (states are tracked on multiples of max of the two)"
        )
    strategy = policy.option("sglang_strategy")
    num_states = policy.option("sglang_num_states")
    stateful = "mamba" in policy.groups
    need = RESERVED_SLOTS[strategy] + 2
    if stateful and num_states is not None and num_states < need:
        raise ConfigError(
            f"policy key 'sglang_num_states': {strategy} needs at least {need} states "
            f"(the running request's slots, its locked state and one new); got {num_states}"
        )
    budget = policy.max_num_batched_tokens
    if budget is not None:
        budget = max(page, budget - budget % page)
    kv_tokens = None if policy.num_blocks is None else policy.num_blocks * page
    swa_tokens = None
    if kv_tokens is not None and policy.sliding_window is not None:
        swa_tokens = int(policy.option("sglang_swa_full_tokens_ratio") * kv_tokens)
    return Geometry(
        page=page,
        strategy=strategy,
        grid=grid,
        decode_grid=math.lcm(grid, policy.option("sglang_track_interval")),
        budget=budget,
        kv_tokens=kv_tokens,
        num_states=num_states,
        stateful=stateful,
        window=policy.sliding_window,
        swa_tokens=swa_tokens,
    )


class SGLangReplay:
    """One replica's cache, replayed request by request (each finishes before the next)."""

    def __init__(self, policy: Policy) -> None:
        self.geo = g = geometry(policy)
        self.cache = MambaRadixCache(g.page, g.kv_tokens, g.num_states, g.stateful)
        self.swa = None
        if g.window is not None:
            self.swa = SWAReplay(g.page, g.window, g.budget, g.kv_tokens, g.swa_tokens)
        self.interner = HashInterner()
        self.stored: set[int] = set()  # keys of pages that ever ended a node with a state

    def run(self, requests: Iterable[SimRequest]) -> Iterator[SimResult]:
        for request in requests:
            yield self.replay_one(request)

    def replay_one(self, sim: SimRequest) -> SimResult:
        prompt = sim.num_prompt_tokens
        if prompt < 1:
            return SimResult(sim.request_id, prompt, 0, 0, 0, 0, 0, 0, 0, (), "empty prompt")
        g, cache = self.geo, self.cache
        total = computed_tokens(prompt, sim.num_output_tokens)
        if g.kv_tokens is not None and total > g.kv_tokens:
            reason = f"KV pool of {g.kv_tokens} tokens < {total} tokens of this request"
            return SimResult(sim.request_id, prompt, 0, 0, 0, 0, 0, 0, 0, (), reason)
        keys = request_hashes(self.interner, sim, g.page, 0)[0].extend(total // g.page)
        error = None
        if self.swa is not None:
            hit, kept, matched, chunks, error = self.swa.serve(keys, prompt, total)
        else:
            path, matched = cache.match(keys[: (prompt - 1) // g.page])
            node = cache.hit_node(path)
            cache.touch_state(node)
            hit = node.end
            kept = deepest_stored(keys, hit, matched, self.stored) if g.stateful else hit
            chunks = self._serve(keys, node, prompt, total, matched * g.page)
        p = g.page
        miss = (matched - hit) * p
        return SimResult(
            sim.request_id,
            prompt,
            hit * p,
            miss,
            miss - (kept - hit) * p,
            (kept - hit) * p,
            matched * p,
            matched * p,
            matched * p if miss else 0,
            tuple(chunks) + (1,) * (total - prompt),
            error,
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
        branch = None
        if kv_hit > pos:
            branch = kv_hit - kv_hit % g.grid or None
        chunks = prefill_chunks(prompt - pos, g.budget)
        for c in chunks:
            ok = cache.alloc_kv(c)
            assert ok, "a request that fits the pool always finds evictable KV"
            track = self._track(pos, c, branch)
            pos += c
            if track is not None:
                run.cache_at(track)
        ok = cache.alloc_kv(total - prompt)  # decode: one slot per fed token
        assert ok, "a request that fits the pool always finds evictable KV"
        cache.reserved -= reserve  # the live / ping-pong slot is donated to the tree
        run.cache_at(self._final(prompt, total, run.tracked))
        cache.private_tokens = 0  # the unaligned / untracked tail's KV is freed
        cache.lock(run.node, -1)
        return chunks

    def _track(self, start: int, extend: int, branch: int | None) -> int | None:
        """Where this prefill extend leaves a state (tokens), or None."""
        g = self.geo
        if g.strategy == "no_buffer" or not g.stateful:
            end = start + extend
            return end - end % g.page
        if (
            branch is not None
            and start < branch < start + extend
            and (branch - start) % g.grid == 0
        ):
            return branch
        if extend < g.grid:
            return None
        return start + extend - extend % g.grid

    def _final(self, prompt: int, total: int, tracked: int) -> int:
        """The depth the finished sequence is cached to (tokens): its last page
        (no_buffer), else the last tracked state, a decode track when one was passed."""
        g = self.geo
        if g.strategy == "no_buffer" or not g.stateful:
            return total - total % g.page
        decode = total - total % g.decode_grid
        return decode if decode > max(prompt, tracked) else tracked


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
