"""Junctions: the branch points of the prefix tree, derived exactly from the match results.

The prefix tree (per `any` namespace) holds every request's inserted sequence (prompt +
output). Inserting request r in arrival order walks e_r units of existing nodes, the
longest prefix r shares with an earlier request, whose earliest holder is w_r, then adds
a *chain* of new nodes for units e_r+1..len_r. So the whole tree is a tree of chains: node
(o, d) is unit d of chain o, and chain r hangs off node (w_r, e_r). No hash is involved:
(e_r, w_r) are the matcher's verified answers.

Definitions (the columns of table `junctions`; positions in units, tokens for token
traces and blocks for hash-id traces, converted to tokens when stored):

- junction: a node at depth >= 1 with two or more children (distinct next units).
  Node (o, d)'s children: o's own next unit if len_o > d, plus one per request r with
  (w_r, e_r) = (o, d) and len_r > d (each such r diverged here with a new next unit).
- position: d.  first request: o, the first request whose path reached the node.
- num_branches: the number of children.
- num_requests_diverging: requests whose path left all earlier paths exactly here.
- num_requests_through: requests whose inserted sequence passes through the node (has
  its prefix), o included; last request: the latest of them.
- prompt families / model revisions: the distinct values among those requests.

Each request's path is enumerated junction by junction (`junction_paths`): its deepest
junction, then each junction's nearest junction above, found by pointer jumping over the
chain tree; never per token.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from analyzer.prefixes.arrays import Array

_SHIFT = 1 << 32  # packs (chain, depth) into one int64: depth < 2^32 units


@dataclass
class Junctions:
    """Junction nodes sorted by (owner, depth); all int64 arrays of one length."""

    owner: Array
    depth: Array
    num_branches: Array
    num_diverging: Array

    @property
    def packed(self) -> Array:
        return self.owner * _SHIFT + self.depth


def find_junctions(e: Array, w: Array, insert_len: Array, *, xp: Any) -> Junctions:
    """Every node with two or more children, from per-request (e, w, len) in arrival order."""
    attach = xp.nonzero((w >= 0) & (insert_len > e))[0]
    packed = xp.sort(xp.take(w, attach) * _SHIFT + xp.take(e, attach))
    m = packed.shape[0]
    if m == 0:
        empty = xp.zeros(0, dtype=xp.int64)
        return Junctions(empty, empty, empty, empty)
    head = xp.concat([xp.ones(1, dtype=xp.bool), packed[1:] != packed[:-1]])
    starts = xp.nonzero(head)[0]
    counts = xp.concat([starts[1:], xp.asarray([m], dtype=xp.int64)]) - starts
    nodes = xp.take(packed, starts)
    owner, depth = nodes // _SHIFT, nodes % _SHIFT
    branches = counts + xp.astype(xp.take(insert_len, owner) > depth, xp.int64)
    keep = xp.nonzero(branches >= 2)[0]
    return Junctions(
        owner=xp.take(owner, keep),
        depth=xp.take(depth, keep),
        num_branches=xp.take(branches, keep),
        num_diverging=xp.take(counts, keep),
    )


def junction_paths(
    e: Array, w: Array, insert_len: Array, junctions: Junctions, *, xp: Any
) -> tuple[Array, Array]:
    """(request, junction index) for every junction on every request's path."""
    n = e.shape[0]
    ids = xp.arange(n, dtype=xp.int64)
    above = _nearest_above_attachment(e, w, junctions, xp=xp)
    own = _deepest_on_chain(junctions, ids, xp.full(n, _SHIFT - 1, dtype=xp.int64), xp=xp)
    current = xp.where(own >= 0, own, above)
    parent = _junction_parents(junctions, above, xp=xp)
    requests, found = [], []
    while True:
        live = xp.nonzero(current >= 0)[0]
        if live.shape[0] == 0:
            break
        ids, current = xp.take(ids, live), xp.take(current, live)
        requests.append(ids)
        found.append(current)
        current = xp.take(parent, current)
    if not requests:
        empty = xp.zeros(0, dtype=xp.int64)
        return empty, empty
    return xp.concat(requests), xp.concat(found)


def _deepest_on_chain(junctions: Junctions, chain: Array, max_depth: Array, *, xp: Any) -> Array:
    """Index of the deepest junction on `chain` with depth <= max_depth, else -1."""
    m = junctions.owner.shape[0]
    if m == 0:
        return xp.full(chain.shape[0], -1, dtype=xp.int64)
    idx = xp.searchsorted(junctions.packed, chain * _SHIFT + max_depth, side="right") - 1
    safe = xp.maximum(idx, 0)
    ok = (idx >= 0) & (xp.take(junctions.owner, safe) == chain)
    return xp.where(ok, idx, -1)


def _nearest_above_attachment(e: Array, w: Array, junctions: Junctions, *, xp: Any) -> Array:
    """Per request r: the deepest junction on the path above the node its chain hangs
    off, i.e. at or above (w_r, e_r). Pointer jumping: O(log depth) vectorised rounds."""
    has_parent = w >= 0
    chain = xp.maximum(w, 0)
    local = xp.where(has_parent, _deepest_on_chain(junctions, chain, e, xp=xp), -1)
    value = local
    done = (local >= 0) | ~has_parent
    nxt = chain
    while not bool(xp.all(done)):
        nxt_done, nxt_value, nxt_next = xp.take(done, nxt), xp.take(value, nxt), xp.take(nxt, nxt)
        settle = ~done & nxt_done
        value = xp.where(settle, nxt_value, value)
        done = done | settle
        nxt = xp.where(done, nxt, nxt_next)
    return value


def _junction_parents(junctions: Junctions, above: Array, *, xp: Any) -> Array:
    """Per junction (o, d): the nearest junction above it (on chain o below d, else the
    one above o's attachment), or -1."""
    same_chain = _deepest_on_chain(junctions, junctions.owner, junctions.depth - 1, xp=xp)
    return xp.where(same_chain >= 0, same_chain, xp.take(above, junctions.owner))
