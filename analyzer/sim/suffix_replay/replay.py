"""Serial replay of SuffixReplay / Tail-Replay (see the package docstring).

Units: tokens, except pool sizes (blocks of block_size tokens).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from analyzer.config.policy import Policy
from analyzer.sim.common.block_hash import HashInterner, request_hashes
from analyzer.sim.common.blocks import BlockTree
from analyzer.sim.common.serial import (
    BLOCK_GROUPS,
    SerialReplay,
    budget_chunks,
    check_unmodelled,
    empty_result,
)
from analyzer.sim.records import SimRequest, SimResult, match_result


class SuffixReplay(SerialReplay):
    """One instance: full-attention KV pages in a leaf-LRU tree, no recurrent states."""

    def __init__(self, policy: Policy) -> None:
        check_unmodelled(
            policy,
            "suffix_replay",
            placement="replaying suffix_replay_tokens",
            groups=BLOCK_GROUPS,
            retention=(0,),
        )
        self.block = policy.block_size
        # Without recurrent layers there is nothing to rebuild: the match is the hit.
        self.replay_budget = (
            policy.option("suffix_replay_tokens") if "mamba" in policy.groups else 0
        )
        self.budget = policy.max_num_batched_tokens
        self.interner = HashInterner()
        self.tree = BlockTree(policy.num_blocks)

    def replay_one(self, sim: SimRequest) -> SimResult:
        prompt = sim.num_prompt_tokens
        if prompt < 1:
            return empty_result(sim, "empty prompt")
        B = self.block
        total = sim.num_computed_tokens
        ids = request_hashes(self.interner, sim, B, 0)[0].extend(total // B)
        tree = self.tree
        run = tree.match(ids, (prompt - 1) // B)
        footprint = -(-total // B)
        if tree.capacity is not None and (
            footprint > tree.capacity or not tree.make_room(footprint - run, ids[:run])
        ):
            return empty_result(
                sim, f"pool of {tree.capacity} blocks cannot hold the request ({footprint})"
            )
        tree.commit(ids, total // B)  # every full block of prompt + outputs - 1
        match = run * B
        replayed = min(self.replay_budget, match)
        hit = match - replayed
        chunks = budget_chunks(hit, (), prompt, self.budget)
        chunks += [1] * (total - prompt)
        return match_result(
            sim.request_id,
            prompt,
            hit_tokens=hit,
            kept_tokens=hit,
            match_tokens=match,
            chunks=tuple(chunks),
            replay_tokens=replayed,
        )


def replay(
    requests: Iterable[SimRequest], policy: Policy, *, num_groups: dict[str, int] | None = None
) -> Iterator[SimResult]:
    """Replay `requests` (arrival order, one instance) under SuffixReplay. `num_groups` is
    accepted for a uniform signature; only full-attention pages are charged."""
    return SuffixReplay(policy).run(requests)
