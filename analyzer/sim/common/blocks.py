"""A pool of committed blocks as hash chains with leaf-only LRU eviction (units: blocks).

Shared by the `trtllm` and `suffix_replay` engines. A block is named by its chained hash id
(analyzer/sim/common/block_hash.py), so its parent is the previous block of the same prefix and
namespaces never meet. Each node may also carry one state snapshot, charged as one more block
(TensorRT-LLM keeps snapshots as blocks of the same pool).

Eviction: only leaves (blocks no other cached block extends) can go, least recently used
first, as in TensorRT-LLM's radix tree (its prioritized LRU with every block at the default
priority 35 is plain LRU). A block's snapshot leaves with it. Touching a path stamps every node
on it with the same clock value, so a parent is never older than its children.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence


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
