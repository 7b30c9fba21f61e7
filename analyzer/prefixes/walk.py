"""Earlier chunks as a tree of chains: find how far each new sequence follows it.

Every earlier request r of the view added one *chain* of new nodes to the prefix tree:
units e_r+1..len_r, hanging off the node at depth e_r created by w_r (its verified
insertion answers). The dictionary of earlier chunks holds only two kinds of keys:
nodes at depths that are multiples of `grid`, and *chain heads* (the node at depth
e_r+1, first unit of r's chain), each with the request that created it. For a sequence:

 1. binary search over grid depths -> the deepest grid node D it shares, and h, the
    request that created it; one token comparison proves s[:D] == s_h[:D];
 2. walk: compare tokens with the current chain's owner until they differ (depth m),
    then look up the chain head for s[:m+1]; a candidate r is accepted only if
    e_r == m, w_r == the current owner and its next unit agrees: exact integer checks on
    the (exact) tree, so a hash collision can only make a lookup fail loudly, never
    succeed wrongly. Stop when no chain continues.

The result: ext (units shared with earlier chunks) and the request that created the
node at that depth, the earliest request holding that prefix. Few walk rounds are
needed (the grid jump skips everything above D), each vectorised over the chunk.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from analyzer.prefixes.arrays import Array, common_prefix, prefixes_equal
from analyzer.prefixes.backend import to_numpy
from analyzer.prefixes.prefix_dict import PrefixDict


class Reference:
    """Sequences of earlier requests fetched for comparison, addressed by global id."""

    def __init__(self, ids: np.ndarray, fetch: Any, *, xp: Any) -> None:
        ids = np.unique(ids[ids >= 0])
        flat, offsets = fetch(ids) if ids.size else (np.zeros(1, np.uint64), np.zeros(2, int))
        self.xp, self.ids = xp, xp.asarray(ids if ids.size else np.zeros(1, np.int64))
        self.flat, self.offsets = xp.asarray(flat), xp.asarray(offsets.astype(np.int64))

    def starts_of(self, holder: Array) -> Array:
        xp = self.xp
        row = xp.minimum(xp.searchsorted(self.ids, holder), self.ids.shape[0] - 1)
        return xp.take(self.offsets, row)


def grid_jump(v: Any, key_at: Any, tree: PrefixDict, grid: int, *, xp: Any) -> tuple[Array, Array]:
    """(D, h): the deepest shared grid depth by key, and its node's creator (unverified)."""
    n = v.lens.shape[0]
    lo = xp.zeros(n, dtype=xp.int64)
    if tree.size == 0:
        return lo, xp.full(n, -1, dtype=xp.int64)
    hi = v.lens // grid
    while True:
        active = lo < hi
        if not bool(xp.any(active)):
            break
        mid = (lo + hi + 1) // 2
        found, _ = tree.lookup(key_at(mid * grid))
        found = found & active
        lo = xp.where(found, mid, lo)
        hi = xp.where(active & ~found, mid - 1, hi)
    depth = lo * grid
    found, first = tree.lookup(key_at(depth))
    return depth, xp.where((depth > 0) & found, first, -1)


def walk_earlier(
    v: Any,
    key_at: Any,
    tree: PrefixDict,
    chains: tuple[Array, Array, Array, Array],
    fetch: Any,
    *,
    grid: int,
    xp: Any,
) -> tuple[Array, Array, Array]:
    """(ext, holder, needs_exact) per sequence of chunk view `v` (see the module doc).

    `chains` = (e, w, len, ns) of every request (global ids; -1 where unknown).
    `needs_exact` marks the sequences where a hash collision hid the answer."""
    e_all, w_all, len_all, ns_all = chains
    depth, cur = grid_jump(v, key_at, tree, grid, xp=xp)
    ref = Reference(to_numpy(cur), fetch, xp=xp)
    safe = xp.maximum(cur, 0)
    same = (cur >= 0) & (xp.take(ns_all, safe) == v.ns) & (depth <= xp.take(len_all, safe))
    length = xp.where(same, depth, 0)
    ok = same & prefixes_equal(v.flat, v.starts, ref.flat, ref.starts_of(safe), length, xp=xp)
    depth, cur = xp.where(ok, depth, 0), xp.where(ok, cur, -1)  # else walk from the root
    hopped = xp.zeros(depth.shape[0], dtype=xp.bool)
    bad = xp.zeros(depth.shape[0], dtype=xp.bool)
    active = xp.ones(depth.shape[0], dtype=xp.bool)
    while bool(xp.any(active)):
        depth, bad, active = _follow(v, cur, depth, hopped, bad, active, len_all, fetch, xp=xp)
        cur, depth, hopped, bad, active = _hop(
            v, key_at, tree, cur, depth, bad, active, (e_all, w_all, ns_all), xp=xp
        )
    return depth, xp.where(depth > 0, cur, -1), bad


def _follow(v, cur, depth, hopped, bad, active, len_all, fetch, *, xp):
    """Compare along the current chains; a hop whose first unit differs was a collision."""
    live = active & (cur >= 0)
    ref = Reference(to_numpy(xp.where(live, cur, -1)), fetch, xp=xp)
    safe = xp.maximum(cur, 0)
    room = xp.minimum(v.lens, xp.take(len_all, safe)) - depth
    cap = xp.where(live, xp.maximum(room, 0), 0)
    shared = common_prefix(
        v.flat, v.starts + depth, ref.flat, ref.starts_of(safe) + depth, cap, xp=xp
    )
    collided = live & hopped & (shared == 0)
    bad = bad | collided
    active = active & ~collided
    return depth + xp.where(active, shared, 0), bad, active


def _hop(v, key_at, tree, cur, depth, bad, active, chains, *, xp):
    """Look up the chain head continuing each active sequence; accept only exact matches."""
    e_all, w_all, ns_all = chains
    active = active & (depth < v.lens)
    found, r = tree.lookup(key_at(depth + 1))
    found = found & active
    safe = xp.maximum(r, 0)
    exact = (xp.take(e_all, safe) == depth) & (xp.take(w_all, safe) == cur)
    exact = exact & (xp.take(ns_all, safe) == v.ns)
    step = found & exact
    bad = bad | (found & ~exact)
    return (xp.where(step, r, cur), depth, step, bad, step)


def holder_at(holder: Array, depth: Array, chains: tuple, *, xp: Any) -> Array:
    """Creator of the node at `depth` on the path to each `holder` chain's node (where
    depth <= that node's depth): climb while the chain starts at or below `depth`."""
    e_all, w_all = chains[0], chains[1]
    c = xp.where(depth > 0, holder, -1)
    while True:
        safe = xp.maximum(c, 0)
        climb = (c >= 0) & (xp.take(e_all, safe) >= depth)
        if not bool(xp.any(climb)):
            return c
        c = xp.where(climb, xp.take(w_all, safe), c)
