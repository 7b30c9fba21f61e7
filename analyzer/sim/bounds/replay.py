"""Serial replay of the two bound engines (see the package docstring). Units: tokens."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from analyzer.config.engines import BOUNDS
from analyzer.config.policy import Policy
from analyzer.errors import ConfigError
from analyzer.sim.common.block_hash import HashInterner, request_hashes
from analyzer.sim.common.serial import SerialReplay, budget_chunks, empty_result
from analyzer.sim.records import SimRequest, SimResult, match_result


def match_alignment(policy: Policy) -> int:
    """Tokens a bound's hit is a multiple of (see the package docstring)."""
    unit = policy.hash_block_tokens
    if policy.engine == "attention_only":
        return unit
    fine = "mamba" in policy.groups and "sliding_window" not in policy.groups
    return unit if fine else policy.block_size


class BoundReplay(SerialReplay):
    """One unbounded cache: the set of full-attention hash ids ever cached."""

    def __init__(self, policy: Policy) -> None:
        if policy.engine not in BOUNDS:
            raise ConfigError(f"the bound replay cannot run engine {policy.engine!r}")
        if policy.num_blocks is not None:
            raise ConfigError(
                f"policy key 'num_blocks': engine {policy.engine} is unbounded; "
                f"set num_blocks to null (got {policy.num_blocks})"
            )
        self.unit = policy.hash_block_tokens
        self.alignment = match_alignment(policy)
        self.budget = policy.max_num_batched_tokens
        self.interner = HashInterner()
        self.cached: set[int] = set()

    def replay_one(self, sim: SimRequest) -> SimResult:
        prompt = sim.num_prompt_tokens
        if prompt < 1:
            return empty_result(sim, "empty prompt")
        H = self.unit
        total = sim.num_computed_tokens
        hashes = request_hashes(self.interner, sim, H, 0)[0].extend(total // H)
        cached = self.cached
        run, cap = 0, (prompt - 1) // H
        while run < cap and hashes[run] in cached:
            run += 1
        hit = min(run * H, prompt - 1)
        hit -= hit % self.alignment
        cached.update(hashes[run:])
        chunks = budget_chunks(hit, (), prompt, self.budget) + [1] * (total - prompt)
        return match_result(
            sim.request_id,
            prompt,
            hit_tokens=hit,
            kept_tokens=hit,
            match_tokens=hit,
            chunks=tuple(chunks),
        )


def replay(
    requests: Iterable[SimRequest], policy: Policy, *, num_groups: dict[str, int] | None = None
) -> Iterator[SimResult]:
    """Replay `requests` (arrival order, one cache) under a bound engine. `num_groups` only
    matters for capacity, which the bounds do not have; accepted for a uniform signature."""
    return BoundReplay(policy).run(requests)
