"""Serial replay of Marconi (see the package docstring). Units: tokens unless a name says
pages (page = block_size tokens) or blocks (pool blocks of block_size tokens)."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import islice

from analyzer.config.policy import Policy
from analyzer.sim.common.block_hash import HashInterner, request_hashes
from analyzer.sim.common.serial import SerialReplay, budget_chunks, check_unmodelled, empty_result
from analyzer.sim.common.tree import deepest_stored
from analyzer.sim.marconi.cache import MarconiCache
from analyzer.sim.marconi.flops import cost_model
from analyzer.sim.records import SimRequest, SimResult, match_result

# marconi_alpha auto: the values tried, Marconi's artifact grid 0, 0.1, ..., 2.0.
ALPHA_GRID = tuple(i / 10 for i in range(21))


@dataclass(frozen=True)
class Tuning:
    """What alpha auto-tuning did: after `after_requests` requests the first eviction
    happened; the next `window_requests` (the bootstrap window) were replayed from a snapshot
    once per alpha of ALPHA_GRID, saving `flops_saved[i]` FLOPs (sum over the window of the
    prefill FLOPs of each hit); `alpha` (the most FLOPs, ties to the smaller) was adopted."""

    after_requests: int
    window_requests: int
    flops_saved: tuple[float, ...]
    alpha: float

    def describe(self) -> str:
        """One line for the user (stored as the note of the window's first request)."""
        best = max(self.flops_saved, default=0.0)
        return (
            f"marconi_alpha auto chose {self.alpha:g}: the first eviction came after "
            f"{self.after_requests:,} requests; over the next {self.window_requests:,} it saves "
            f"{best:.3g} prefill FLOPs (alpha 0: {self.flops_saved[0]:.3g})"
        )


class MarconiReplay(SerialReplay):
    """One replica's cache, replayed request by request (each finishes before the next)."""

    def __init__(self, policy: Policy) -> None:
        check_unmodelled(
            policy,
            "marconi",
            placement="branch points and sequence ends",
            groups=(("full_attention", "mamba"),),
        )
        costs, state_blocks = cost_model(policy)
        self.page = policy.block_size
        self.budget = policy.max_num_batched_tokens
        alpha = policy.option("marconi_alpha")
        self.auto = alpha == "auto"
        self.bootstrap = policy.option("marconi_bootstrap")
        self.cache = MarconiCache(
            self.page, policy.num_blocks, state_blocks, 0.0 if self.auto else alpha, costs
        )
        self.interner = HashInterner()
        self.stored: set[int] = set()  # keys of pages that ever ended a node with a state
        self.seen = 0  # requests replayed
        self.tuning: Tuning | None = None  # set once alpha auto-tuning has run

    def run(self, requests: Iterable[SimRequest]) -> Iterator[SimResult]:
        """Replay in order. With alpha auto, right after the request whose insert made the
        first eviction, the next `marconi_bootstrap` x (requests replayed so far) requests
        are read ahead - only those - to tune alpha (`tune`), then replayed for real."""
        stream = iter(requests)
        for request in stream:
            yield self.replay_one(request)
            if self.auto and self.tuning is None and self.cache.evictions:
                window = list(islice(stream, self.bootstrap * self.seen))
                tuning = self.tune(window)
                for k, ahead in enumerate(window):
                    result = self.replay_one(ahead)
                    yield result._replace(note=tuning.describe()) if k == 0 else result

    def tune(self, window: list[SimRequest]) -> Tuning:
        """Replay `window` from a snapshot of this cache once per alpha of ALPHA_GRID (pure
        replays of copies) and adopt the alpha that saves the most FLOPs (Marconi's artifact;
        its paper says the best hit rate); ties go to the smaller alpha."""
        keys = [self._keys(r) for r in window]  # the interner is shared: ids name contents
        saved = []
        for alpha in ALPHA_GRID:
            trial = copy.copy(self)
            trial.cache = self.cache.clone(alpha)
            trial.stored = set(self.stored)
            flops = 0.0
            for request, k in zip(window, keys, strict=True):
                hit = trial.replay_one(request, k).hit_tokens
                flops += self.cache.costs.flops_saved(hit, hit)
            saved.append(flops)
        best = max(range(len(ALPHA_GRID)), key=lambda i: (saved[i], -i))
        self.cache.alpha = ALPHA_GRID[best]
        self.tuning = Tuning(self.seen, len(window), tuple(saved), ALPHA_GRID[best])
        return self.tuning

    def _keys(self, sim: SimRequest) -> list[int] | None:
        """The request's page keys (computed tokens, whole pages); None for an empty prompt."""
        prompt = sim.num_prompt_tokens
        if prompt < 1:
            return None
        total = sim.num_computed_tokens
        return request_hashes(self.interner, sim, self.page, 0)[0].extend(total // self.page)

    def replay_one(self, sim: SimRequest, keys: list[int] | None = None) -> SimResult:
        """Replay one request (`keys`: its page keys when already computed)."""
        self.seen += 1
        prompt = sim.num_prompt_tokens
        if prompt < 1:
            return empty_result(sim, "empty prompt")
        page, cache = self.page, self.cache
        total = sim.num_computed_tokens
        own = total // page + cache.state_blocks
        if cache.capacity is not None and own > cache.capacity:
            reason = f"pool of {cache.capacity} blocks < {own} blocks of this request"
            return empty_result(sim, reason)
        keys = keys if keys is not None else self._keys(sim)
        cache.clock += 1
        # Whole edges only: the hit is the deepest fully matched node holding a state.
        path, matched, _ = cache.tree.walk(keys[: (prompt - 1) // page])
        hit = next((n.end for n in reversed(path) if n.state), 0)
        if path:
            path[-1].stamp = cache.clock  # only the deepest accessed node is refreshed
        kept = deepest_stored(keys, hit, matched, self.stored)
        branch = self._branch(keys[: prompt // page])
        cache.insert(keys, branch, self.stored)
        chunks = budget_chunks(hit * page, (), prompt, self.budget) + [1] * (total - prompt)
        return match_result(
            sim.request_id,
            prompt,
            hit_tokens=hit * page,
            kept_tokens=kept * page,
            match_tokens=matched * page,
            chunks=tuple(chunks),
        )

    def _branch(self, prompt_keys: list[int]) -> int | None:
        """Speculative insertion: the depth (pages) where the prompt would split an edge,
        whose state the prefill checkpoints; None when it splits none."""
        _, matched, partial = self.cache.tree.walk(prompt_keys)
        return matched if partial is not None and matched < len(prompt_keys) else None


def replay(
    requests: Iterable[SimRequest], policy: Policy, *, num_groups: dict[str, int] | None = None
) -> Iterator[SimResult]:
    """Replay `requests` (arrival order, one cache) under Marconi. `num_groups` is accepted
    for a uniform signature: the pool is `num_blocks` blocks of block_size tokens."""
    return MarconiReplay(policy).run(requests)
