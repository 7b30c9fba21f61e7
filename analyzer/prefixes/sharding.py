"""The prefix matcher sharded by each request's first K units, with answers identical to
one whole pass: the partitions (the shallow pass and bins of whole groups), and what one
partition's worker computes. Pure; `analyzer.access.sharded` runs them on an executor.

The driver reads the first K units of every request (K: `ExecutorSpec.shard_tokens`
tokens) and keys each request's *group* by them (same namespace, same first K units).
The partitions are the *shallow pass* (every request cut to K units, see
`analyzer.prefixes.shallow` for why this is exact) and bins of whole groups of two or
more requests (the shards), each matched on its own in arrival order by a worker that
reads its requests' whole sequences; local answers map back to global arrival indices.
The driver then takes, per view, the shallow answer where it is below K and the shard's
where it reached K, and the junctions above depth K from the shallow pass, those at depth
K and deeper from the shards (`analyzer.prefixes.merge`). Namespace ids are re-numbered
per partition in the same order, so each view's decisions are those of the whole pass.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa

from analyzer.errors import StoreError
from analyzer.prefixes.engine import MatchArrays, MatchOptions, run_matcher
from analyzer.prefixes.junctions import Junctions
from analyzer.prefixes.labels import junction_ids
from analyzer.prefixes.memory import MemorySource
from analyzer.prefixes.merge import combine, keep_deep, matchers_said, merge_arrays, part_tables
from analyzer.prefixes.result import compute
from analyzer.prefixes.shallow import ShallowTask, group_roots, truncate, unit_limits
from analyzer.prefixes.source import Archive, PartitionSource, RequestMeta, take_sequences

# Two per worker even out groups of different sizes; each partition scans the input's token
# columns once (a partition's rows are scattered through arrival order), so not more.
PARTITIONS_PER_WORKER = 2


@dataclass(frozen=True)
class MatchTask:
    """One partition: global arrival indices (ascending), their re-numbered metadata, and
    K in tokens (the shard keeps junctions at depth >= K only)."""

    ids: np.ndarray
    meta: RequestMeta
    options: MatchOptions
    shard_tokens: int


@dataclass
class ShardedResult:
    """A merged sharded match: `prefixes.result.PrefixResult`'s fields and junction ids."""

    arrays: MatchArrays
    junctions: Junctions
    path_requests: np.ndarray
    path_junctions: np.ndarray
    junction_ids: list[str]
    num_partitions: int


def partition_requests(group: np.ndarray, weight: np.ndarray, num_parts: int) -> list[np.ndarray]:
    """Bins of whole groups (requests with the same `group` >= 0; -1: in no bin), about
    equal in `weight` (units), each an ascending array of arrival indices; deterministic
    (largest group first, to the lightest bin, ties by group)."""
    rows = np.flatnonzero(group >= 0)
    if rows.size == 0:
        return []
    _, member = np.unique(group[rows], return_inverse=True)
    sizes = np.bincount(member, weights=weight[rows]).astype(np.int64)
    bins = [(0, b) for b in range(max(1, min(num_parts, sizes.shape[0])))]
    owner = np.empty(sizes.shape[0], dtype=np.int64)
    for g in np.argsort(-sizes, kind="stable"):
        load, b = heapq.heappop(bins)
        owner[g] = b
        heapq.heappush(bins, (load + int(sizes[g]), b))
    part = owner[member]
    return [rows[part == b] for b in range(len(bins)) if (part == b).any()]


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
    meta: RequestMeta, roots: np.ndarray, num_parts: int, options: MatchOptions, k: int
) -> list[MatchTask]:
    """The shards: bins of whole groups (`roots`, see `shallow.group_roots`)."""
    options = replace(options, progress=None)  # a driver callback is no worker's business
    parts = partition_requests(roots, meta.insert_len, num_parts)
    return [MatchTask(ids, local_meta(meta, ids), options, k) for ids in parts]


def sharded_items(
    meta: RequestMeta,
    prefixes: tuple[np.ndarray, np.ndarray],
    options: MatchOptions,
    *,
    shard_tokens: int,
    num_workers: int,
    junctions: bool,
) -> tuple[np.ndarray, list, list[str]]:
    """(K in units per request, partitions, their labels): the shallow pass over `prefixes`
    (at least the first K = `shard_tokens` units of every request) first, then the shards of
    its groups, about `PARTITIONS_PER_WORKER` x `num_workers` of them."""
    k = shard_tokens
    limit = unit_limits(meta.block_size, k)
    flat, offsets = truncate(*prefixes, limit)
    roots = group_roots(meta.ns_any, flat, offsets, limit)
    tasks = match_tasks(meta, roots, num_workers * PARTITIONS_PER_WORKER, options, k)
    first = ShallowTask(meta, flat, offsets, k, replace(options, progress=None), junctions)
    total = len(tasks) + 1
    labels = [f"match partition 1/{total} (the first {k} tokens of {meta.n:,} requests)"]
    labels += [task_label(t, i + 1, total) for i, t in enumerate(tasks)]
    return limit, [first, *tasks], labels


def merged_answers(n: int, limit: np.ndarray, parts: list[dict[str, pa.Table]]) -> MatchArrays:
    """The answers of the shallow pass (`parts[0]`) and the shards, combined."""
    arrays = combine(merge_arrays(n, parts[:1]), merge_arrays(n, parts[1:]), limit)
    arrays.path = matchers_said(parts)
    return arrays


def task_label(task: MatchTask, k: int, total: int) -> str:
    units = int(task.meta.insert_len.sum())
    return f"match partition {k + 1}/{total} ({task.ids.size:,} requests, {units:,} units)"


def match_local(source: PartitionSource, task: MatchTask) -> dict[str, pa.Table]:
    """Match one partition's `source` (local indices) and map answers to global ones;
    junctions at depth >= K only (the shallow pass has the others)."""
    if not np.array_equal(np.diff(source.offsets), task.meta.insert_len):
        raise StoreError("requests changed while `hpa match` was reading them; run it again")
    # The source is in memory: an archive of one chunk is enough (memory only, never a result).
    options = replace(task.options, archive_tokens=task.options.chunk_tokens)
    result = compute(source, xp=np, options=options)
    limit = unit_limits(task.meta.block_size, task.shard_tokens)
    j, rows, path_junctions = keep_deep(result.junctions, result.path_junctions, limit)
    raw = junction_ids(
        j.owner, j.depth, task.meta.ns_any[j.owner], task.meta.namespaces, Archive(source, 0).fetch
    )
    path_requests = result.path_requests[rows]
    return part_tables(task.ids, result.arrays, j, raw, path_requests, path_junctions)


def match_in_memory(shared: tuple[np.ndarray, np.ndarray], task: MatchTask | ShallowTask):
    """Worker of an in-memory sharded match: the views only (the replay needs no junctions)."""
    if isinstance(task, ShallowTask):
        return task.run()
    flat, offsets = take_sequences(shared[0], shared[1], task.ids)
    arrays = run_matcher(MemorySource(task.meta, flat, offsets), xp=np, options=task.options)
    return answers_only(task.ids, arrays)


def answers_only(ids: np.ndarray, arrays: MatchArrays) -> dict[str, pa.Table]:
    """A partition's tables without junctions (the replay's L1/L2)."""
    none = np.zeros(0, dtype=np.int64)
    return part_tables(ids, arrays, Junctions(none, none, none, none), [], none, none)
