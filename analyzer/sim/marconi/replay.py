"""Serial replay of Marconi (see the package docstring). Units: tokens unless a name says
pages (page = block_size tokens) or blocks (pool blocks of block_size tokens)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from analyzer.errors import ConfigError
from analyzer.sim.marconi.cache import MarconiCache
from analyzer.sim.marconi.flops import cost_model
from analyzer.sim.policy import Policy
from analyzer.sim.records import SimRequest, SimResult
from analyzer.sim.tree import (
    check_page_engine,
    computed_tokens,
    deepest_stored,
    prefill_chunks,
)
from analyzer.sim.vllm.hashing import HashInterner, request_hashes


def check_policy(policy: Policy) -> None:
    """Marconi models full attention + Mamba at page granularity (ConfigError naming the key)."""
    if policy.engine != "marconi":
        raise ConfigError(f"the marconi replay cannot run engine {policy.engine!r}")
    if policy.groups != ("full_attention", "mamba"):
        raise ConfigError(
            f"policy key 'groups': engine marconi models full_attention + mamba; "
            f"got {', '.join(policy.groups)}"
        )
    check_page_engine(policy, "branch points and sequence ends")


class MarconiReplay:
    """One replica's cache, replayed request by request (each finishes before the next)."""

    def __init__(self, policy: Policy) -> None:
        check_policy(policy)
        costs, state_blocks = cost_model(policy)
        self.page = policy.block_size
        self.budget = policy.max_num_batched_tokens
        self.cache = MarconiCache(
            self.page, policy.num_blocks, state_blocks, policy.option("marconi_alpha"), costs
        )
        self.interner = HashInterner()
        self.stored: set[int] = set()  # keys of pages that ever ended a node with a state

    def run(self, requests: Iterable[SimRequest]) -> Iterator[SimResult]:
        for request in requests:
            yield self.replay_one(request)

    def replay_one(self, sim: SimRequest) -> SimResult:
        prompt = sim.num_prompt_tokens
        if prompt < 1:
            return SimResult(sim.request_id, prompt, 0, 0, 0, 0, 0, 0, 0, (), "empty prompt")
        page, cache = self.page, self.cache
        total = computed_tokens(prompt, sim.num_output_tokens)
        own = total // page + cache.state_blocks
        if cache.capacity is not None and own > cache.capacity:
            reason = f"pool of {cache.capacity} blocks < {own} blocks of this request"
            return SimResult(sim.request_id, prompt, 0, 0, 0, 0, 0, 0, 0, (), reason)
        keys = request_hashes(self.interner, sim, page, 0)[0].extend(total // page)
        cache.clock += 1
        # Whole edges only: the hit is the deepest fully matched node holding a state.
        path, matched, _ = cache.tree.walk(keys[: (prompt - 1) // page])
        hit = next((n.end for n in reversed(path) if n.state), 0)
        if path:
            path[-1].stamp = cache.clock  # only the deepest accessed node is refreshed
        kept = deepest_stored(keys, hit, matched, self.stored)
        branch = self._branch(keys[: prompt // page])
        cache.insert(keys, branch, self.stored)
        miss = (matched - hit) * page
        chunks = prefill_chunks(prompt - hit * page, self.budget) + [1] * (total - prompt)
        return SimResult(
            sim.request_id,
            prompt,
            hit * page,
            miss,
            miss - (kept - hit) * page,
            (kept - hit) * page,
            matched * page,
            matched * page,
            matched * page if miss else 0,
            tuple(chunks),
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
