"""A pool of committed blocks as hash chains with leaf-only LRU eviction (units: blocks).

Shared by the `trtllm` and `suffix_replay` engines. A block is named by its chained hash id
(analyzer/sim/vllm/hashing.py), so its parent is the previous block of the same prefix and
namespaces never meet. Each node may also carry one state snapshot, charged as one more block
(TensorRT-LLM keeps snapshots as blocks of the same pool).

Eviction: only leaves (blocks no other cached block extends) can go, least recently used
first, as in TensorRT-LLM's radix tree (its prioritized LRU with every block at the default
priority 35 is plain LRU). A block's snapshot leaves with it. Touching a path stamps every node
on it with the same clock value, so a parent is never older than its children.

Also the small helpers the three SPEC 7 replay engines of this project share.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence

from analyzer.errors import ConfigError
from analyzer.sim.policy import Policy
from analyzer.sim.records import SimRequest, SimResult


class _Node:
    __slots__ = ("parent", "children", "stamp", "snapshot")

    def __init__(self, parent: int | None, stamp: int) -> None:
        self.parent = parent
        self.children = 0
        self.stamp = stamp
        self.snapshot = False


class BlockTree:
    """Committed blocks of one pool; `capacity` in blocks (None = unbounded, never evicts)."""

    def __init__(self, capacity: int | None) -> None:
        self.capacity = capacity
        self.nodes: dict[int, _Node] = {}
        self.used = 0  # blocks held: one per node plus one per snapshot
        self.clock = 0
        self._leaves: list[tuple[int, int]] = []  # (stamp, id); stale entries skipped on pop

    def match(self, ids: Sequence[int], limit: int) -> int:
        """How many of the first `limit` ids are cached (a chain: stops at the first gap)."""
        nodes = self.nodes
        run = 0
        while run < limit and ids[run] in nodes:
            run += 1
        return run

    def has_snapshot(self, block_id: int) -> bool:
        node = self.nodes.get(block_id)
        return node is not None and node.snapshot

    def commit(self, ids: Sequence[int], count: int) -> None:
        """Cache the first `count` blocks of a chain (adding the missing ones) and touch them."""
        self.clock += 1
        stamp = self.clock
        nodes = self.nodes
        parent = None
        for i in range(count):
            block = ids[i]
            node = nodes.get(block)
            if node is None:
                node = nodes[block] = _Node(parent, stamp)
                self.used += 1
                if parent is not None:
                    nodes[parent].children += 1
            node.stamp = stamp
            parent = block
        if parent is not None and nodes[parent].children == 0:
            heapq.heappush(self._leaves, (stamp, parent))

    def touch(self, ids: Sequence[int], count: int) -> None:
        """Mark the first `count` (cached) blocks of a chain as just used."""
        self.commit(ids, count)

    def add_snapshot(self, block_id: int) -> bool:
        """Give a cached block a state snapshot (one more block); False if it had one."""
        node = self.nodes[block_id]
        if node.snapshot:
            return False
        node.snapshot = True
        self.used += 1
        return True

    def free(self) -> int | None:
        return None if self.capacity is None else self.capacity - self.used

    def make_room(self, blocks: int, locked: Iterable[int] = ()) -> bool:
        """Evict LRU leaves (never a `locked` id) until `blocks` are free; False if impossible."""
        if self.capacity is None:
            return True
        locked = set(locked)
        kept: list[tuple[int, int]] = []
        heap, nodes = self._leaves, self.nodes
        while self.capacity - self.used < blocks and heap:
            stamp, block = heapq.heappop(heap)
            node = nodes.get(block)
            if node is None or node.stamp != stamp or node.children:
                continue  # stale entry
            if block in locked:
                kept.append((stamp, block))
                continue
            self._evict(block, node)
        for entry in kept:
            heapq.heappush(heap, entry)
        return self.capacity - self.used >= blocks

    def _evict(self, block: int, node: _Node) -> None:
        del self.nodes[block]
        self.used -= 1 + node.snapshot
        if node.parent is not None:
            parent = self.nodes[node.parent]
            parent.children -= 1
            if parent.children == 0:
                heapq.heappush(self._leaves, (parent.stamp, node.parent))


# -- helpers shared by the trtllm, llamacpp and suffix_replay engines ---------------------


def check_policy(policy: Policy, engine: str) -> None:
    """Policy keys these engines do not model are errors, not silently ignored."""
    if policy.engine != engine:
        raise ConfigError(f"the {engine} replay cannot run engine {policy.engine!r}")
    if policy.spec_decode != "none":
        raise ConfigError(
            f"policy key 'spec_decode': engine {engine} does not model speculative decoding; "
            f"use none (got {policy.spec_decode!r})"
        )
    if "sliding_window" in policy.groups:
        raise ConfigError(
            f"policy key 'groups': engine {engine} models full attention and mamba only, "
            "not sliding_window"
        )
    if policy.retention_interval != 0:
        raise ConfigError(
            f"policy key 'retention_interval': a vLLM key; engine {engine} places states "
            f"by its own options (keep 0, got {policy.retention_interval!r})"
        )


def check_block_match(policy: Policy) -> None:
    """Block engines match whole blocks: a finer prefix_match_unit is an error."""
    unit = policy.prefix_match_unit
    if unit is not None and unit != policy.block_size:
        raise ConfigError(
            f"policy key 'prefix_match_unit': engine {policy.engine} matches whole "
            f"blocks of block_size {policy.block_size}; got {unit}"
        )


def computed_tokens(sim: SimRequest) -> int:
    """Tokens whose KV the request computes: prompt + outputs - 1 (the last is only sampled)."""
    prompt, outputs = sim.num_prompt_tokens, sim.num_output_tokens
    return prompt + outputs - 1 if outputs > 1 else prompt


def budget_chunks(start: int, stops: Iterable[int], end: int, budget: int | None) -> list[int]:
    """Prefill chunks from token `start` to `end`: each ends at the next forced stop (> start)
    or after `budget` tokens (None = no budget), whichever comes first."""
    chunks = []
    pos = start
    stops = sorted(s for s in stops if start < s < end)
    stops.append(end)
    i = 0
    while pos < end:
        while stops[i] <= pos:
            i += 1
        stop = stops[i] if budget is None else min(stops[i], pos + budget)
        chunks.append(stop - pos)
        pos = stop
    return chunks


def empty_result(sim: SimRequest, error: str) -> SimResult:
    """A request the engine could not run: every counter 0, no chunks."""
    return SimResult(sim.request_id, sim.num_prompt_tokens, 0, 0, 0, 0, 0, 0, 0, (), error)
