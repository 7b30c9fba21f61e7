"""The plain Python dict-trie: the reference the vectorised matcher is tested and
benchmarked against. Slow, obviously correct, and deliberately simple.

Each request is looked up with its prompt (query), then inserted with its prompt followed
by its output (inserted sequence), in arrival order, into one trie per namespace. A node
remembers the first request that created it, so the node where a lookup stops gives both
the longest shared prefix and the earliest earlier request sharing it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from analyzer.prefixes.memory import Request

# node layout (lists are smaller and faster than objects):
# [children: dict[int, node], first request, requests through, last request,
#  requests diverging here, families, revisions]; the lean trie uses the first two only.
_CHILDREN, _FIRST, _THROUGH, _LAST, _DIVERGING, _FAMILIES, _REVISIONS = range(7)


class DictTrie:
    """One namespace's trie. `track` also keeps the per-node statistics of junctions."""

    def __init__(self, track: bool = False) -> None:
        self.track = track
        self.root = self._node(-1)

    def _node(self, first: int) -> list:
        return [{}, first, 0, -1, 0, set(), set()] if self.track else [{}, first]

    def lookup(self, seq: Iterable[int]) -> tuple[int, int]:
        """(longest shared prefix length, earliest request holding it, or -1)."""
        node, depth = self.root, 0
        for tok in seq:
            child = node[_CHILDREN].get(tok)
            if child is None:
                break
            node, depth = child, depth + 1
        return depth, (node[_FIRST] if depth else -1)

    def insert(self, seq: Iterable[int], index: int, request: Request | None = None) -> None:
        node, diverged = self.root, False
        for tok in seq:
            children = node[_CHILDREN]
            child = children.get(tok)
            if child is None:
                if self.track and not diverged and node is not self.root:
                    node[_DIVERGING] += 1
                diverged = True
                child = children[tok] = self._node(index)
            node = child
            if self.track:
                self._visit(node, index, request)

    @staticmethod
    def _visit(node: list, index: int, request: Request | None) -> None:
        node[_THROUGH] += 1
        node[_LAST] = index
        if request is not None:
            if request.prompt_family is not None:
                node[_FAMILIES].add(request.prompt_family)
            if request.model_revision is not None:
                node[_REVISIONS].add(request.model_revision)

    def junctions(self) -> list[dict]:
        """Every node with two or more children (excluding the root), depth in units."""
        out, stack = [], [(self.root, 0)]
        while stack:
            node, depth = stack.pop()
            children = node[_CHILDREN]
            if depth and len(children) >= 2:
                out.append(
                    {
                        "depth": depth,
                        "first": node[_FIRST],
                        "last": node[_LAST],
                        "through": node[_THROUGH],
                        "branches": len(children),
                        "diverging": node[_DIVERGING],
                        "families": sorted(node[_FAMILIES]),
                        "revisions": sorted(node[_REVISIONS]),
                    }
                )
            stack.extend((child, depth + 1) for child in children.values())
        return out


@dataclass
class TrieResult:
    """Per request, in tokens (hash-id traces: blocks * block_size capped at the prompt)."""

    shared_any: list[int] = field(default_factory=list)
    parent: list[int] = field(default_factory=list)
    shared_replica: list[int] = field(default_factory=list)
    shared_conversation: list[int | None] = field(default_factory=list)
    tries: dict = field(default_factory=dict)


def to_tokens(units: int, request: Request) -> int:
    if request.is_hash:
        return min(units * request.block_size, request.prompt_tokens)
    return units


def trie_match(requests: list[Request], *, track: bool = False) -> TrieResult:
    """Look up then insert every request in arrival order, in three views."""
    res = TrieResult()
    views: dict[str, dict] = {"any": {}, "replica": {}, "conversation": {}}
    for i, r in enumerate(requests):
        any_trie = views["any"].setdefault(r.namespace, DictTrie(track))
        units, parent = any_trie.lookup(r.query)
        res.shared_any.append(to_tokens(units, r))
        res.parent.append(parent)
        any_trie.insert(r.inserted, i, r)
        rep = views["replica"].setdefault((r.namespace, r.replica), DictTrie())
        res.shared_replica.append(to_tokens(rep.lookup(r.query)[0], r))
        rep.insert(r.inserted, i)
        if r.conversation_id is None:
            res.shared_conversation.append(None)
            continue
        conv = views["conversation"].setdefault((r.namespace, r.conversation_id), DictTrie())
        res.shared_conversation.append(to_tokens(conv.lookup(r.query)[0], r))
        conv.insert(r.inserted, i)
    res.tries = views["any"]
    return res
