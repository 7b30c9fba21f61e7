"""Exact longest shared prefixes for one namespace view, one arrival-order chunk at a time.

For every request j of a chunk, with s_j its inserted sequence (prompt + output) and
q_j = s_j[:query_len] its prompt, `ViewMatcher.process` finds

    e_j = max over earlier i in j's namespace of LCP(s_j, s_i)   and the earliest such i,
    L_j = max over earlier i of LCP(q_j, s_i) = min(e_j, query_len_j) and the earliest i.

How (all vectorised over the chunk):
 1. prefix keys come from the chunk's running hash (`hashing.ChunkHash`), on demand;
 2. earlier chunks: walk the tree of earlier chains (`walk`): `ext_j`, the prefix shared
    with earlier chunks, and the request that created that node (exact);
 3. inside the chunk, keys at every `grid`-th depth name for each sequence an earlier
    *partner*; comparing tokens with it proves lb_j >= ext_j, and the true e_j lies in a
    window of fewer than `grid` positions after it (`grid`);
 4. the windows' prefixes are the chunk's candidates: sorted by key, the first sequence
    holding each key tells which positions are shared, and the first unshared position
    of each sequence's window gives e_j;
 5. every (length, holder) answer from keys is verified by comparing the actual tokens;
    the chunk's grid nodes and chain heads then join the dictionary for later chunks,
    and prompt holders are read off the exact tree of chains (`walk.holder_at`).

Why verification makes hashing safe: equal prefixes always have equal keys, so the fast
path never under-estimates a length, and the holder it reports is never later than the
true earliest one. A token comparison proving the holder really shares that length
therefore proves both the length and the holder exact. When a comparison fails (a hash
collision), that answer is recomputed by `ExactPath`, which compares tokens only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from analyzer.prefixes.arrays import (
    Array,
    first_at_or_after,
    lookup_sorted,
    prefixes_equal,
    ragged_arange,
    run_starts,
    stable_argsort_u64,
)
from analyzer.prefixes.backend import to_numpy
from analyzer.prefixes.exact import ExactPath, Fetch
from analyzer.prefixes.grid import DEFAULT_GRID, GridResult, grid_stage, partner_bounds
from analyzer.prefixes.prefix_dict import PrefixDict
from analyzer.prefixes.prefix_hash import ChunkHash, HashParams
from analyzer.prefixes.walk import holder_at, walk_earlier

PRUNE_FLOOR = 1 << 16


@dataclass
class ChunkView:
    """One chunk's sequences of one view (xp arrays, in arrival order).

    `ids` are global request ids; every id < `first_id` belongs to an earlier chunk."""

    flat: Array  # uint64 tokens of the whole chunk (a view may use only some sequences)
    hasher: ChunkHash
    starts: Array
    lens: Array
    qlens: Array
    ids: Array
    ns: Array
    first_id: int


@dataclass
class ChunkResult:
    """Per sequence of the chunk: e/w (inserted sequence) and L/p (prompt) as above;
    lengths in units, holders as global ids, -1 when nothing is shared."""

    insert_shared: Array
    insert_parent: Array
    query_shared: Array
    query_parent: Array | None


@dataclass
class _Candidates:
    keys: Array  # sorted candidate keys
    pos: Array  # flat position of each
    seq: Array  # chunk-local sequence index of each
    first: Array  # chunk-local index of the first sequence holding each key
    heads: Array  # index of the first element of each run of equal keys


class ViewMatcher:
    """Matches chunks of one view in arrival order, remembering earlier chunks.

    Pruning (conversations) runs when the dictionary has grown by half since the last
    prune, and not below `prune_floor` entries (tests set it to 0 to prune every chunk).

    Args:
        ns_all, insert_len_all: per global request id (xp int64), to check holders.
        exact: the slow path for this view's namespaces.
        want_parent: also find the prompt's earliest holder (query_parent).
        ns_last: optional last request id per namespace; entries of namespaces that can
            no longer be queried are then dropped after each chunk (conversations).
    """

    def __init__(
        self,
        *,
        ns_all: Array,
        insert_len_all: Array,
        exact: ExactPath,
        params: HashParams,
        want_parent: bool,
        ns_last: Array | None = None,
        xp: Any,
    ) -> None:
        self.prune_floor = PRUNE_FLOOR
        self.xp, self.params, self.exact = xp, params, exact
        self.ns_all, self.insert_len_all = ns_all, insert_len_all
        self.want_parent, self.ns_last = want_parent, ns_last
        self.dict = PrefixDict(xp=xp)
        self.pinned = np.zeros(0, dtype=np.uint64)
        self._kept = 0  # dictionary size after the last prune
        n = int(ns_all.shape[0])
        self.e_host = np.full(n, -1, dtype=np.int64)  # exact (e, w) of earlier requests
        self.w_host = np.full(n, -1, dtype=np.int64)
        self.grid = DEFAULT_GRID

    def process(self, v: ChunkView, fetch: Fetch, next_id: int) -> ChunkResult:
        """Match chunk `v`, then remember its prefixes. `next_id`: first id of the next chunk."""
        xp = self.xp
        self._const = v.hasher.constants(v.starts, v.ns)
        chains = self._chains()
        ext, wit, bad = walk_earlier(
            v, lambda d: self._key_at(v, d), self.dict, chains, fetch, grid=self.grid, xp=xp
        )
        if bool(xp.any(bad)):
            ext, wit = self._exact(v, ext, wit, bad, before_chunk=True)
        g = grid_stage(v.hasher, self._const, v, ext, grid=self.grid, xp=xp)
        lb = partner_bounds(
            v.flat, v.starts, v.lens, v.ns, ext, g.partner, g.depth, grid=self.grid, xp=xp
        )
        cand = self._candidates(v, g)
        e, w = self._extend_in_chunk(v, ext, wit, lb, g, cand)
        ids = to_numpy(v.ids)
        self.e_host[ids], self.w_host[ids] = to_numpy(e), to_numpy(w)
        q_len = xp.minimum(e, v.qlens)
        q_par = None
        if self.want_parent:  # the creator of the node at q_len on the request's path
            q_par = holder_at(w, xp.where(v.qlens < e, v.qlens, e), self._chains(), xp=xp)
            q_par = xp.where(q_len > 0, q_par, -1)
        self._remember(v, g, e, next_id)
        return ChunkResult(e, w, q_len, q_par)

    # -- earlier chunks ---------------------------------------------------------------
    def _chains(self) -> tuple[Array, Array, Array, Array]:
        xp = self.xp
        return xp.asarray(self.e_host), xp.asarray(self.w_host), self.insert_len_all, self.ns_all

    def _key_at(self, v: ChunkView, depth: Array) -> Array:
        """Key of each sequence's prefix of length `depth` (clamped to a valid position)."""
        xp = self.xp
        depth = xp.maximum(xp.minimum(depth, v.lens), 1)
        pos = xp.minimum(v.starts + depth - 1, v.hasher.size - 1)
        return v.hasher.keys(pos, self._const)

    def _exact(self, v, e, holder, bad, *, before_chunk: bool):
        """Recompute flagged sequences by the slow exact path (after a hash collision)."""
        e_h, holder_h = to_numpy(e).copy(), to_numpy(holder).copy()
        ids = to_numpy(v.ids)
        for j in np.flatnonzero(to_numpy(bad)):
            bound = v.first_id if before_chunk else int(ids[j])
            e_h[j], holder_h[j] = self.exact.longest(self._seq(v, j), self._ns(v, j), bound)
        return self.xp.asarray(e_h), self.xp.asarray(holder_h)

    # -- within the chunk -------------------------------------------------------------
    def _candidates(self, v: ChunkView, g: GridResult) -> _Candidates:
        """The windows' prefixes (see `grid`), sorted by key, with each key's first holder."""
        xp = self.xp
        owner, t = ragged_arange(g.win_hi - g.win_lo, xp=xp)
        seg = xp.take(g.win_seq, owner)
        pos = xp.take(v.starts, seg) + xp.take(g.win_lo, owner) + t
        ckeys = v.hasher.keys(pos, xp.take(self._const, seg))
        perm = stable_argsort_u64(ckeys, xp=xp)
        skeys, spos, sseq = xp.take(ckeys, perm), xp.take(pos, perm), xp.take(seg, perm)
        head = run_starts(skeys, xp=xp)
        heads = xp.nonzero(head)[0]
        run = xp.cumulative_sum(xp.astype(head, xp.int64)) - 1
        first = xp.take(xp.take(sseq, heads), run)
        return _Candidates(skeys, spos, sseq, first, heads)

    def _extend_in_chunk(self, v, ext, wit, lb, g: GridResult, cand) -> tuple[Array, Array]:
        """e_j: lb_j plus the run of window positions first held by an earlier sequence,
        never past the window's end (the true e_j is below it, see `grid`)."""
        xp, grid = self.xp, self.grid
        has = g.partner >= 0
        end = xp.where(has, g.depth + grid - 1, (ext // grid + 1) * grid - 1)
        end = xp.maximum(xp.minimum(end, v.lens), lb)
        unshared = xp.sort(cand.pos[cand.first == cand.seq])
        first_new = first_at_or_after(unshared, v.starts + lb, sentinel=v.hasher.size, xp=xp)
        e = xp.maximum(xp.minimum(first_new - v.starts, end), lb)
        grew = e > ext
        at_node = has & (e == g.depth)  # X_j itself: its first holder is the partner
        local_holder = xp.where(at_node, g.partner, self._chunk_holder(v, e, cand))
        holder = xp.where(grew, xp.take(v.ids, xp.maximum(local_holder, 0)), wit)
        holder = xp.where(e > 0, holder, -1)
        proven = (e == lb) & (local_holder == g.partner)  # partner_bounds compared these
        check = grew & ~proven
        ok = ~check | self._holds_in_chunk(v, local_holder, xp.where(check, e, 0))
        ok = ok & ~(has & (lb < g.depth))  # a collision faked the partner
        if bool(xp.all(ok)):
            return e, holder
        return self._exact(v, e, holder, ~ok, before_chunk=False)

    def _chunk_holder(self, v: ChunkView, depth: Array, cand: _Candidates) -> Array:
        """Chunk-local index of the first sequence holding each prefix of length `depth`
        (meaningful where that prefix is a candidate, i.e. depth > ext)."""
        xp = self.xp
        if cand.keys.shape[0] == 0:
            return xp.zeros(depth.shape[0], dtype=xp.int64)
        idx = xp.searchsorted(cand.keys, self._key_at(v, depth))
        return xp.take(cand.first, xp.minimum(idx, cand.keys.shape[0] - 1))

    def _holds_in_chunk(self, v: ChunkView, local_holder: Array, length: Array) -> Array:
        xp = self.xp
        n = v.lens.shape[0]
        earlier = local_holder < xp.arange(n, dtype=xp.int64)
        same = earlier & (xp.take(v.ns, local_holder) == v.ns)
        same = same & (length <= xp.take(v.lens, local_holder))
        length = xp.where(same, length, 0)
        equal = prefixes_equal(
            v.flat, v.starts, v.flat, xp.take(v.starts, local_holder), length, xp=xp
        )
        return same & equal

    # -- step 5: remember -------------------------------------------------------------
    def _remember(self, v: ChunkView, g: GridResult, e: Array, next_id: int) -> None:
        """Keep what later chunks need: keys of the chunk's new grid nodes and of its
        chain heads (see `walk`), with their creators. Keys that collide are all kept."""
        xp = self.xp
        grows = xp.nonzero(e < v.lens)[0]
        keys = xp.concat([g.node_keys, xp.take(self._key_at(v, e + 1), grows)])
        first = xp.concat([xp.take(v.ids, g.node_first), xp.take(v.ids, grows)])
        perm = stable_argsort_u64(keys, xp=xp)
        keys, first = xp.take(keys, perm), xp.take(first, perm)
        head = run_starts(keys, xp=xp)
        self.dict.add(keys[head], first[head])
        if self.ns_last is not None:
            run = xp.cumulative_sum(xp.astype(head, xp.int64)) - 1
            ns = xp.take(self.ns_all, first)
            mixed = ns != xp.take(xp.take(ns, xp.nonzero(head)[0]), run)
            self._prune(xp.concat([g.node_mixed, keys[mixed]]), next_id)

    def _prune(self, collided: Array, next_id: int) -> None:
        """Forget prefixes of namespaces that no later request can query. An entry is
        dropped by the namespace of its creator, so a key that stood for nodes of two
        namespaces (a collision) is pinned: never dropped."""
        xp = self.xp
        new_pins = to_numpy(collided)
        if new_pins.size:
            self.pinned = np.union1d(self.pinned, new_pins)
        if self.dict.size < 3 * self._kept // 2:  # prune in batches: O(entries) each time
            return
        pinned = xp.asarray(self.pinned)
        ns_last, ns_all = self.ns_last, self.ns_all

        def keep(keys: Array, ids: Array) -> Array:
            alive = xp.take(ns_last, xp.take(ns_all, ids)) >= next_id
            return alive | lookup_sorted(pinned, keys, xp=xp)[1]

        self.dict.prune(keep)
        self._kept = max(self.dict.size, self.prune_floor)

    def _seq(self, v: ChunkView, j: int) -> np.ndarray:
        start = int(to_numpy(v.starts[j : j + 1])[0])
        length = int(to_numpy(v.lens[j : j + 1])[0])
        return to_numpy(v.flat[start : start + length]).astype(np.uint64)

    def _ns(self, v: ChunkView, j: int) -> int:
        return int(to_numpy(v.ns[j : j + 1])[0])
