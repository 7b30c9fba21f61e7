"""The replay's pieces that run on an executor: cache partitions and the L1/L2 matcher pass.

Routing is one ordered pass over the trace and stays on the driver; after it, every
(model revision, replica) partition replays its own cache in arrival order, independent of
the others. A partition's per-request results come back as an Arrow table (SimResult's
fields as columns) and the driver puts them back in arrival order.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from analyzer.executors import ExecutorSpec, Progress, map_partitions
from analyzer.prefixes.source import lists_to_flat
from analyzer.sim.records import SimResult


@dataclass(frozen=True)
class ReplayShared:
    """What every partition's replay reads (put once in Ray's object store)."""

    trace: Any  # analyzer.replay._Trace
    policy: Any
    namespaces: list
    replayer: Any
    num_groups: dict | None


def replay_partition(shared: ReplayShared, item: list[list[int]]) -> pa.Table:
    """Worker: replay the (model revision, replica) partitions of `item` (lists of request
    indices); one row per request, in the item's order."""
    return results_table(_replay(shared, item))


def _replay(shared: ReplayShared, item: list[list[int]]) -> list[SimResult]:
    from analyzer.replay import _sim_request

    trace, ns = shared.trace, shared.namespaces
    if isinstance(trace, LazyTrace):  # one read of the dataset for all of the item's rows
        wanted = sorted(i for indices in item for i in indices)
        rows, where = partition_trace(trace, wanted), {i: k for k, i in enumerate(wanted)}
    else:
        rows, where = trace, None
    out: list[SimResult] = []
    for indices in item:
        at = indices if where is None else [where[i] for i in indices]
        requests = [_sim_request(rows, k, ns[i]) for k, i in zip(at, indices, strict=True)]
        out.extend(shared.replayer(requests, shared.policy, num_groups=shared.num_groups))
    return out


def results_table(results: list[SimResult]) -> pa.Table:
    columns = {name: [getattr(r, name) for r in results] for name in SimResult._fields}
    columns["chunks"] = pa.array(columns["chunks"], pa.list_(pa.int64()))
    columns["error"] = pa.array(columns["error"], pa.string())
    columns["note"] = pa.array(columns["note"], pa.string())
    return pa.table(columns)


def results_from_table(table: pa.Table) -> list[SimResult]:
    columns = [table.column(name).to_pylist() for name in SimResult._fields]
    chunks = SimResult._fields.index("chunks")
    columns[chunks] = [tuple(c) for c in columns[chunks]]
    return [SimResult(*row) for row in zip(*columns, strict=True)]


def replay_partitions(
    spec: ExecutorSpec,
    shared: ReplayShared,
    members: dict[tuple, list[int]],
    progress: Progress | None = None,
) -> list[SimResult | None]:
    """Per request (arrival order): its SimResult, every partition run on `spec`.

    One task per partition; for a dataset, bins of partitions (about 2 per worker, at least
    8), because each task scans the dataset once for its rows.
    `progress(tasks done, number of tasks)` is called as each one finishes."""
    keys = list(members)
    if isinstance(shared.trace, LazyTrace):
        count = max(8, 2 * spec.num_workers())
        bins = lpt_bins([len(members[k]) for k in keys], count)
    else:
        bins = [[k] for k in range(len(keys))]
    items = [[members[keys[k]] for k in b] for b in bins]
    labels = [_label(keys, members, b, len(keys)) for b in bins]
    # In this process the results need no Arrow round trip (nor do stateful replayers).
    fn = _replay if spec.is_local else replay_partition
    parts = map_partitions(spec, fn, items, labels=labels, shared=shared, progress=progress)
    results: list[SimResult | None] = [None] * shared.trace.n
    for item, part in zip(items, parts, strict=True):
        replayed = part if spec.is_local else results_from_table(part)
        indices = [i for idx in item for i in idx]
        for i, result in zip(indices, replayed, strict=True):
            results[i] = result
    return results


def _label(keys: list[tuple], members: dict, chosen: list[int], total: int) -> str:
    names = ", ".join(
        f"{k + 1}/{total} (model revision {keys[k][0]!r}, replica {keys[k][1]!r}, "
        f"{len(members[keys[k]]):,} requests)"
        for k in chosen
    )
    return f"replay partition{'s' if len(chosen) > 1 else ''} {names}"


def lpt_bins(sizes: list[int], count: int) -> list[list[int]]:
    """Indices of `sizes` in about-equal bins (largest first, to the lightest bin; ties by
    index); each bin ascending; empty bins dropped. Deterministic."""
    heap = [(0, b) for b in range(max(1, min(count, len(sizes))))]
    bins: list[list[int]] = [[] for _ in heap]
    for k in sorted(range(len(sizes)), key=lambda k: (-sizes[k], k)):
        load, b = heapq.heappop(heap)
        bins[b].append(k)
        heapq.heappush(heap, (load + sizes[k], b))
    return [sorted(b) for b in bins if b]


def pack_arrays(arrays: list[np.ndarray | None]) -> dict:
    """A list of 1-d arrays (or None) as one flat array + offsets per dtype: pickles (and
    travels to Ray's object store) as a few buffers instead of one object per request."""
    packed: dict = {"n": len(arrays), "parts": []}
    dtypes = sorted({a.dtype.str for a in arrays if a is not None})
    for dtype in dtypes:
        rows = np.asarray(
            [i for i, a in enumerate(arrays) if a is not None and a.dtype.str == dtype],
            dtype=np.int64,
        )
        chosen = [arrays[i] for i in rows]
        offsets = np.zeros(len(chosen) + 1, dtype=np.int64)
        np.cumsum([a.shape[0] for a in chosen], out=offsets[1:])
        flat = np.concatenate(chosen) if chosen else np.zeros(0, dtype=np.dtype(dtype))
        packed["parts"].append((rows, offsets, flat))
    return packed


def unpack_arrays(packed: dict) -> list[np.ndarray | None]:
    out: list[np.ndarray | None] = [None] * packed["n"]
    for rows, offsets, flat in packed["parts"]:
        for k, i in enumerate(rows.tolist()):
            out[i] = flat[offsets[k] : offsets[k + 1]]
    return out


# -- a Parquet dataset: the driver holds scalar columns, workers read their token ids --------


@dataclass
class LazyTrace:
    """A dataset trace as the replay's driver holds it: every column but the token ids
    (`columns`, as `_Trace.columns`) and lengths in units; workers read the token ids of
    their partitions. `prompts` streams them in arrival order (only prefix-aware routing
    asks)."""

    columns: dict[str, list]
    dataset: str
    query_len: np.ndarray
    insert_len: np.ndarray

    @property
    def n(self) -> int:
        return len(self.columns["request_id"])

    @property
    def prompts(self) -> StreamedPrompts:
        return StreamedPrompts(self.dataset)


class StreamedPrompts:
    """Iterates every prompt of a dataset in arrival order, a batch in memory at a time."""

    def __init__(self, dataset: str) -> None:
        self.dataset = dataset

    def __iter__(self):
        from analyzer.executors.dataset import open_dataset, register_requests
        from analyzer.store.db import load_sql

        con = duckdb.connect()
        try:
            register_requests(con, open_dataset(self.dataset))
            reader = con.sql(load_sql("replay_stream_prompts")).to_arrow_reader(8192)
            for batch in reader:
                flat, offsets = lists_to_flat(batch.column(0))
                for k in range(batch.num_rows):
                    yield flat[offsets[k] : offsets[k + 1]]
        finally:
            con.close()


def load_lazy_trace(con: duckdb.DuckDBPyConnection, dataset: str) -> LazyTrace:
    """The driver's part of the dataset registered as `requests` on `con`."""
    from analyzer.prefixes.dbsource import check_requests
    from analyzer.store.db import load_sql, query_arrow

    check_requests(con)
    table = query_arrow(con, load_sql("replay_load_scalars"))
    arrays = {}
    for name in ("query_len", "insert_len"):
        arrays[name] = table.column(name).to_numpy(zero_copy_only=False).astype(np.int64)
        table = table.drop_columns([name])
    columns = {name: table.column(name).to_pylist() for name in table.column_names}
    return LazyTrace(columns, dataset, arrays["query_len"], arrays["insert_len"])


def dataset_trace(dataset: str, *, whole: bool):
    """A dataset's trace, checked as the replay's driver checks it (requests present, dense
    arrival order). `whole`: every column, token ids included (`replay._Trace`: what a
    sweep point's or plan setting's worker reads once, or a local run); else the driver's
    scalars (LazyTrace)."""
    from analyzer.executors.dataset import open_dataset, register_requests
    from analyzer.prefixes.dbsource import check_requests
    from analyzer.replay import _load

    con = duckdb.connect()
    try:
        register_requests(con, open_dataset(dataset))
        if not whole:
            return load_lazy_trace(con, dataset)
        check_requests(con)
        return _load(con)
    finally:
        con.close()


def lazy_shared_prefixes(trace: LazyTrace, ns_any, ns_replica, spec: ExecutorSpec):
    """The replay's L1/L2 in units (MatchArrays) for a dataset trace: the shallow pass over
    each request's first K units (read by the driver) and the groups' shards, on `spec`,
    each shard's worker reading its own rows (as `replay_prefixes` defines the sequences;
    see executors.shallow)."""
    from analyzer.executors.match import merged_answers, sharded_items
    from analyzer.executors.sequences import TraceInput
    from analyzer.prefixes.engine import MatchOptions
    from analyzer.prefixes.source import RequestMeta

    block = np.asarray([b or 0 for b in trace.columns["block_size"]], dtype=np.int64)
    meta = RequestMeta(
        ns_any=ns_any,
        ns_replica=ns_replica,
        ns_conversation=np.full(trace.n, -1, dtype=np.int64),
        query_len=trace.query_len,
        insert_len=trace.insert_len,
        block_size=block,
        prompt_tokens=np.asarray(trace.columns["prompt_tokens"], dtype=np.int64),
    )
    prefixes = dataset_prefixes(trace.dataset, spec.shard_tokens)
    limit, items, labels = sharded_items(meta, prefixes, spec, MatchOptions(), junctions=False)
    source = TraceInput(dataset=trace.dataset)
    found = map_partitions(spec, _lazy_match, items, labels=labels, shared=source)
    return merged_answers(trace.n, limit, found)


def dataset_prefixes(dataset: str, units: int) -> tuple[np.ndarray, np.ndarray]:
    """The first `units` units of every inserted sequence of a dataset (L1/L2's: without
    the last output token), in arrival order; never more of the token ids."""
    from analyzer.executors.dataset import open_dataset, register_requests
    from analyzer.executors.sequences import read_prefixes

    con = duckdb.connect()
    try:
        register_requests(con, open_dataset(dataset))
        return read_prefixes(con, units, drop_last_output=True)
    finally:
        con.close()


def _lazy_match(source, task):
    from dataclasses import replace

    from analyzer.executors.match import answers_only
    from analyzer.executors.sequences import PartitionSource, read_sequences
    from analyzer.executors.shallow import ShallowTask
    from analyzer.prefixes.engine import run_matcher

    if isinstance(task, ShallowTask):
        return task.run()
    flat, offsets = read_sequences(source, task.ids, drop_last_output=True)
    options = replace(task.options, archive_tokens=task.options.chunk_tokens)
    arrays = run_matcher(PartitionSource(task.meta, flat, offsets), xp=np, options=options)
    return answers_only(task.ids, arrays)


def partition_trace(trace: LazyTrace, indices: list[int]):
    """Worker: the `_Trace` of one partition's rows (local index k = indices[k])."""
    from analyzer.executors.dataset import read_rows, register_requests
    from analyzer.replay import _load

    seqs = np.asarray([trace.columns["arrival_seq"][i] for i in indices], dtype=np.int64)
    con = duckdb.connect()
    try:
        register_requests(con, read_rows(trace.dataset, seqs))
        return _load(con)
    finally:
        con.close()
