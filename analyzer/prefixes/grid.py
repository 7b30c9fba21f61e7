"""Sharing inside a chunk, found with few keys: grid nodes, partners and windows.

Keys are taken only at prefix lengths that are multiples of `grid` (beyond what earlier
chunks hold, `ext`). For each sequence j, the deepest such *grid node* X_j (depth D_j)
that an earlier sequence of the chunk also has names a *partner* (the first holder of
X_j); comparing tokens with it proves a shared length lb_j >= D_j. The true shared
length e_j is below D_j + grid, since no earlier sequence has the next grid node. So e_j
is decided inside a *window* of `grid` - 1 positions after D_j, and only the holders of
X_j up to j need keys in that window:

    seq j:    |== earlier chunks (ext) ==|------ shared in chunk ------|x new ...
    grid:                               g        g        g      X_j |window|
    holders of X_j before j hash the window too: the earliest holder of any prefix
    s_j[:k] in the window holds X_j, so it is always among them.

A sequence with no partner decides e_j in its first window (ext_j, next grid depth): the
earliest holder of such a prefix shares ext_j and truly has no partner (anyone earlier
holding its grid prefixes would hold the shorter prefix too), and every sequence hashes
its first window, so that holder's keys are there even if a collision fakes a partner.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from analyzer.prefixes.arrays import (
    Array,
    common_prefix,
    ragged_arange,
    run_starts,
    stable_argsort_u64,
)
from analyzer.prefixes.prefix_hash import ChunkHash

DEFAULT_GRID = 32
_SHIFT = 1 << 32


@dataclass
class GridResult:
    """Per sequence: partner (chunk-local index, -1) and D (0 without partner); the
    windows to hash (owner, lowest depth - 1, highest depth); and the chunk's grid nodes
    as sorted unique keys with the chunk-local index of their first holder."""

    partner: Array
    depth: Array
    win_seq: Array
    win_lo: Array
    win_hi: Array
    node_keys: Array
    node_first: Array
    node_mixed: Array  # keys of grid nodes that collided across namespaces


def grid_stage(
    hasher: ChunkHash, const: Array, v: Any, ext: Array, *, grid: int, xp: Any
) -> GridResult:
    """Partners, windows and grid nodes of chunk view `v` (see the module doc)."""
    first_grid = (ext // grid + 1) * grid
    count = xp.where(v.lens >= first_grid, (v.lens - first_grid) // grid + 1, 0)
    seg, t = ragged_arange(count, xp=xp)
    depth = xp.take(first_grid, seg) + t * grid
    keys = hasher.keys(xp.take(v.starts, seg) + depth - 1, xp.take(const, seg))
    perm = stable_argsort_u64(keys, xp=xp)
    skeys, sseq, sdepth = xp.take(keys, perm), xp.take(seg, perm), xp.take(depth, perm)
    head = run_starts(skeys, xp=xp)
    heads = xp.nonzero(head)[0]
    run = xp.cumulative_sum(xp.astype(head, xp.int64)) - 1
    first = xp.take(xp.take(sseq, heads), run)
    n = v.lens.shape[0]
    partner, deep, where = _deepest_held(sseq, sdepth, first, n, xp=xp)
    win = _windows(v, ext, partner, where, run, heads, sseq, sdepth, grid=grid, xp=xp)
    mixed = xp.take(v.ns, sseq) != xp.take(v.ns, first)
    return GridResult(
        partner, deep, *win, xp.take(skeys, heads), xp.take(sseq, heads), skeys[mixed]
    )


def _deepest_held(sseq, sdepth, first, n: int, *, xp: Any):
    """Per sequence: (partner, D, index in the sorted grid arrays) of its deepest grid
    node held by an earlier sequence; (-1, 0, -1) if none."""
    held = xp.nonzero(first < sseq)[0]
    if held.shape[0] == 0:
        none = xp.full(n, -1, dtype=xp.int64)
        return none, xp.zeros(n, dtype=xp.int64), none
    packed = xp.take(sseq, held) * _SHIFT + xp.take(sdepth, held)
    order = xp.argsort(packed)
    packed, held = xp.take(packed, order), xp.take(held, order)
    ids = xp.arange(n, dtype=xp.int64)
    last = xp.searchsorted(packed, (ids + 1) * _SHIFT) - 1
    safe = xp.maximum(last, 0)
    has = (last >= 0) & ((xp.take(packed, safe) // _SHIFT) == ids)
    idx = xp.take(held, safe)
    partner = xp.where(has, xp.take(first, idx), -1)
    return partner, xp.where(has, xp.take(sdepth, idx), 0), xp.where(has, idx, -1)


def _windows(v, ext, partner, where, run, heads, sseq, sdepth, *, grid: int, xp: Any):
    """(owner, lo, hi): depths lo+1..hi to hash. Holders of each deciding grid node up to
    the last sequence it decides for; plus every sequence's first window."""
    decided = xp.nonzero(where >= 0)[0]
    pos = xp.take(where, decided)  # index of j's own entry in the sorted grid arrays
    rid = xp.take(run, pos)
    packed = xp.sort(rid * _SHIFT + pos)
    last_of_run = run_starts(xp.flip(packed // _SHIFT), xp=xp)  # last entry of each run
    ends = xp.take(xp.flip(packed % _SHIFT), xp.nonzero(last_of_run)[0])
    runs = xp.take(xp.flip(packed // _SHIFT), xp.nonzero(last_of_run)[0])
    starts = xp.take(heads, runs)
    seg, t = ragged_arange(ends - starts + 1, xp=xp)
    member = xp.take(starts, seg) + t
    owner, lo = xp.take(sseq, member), xp.take(sdepth, member)
    alone = xp.arange(partner.shape[0], dtype=xp.int64)  # every first window: see module doc
    own_lo = xp.take(ext, alone)
    own_hi = (own_lo // grid + 1) * grid - 1
    win_seq = xp.concat([owner, alone])
    win_lo = xp.concat([lo, own_lo])
    win_hi = xp.concat([lo + grid - 1, own_hi])
    # in (owner, depth) order: the first of equal keys is then the earliest request
    order = xp.argsort(win_seq * _SHIFT + win_lo)
    win_seq, win_lo, win_hi = (xp.take(a, order) for a in (win_seq, win_lo, win_hi))
    win_hi = xp.minimum(win_hi, xp.take(v.lens, win_seq))
    return win_seq, win_lo, xp.maximum(win_hi, win_lo)


def partner_bounds(
    flat: Array,
    starts: Array,
    lens: Array,
    ns: Array,
    ext: Array,
    partner: Array,
    depth: Array,
    *,
    grid: int,
    xp: Any,
) -> Array:
    """lb per sequence: max(ext, tokens proved shared with the partner), looking no further
    than the partner's grid depth + `grid` (the true shared length is below that)."""
    safe = xp.maximum(partner, 0)
    ok = (partner >= 0) & (xp.take(ns, safe) == ns)
    cap = xp.minimum(xp.minimum(lens, xp.take(lens, safe)), depth + grid)
    shared = common_prefix(flat, starts, flat, xp.take(starts, safe), xp.where(ok, cap, 0), xp=xp)
    return xp.maximum(ext, shared)
