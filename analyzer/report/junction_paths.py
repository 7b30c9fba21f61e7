"""Each request's deepest shared junction, for the report's junction section (vectorised).

A junction (table `junctions`, from `hpa match`) is a branch point of the prefix tree: a
position where requests that shared everything before it continue differently. A request is
pinned to the deepest junction on its own prompt path at or before its shared prefix
(`prefix_matches.shared_any_tokens`, capped at prompt_tokens - 1), in its namespace
(cache_salt, LoRA, block size). It does not depend on the replay policy.

Sequences stay in flat NumPy arrays (token ids, or block hash ids for hash-id requests, one
element per block); prefixes are compared through the matcher's 64-bit prefix keys
(analyzer/prefixes/prefix_hash.py), one junction depth at a time from the deepest, and every key
match is verified element by element, so a collision can never pin a wrong junction.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from analyzer.prefixes.arrays import ragged_arange
from analyzer.prefixes.prefix_hash import DEFAULT_HASH, ChunkHash, HashParams, PowerTables
from analyzer.store.db import load_sql, query_arrow


class _Sequences:
    """Every request's sequence as one flat int64 array, with per-request metadata."""

    def __init__(self, table: pa.Table, params: HashParams) -> None:
        tokens, hashes = table.column("token_ids"), table.column("block_hash_ids")
        is_tokens = pc.is_valid(tokens).to_numpy(zero_copy_only=False)
        seqs = pc.if_else(pc.is_valid(tokens), tokens, hashes.cast(tokens.type))
        self.lens = pc.fill_null(pc.list_value_length(seqs), 0).to_numpy().astype(np.int64)
        self.flat = pc.list_flatten(seqs).to_numpy().astype(np.int64)
        self.starts = np.concatenate([[0], np.cumsum(self.lens)[:-1]]).astype(np.int64)
        block = pc.fill_null(table.column("block_size"), 1).to_numpy().astype(np.int64)
        self.unit = np.where(is_tokens, 1, np.maximum(block, 1))
        self.present = self.lens > 0
        keys = list(zip(table.column("salt_lora").to_pylist(), self.unit.tolist(), strict=True))
        ids: dict = {}
        self.ns = np.asarray([ids.setdefault(k, len(ids)) for k in keys], dtype=np.int64)
        tables = PowerTables(params, xp=np)
        self.hasher = ChunkHash(self.flat.astype(np.uint64), tables, xp=np)
        self.const = self.hasher.constants(self.starts, self.ns)

    def keys(self, rows: np.ndarray, n: np.ndarray) -> np.ndarray:
        """Prefix keys of the first `n` elements (n >= 1) of each of `rows`."""
        return self.hasher.keys(self.starts[rows] + n - 1, self.const[rows])

    def same_prefix(self, a: np.ndarray, b: np.ndarray, n: np.ndarray) -> np.ndarray:
        """Whether rows a and b agree on their first n elements (pairwise), and namespace."""
        seg, local = ragged_arange(n, xp=np)
        diff = self.flat[self.starts[a][seg] + local] != self.flat[self.starts[b][seg] + local]
        mismatches = np.bincount(seg, weights=diff, minlength=len(n))
        return (mismatches == 0) & (self.ns[a] == self.ns[b])


def deepest_junctions(con, *, params: HashParams = DEFAULT_HASH) -> pa.Table:
    """(arrival_seq, junction_id) of every request pinned to a junction (see the module).

    `params`: the prefix hash; tests mask its keys to a few bits to force collisions."""
    table = query_arrow(con, load_sql("report_junction_requests"))
    junctions = query_arrow(con, load_sql("report_junction_firsts"))
    empty = pa.table(
        {"arrival_seq": pa.array([], pa.int64()), "junction_id": pa.array([], pa.string())}
    )
    if table.num_rows == 0 or junctions.num_rows == 0:
        return empty
    seqs = _Sequences(table, params)
    arrival = table.column("arrival_seq").to_numpy()
    j_rows = np.searchsorted(arrival, junctions.column("first_seq").to_numpy())
    j_pos = junctions.column("position_tokens").to_numpy().astype(np.int64)
    j_ids = np.asarray(junctions.column("junction_id").to_pylist(), dtype=object)
    usable = seqs.present[j_rows] & (j_pos > 0) & (j_pos % seqs.unit[j_rows] == 0)
    j_rows, j_pos, j_ids = j_rows[usable], j_pos[usable], j_ids[usable]
    j_n = j_pos // seqs.unit[j_rows]
    j_keys = seqs.keys(j_rows, j_n)
    shared = table.column("shared_tokens").to_numpy().astype(np.int64)
    prompt = table.column("prompt_tokens").to_numpy().astype(np.int64)
    limit = np.where(seqs.present & (shared > 0), np.minimum(shared, prompt - 1), -1)
    pinned = np.full(table.num_rows, -1, dtype=np.int64)  # index into the junction arrays
    for pos in np.unique(j_pos)[::-1]:
        _pin_at(seqs, pos, np.flatnonzero(j_pos == pos), j_rows, j_n, j_keys, limit, pinned)
    found = np.flatnonzero(pinned >= 0)
    return pa.table(
        {
            "arrival_seq": pa.array(arrival[found], pa.int64()),
            "junction_id": pa.array(j_ids[pinned[found]].tolist(), pa.string()),
        }
    )


def _pin_at(seqs, pos, js, j_rows, j_n, j_keys, limit, pinned) -> None:
    """Pin the still unpinned requests whose path passes a junction at `pos` tokens."""
    rows = np.flatnonzero((pinned < 0) & (limit >= pos))
    for unit in np.unique(seqs.unit[j_rows[js]]):
        mine = js[seqs.unit[j_rows[js]] == unit]
        cand = rows[(seqs.unit[rows] == unit) & (seqs.lens[rows] * unit >= pos)]
        if not cand.size:
            continue
        n = np.full(cand.size, pos // unit, dtype=np.int64)
        order = np.argsort(j_keys[mine], kind="stable")
        sorted_keys = j_keys[mine][order]
        at = np.searchsorted(sorted_keys, seqs.keys(cand, n))
        at = np.minimum(at, sorted_keys.size - 1)
        hit = sorted_keys[at] == seqs.keys(cand, n)
        cand, n, at = cand[hit], n[hit], at[hit]
        # Junctions sharing a key (a 64-bit collision) are tried in turn; the verified one wins.
        while cand.size:
            j = mine[order[at]]
            ok = seqs.same_prefix(cand, j_rows[j], n)
            pinned[cand[ok]] = j[ok]
            at = at + 1
            more = ~ok & (at < sorted_keys.size)
            more[more] = sorted_keys[at[more]] == sorted_keys[at[more] - 1]
            cand, n, at = cand[more], n[more], at[more]
