"""The sharded prefix matcher on an executor (`analyzer.prefixes.sharding` defines the
partitions): workers read their own partitions' sequences (`analyzer.store.sequences`) or
take them from memory, the driver merges the answers."""

from __future__ import annotations

from dataclasses import replace

import duckdb
import numpy as np
import pyarrow as pa

from analyzer.access.workers import map_match_partitions
from analyzer.executors import ExecutorSpec, Progress
from analyzer.prefixes.engine import MatchArrays, MatchOptions, run_matcher
from analyzer.prefixes.merge import merge_junctions
from analyzer.prefixes.shallow import ShallowTask
from analyzer.prefixes.sharding import (
    MatchTask,
    ShardedResult,
    answers_only,
    match_in_memory,
    match_local,
    merged_answers,
    sharded_items,
)
from analyzer.prefixes.source import PartitionSource, RequestMeta
from analyzer.store.dataset import open_dataset, register_requests
from analyzer.store.sequences import TraceInput, read_prefixes, read_sequences


def plan_shards(
    meta: RequestMeta,
    prefixes: tuple[np.ndarray, np.ndarray],
    spec: ExecutorSpec,
    options: MatchOptions,
    *,
    junctions: bool,
) -> tuple[np.ndarray, list, list[str]]:
    """`prefixes.sharding.sharded_items` for executor `spec`: its K and its workers."""
    return sharded_items(
        meta,
        prefixes,
        options,
        shard_tokens=spec.shard_tokens,
        num_workers=spec.num_workers(),
        junctions=junctions,
    )


def match_partition(trace: TraceInput, task: MatchTask | ShallowTask) -> dict[str, pa.Table]:
    """Worker: read and match one partition; answers in global arrival indices."""
    if isinstance(task, ShallowTask):
        return task.run()
    flat, offsets = read_sequences(trace, task.ids)
    return match_local(PartitionSource(task.meta, flat, offsets), task)


def match_sharded(
    meta: RequestMeta,
    prefixes: tuple[np.ndarray, np.ndarray],
    trace: TraceInput,
    spec: ExecutorSpec,
    options: MatchOptions,
    progress: Progress | None = None,
) -> ShardedResult:
    """Match every request: the shallow pass over `prefixes` (at least the first K units
    of each request) and the groups' shards, all partitions run on `spec`; merged."""
    limit, items, labels = plan_shards(meta, prefixes, spec, options, junctions=True)
    parts = map_match_partitions(
        spec, match_partition, items, labels=labels, shared=trace, progress=progress
    )
    junctions, path_requests, path_junctions, ids = merge_junctions(parts)
    arrays = merged_answers(meta.n, limit, parts)
    return ShardedResult(arrays, junctions, path_requests, path_junctions, ids, len(parts))


def shared_units(
    meta: RequestMeta, flat: np.ndarray, offsets: np.ndarray, spec: ExecutorSpec
) -> MatchArrays:
    """`run_matcher` over an in-memory trace (the replay's L1/L2), sharded on `spec`."""
    limit, items, labels = plan_shards(meta, (flat, offsets), spec, MatchOptions(), junctions=False)
    shared = (flat, offsets)
    parts = map_match_partitions(spec, match_in_memory, items, labels=labels, shared=shared)
    return merged_answers(meta.n, limit, parts)


def dataset_shared_units(meta: RequestMeta, dataset: str, spec: ExecutorSpec) -> MatchArrays:
    """The replay's L1/L2 in units for a Parquet dataset, sharded on `spec`: the driver reads
    each request's first K units, each shard's worker reads its own rows (without the last
    output token, which is never cached)."""
    prefixes = dataset_prefixes(dataset, spec.shard_tokens)
    limit, items, labels = plan_shards(meta, prefixes, spec, MatchOptions(), junctions=False)
    source = TraceInput(dataset=dataset)
    found = map_match_partitions(spec, _dataset_match, items, labels=labels, shared=source)
    return merged_answers(meta.n, limit, found)


def dataset_prefixes(dataset: str, units: int) -> tuple[np.ndarray, np.ndarray]:
    """The first `units` units of every inserted sequence of a dataset (L1/L2's: without
    the last output token), in arrival order; never more of the token ids."""
    con = duckdb.connect()
    try:
        register_requests(con, open_dataset(dataset))
        return read_prefixes(con, units, drop_last_output=True)
    finally:
        con.close()


def _dataset_match(source: TraceInput, task: MatchTask | ShallowTask) -> dict[str, pa.Table]:
    """Worker of `dataset_shared_units`: one partition's views, its rows read here."""
    if isinstance(task, ShallowTask):
        return task.run()
    flat, offsets = read_sequences(source, task.ids, drop_last_output=True)
    options = replace(task.options, archive_tokens=task.options.chunk_tokens)
    arrays = run_matcher(PartitionSource(task.meta, flat, offsets), xp=np, options=options)
    return answers_only(task.ids, arrays)
