"""SGLang's MambaRadixCache as a replay data structure: radix tree, two pools, two LRU orders.

Pools: KV in tokens (`kv_tokens`, None = unbounded) and recurrent states in slots
(`num_states`, None = unbounded). The tree's pages and the running request's private KV share
the KV pool; tree states and the running request's own slots (`reserved`) share the state pool.
The running request holds whole pages (its last one partly filled). Before an extend SGLang's
paged allocator evicts for the extend plus one page, before each decode step for one page
(allocation.py, alloc_paged_token_slots_extend / _decode): only the shortfall below the free
pages, so a step that starts no page may still evict; at page 1 the exact need.

LRU orders are logical stamps kept in two lazy heaps (stale entries are skipped on pop):
- full LRU over unlocked leaves: evicting one frees its KV and state; its parent, now a leaf,
  stays (SGLang's unified cache deletes a node only when its full KV goes);
- state LRU over unlocked nodes holding a state: an internal node becomes a tombstone (its KV
  stays), a leaf is deleted as above (leaves are never tombstones).
Without a recurrent group (`stateful` False) every node counts as holding state: plain
RadixCache, hit = full match, no state pool.
"""

from __future__ import annotations

import heapq
import weakref
from collections.abc import Sequence

from analyzer.sim.common.tree import Node, RadixTree


class MambaRadixCache:
    """One replica's cache; all sizes in tokens or state slots (see the module docstring)."""

    def __init__(
        self, page_tokens: int, kv_tokens: int | None, num_states: int | None, stateful: bool
    ) -> None:
        self.page = page_tokens
        self.kv_tokens = kv_tokens
        self.num_states = num_states if stateful else None
        self.stateful = stateful
        self.tree = RadixTree()
        self.private_tokens = 0  # KV of the running request not (yet) owned by the tree
        self.states = 0  # states held by tree nodes
        self.reserved = 0  # slots held by the running request (live, ping-pong)
        self.clock = 0
        self.full_heap: list[tuple[int, int, Node]] = []
        self.state_heap: list[tuple[int, int, Node]] = []
        self.tree.on_split = weakref.WeakMethod(self._stamp_split)  # (a strong one: a cycle)

    # --- stamps -----------------------------------------------------------------------
    def tick(self) -> int:
        self.clock += 1
        return self.clock

    def touch(self, nodes: Sequence[Node]) -> None:
        """Full-LRU refresh, root-down so children are more recent than their parents."""
        for node in nodes:
            node.stamp = self.tick()
            if not node.children:
                heapq.heappush(self.full_heap, (node.stamp, node.uid, node))

    def _stamp_split(self, upper: Node, lower: Node) -> None:
        """SGLang's split (unified_tree_core._split_node) makes a new upper node, stamped
        when it is made, then stamps the lower part as just accessed: a split counts as a
        use of both, and the lower part is the more recent."""
        upper.stamp = self.tick()
        lower.stamp = self.tick()
        if not lower.children:
            heapq.heappush(self.full_heap, (lower.stamp, lower.uid, lower))

    def touch_state(self, node: Node) -> None:
        """State-LRU refresh of the one node whose state was used or stored."""
        if node.parent is None or not node.state:
            return
        node.state_stamp = self.tick()
        heapq.heappush(self.state_heap, (node.state_stamp, node.uid, node))

    # --- match and insert -------------------------------------------------------------
    def match(self, keys: Sequence[int], *, touch: bool = True) -> tuple[list[Node], int]:
        """Walk `keys` (split where the match ends inside an edge); returns (path, pages).
        `touch=False` leaves the stamps to the caller (`touch_to`)."""
        path, matched, partial = self.tree.walk(keys)
        if partial is not None:
            path.append(self.split(partial, matched - partial.start))
        if touch:
            self.touch(path)
        return path, matched

    def touch_to(self, path: list[Node], node: Node) -> None:
        """Refresh the matched path down to the hit `node` only: SGLang's unified cache
        stamps the path of its best match, where every component validates
        (UnifiedTreeCore._match_post_processor), so KV matched past the hit ages."""
        self.touch(path[: path.index(node) + 1] if node in path else [])

    def split(self, node: Node, k: int) -> Node:
        """Split `node` after `k` pages; a recurrent state stays on the lower part."""
        return self.tree.split(node, k)

    def units(self, node: Node) -> int:
        """Pool units `node`'s state takes: one state slot."""
        return 1

    def hit_node(self, path: list[Node]) -> Node:
        """The deepest node on `path` with a state (the root when none)."""
        for node in reversed(path):
            if node.state or not self.stateful:
                return node
        return self.tree.root

    def insert(self, keys: Sequence[int], covered_tokens: int) -> Node:
        """Insert the request's `keys` (its KV from `covered_tokens` on moves to the tree,
        duplicates of pages already there are freed); returns the node ending there."""
        path, _ = self.tree.insert(keys)
        self.private_tokens -= len(keys) * self.page - covered_tokens
        self.touch(path)
        return path[-1] if path else self.tree.root

    def add_state(self, node: Node, stored: set[int]) -> None:
        """Give `node` the state in a fresh slot (already allocated by `alloc_state`); an
        existing state wins and the slot is freed ("mamba_exist")."""
        if node.parent is None or not self.stateful:
            return
        if not node.state:
            node.state = True
            self.states += 1
            stored.add(node.pages[-1])
        self.touch_state(node)

    # --- locks ------------------------------------------------------------------------
    def lock(self, node: Node, delta: int) -> None:
        """Path lock to the root (+1 / -1) and the state lock on `node` itself."""
        node.state_lock += delta
        while node.parent is not None:
            node.lock += delta
            node = node.parent

    # --- pools ------------------------------------------------------------------------
    def alloc_kv(self, tokens: int, pos: int = 0) -> bool:
        """An extend of the running request by `tokens` from position `pos`: evict for
        SGLang's demand (`demand`), then take the whole pages the tokens start."""
        self.make_room(self.demand(tokens))
        return self._take(pages_between(pos, pos + tokens, self.page))

    def alloc_decode(self, pos: int, steps: int) -> bool:
        """`steps` decode steps of the running request from position `pos` (`decode_demand`),
        taking a page whenever a step's token starts one."""
        self.make_room(self.decode_demand(pos, pos + steps))
        return self._take(pages_between(pos, pos + steps, self.page))

    def decode_demand(self, pos: int, end: int) -> int:
        """What decode steps from `pos` to `end` evict for, at once. Above page 1 each step
        evicts for one page while none is free (SGLang's paged decode assumes every request
        needs a new one), so the steps together need one page more than the pages started
        before the last step; at page 1 each step needs its own slot. Nothing is refreshed
        between the steps, so evicting once for this is evicting step by step."""
        if self.page == 1:
            return end - pos
        return self.page + pages_between(pos, end - 1, self.page)

    def demand(self, tokens: int) -> int:
        """What SGLang evicts for before an extend of `tokens`: the extend plus one page (its
        paged allocator assumes each request starts a new page), the exact need at page 1."""
        return tokens + self.page if self.page > 1 else tokens

    def make_room(self, need: int) -> None:
        """Evict (full LRU) until `need` tokens are free or nothing is evictable."""
        cap = self.kv_tokens
        while cap is not None and self.used_kv() + need > cap:
            if not self._evict_full():
                return

    def _take(self, tokens: int) -> bool:
        """The running request takes `tokens` of free KV (False: the pool is short)."""
        if self.kv_tokens is not None and self.used_kv() + tokens > self.kv_tokens:
            return False
        self.private_tokens += tokens
        return True

    def used_kv(self) -> int:
        return self.tree.num_pages * self.page + self.private_tokens

    def alloc_state(self) -> None:
        """Make room for one more state slot (state-LRU eviction); the caller sized the pool
        so an unlocked state always exists."""
        cap = self.num_states
        while cap is not None and self.states + self.reserved + 1 > cap:
            if not self._evict_state():
                raise AssertionError("state pool too small for one request")

    # --- eviction ---------------------------------------------------------------------
    def _pop(self, heap: list, valid, locked) -> Node | None:
        aside = []
        found = None
        while heap:
            entry = heapq.heappop(heap)
            node = entry[2]
            if not valid(entry):
                continue
            if locked(node):
                aside.append(entry)
                continue
            found = node
            break
        for entry in aside:
            heapq.heappush(heap, entry)
        return found

    def _evict_full(self) -> bool:
        node = self._pop(
            self.full_heap,
            lambda e: e[2].alive and e[2].stamp == e[0] and not e[2].children,
            lambda n: n.lock > 0,
        )
        if node is None:
            return False
        self._delete(node)
        return True

    def _evict_state(self) -> bool:
        node = self._pop(
            self.state_heap,
            lambda e: e[2].alive and e[2].state and e[2].state_stamp == e[0],
            self.state_locked,
        )
        if node is None:
            return False
        if node.children:
            self._tombstone(node)
        else:
            self._delete(node)
        return True

    def _tombstone(self, node: Node) -> None:
        """Drop an internal node's state (its KV stays)."""
        node.state = False
        self.states -= self.units(node)

    def _free(self, node: Node) -> None:
        """Release the state of a deleted node."""
        if node.state and self.stateful:
            self.states -= self.units(node)

    def _keeps(self, node: Node) -> bool:
        """Whether a node that just became a leaf stays. SGLang's unified cache lets the full
        KV alone decide (unified_tree_core._iteratively_delete_tombstone_ancestors), and
        every node here holds its KV, so a parent left childless stays, with or without a
        state; the legacy MambaRadixCache deleted it when it had none."""
        return True

    def state_locked(self, node: Node) -> bool:
        """A state in use by the running request (a locked leaf cannot be deleted either)."""
        return node.state_lock > 0 or (node.lock > 0 and not node.children)

    def _delete(self, node: Node) -> None:
        """Delete a leaf (KV and state), then the childless parents `_keeps` refuses."""
        tree = self.tree
        while True:
            parent = node.parent
            tree.remove_leaf(node)
            self._free(node)
            node = parent
            if node.parent is None or node.children:
                break
            if self._keeps(node):  # a leaf now
                heapq.heappush(self.full_heap, (node.stamp, node.uid, node))
                break


def pages_between(start: int, end: int, page: int) -> int:
    """Tokens of the whole pages a sequence growing from `start` to `end` tokens starts."""
    return (-(-end // page) - -(-start // page)) * page
