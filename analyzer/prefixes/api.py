"""`hpa match` as a library call: match every stored request, find the junctions, write the
`prefix_matches` and `junctions` tables (optionally derived prompt families), export.

Figures (all in tokens; hash-id traces: matched blocks x block size, capped at the prompt):

- shared_any_tokens: longest prefix of the prompt shared with any earlier request's
  prompt + output, under the same cache_salt and LoRA (and kind / block size);
- shared_parent_request_id: the earliest earlier request achieving it (NULL when 0);
- shared_replica_tokens: the same, only earlier requests on the same replica (a NULL
  replica is one replica of its own);
- shared_conversation_tokens: the same, only earlier requests of the same conversation
  (NULL for requests without a conversation_id).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from analyzer.backend import backend_name, get_xp, to_numpy
from analyzer.executors import ExecutorSpec, as_spec
from analyzer.prefixes.dbsource import DuckDBSource
from analyzer.prefixes.engine import MatchArrays, MatchOptions, run_matcher
from analyzer.prefixes.junctions import Junctions, find_junctions, junction_paths
from analyzer.prefixes.labels import family_labels, junction_ids
from analyzer.prefixes.source import Archive, RequestMeta, SequenceSource
from analyzer.store.db import connect, load_sql
from analyzer.store.export import check_export_path, export_table

DEFAULT_MIN_FAMILY_TOKENS = 32


@dataclass(frozen=True)
class MatchSummary:
    """What one `hpa match` run did; `lines()` is what the CLI prints."""

    num_requests: int
    prompt_tokens: int
    shared_any_tokens: int
    shared_replica_tokens: int
    num_junctions: int
    backend: str
    match_seconds: float
    exact_fallbacks: int
    num_derived: int | None = None
    num_families: int | None = None
    out: str | None = None

    @property
    def tokens_per_s(self) -> float:
        return self.prompt_tokens / self.match_seconds if self.match_seconds > 0 else 0.0

    def lines(self) -> list[str]:
        share = self.shared_any_tokens / self.prompt_tokens if self.prompt_tokens else 0.0
        rep = self.shared_replica_tokens / self.prompt_tokens if self.prompt_tokens else 0.0
        out = [
            f"matched {self.num_requests:,} requests ({self.prompt_tokens:,} prompt tokens) "
            f"in {self.match_seconds:.2f} s: {self.tokens_per_s:,.0f} tokens/s on {self.backend}",
            f"shared with any earlier request: {share:.1%} of prompt tokens; "
            f"on the same replica: {rep:.1%}",
            f"junctions: {self.num_junctions:,}; wrote tables prefix_matches, junctions",
        ]
        if self.num_derived is not None:
            out.append(
                f"derived prompt families: {self.num_families:,} labels on "
                f"{self.num_derived:,} requests (source derived:first_junction)"
            )
        if self.exact_fallbacks:
            out.append(f"hash collisions resolved by exact comparison: {self.exact_fallbacks:,}")
        if self.out:
            out.append(f"exported prefix_matches to {self.out}")
        return out


@dataclass
class PrefixResult:
    """Everything `match_prefixes` computes before writing (NumPy, arrival order)."""

    arrays: MatchArrays
    junctions: Junctions
    path_requests: np.ndarray
    path_junctions: np.ndarray


def compute(source: SequenceSource, *, xp: Any, options: MatchOptions) -> PrefixResult:
    """Match `source` and derive its junctions; no database writes."""
    arrays = run_matcher(source, xp=xp, options=options)
    e, w = xp.asarray(arrays.insert_shared), xp.asarray(arrays.insert_parent)
    length = xp.asarray(source.meta.insert_len)
    found = find_junctions(e, w, length, xp=xp)
    requests, junction = junction_paths(e, w, length, found, xp=xp)
    as_np = Junctions(
        *(to_numpy(a) for a in (found.owner, found.depth, found.num_branches, found.num_diverging))
    )
    return PrefixResult(arrays, as_np, to_numpy(requests), to_numpy(junction))


def match_prefixes(
    db_path: str | Path,
    *,
    backend: str = "auto",
    out: str | Path | None = None,
    derive_families: bool = False,
    min_family_tokens: int = DEFAULT_MIN_FAMILY_TOKENS,
    options: MatchOptions | None = None,
    executor: ExecutorSpec | str | None = None,
    dataset: str | Path | None = None,
) -> MatchSummary:
    """Run the prefix matcher on the store at `db_path` and write its tables.

    `executor` (local, processes, ray; see analyzer.executors) runs the matcher sharded by
    each request's first K tokens (`ExecutorSpec.shard_tokens`; a driver pass answers
    everything shallower, see analyzer.executors.shallow), with identical tables.
    `dataset`: read the requests from a Parquet dataset (analyzer.executors.dataset)
    instead of the store's `requests` table.

    Raises:
        ConfigError: unknown backend, executor or `out` suffix.
        BackendUnavailable: `backend='cupy'` cannot be used here, or ray is not installed.
        StoreError: no database, no requests, or requests without arrival order.
        WorkerError: a partition failed (named in the message).
    """
    if out is not None:
        check_export_path(out)
    spec = as_spec(executor)
    if not spec.is_local or dataset is not None:
        from analyzer.executors.match import match_store

        return match_store(
            db_path,
            spec=spec,
            dataset=dataset,
            backend=backend,
            out=out,
            derive_families=derive_families,
            min_family_tokens=min_family_tokens,
            options=options or MatchOptions(),
        )
    xp = get_xp(backend)
    con = connect(db_path, create=False)
    try:
        source = DuckDBSource(con)
        started = time.perf_counter()
        result = compute(source, xp=xp, options=options or MatchOptions())
        seconds = time.perf_counter() - started
        derived = write_tables(
            con,
            source,
            result,
            derive_families=derive_families,
            min_family_tokens=min_family_tokens,
        )
        if out is not None:
            export_prefix_matches(con, out)
    finally:
        con.close()
    return _summary(source.meta, result, backend_name(xp), seconds, derived, out)


def _summary(meta, result: PrefixResult, backend, seconds, derived, out) -> MatchSummary:
    arrays = result.arrays
    return MatchSummary(
        num_requests=meta.n,
        prompt_tokens=int(meta.prompt_tokens.sum()),
        shared_any_tokens=int(to_tokens(arrays.shared_any, meta).sum()),
        shared_replica_tokens=int(to_tokens(arrays.shared_replica, meta).sum()),
        num_junctions=int(result.junctions.owner.size),
        backend=backend,
        match_seconds=seconds,
        exact_fallbacks=arrays.exact_fallbacks,
        num_derived=derived[0] if derived else None,
        num_families=derived[1] if derived else None,
        out=str(out) if out is not None else None,
    )


def to_tokens(units: np.ndarray, meta: RequestMeta) -> np.ndarray:
    """Shared units -> tokens: blocks x block size, capped at the prompt, for hash-id traces."""
    size = meta.block_size
    return np.where(size > 0, np.minimum(units * size, meta.prompt_tokens), units)


def write_tables(
    con,
    source: SequenceSource,
    result: PrefixResult,
    *,
    derive_families: bool,
    min_family_tokens: int,
) -> tuple[int, int] | None:
    """Write prefix_matches and junctions (and derived families) in one transaction.
    Returns (requests labelled, distinct labels) when deriving families."""
    relations = {
        "match_rows": _rows(source.meta, result.arrays),
        "match_junction_nodes": _nodes(source, result),
        "match_junction_paths": _paths(source.meta, result),
    }
    return write_relations(con, relations, derive_families, min_family_tokens)


def write_relations(
    con, relations: dict[str, pa.Table], derive_families: bool, min_family_tokens: int
) -> tuple[int, int] | None:
    """Write the relations `write_tables` builds (also a sharded match's) in one transaction."""
    for name, table in relations.items():
        con.register(name, table)
    try:
        con.execute("BEGIN TRANSACTION")
        con.execute(load_sql("match_write_prefix_matches"))
        if derive_families:
            con.execute(load_sql("match_derive_families"), {"min_tokens": min_family_tokens})
        con.execute(load_sql("match_write_junctions"))
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    finally:
        for name in relations:
            con.unregister(name)
    if not derive_families:
        return None
    labelled, labels = con.execute(load_sql("match_count_derived")).fetchall()[0]
    return int(labelled), int(labels)


def _rows(meta: RequestMeta, arrays: MatchArrays) -> pa.Table:
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


def _nodes(source: SequenceSource, result: PrefixResult) -> pa.Table:
    meta, j = source.meta, result.junctions
    ids = junction_ids(
        j.owner, j.depth, meta.ns_any[j.owner], meta.namespaces, Archive(source, 0).fetch
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


def _paths(meta: RequestMeta, result: PrefixResult) -> pa.Table:
    req, idx = result.path_requests, result.path_junctions
    on_prompt = result.junctions.depth[idx] <= meta.query_len[req]
    return pa.table(
        {
            "arrival_seq": pa.array(req),
            "junction_idx": pa.array(idx),
            "on_prompt": pa.array(on_prompt),
        }
    )


def export_prefix_matches(con, out: str | Path) -> int:
    """Write table prefix_matches to `out` (.parquet, .jsonl or .csv), in arrival order."""
    return export_table(con, load_sql("match_export_prefix_matches"), out)
