"""The prefix matcher sharded by first unit, with answers identical to one whole pass.

Why it is exact: two requests share a prefix only if they are in the same `any` namespace
and start with the same unit (first token id, or first block hash id), so the requests of
one (namespace, first unit) group never share anything with another group's. The
replica and conversation views refine the `any` namespace, so the same holds for them,
and a junction (a node at depth >= 1) lies inside one group. Each partition (a bin of
whole groups) is matched on its own in arrival order; its local answers map back to
global arrival indices, and the driver merges them. Namespace ids are re-numbered per
partition in the same order, so each view's decisions are those of the whole pass.
"""

from __future__ import annotations

import heapq
import time
from dataclasses import dataclass, replace
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from analyzer.backend import backend_name, get_xp
from analyzer.errors import ConfigError, StoreError
from analyzer.executors import ExecutorSpec, Progress, map_partitions
from analyzer.executors.dataset import open_dataset, read_rows, register_requests
from analyzer.prefixes.dbsource import DuckDBSource
from analyzer.prefixes.engine import MatchArrays, MatchOptions, run_matcher
from analyzer.prefixes.junctions import Junctions
from analyzer.prefixes.labels import _dedupe, junction_ids
from analyzer.prefixes.memory import MemorySource
from analyzer.prefixes.source import Archive, Chunk, RequestMeta, narrow, take_sequences
from analyzer.store.db import connect, load_sql, query_arrow

# Two per worker even out groups of different sizes; each partition scans the input's token
# columns once (a partition's rows are scattered through arrival order), so not more.
PARTITIONS_PER_WORKER = 2
JUNCTION_COLUMNS = ("owner", "depth", "num_branches", "num_diverging")


@dataclass(frozen=True)
class TraceInput:
    """Where workers read sequences: the store at `db_path`, or a Parquet `dataset`."""

    db_path: str | None = None
    dataset: str | None = None


@dataclass(frozen=True)
class MatchTask:
    """One partition: global arrival indices (ascending) and their re-numbered metadata."""

    ids: np.ndarray
    meta: RequestMeta
    options: MatchOptions


@dataclass
class ShardedResult:
    """A merged sharded match: the same fields `api.PrefixResult` has, plus junction ids."""

    arrays: MatchArrays
    junctions: Junctions
    path_requests: np.ndarray
    path_junctions: np.ndarray
    junction_ids: list[str]
    num_partitions: int


def first_units(con: duckdb.DuckDBPyConnection) -> np.ndarray:
    """Each request's first unit, in arrival order (int64)."""
    table = query_arrow(con, load_sql("match_first_units"))
    return table.column("first_unit").to_numpy(zero_copy_only=False).astype(np.int64)


def partition_requests(
    ns_any: np.ndarray, first: np.ndarray, weight: np.ndarray, num_parts: int
) -> list[np.ndarray]:
    """Bins of whole (namespace, first unit) groups, about equal in `weight` (units), each
    an ascending array of arrival indices; deterministic (largest group first, to the
    lightest bin, ties by key)."""
    n = ns_any.shape[0]
    order = np.lexsort((np.arange(n), first, ns_any))
    key_ns, key_first = ns_any[order], first[order]
    head = np.ones(n, dtype=bool)
    head[1:] = (key_ns[1:] != key_ns[:-1]) | (key_first[1:] != key_first[:-1])
    group = np.cumsum(head) - 1
    sizes = np.bincount(group, weights=weight[order]).astype(np.int64)
    bins = [(0, b) for b in range(max(1, min(num_parts, sizes.shape[0])))]
    owner = np.empty(sizes.shape[0], dtype=np.int64)
    for g in np.argsort(-sizes, kind="stable"):
        load, b = heapq.heappop(bins)
        owner[g] = b
        heapq.heappush(bins, (load + int(sizes[g]), b))
    part = owner[group]
    return [np.sort(order[part == b]) for b in range(len(bins)) if (part == b).any()]


def local_meta(meta: RequestMeta, ids: np.ndarray) -> RequestMeta:
    """`meta` restricted to `ids`, namespace ids re-numbered densely in the same order."""
    any_global = meta.ns_any[ids]
    used, ns_any = np.unique(any_global, return_inverse=True)
    conv = meta.ns_conversation[ids]
    ns_conv = np.full(ids.shape[0], -1, dtype=np.int64)
    inside = conv >= 0
    ns_conv[inside] = np.unique(conv[inside], return_inverse=True)[1]
    return RequestMeta(
        ns_any=ns_any.astype(np.int64),
        ns_replica=np.unique(meta.ns_replica[ids], return_inverse=True)[1].astype(np.int64),
        ns_conversation=ns_conv,
        query_len=meta.query_len[ids],
        insert_len=meta.insert_len[ids],
        block_size=meta.block_size[ids],
        prompt_tokens=meta.prompt_tokens[ids],
        namespaces=tuple(meta.namespaces[int(k)] for k in used) if meta.namespaces else (),
    )


def match_tasks(
    meta: RequestMeta, first: np.ndarray, num_parts: int, options: MatchOptions
) -> list[MatchTask]:
    options = replace(options, progress=None)  # a driver callback is no worker's business
    parts = partition_requests(meta.ns_any, first, meta.insert_len, num_parts)
    return [MatchTask(ids, local_meta(meta, ids), options) for ids in parts]


def task_label(task: MatchTask, k: int, total: int) -> str:
    units = int(task.meta.insert_len.sum())
    return f"match partition {k + 1}/{total} ({task.ids.size:,} requests, {units:,} units)"


def read_sequences(
    trace: TraceInput, ids: np.ndarray, *, drop_last_output: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """(flat, offsets) of the inserted sequences of `ids`, read by the worker itself."""
    wanted = pa.table({"arrival_seq": pa.array(ids, pa.int64())})
    if trace.dataset is not None:
        con = duckdb.connect()
        register_requests(con, read_rows(trace.dataset, ids))
    else:
        con = duckdb.connect(str(trace.db_path), read_only=True)
    try:
        con.register("match_wanted", wanted)
        sql = load_sql("match_partition_sequences")
        table = query_arrow(con, sql, {"drop_last": int(drop_last_output)})
    finally:
        con.close()
    if table.num_rows != ids.size:
        raise StoreError("requests changed while `hpa match` was reading them; run it again")
    return inserted_sequences(table)


def inserted_sequences(table: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """(flat int64, offsets) of each row's inserted sequence from the columns `tokens` and
    `block_hash_ids` (one of them set per row); no copy beyond the flat array unless a
    partition mixes token and hash-id requests."""
    tokens, t_off = _flat(table.column("tokens"))
    hashes, h_off = _flat(table.column("block_hash_ids"))
    if hashes.size == 0:
        return tokens, t_off
    if tokens.size == 0:
        return hashes, h_off
    t_len, h_len = np.diff(t_off), np.diff(h_off)  # a row has one kind: the other is 0
    offsets = np.zeros(table.num_rows + 1, dtype=np.int64)
    np.cumsum(t_len + h_len, out=offsets[1:])
    flat = np.empty(int(offsets[-1]), dtype=np.int64)  # hash ids need 64 bits
    for values, own_off, lens in ((tokens, t_off, t_len), (hashes, h_off, h_len)):
        rows = np.flatnonzero(lens)
        dest = np.repeat(offsets[rows] - own_off[rows], lens[rows]) + np.arange(values.size)
        flat[dest] = values
    return flat, offsets


def _flat(column: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """(values in their own dtype, int64 offsets) of a list column; null rows are empty."""
    column = column.combine_chunks() if column.num_chunks else pa.array([], column.type)
    lens = pc.fill_null(pc.list_value_length(column), 0).to_numpy(zero_copy_only=False)
    offsets = np.zeros(len(lens) + 1, dtype=np.int64)
    np.cumsum(lens, out=offsets[1:])
    return column.flatten().to_numpy(zero_copy_only=False), offsets


class PartitionSource:
    """A partition's inserted sequences, held once and narrow (int32 token ids): the
    matcher's `SequenceSource` in a worker, so its archive need not keep a second copy."""

    def __init__(self, meta: RequestMeta, flat: np.ndarray, offsets: np.ndarray) -> None:
        self.meta, self.flat, self.offsets = meta, narrow(flat), offsets

    def read(self, start: int, stop: int) -> Chunk:
        a, b = int(self.offsets[start]), int(self.offsets[stop])
        return Chunk(start, stop, self.flat[a:b], self.offsets[start : stop + 1] - a)

    def fetch(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return take_sequences(self.flat, self.offsets, np.asarray(ids, dtype=np.int64))


def match_partition(trace: TraceInput, task: MatchTask) -> dict[str, pa.Table]:
    """Worker: read and match one partition; answers in global arrival indices."""
    flat, offsets = read_sequences(trace, task.ids)
    return match_local(PartitionSource(task.meta, flat, offsets), task)


def match_local(source: PartitionSource, task: MatchTask) -> dict[str, pa.Table]:
    """Match one partition's `source` (local indices) and map answers to global ones."""
    from analyzer.prefixes.api import compute

    if not np.array_equal(np.diff(source.offsets), task.meta.insert_len):
        raise StoreError("requests changed while `hpa match` was reading them; run it again")
    # The source is in memory: an archive of one chunk is enough (memory only, never a result).
    options = replace(task.options, archive_tokens=task.options.chunk_tokens)
    result = compute(source, xp=np, options=options)
    j = result.junctions
    raw = junction_ids(
        j.owner, j.depth, task.meta.ns_any[j.owner], task.meta.namespaces, Archive(source, 0).fetch
    )
    return _tables(task.ids, result.arrays, j, raw, result.path_requests, result.path_junctions)


def _glob(ids: np.ndarray, local: np.ndarray) -> np.ndarray:
    return np.where(local >= 0, ids[np.maximum(local, 0)], -1)


def _tables(ids, a: MatchArrays, j: Junctions, raw, path_requests, path_junctions) -> dict:
    requests = {
        "arrival_seq": ids,
        "shared_any": a.shared_any,
        "parent": _glob(ids, a.parent),
        "shared_replica": a.shared_replica,
        "shared_conversation": a.shared_conversation,
        "insert_shared": a.insert_shared,
        "insert_parent": _glob(ids, a.insert_parent),
    }
    junctions = {
        "owner": ids[j.owner],
        "depth": j.depth,
        "num_branches": j.num_branches,
        "num_diverging": j.num_diverging,
        "raw_id": pa.array([i[:16] for i in raw], pa.string()),  # before global dedupe
    }
    paths = {"arrival_seq": ids[path_requests], "junction": path_junctions}
    return {
        "requests": pa.table(requests),
        "junctions": pa.table(junctions),
        "paths": pa.table(paths),
        "exact_fallbacks": pa.table({"n": [a.exact_fallbacks]}),
    }


def match_sharded(
    meta: RequestMeta,
    first: np.ndarray,
    trace: TraceInput,
    spec: ExecutorSpec,
    options: MatchOptions,
    progress: Progress | None = None,
) -> ShardedResult:
    """Match every request by partitions run on `spec`, merged in arrival order."""
    tasks = match_tasks(meta, first, spec.num_workers() * PARTITIONS_PER_WORKER, options)
    labels = [task_label(t, k, len(tasks)) for k, t in enumerate(tasks)]
    parts = map_partitions(
        spec, match_partition, tasks, labels=labels, shared=trace, progress=progress
    )
    return merge(meta.n, parts)


def merge(n: int, parts: list[dict[str, pa.Table]]) -> ShardedResult:
    """One result from the partitions' tables (junctions sorted by owner, then depth)."""
    cols = {}
    for name in (
        "shared_any",
        "parent",
        "shared_replica",
        "shared_conversation",
        "insert_shared",
        "insert_parent",
    ):
        cols[name] = np.full(n, -1, dtype=np.int64)
    for part in parts:
        rows = part["requests"]
        ids = rows.column("arrival_seq").to_numpy()
        for name, values in cols.items():
            values[ids] = rows.column(name).to_numpy()
    junctions = pa.concat_tables([p["junctions"] for p in parts])
    owner = junctions.column("owner").to_numpy()
    depth = junctions.column("depth").to_numpy()
    order = np.lexsort((depth, owner))
    new_index = np.empty_like(order)
    new_index[order] = np.arange(order.size)
    starts = np.cumsum([0] + [p["junctions"].num_rows for p in parts])
    path_req = [p["paths"].column("arrival_seq").to_numpy() for p in parts]
    path_j = [
        new_index[p["paths"].column("junction").to_numpy() + s]
        for p, s in zip(parts, starts, strict=False)
    ]

    def take(name: str) -> np.ndarray:
        return junctions.column(name).to_numpy()[order].astype(np.int64)

    raw = junctions.column("raw_id").to_pylist()
    return ShardedResult(
        arrays=MatchArrays(
            shared_any=cols["shared_any"],
            parent=cols["parent"],
            shared_replica=cols["shared_replica"],
            shared_conversation=cols["shared_conversation"],
            insert_shared=cols["insert_shared"],
            insert_parent=cols["insert_parent"],
            exact_fallbacks=sum(p["exact_fallbacks"].column("n")[0].as_py() for p in parts),
            archive_rereads=0,
        ),
        junctions=Junctions(*(take(c) for c in JUNCTION_COLUMNS)),
        path_requests=np.concatenate(path_req) if path_req else np.zeros(0, np.int64),
        path_junctions=np.concatenate(path_j) if path_j else np.zeros(0, np.int64),
        junction_ids=_dedupe([raw[i] for i in order]),
        num_partitions=len(parts),
    )


def shared_units(
    meta: RequestMeta,
    first: np.ndarray,
    flat: np.ndarray,
    offsets: np.ndarray,
    spec: ExecutorSpec,
) -> MatchArrays:
    """`run_matcher` over an in-memory trace (the replay's L1/L2), sharded on `spec`."""
    tasks = match_tasks(meta, first, spec.num_workers() * PARTITIONS_PER_WORKER, MatchOptions())
    labels = [task_label(t, k, len(tasks)) for k, t in enumerate(tasks)]
    parts = map_partitions(spec, _match_in_memory, tasks, labels=labels, shared=(flat, offsets))
    return merge(meta.n, parts).arrays


def _match_in_memory(shared: tuple[np.ndarray, np.ndarray], task: MatchTask):
    """Worker for `shared_units`: the views only (the replay needs no junctions)."""
    flat, offsets = take_sequences(shared[0], shared[1], task.ids)
    arrays = run_matcher(MemorySource(task.meta, flat, offsets), xp=np, options=task.options)
    none = np.zeros(0, dtype=np.int64)
    return _tables(task.ids, arrays, Junctions(none, none, none, none), [], none, none)


def match_store(
    db_path: str | Path,
    *,
    spec: ExecutorSpec,
    dataset: str | Path | None,
    backend: str,
    out: str | Path | None,
    derive_families: bool,
    min_family_tokens: int,
    options: MatchOptions,
):
    """`match_prefixes` with a non-local executor and/or a Parquet dataset: the driver reads
    the per-request metadata, workers read and match their partitions, the driver writes
    the tables once (the store's connection is closed while workers read it)."""
    from analyzer.prefixes import api

    if dataset is not None and derive_families:
        raise ConfigError(
            "--derive-families writes requests.prompt_family, which a --dataset cannot hold; "
            "ingest the trace with `hpa ingest` to derive families"
        )
    if not spec.is_local and backend == "cupy":
        raise ConfigError("--backend cupy runs in one process; use it with --executor local")
    xp = get_xp(backend) if spec.is_local else np
    con = _open(db_path, dataset)
    try:
        started = time.perf_counter()
        source = DuckDBSource(con)
        if spec.is_local:
            result = api.compute(source, xp=xp, options=options)
            seconds = time.perf_counter() - started
            derived = api.write_tables(
                con,
                source,
                result,
                derive_families=derive_families,
                min_family_tokens=min_family_tokens,
            )
        else:
            first = first_units(con)
            if dataset is None:
                con.close()  # workers open the store read-only
            trace = TraceInput(str(db_path) if dataset is None else None, _str(dataset))
            result = match_sharded(source.meta, first, trace, spec, options, options.progress)
            seconds = time.perf_counter() - started
            if dataset is None:
                con = connect(db_path, create=False)
            relations = {
                "match_rows": api._rows(source.meta, result.arrays),
                "match_junction_nodes": api.nodes_table(
                    source.meta, result.junctions, result.junction_ids
                ),
                "match_junction_paths": api._paths(source.meta, result),
            }
            derived = api.write_relations(con, relations, derive_families, min_family_tokens)
        if out is not None:
            api.export_prefix_matches(con, out)
    finally:
        con.close()
    name = backend_name(xp)
    if not spec.is_local:
        name = f"{name}, {result.num_partitions} partitions on executor {spec.name}"
    return api._summary(source.meta, result, name, seconds, derived, out)


def _open(db_path: str | Path, dataset: str | Path | None) -> duckdb.DuckDBPyConnection:
    if dataset is None:
        return connect(db_path, create=False)
    data = open_dataset(dataset)
    con = connect(db_path, create=True)
    register_requests(con, data)
    return con


def _str(path: str | Path | None) -> str | None:
    return None if path is None else str(Path(path).resolve())
