"""Stable names: junction ids and the prompt-family labels derived from them.

A junction id is the 16-hex-digit prefix hash of the junction's prefix (its first
request's first `position` units), seeded by its namespace *values* (kind, block size,
cache_salt, LoRA), so the same system prompt gets the same id in every database. Two
different junctions never share an id in one table: in the (2^-64-unlikely) event of a
clash, the later ones get a `-2`, `-3` ... suffix.

Derived family label (rule `derived:first_junction`): a request without a trace family is
labelled by the shallowest junction on its prompt's path whose position is at least
`min_family_tokens` tokens, i.e. the end of the system prompt it shares with other
requests, as `j<position>-<first 8 hex digits of the junction id>` (the whole id when
two anchors would otherwise share a label); a request with no such junction is
`below-min-family-tokens` (NO_FAMILY_LABEL): it may share a prefix with other requests, only
one that ends before `min_family_tokens` (or none). Derivations before hpa said so wrote
`unshared`, which read as the waterfall's cause (no common prefix at all); such a store keeps
that label until families are derived again or cleared (every derivation rewrites them all).
"""

from __future__ import annotations

import hashlib
from collections import Counter

import numpy as np

from analyzer.prefixes.arrays import exclusive_cumsum, ragged_arange
from analyzer.prefixes.engine import MatchOptions, chunk_bounds
from analyzer.prefixes.exact import Fetch
from analyzer.prefixes.prefix_hash import DEFAULT_HASH, ChunkHash, PowerTables


def namespace_seed(namespace: tuple) -> int:
    """A 63-bit seed from a namespace's values (stable across databases and runs)."""
    digest = hashlib.blake2b(repr(tuple(namespace)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


NO_FAMILY_LABEL = "below-min-family-tokens"  # match_derive_families.sql writes it

# Units of owner sequences fetched and hashed at once (a batch holds at least one owner).
ID_BATCH_UNITS = 1 << 16


def junction_ids(
    owners: np.ndarray,
    depths: np.ndarray,
    owner_ns: np.ndarray,
    namespaces: tuple,
    fetch: Fetch,
    lengths: np.ndarray | None = None,
) -> list[str]:
    """Ids of junctions (owner request, depth in units), in the given order.

    Owners are fetched in batches of about ID_BATCH_UNITS units (by `lengths`, the
    inserted length of every request, when given) and each owner's sequence is cut to
    its deepest junction before hashing: a prefix's key depends on that prefix only, so
    the ids are the same, and memory follows the batch, not the trace."""
    if owners.size == 0:
        return []
    uniq, row = np.unique(owners, return_inverse=True)
    need = np.zeros(uniq.size, dtype=np.int64)
    np.maximum.at(need, row, depths.astype(np.int64))
    seeds = np.asarray([namespace_seed(namespaces[int(k)]) for k in owner_ns], dtype=np.int64)
    keys = np.zeros(owners.size, dtype=np.uint64)
    tables = PowerTables(DEFAULT_HASH, xp=np)
    batch = MatchOptions(chunk_tokens=ID_BATCH_UNITS)
    by_owner = np.argsort(row, kind="stable")  # each batch's junctions: one run of these
    bounds = np.searchsorted(row[by_owner], np.arange(uniq.size + 1))
    for a, b in chunk_bounds(need if lengths is None else lengths[uniq], batch):
        flat, offsets = fetch(uniq[a:b])
        lens = np.minimum(np.diff(offsets), need[a:b])
        if np.array_equal(lens, np.diff(offsets)):  # fetched as far as needed: no cut
            cut, starts = flat, offsets[:-1]
        else:
            seg, local = ragged_arange(lens, xp=np)
            cut = flat[offsets[:-1][seg] + local]
            starts = exclusive_cumsum(lens, xp=np)[:-1]
        hasher = ChunkHash(cut, tables, xp=np)
        mine = by_owner[bounds[a] : bounds[b]]
        at = starts[row[mine] - a]
        keys[mine] = hasher.keys(at + depths[mine] - 1, hasher.constants(at, seeds[mine]))
    return dedupe([f"{int(k):016x}" for k in keys])


def family_labels(ids: list[str], positions: np.ndarray) -> list[str]:
    """The derived family label of each junction (unique among junctions)."""
    short = [f"j{int(p)}-{i[:8]}" for i, p in zip(ids, positions, strict=True)]
    counts = Counter(short)
    return [
        s if counts[s] == 1 else f"j{int(p)}-{i}"
        for s, i, p in zip(short, ids, positions, strict=True)
    ]


def dedupe(ids: list[str]) -> list[str]:
    seen: Counter = Counter()
    out = []
    for i in ids:
        seen[i] += 1
        out.append(i if seen[i] == 1 else f"{i}-{seen[i]}")
    return out
