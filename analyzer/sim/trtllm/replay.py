"""Serial replay of TensorRT-LLM's hybrid Mamba block reuse (see the package docstring).

Units: tokens, except pool sizes (blocks of block_size tokens).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from analyzer.config.policy import Policy
from analyzer.errors import ConfigError
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


def snapshot_points(prompt: int, block: int, interval: int | None, save_last: bool) -> list[int]:
    """Positions (tokens, ascending) where the prompt's prefill leaves a reusable snapshot.

    TensorRT-LLM stops context chunks at {k * interval < prompt} and at the prompt end (plus
    the last full block with save-last); a snapshot is reusable only on a block boundary, so
    an unaligned prompt end is a chunk stop but not a snapshot here. `interval` None: no
    periodic snapshots (TensorRT-LLM's default).
    """
    points = set(range(interval, prompt, interval)) if interval else set()
    if prompt % block == 0:
        points.add(prompt)
    if save_last and prompt >= block:
        points.add(prompt - prompt % block)
    return sorted(points)


def chunk_stops(prompt: int, block: int, interval: int | None, save_last: bool) -> list[int]:
    """Where a context chunk must end: every snapshot point and the prompt end."""
    stops = set(snapshot_points(prompt, block, interval, save_last))
    stops.add(prompt)
    return sorted(stops)


# Engines on BlockTree model full attention, optionally with Mamba (no sliding window).


class TrtllmReplay(SerialReplay):
    """One TensorRT-LLM instance: a block pool shared by KV blocks and state snapshots."""

    def __init__(self, policy: Policy) -> None:
        check_unmodelled(
            policy, "trtllm", placement="trtllm_interval", groups=BLOCK_GROUPS, retention=(0,)
        )
        self.block = policy.block_size
        self.interval = policy.option("trtllm_interval")
        if self.interval is not None and self.interval % self.block:
            raise ConfigError(
                f"policy key 'trtllm_interval': {self.interval} must be a multiple of "
                f"block_size {self.block}"
            )
        self.save_last = policy.option("trtllm_save_last")
        self.hybrid = "mamba" in policy.groups
        self.budget = policy.max_num_batched_tokens
        self.interner = HashInterner()
        self.tree = BlockTree(policy.num_blocks)
        self.ever_snapshot: set[int] = set()  # block ids that ever carried a snapshot

    def replay_one(self, sim: SimRequest) -> SimResult:
        prompt = sim.num_prompt_tokens
        if prompt < 1:
            return empty_result(sim, "empty prompt")
        B = self.block
        total = sim.num_computed_tokens
        points = snapshot_points(prompt, B, self.interval, self.save_last) if self.hybrid else []
        # Blocks committed for reuse: up to the last snapshot point on a hybrid model (decode
        # blocks lie beyond it), every full block of the computed tokens otherwise.
        commit_tokens = (points[-1] if points else 0) if self.hybrid else total
        hashes = request_hashes(self.interner, sim, B, 0)[0]
        ids = hashes.extend(max((prompt - 1) // B, commit_tokens // B))
        tree = self.tree
        run = tree.match(ids, (prompt - 1) // B)
        hit_blocks = self._deepest(ids, run, tree.has_snapshot)
        kept_blocks = self._deepest(ids, run, self.ever_snapshot.__contains__)
        new_points = [p for p in points if p > hit_blocks * B]
        footprint = -(-total // B) + (1 + len(points) if self.hybrid else 0)
        need = footprint - hit_blocks - (len(points) - len(new_points) if self.hybrid else 0)
        if tree.capacity is not None and (
            footprint > tree.capacity or not tree.make_room(need, ids[:hit_blocks])
        ):
            return empty_result(
                sim, f"pool of {tree.capacity} blocks cannot hold the request ({footprint})"
            )
        tree.touch(ids, hit_blocks)
        tree.commit(ids, commit_tokens // B)
        for p in new_points:
            tree.add_snapshot(ids[p // B - 1])
            self.ever_snapshot.add(ids[p // B - 1])
        return self._result(sim, run * B, hit_blocks * B, max(kept_blocks, hit_blocks) * B, total)

    def _deepest(self, ids, run: int, has) -> int:
        """The deepest block count j <= run whose last block carries a state (`has`)."""
        if not self.hybrid:
            return run
        for j in range(run, 0, -1):
            if has(ids[j - 1]):
                return j
        return 0

    def _result(self, sim: SimRequest, match: int, hit: int, kept: int, total: int) -> SimResult:
        prompt = sim.num_prompt_tokens
        stops = chunk_stops(prompt, self.block, self.interval, self.save_last)
        chunks = budget_chunks(hit, stops if self.hybrid else (), prompt, self.budget)
        chunks += [1] * (total - prompt)
        return match_result(
            sim.request_id,
            prompt,
            hit_tokens=hit,
            kept_tokens=kept,
            match_tokens=match,
            chunks=tuple(chunks),
        )


def replay(
    requests: Iterable[SimRequest], policy: Policy, *, num_groups: dict[str, int] | None = None
) -> Iterator[SimResult]:
    """Replay `requests` (arrival order, one instance) under TensorRT-LLM's hybrid reuse.
    `num_groups` is accepted for a uniform signature; the pool charges one block per block
    position and one per snapshot whatever the group count."""
    return TrtllmReplay(policy).run(requests)
