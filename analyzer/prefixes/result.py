"""What one prefix match computes, before anything is written: the matcher's arrays, the
junctions and each request's path through them, and the relations the store writes
(`match_rows`, `node_rows` / `nodes_table`, `path_rows`). Pure: NumPy (or `xp`) in, Arrow out.

Figures, in tokens (hash-id traces: matched blocks x block size, capped at the prompt):
shared_any_tokens (any earlier request's prompt + output, same cache_salt / LoRA / kind /
block size), parent_seq (the earliest holder of it), shared_replica_tokens (same replica),
shared_conversation_tokens (same conversation; NULL without a conversation_id).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from analyzer.prefixes.backend import backend_name, to_numpy
from analyzer.prefixes.engine import MatchArrays, MatchOptions, run_matcher
from analyzer.prefixes.junctions import Junctions, find_junctions, junction_paths
from analyzer.prefixes.labels import family_labels, junction_ids
from analyzer.prefixes.source import Archive, RequestMeta, SequenceSource


@dataclass
class PrefixResult:
    """Everything a match computes before writing (NumPy, arrival order)."""

    arrays: MatchArrays
    junctions: Junctions
    path_requests: np.ndarray
    path_junctions: np.ndarray


def compute(source: SequenceSource, *, xp: Any, options: MatchOptions) -> PrefixResult:
    """Match `source` and derive its junctions; no database writes."""
    arrays = run_matcher(source, xp=xp, options=options)
    if backend_name(xp) == "cupy":
        xp = np  # the answers are on the host: junctions there cost milliseconds, no syncs
    e, w = xp.asarray(arrays.insert_shared), xp.asarray(arrays.insert_parent)
    length = xp.asarray(source.meta.insert_len)
    found = find_junctions(e, w, length, xp=xp)
    requests, junction = junction_paths(e, w, length, found, xp=xp)
    as_np = Junctions(
        *(to_numpy(a) for a in (found.owner, found.depth, found.num_branches, found.num_diverging))
    )
    return PrefixResult(arrays, as_np, to_numpy(requests), to_numpy(junction))


def to_tokens(units: np.ndarray, meta: RequestMeta) -> np.ndarray:
    """Shared units -> tokens: blocks x block size, capped at the prompt, for hash-id traces."""
    size = meta.block_size
    return np.where(size > 0, np.minimum(units * size, meta.prompt_tokens), units)


def match_rows(meta: RequestMeta, arrays: MatchArrays) -> pa.Table:
    conv = arrays.shared_conversation
    return pa.table(
        {
            "arrival_seq": pa.array(np.arange(meta.n, dtype=np.int64)),
            "shared_any_tokens": pa.array(to_tokens(arrays.shared_any, meta)),
            "parent_seq": pa.array(arrays.parent, mask=arrays.parent < 0),
            "shared_replica_tokens": pa.array(to_tokens(arrays.shared_replica, meta)),
            "shared_conversation_tokens": pa.array(
                to_tokens(np.maximum(conv, 0), meta), mask=conv < 0
            ),
        }
    )


def node_rows(source: SequenceSource, result: PrefixResult) -> pa.Table:
    meta, j = source.meta, result.junctions
    ids = junction_ids(
        j.owner,
        j.depth,
        meta.ns_any[j.owner],
        meta.namespaces,
        Archive(source, 0).fetch,
        meta.insert_len,
    )
    return nodes_table(meta, j, ids)


def nodes_table(meta: RequestMeta, j: Junctions, ids: list[str]) -> pa.Table:
    """Relation match_junction_nodes: junctions sorted by (owner, depth) and their ids."""
    size = meta.block_size[j.owner]
    positions = np.where(size > 0, j.depth * size, j.depth)
    return pa.table(
        {
            "junction_idx": pa.array(np.arange(j.owner.size, dtype=np.int64)),
            "junction_id": pa.array(ids, type=pa.string()),
            "owner_seq": pa.array(j.owner),
            "position_tokens": pa.array(positions.astype(np.int64)),
            "num_branches": pa.array(j.num_branches),
            "num_requests_diverging": pa.array(j.num_diverging),
            "family_label": pa.array(family_labels(ids, positions), type=pa.string()),
        }
    )


def path_rows(meta: RequestMeta, result: PrefixResult) -> pa.Table:
    req, idx = result.path_requests, result.path_junctions
    on_prompt = result.junctions.depth[idx] <= meta.query_len[req]
    return pa.table(
        {
            "arrival_seq": pa.array(req),
            "junction_idx": pa.array(idx),
            "on_prompt": pa.array(on_prompt),
        }
    )
