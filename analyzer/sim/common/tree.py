"""A page-level radix tree shared by the radix-cache engines (sglang, marconi).

A page is `block_size` tokens; its key is the chained block hash id of the prefix ending with
it (analyzer/sim/common/block_hash.py), so equal keys at equal depths mean equal prefixes and a
namespace never shares a key with another. An edge is a run of page keys; a child is found by
its first page key, an edge is compared page by page and a divergence inside an edge splits it
at that page (split-on-divergence, as SGLang's RadixCache and Marconi's tree do).

The tree only holds topology and per-node fields the engines read (`state`, timestamps, locks);
what a state means, what is refreshed and what is evicted is the engine's business.
Units: `end` and edge lengths are in pages (multiply by the page size for tokens).

A child links to its parent and the parent to its children: reference cycles, which only the
collector's full pass would free. A tree cuts them itself as it goes (`RadixTree.__del__`),
so a replay's tree is freed as its cache is; a parent link costs a plain attribute read (a
weak one would cost a call at every step of a walk up).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

# Per-node fields a clone copies besides the topology.
COPIED_FIELDS = ("state", "stamp", "state_stamp", "lock", "state_lock", "mamba", "mamba_stamp")


def cut_links(root) -> None:
    """Cut the links of a tree's nodes (children emptied, parents cleared) so each goes as its
    last reference does, without the collector and without a recursive free: what a tree's
    `__del__` does (this one's, and SGLang's router's)."""
    stack = [root]
    while stack:
        node = stack.pop()
        stack.extend(node.children.values())
        node.children.clear()
        node.parent = None


class Node:
    """One edge of the tree: `pages` (page keys), ending `end` pages below the root.

    `state`: the node holds a recurrent-state snapshot taken after its last token.
    `stamp` / `state_stamp`: logical access times (LRU orders of the engines).
    `lock`: requests whose path runs through this node (cannot be evicted).
    `state_lock`: requests using this node's state (SGLang's mamba lock).
    `mamba` / `mamba_stamp`: a second per-node state and its access time, for a cache whose
    `state` means something else (SGLang's unified cache: `state` = SWA KV, `mamba` = the
    recurrent state).
    """

    __slots__ = (
        "parent",
        "pages",
        "children",
        "end",
        "state",
        "stamp",
        "state_stamp",
        "lock",
        "state_lock",
        "mamba",
        "mamba_stamp",
        "alive",
        "uid",
    )

    def __init__(self, parent: Node | None, pages: list[int], end: int, uid: int) -> None:
        self.parent = parent
        self.pages = pages
        self.children: dict[int, Node] = {}
        self.end = end
        self.state = False
        self.stamp = 0
        self.state_stamp = 0
        self.lock = 0
        self.state_lock = 0
        self.mamba = False
        self.mamba_stamp = 0
        self.alive = True
        self.uid = uid

    @property
    def start(self) -> int:
        """Pages from the root to the start of this edge."""
        return self.end - len(self.pages)

    def path(self) -> list[Node]:
        """Nodes from the root's child down to this node (empty for the root)."""
        out = []
        node = self
        while node.parent is not None:
            out.append(node)
            node = node.parent
        out.reverse()
        return out


class RadixTree:
    """The page-keyed radix tree; `num_pages` counts the pages resident in it."""

    def __init__(self) -> None:
        self.next_uid = 1
        self.root = Node(None, [], 0, 0)
        self.num_pages = 0
        # a weakref.WeakMethod of the owner's method called as (upper, lower) after every
        # split, for a cache whose LRU stamps a split (SGLang's unified cache; weak: the
        # cache holds the tree); None: the stamps stay as they were
        self.on_split: Callable[[], Callable[[Node, Node], None] | None] | None = None

    def __del__(self) -> None:
        cut_links(self.root)

    def walk(self, keys: Sequence[int]) -> tuple[list[Node], int, Node | None]:
        """Match `keys` from the root without changing the tree.

        Returns (fully matched nodes in order, pages matched including a partial edge, the
        partially matched node or None). The partial node matched `matched - its start` pages.
        """
        node, i, n = self.root, 0, len(keys)
        path: list[Node] = []
        while i < n:
            child = node.children.get(keys[i])
            if child is None:
                return path, i, None
            edge = child.pages
            k = 1
            limit = min(len(edge), n - i)
            while k < limit and edge[k] == keys[i + k]:
                k += 1
            i += k
            if k < len(edge):
                return path, i, child
            path.append(child)
            node = child
        return path, i, None

    def split(self, node: Node, k: int) -> Node:
        """Cut `node`'s edge after `k` pages; returns the new upper node (no state, same stamp).

        The state stays on the lower part: it describes the position after the original edge.
        """
        upper = Node(node.parent, node.pages[:k], node.start + k, self._uid())
        upper.stamp = node.stamp
        upper.lock = node.lock
        node.parent.children[upper.pages[0]] = upper
        node.pages = node.pages[k:]
        node.parent = upper
        upper.children[node.pages[0]] = node
        hook = self.on_split and self.on_split()
        if hook is not None:
            hook(upper, node)
        return upper

    def insert(self, keys: Sequence[int]) -> tuple[list[Node], int]:
        """Make `keys` a path of the tree; returns (its nodes root-down, pages newly added).

        The last node ends exactly at len(keys) (an edge is split there if needed); no keys
        returns ([], 0).
        """
        path, matched, partial = self.walk(keys)
        if partial is not None:
            path.append(self.split(partial, matched - partial.start))
        if matched == len(keys):
            return path, 0
        parent = path[-1] if path else self.root
        leaf = Node(parent, list(keys[matched:]), len(keys), self._uid())
        parent.children[leaf.pages[0]] = leaf
        self.num_pages += len(leaf.pages)
        path.append(leaf)
        return path, len(leaf.pages)

    def remove_leaf(self, node: Node) -> None:
        """Delete a childless node and its pages."""
        assert not node.children and node.parent is not None
        del node.parent.children[node.pages[0]]
        self.num_pages -= len(node.pages)
        node.alive = False

    def merge_into_child(self, node: Node) -> Node:
        """Fold a single-child node into its child (edge concatenation); returns the child."""
        (child,) = node.children.values()
        parent = node.parent
        child.pages = node.pages + child.pages
        child.parent = parent
        parent.children[node.pages[0]] = child
        node.alive = False
        return child

    def clone(self) -> RadixTree:
        """An independent copy (same topology, uids and per-node fields), built without
        recursion so a deep tree (a long conversation) cannot exhaust the stack."""
        twin = RadixTree()
        twin.next_uid, twin.num_pages = self.next_uid, self.num_pages
        stack = [(self.root, twin.root)]
        while stack:
            old, new = stack.pop()
            for key, child in old.children.items():
                copy = Node(new, list(child.pages), child.end, child.uid)
                for field in COPIED_FIELDS:
                    setattr(copy, field, getattr(child, field))
                new.children[key] = copy
                stack.append((child, copy))
        return twin

    def _uid(self) -> int:
        self.next_uid += 1
        return self.next_uid - 1


def deepest_stored(keys: Sequence[int], lo: int, hi: int, stored: set[int]) -> int:
    """The deepest page count in (lo, hi] whose prefix ever held a state (`stored` holds the
    key of the page ending there), else `lo`: what the hit would have been with no eviction."""
    for end in range(hi, lo, -1):
        if keys[end - 1] in stored:
            return end
    return lo
