"""Exact longest shared prefixes by a compiled radix tree, over sequences held in memory or
streamed through it in arrival order.

The same answers as `matcher.ViewMatcher` (see its definitions of e/w and L/p), computed
the direct way: every view keeps one radix tree per namespace, and each request, in
arrival order, walks its inserted sequence down its tree and then hangs the rest of it
off the point where the walk stopped. An edge is a run of units named by where they are
(a base, first depth, last depth): in the held array, so the tree holds no unit, or, when
the sequences stream by and are dropped, in the trees' arena, which keeps each request's
units from its shallowest new leaf on, once for every view (about the trace's unique
content). A child is found by its parent and its first unit in one open-addressing table,
with the whole key stored, so no lookup can collide. An edge remembers the request that
created it, which is the earliest request holding any point on it (a split keeps the
creator on both halves): the walk's last point gives e and w, the point at the prompt's
length gives p. The work is the tokens compared, sum of e over requests, plus one lookup
per edge walked: a C loop (`radix_loop.c`) on the CPU. The vectorised matcher does the
rest: chunks read from the store by `hpa match`, archives, the GPU, and a package built
without a C compiler.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analyzer.prefixes.source import PartitionSource, RequestMeta

try:  # the C loop, built with the package (setup.py)
    from analyzer.prefixes import radix_loop
except ImportError:  # pragma: no cover - built without a C compiler: the vectorised matcher
    radix_loop = None

# Below this many units the vectorised matcher answers in milliseconds too; small traces
# keep it in use, as the path of a package built without a C compiler.
COMPILED_MIN_UNITS = 1 << 20


VIEWS = ("any", "replica", "conversation")


class RadixMatch:
    """The radix trees of every view of `meta`, fed its requests in arrival order: all at
    once where every sequence is held (`held`: the array `feed` is given, which the trees'
    edges then point into), or chunk by chunk as they stream (the trees then keep their
    own copy of each unit no earlier request had: an arena about the trace's unique
    content, every view's edges pointing into it). Answers never depend on the chunks.

    Memory: about 130 bytes a request a view (nodes and the child table), plus the arena
    (`dtype` units; virtual until written) when nothing is held."""

    def __init__(self, meta: RequestMeta, dtype: np.dtype, *, held: np.ndarray | None = None):
        n = meta.n
        self.n, self.meta = n, meta
        self.alias_replica = bool(np.array_equal(meta.ns_replica, meta.ns_any))
        wanted = {
            "any": meta.ns_any,
            "replica": meta.ns_replica,
            "conversation": meta.ns_conversation,
        }
        self.names = [
            name
            for name in VIEWS
            if n and wanted[name].max() >= 0 and not (name == "replica" and self.alias_replica)
        ]
        num_views = len(self.names)
        self.ns = np.zeros((num_views, n), dtype=np.int64)
        for v, name in enumerate(self.names):
            self.ns[v] = wanted[name]
        num_ns = self.ns.max(axis=1) + 1 if n else np.zeros(0, np.int64)
        # copies (a request's int64), writable, as every other argument: a read-only array
        # is another numba type, a kernel the wheel does not carry (analyzer.kernels)
        self.lens = np.array(meta.insert_len, dtype=np.int64)
        self.qlen = np.minimum(meta.query_len, self.lens).astype(np.int64)
        max_nodes = int(num_ns.max(initial=0)) + 2 * n + 1
        cap = 1
        while cap < 2 * max_nodes:
            cap *= 2
        shape = (num_views, max_nodes)
        self.nodes = (  # per node: lo, hi (an edge holds units [lo, hi)), base, creator
            np.zeros(shape, np.int64),
            np.zeros(shape, np.int64),
            np.zeros(shape, np.int64),
            np.full(shape, -1, np.int64),
        )
        self.table = (  # open addressing: (parent node, first unit) -> child node
            np.full((num_views, cap), -1, np.int64),
            np.zeros((num_views, cap), np.int64),
            np.zeros((num_views, cap), np.int64),
        )
        # nodes used per view (roots 0..num_ns-1 first), then the arena's used units
        self.counts = np.append(num_ns, 0).astype(np.int64)
        self.own = held is None
        self.arena = np.empty(int(self.lens.sum()), dtype) if held is None else held
        self.out = np.full((4, num_views, n), -1, np.int64)  # L, p, e, w per view
        # per request: where unit x (from its shallowest new leaf on) is, less x
        self.leaf_at = np.zeros(n, np.int64)

    def feed(self, flat: np.ndarray, starts: np.ndarray, first: int, stop: int) -> None:
        """Requests [first, stop): request i's inserted sequence is flat[starts[i - first]
        :][: insert_len[i]] (`flat` is the held array itself when one is held)."""
        if not self.names or stop <= first:
            return
        radix_loop.feed(
            flat,
            np.array(starts, dtype=np.int64),
            first,
            stop,
            self.lens,
            self.qlen,
            self.ns,
            *self.nodes,
            *self.table,
            self.counts,
            self.arena,
            self.arena if self.own else self.arena[:0].copy(),  # written to; `held` may not be
            self.own,
            *self.out,
            self.leaf_at,
        )

    def sequences(self) -> ArenaSequences | None:
        """What rebuilds any request's inserted sequence once the trees are dropped (the
        arena, and in the any view e, w and where each request's own units are)."""
        if "any" not in self.names:
            return None
        v = self.names.index("any")
        e, w = self.out[2, v].copy(), self.out[3, v].copy()
        return ArenaSequences(self.meta, e, w, self.leaf_at, self.arena)

    def views(self) -> dict[str, tuple[np.ndarray, ...]]:
        """Per view: (L, p, e, w) per request in units, -1 where a request is not in the
        view (p and w: -1 where nothing is shared)."""
        none = tuple(np.full(self.n, -1, np.int64) for _ in range(4))
        out = {name: tuple(self.out[:, v]) for v, name in enumerate(self.names)}
        if self.alias_replica and "any" in out:
            out["replica"] = out["any"]
        return {name: out.get(name, none) for name in VIEWS}


@dataclass(frozen=True)
class ArenaSequences:
    """The inserted sequences of requests matched by the trees, rebuilt from their arena
    (or the held array): a request's units from where it left every earlier request (e,
    any view) on are at leaf_at + depth; the rest are its holder's (w), and so on up. What
    `hpa match` needs of the junctions' owners, without reading the store again."""

    meta: RequestMeta
    e: np.ndarray
    w: np.ndarray
    leaf_at: np.ndarray
    arena: np.ndarray

    def held(self, ids: np.ndarray) -> PartitionSource:
        """A source holding the inserted sequences of requests `ids` (ascending, unique),
        as `access.sources.DuckDBSource.held(ids)` reads them."""
        ids = np.asarray(ids, dtype=np.int64)
        lens = np.asarray(self.meta.insert_len, dtype=np.int64)
        offsets = np.zeros(len(ids) + 1, dtype=np.int64)
        np.cumsum(lens[ids], out=offsets[1:])
        flat = np.empty(int(offsets[-1]), dtype=self.arena.dtype)
        radix_loop.rebuild(ids, lens, self.e, self.w, self.leaf_at, self.arena, flat, offsets[:-1])
        starts = np.zeros(self.meta.n, dtype=np.int64)  # never read: the source serves `ids`
        starts[ids] = offsets[:-1]
        return PartitionSource.gapped(self.meta, flat, starts)

    def prefixes(self, ids: np.ndarray, lens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(flat, int64 offsets): the first `lens[k]` units (at most its length) of request
        `ids[k]`'s inserted sequence, one after another (`ids` ascending, unique): what the
        junction ids hash of each owner (up to its deepest junction), not the rest."""
        ids = np.asarray(ids, dtype=np.int64)
        want = np.zeros(self.meta.n, dtype=np.int64)
        want[ids] = np.minimum(lens, self.meta.insert_len[ids])
        offsets = np.zeros(len(ids) + 1, dtype=np.int64)
        np.cumsum(want[ids], out=offsets[1:])
        flat = np.empty(int(offsets[-1]), dtype=self.arena.dtype)
        radix_loop.rebuild(ids, want, self.e, self.w, self.leaf_at, self.arena, flat, offsets[:-1])
        return flat, offsets


def radix_views(meta: RequestMeta, flat: np.ndarray, starts: np.ndarray):
    """Per view of `engine` ("any", "replica", "conversation"): (L, p, e, w) per request
    in units, -1 where a request is not in the view (p and w: -1 where nothing is
    shared); None without the C loop. Request i's inserted sequence is
    flat[starts[i] : starts[i] + meta.insert_len[i]]; `flat` is int32 or int64."""
    if not available():  # pragma: no cover - built without a C compiler
        return None
    match = RadixMatch(meta, flat.dtype, held=flat)
    match.feed(flat, starts, 0, meta.n)
    return match.views()


def available() -> bool:
    """Whether the C loop was built (not, where the package was built without a C compiler:
    the vectorised matcher then answers, and nothing streams through the trees)."""
    return radix_loop is not None
