"""The sharded prefix matcher on an executor (`analyzer.prefixes.sharding` defines the
partitions): workers read their own partitions' sequences (`analyzer.store.sequences`) or
take them from memory, the driver merges the answers."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from analyzer.executors import ExecutorSpec, Progress, map_partitions
from analyzer.prefixes.engine import MatchArrays, MatchOptions
from analyzer.prefixes.junctions import Junctions
from analyzer.prefixes.merge import merge_junctions
from analyzer.prefixes.shallow import ShallowTask
from analyzer.prefixes.sharding import (
    MatchTask,
    match_in_memory,
    match_local,
    merged_answers,
    sharded_items,
)
from analyzer.prefixes.source import PartitionSource, RequestMeta
from analyzer.store.sequences import TraceInput, read_sequences


@dataclass
class ShardedResult:
    """A merged sharded match: `prefixes.result.PrefixResult`'s fields and junction ids."""

    arrays: MatchArrays
    junctions: Junctions
    path_requests: np.ndarray
    path_junctions: np.ndarray
    junction_ids: list[str]
    num_partitions: int


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
    limit, items, labels = sharded_items(
        meta,
        prefixes,
        options,
        shard_tokens=spec.shard_tokens,
        num_workers=spec.num_workers(),
        junctions=True,
    )
    parts = map_partitions(
        spec, match_partition, items, labels=labels, shared=trace, progress=progress
    )
    junctions, path_requests, path_junctions, ids = merge_junctions(parts)
    arrays = merged_answers(meta.n, limit, parts)
    return ShardedResult(arrays, junctions, path_requests, path_junctions, ids, len(parts))


def shared_units(
    meta: RequestMeta, flat: np.ndarray, offsets: np.ndarray, spec: ExecutorSpec
) -> MatchArrays:
    """`run_matcher` over an in-memory trace (the replay's L1/L2), sharded on `spec`."""
    limit, items, labels = sharded_items(
        meta,
        (flat, offsets),
        MatchOptions(),
        shard_tokens=spec.shard_tokens,
        num_workers=spec.num_workers(),
        junctions=False,
    )
    parts = map_partitions(spec, match_in_memory, items, labels=labels, shared=(flat, offsets))
    return merged_answers(meta.n, limit, parts)
