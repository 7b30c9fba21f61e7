"""The shallow pass of a sharded match (every request cut to its first K units) and the
groups that key the shards.

Shard key. K is `ExecutorSpec.shard_tokens` tokens: K units for token requests and
ceil(K / block_size) blocks for hash-id requests (`unit_limits`; one namespace has one
kind and block size, so one K). Requests of one namespace whose first K units are equal
form a *group*. Two requests of different groups share fewer than K units, and every
request sharing K or more units with a request is in its group.

Why cutting at K is exact. Let t_i be s_i (the inserted sequence) cut to K units. Then
LCP(t_i, t_j) = min(LCP(s_i, s_j), K), so a match over the cut sequences (the *shallow
pass*) answers e'_j = min(e_j, K) for every view (any, replica, conversation: each within
its own namespace), and when e_j < K its earliest holder is e_j's earliest holder too.
When e'_j = K, every holder of j's answer shares K or more units with j, so it is in
j's group, and the group's own match (a shard: a bin of whole groups) answers exactly. The
same holds for the prompt's answer L_j = min(e_j, query_len_j) with the query cut to K.
So, per view and per answer: the shallow pass's answer, unless it is K, then the shard's
(`analyzer.prefixes.merge.combine`).

Junctions. The prefix tree cut at depth K is the shallow pass's tree: a node's first
holder and its children at depth < K are the same in both, so junctions at depth < K
(and every request's path through them) come from the shallow pass, which finds none at
depth K or deeper. At depth K and deeper a node's subtree holds only its group's
requests, so those junctions and the paths through them come from the shards, which drop
everything shallower (`analyzer.prefixes.merge.keep_deep`).

Requests shorter than K, and groups of one request, are answered by the shallow pass
alone and go to no shard. The driver reads the first K units of every request (at most K
per request), keys the groups by them (`group_roots`) and runs the shallow pass as one
more partition (`ShallowTask`), beside the shards.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa

from analyzer.prefixes.engine import (
    DEFAULT_CHUNK_TOKENS,
    MatchArrays,
    MatchOptions,
    chunk_bounds,
    run_matcher,
)
from analyzer.prefixes.junctions import Junctions
from analyzer.prefixes.labels import junction_ids
from analyzer.prefixes.merge import part_tables
from analyzer.prefixes.prefix_hash import DEFAULT_HASH, ChunkHash, PowerTables
from analyzer.prefixes.result import compute
from analyzer.prefixes.source import Archive, PartitionSource, RequestMeta


@dataclass
class ShallowPass:
    """The shallow pass's answers (arrival order, units), the same as a partition's tables
    (`part`, with the junctions and paths when asked for) and each request's K in units."""

    limit: np.ndarray
    arrays: MatchArrays
    part: dict[str, pa.Table]


def unit_limits(block_size: np.ndarray, shard_tokens: int) -> np.ndarray:
    """K in units per request: `shard_tokens` tokens, or ceil(K / block size) blocks."""
    size = np.maximum(block_size, 1)
    return np.where(block_size > 0, -(-shard_tokens // size), shard_tokens).astype(np.int64)


def truncate(
    flat: np.ndarray, offsets: np.ndarray, limit: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(flat, offsets) of every sequence cut to its first `limit` units."""
    starts = offsets[:-1]
    if np.all(offsets[1:] - starts <= limit):  # read cut already: no copy
        return flat, offsets
    lens = np.minimum(offsets[1:] - starts, limit)
    out = np.zeros(lens.shape[0] + 1, dtype=np.int64)
    np.cumsum(lens, out=out[1:])
    seg = np.repeat(np.arange(lens.shape[0]), lens)
    return flat[starts[seg] + np.arange(out[-1]) - out[:-1][seg]], out


def shallow_pass(
    meta: RequestMeta,
    flat: np.ndarray,
    offsets: np.ndarray,
    shard_tokens: int,
    options: MatchOptions,
    *,
    junctions: bool,
) -> ShallowPass:
    """Match every request cut to K units (`flat`/`offsets`: at least that much of each
    inserted sequence, in arrival order); with `junctions`, also the cut tree's junctions."""

    limit = unit_limits(meta.block_size, shard_tokens)
    cut = replace(
        meta,
        query_len=np.minimum(meta.query_len, limit),
        insert_len=np.minimum(meta.insert_len, limit),
    )
    source = PartitionSource(cut, *truncate(flat, offsets, limit))  # int32 token ids
    # The source is in memory: an archive of one chunk is enough (memory only, never a result).
    options = replace(options, progress=None, archive_tokens=options.chunk_tokens)
    ids = np.arange(meta.n, dtype=np.int64)
    if not junctions:
        arrays = run_matcher(source, xp=np, options=options)
        none = np.zeros(0, dtype=np.int64)
        empty = Junctions(none, none, none, none)
        return ShallowPass(limit, arrays, part_tables(ids, arrays, empty, [], none, none))
    result = compute(source, xp=np, options=options)
    j = result.junctions
    fetch = Archive(source, 0).fetch  # uint64 values, as the junction ids are hashed
    raw = junction_ids(j.owner, j.depth, meta.ns_any[j.owner], meta.namespaces, fetch)
    part = part_tables(ids, result.arrays, j, raw, result.path_requests, result.path_junctions)
    return ShallowPass(limit, result.arrays, part)


def group_roots(
    ns_any: np.ndarray, flat: np.ndarray, offsets: np.ndarray, limit: np.ndarray
) -> np.ndarray:
    """Per request: the first request of its group (same namespace, same first K units),
    or -1 when the shallow pass answers it alone (shorter than K, or alone in its group).
    `flat`/`offsets`: at least the first K units of each request, in arrival order.

    Groups are told apart by a 64-bit key of (namespace, first K units): equal prefixes
    have equal keys, so a group is never split; two groups whose keys collide (2^-64) are
    merged into one, which is harmless (a shard may hold any number of whole groups)."""
    n = ns_any.shape[0]
    full = np.flatnonzero(offsets[1:] - offsets[:-1] >= limit)
    if full.size == 0:
        return np.full(n, -1, dtype=np.int64)
    keys = _prefix_keys(ns_any, flat, offsets, limit, full)
    pairs = np.stack([ns_any[full].astype(np.uint64), keys], axis=1)
    _, first, group, count = np.unique(
        pairs, axis=0, return_index=True, return_inverse=True, return_counts=True
    )
    group = group.reshape(-1)
    root = np.full(n, -1, dtype=np.int64)
    shared = count[group] >= 2
    root[full[shared]] = full[first[group[shared]]]
    return root


def _prefix_keys(ns_any, flat, offsets, limit, rows: np.ndarray) -> np.ndarray:
    """The key of each of `rows`' first `limit` units, hashed a chunk of about
    DEFAULT_CHUNK_TOKENS units at a time (the hash's running sum is 8 bytes a unit)."""
    tables = PowerTables(DEFAULT_HASH, xp=np)
    keys = np.empty(rows.size, dtype=np.uint64)
    lens = np.minimum(offsets[rows + 1] - offsets[rows], limit[rows])
    options = MatchOptions(chunk_tokens=DEFAULT_CHUNK_TOKENS)
    for a, b in chunk_bounds(lens, options):
        lo, hi = int(offsets[rows[a]]), int(offsets[rows[b - 1] + 1])
        values = np.asarray(flat[lo:hi], dtype=np.int64).view(np.uint64)
        hasher = ChunkHash(values, tables, xp=np)
        starts = offsets[rows[a:b]] - lo
        const = hasher.constants(starts, ns_any[rows[a:b]])
        keys[a:b] = hasher.keys(starts + limit[rows[a:b]] - 1, const)
    return keys


@dataclass(frozen=True)
class ShallowTask:
    """The shallow pass as one more partition of a sharded run, so that it runs beside the
    shards: the global metadata and each request's first K units."""

    meta: RequestMeta
    flat: np.ndarray
    offsets: np.ndarray
    shard_tokens: int
    options: MatchOptions
    junctions: bool

    def run(self) -> dict[str, pa.Table]:
        """The pass's answers (and junctions, paths) as a partition's tables."""
        args = (self.meta, self.flat, self.offsets, self.shard_tokens, self.options)
        return shallow_pass(*args, junctions=self.junctions).part
