"""Marconi's cache as a replay data structure: radix tree, one pool, FLOP-aware eviction.

The pool is `capacity` blocks (None = unbounded): a page of KV is one block, a state is
`state_blocks` blocks. Eviction candidates are the nodes holding a state with at most one
child; each scores norm(recency) + alpha x norm(FLOP efficiency) (min-max over the candidates;
recency = 1 / (now - last access)) and the lowest goes: a leaf frees its state and KV, a
single-child node frees its state and its edge merges into the child's.
"""

from __future__ import annotations

from collections.abc import Sequence

from analyzer.sim.common.tree import Node, RadixTree
from analyzer.sim.marconi.flops import CostModel


class MarconiCache:
    """One replica's cache; sizes in pool blocks, depths in pages of `page` tokens."""

    def __init__(
        self, page: int, capacity: int | None, state_blocks: int, alpha: float, costs: CostModel
    ) -> None:
        self.page = page
        self.capacity = capacity
        self.state_blocks = state_blocks
        self.alpha = alpha
        self.costs = costs
        self.tree = RadixTree()
        self.states = 0
        self.clock = 0
        self.evictions = 0
        self._eff: dict[tuple[int, int], float] = {}  # (end, edge) pages -> FLOP efficiency

    def clone(self, alpha: float) -> MarconiCache:
        """An independent copy of this cache (tree, pool, clock) evicting with `alpha`.

        The efficiency memo is shared: it is a pure function of (end, edge) pages."""
        twin = MarconiCache(self.page, self.capacity, self.state_blocks, alpha, self.costs)
        twin.tree = self.tree.clone()
        twin.states, twin.clock, twin.evictions = self.states, self.clock, self.evictions
        twin._eff = self._eff
        return twin

    def used(self) -> int:
        return self.tree.num_pages + self.states * self.state_blocks

    def insert(
        self, keys: Sequence[int], branch: int | None, stored: set[int]
    ) -> tuple[Node, ...] | None:
        """Cache the finished sequence `keys` with a state at its end, and at `branch` pages
        when the insert splits an edge there (the speculative-insertion checkpoint).

        Evicts first to make room; returns None (nothing cached) when even that cannot.
        """
        while True:
            path, matched, partial = self.tree.walk(keys)
            protect = {id(n) for n in path}
            if partial is not None:
                protect.add(id(partial))
            end_node = path[-1] if path and matched == len(keys) and partial is None else None
            states = 0 if end_node is not None and end_node.state else 1
            if partial is not None and branch == matched < len(keys):
                states += 1
            need = len(keys) - matched + states * self.state_blocks
            room = self._make_room(need, protect)
            # Evictions may have stranded a node this insert was to extend or split (now
            # stateless, with one child or none): fold it as an eviction does, and walk again.
            if self._fold_stranded([*path[-1:], *([partial] if partial else [])]):
                continue
            if not room:
                return None
            break
        nodes, _ = self.tree.insert(keys)
        for node in nodes:
            if node.end == len(keys) or node.end == branch:
                self._give_state(node, stored)
        return tuple(nodes)

    def _fold_stranded(self, nodes: list[Node]) -> bool:
        """Fold each of `nodes` that is stateless with at most one child; whether any was."""
        stranded = [
            n for n in nodes if n.parent is not None and not n.state and len(n.children) <= 1
        ]
        for node in stranded:
            self._fold(node, set())
        return bool(stranded)

    def _give_state(self, node: Node, stored: set[int]) -> None:
        node.stamp = self.clock
        if not node.state:
            node.state = True
            self.states += 1
            stored.add(node.pages[-1])

    def _make_room(self, need: int, protect: set[int]) -> bool:
        cap = self.capacity
        if cap is None:
            return True
        while self.used() + need > cap:
            victim = self._victim(protect)
            if victim is None:
                return False
            self._evict(victim, protect)
        return True

    def _candidates(self, protect: set[int]) -> list[Node]:
        out, stack = [], list(self.tree.root.children.values())
        while stack:
            node = stack.pop()
            stack.extend(node.children.values())
            if node.state and len(node.children) <= 1 and id(node) not in protect:
                out.append(node)
        return out

    def _victim(self, protect: set[int]) -> Node | None:
        nodes = self._candidates(protect)
        if not nodes:
            return None
        now = self.clock + 1
        rec = [1.0 / (now - n.stamp) for n in nodes]
        eff = [self._efficiency(n) for n in nodes]
        scores = [r + self.alpha * e for r, e in zip(_norm(rec), _norm(eff), strict=True)]
        best = min(range(len(nodes)), key=lambda i: (scores[i], nodes[i].stamp, nodes[i].uid))
        return nodes[best]

    def _efficiency(self, node: Node) -> float:
        key = (node.end, len(node.pages))
        eff = self._eff.get(key)
        if eff is None:
            path, edge = node.end * self.page, len(node.pages) * self.page
            eff = self.costs.flops_saved(path, edge) / self.costs.memory_bytes(path)
            self._eff[key] = eff
        return eff

    def _evict(self, node: Node, protect: set[int]) -> None:
        self.evictions += 1
        node.state = False
        self.states -= 1
        if node.children:  # single child: the edge merges into it
            self.tree.merge_into_child(node)
            return
        parent = node.parent
        self.tree.remove_leaf(node)
        self._fold(parent, protect)

    def _fold(self, node: Node, protect: set[int]) -> None:
        """Drop or fold the stateless nodes from `node` up (a split without a checkpoint
        leaves them): a leaf holds a state, a stateless node with one child merges into it."""
        tree = self.tree
        while node.parent is not None and not node.state and id(node) not in protect:
            if len(node.children) == 1:
                tree.merge_into_child(node)
                return
            if node.children:
                return
            parent = node.parent
            tree.remove_leaf(node)
            node = parent


def _norm(values: list[float]) -> list[float]:
    """Min-max normalisation to [0, 1] (all 0 when the values are equal)."""
    lo, hi = min(values), max(values)
    if hi <= lo:
        return [0.0] * len(values)
    span = hi - lo
    return [(v - lo) / span for v in values]
