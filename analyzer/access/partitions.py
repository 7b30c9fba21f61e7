"""The replay's cache partitions on an executor.

Routing is one ordered pass over the trace and stays on the driver; after it, every
(model revision, replica) partition replays its own cache in arrival order, independent of
the others. A partition's per-request results come back as an Arrow table (SimResult's
fields as columns) and the driver puts them back in arrival order.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa

from analyzer.access.trace import Trace
from analyzer.access.workers import map_partitions
from analyzer.executors import ExecutorSpec, Progress
from analyzer.sim.records import SimResult


@dataclass(frozen=True)
class ReplayShared:
    """What every partition's replay reads (put once in Ray's object store)."""

    trace: Trace
    policy: Any
    namespaces: list
    replayer: Any
    num_groups: dict | None


def replay_partition(shared: ReplayShared, item: list[list[int]]) -> pa.Table:
    """Worker: replay the (model revision, replica) partitions of `item` (lists of request
    indices); one row per request, in the item's order."""
    return results_table(replay_item(shared, item))


def replay_item(shared: ReplayShared, item: list[list[int]]) -> list[SimResult]:
    """The SimResults of `item`'s partitions, in the item's order (one read of a dataset for
    all of the item's rows)."""
    ns = shared.namespaces
    rows, local = shared.trace.partition([i for indices in item for i in indices])
    out: list[SimResult] = []
    start = 0
    for indices in item:
        at = local[start : start + len(indices)]
        start += len(indices)
        requests = [rows.sim_request(k, ns[i]) for k, i in zip(at, indices, strict=True)]
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
    `progress(requests replayed, requests)` is called as they are: in this process every
    PROGRESS_REQUESTS requests, elsewhere as each task finishes."""
    keys = list(members)
    bins = shared.trace.replay_bins([len(members[k]) for k in keys], spec)
    items = [[members[keys[k]] for k in b] for b in bins]
    labels = [_label(keys, members, b, len(keys)) for b in bins]
    sizes = [sum(len(indices) for indices in item) for item in items]
    if spec.is_local:
        # In this process the results need no Arrow round trip (nor do stateful replayers),
        # and progress can count requests inside a partition (one cache is one partition).
        if progress is not None:
            shared = replace(shared, replayer=_counting(shared.replayer, progress, sum(sizes)))
        parts = map_partitions(spec, replay_item, items, labels=labels, shared=shared)
    else:
        parts = map_partitions(
            spec, replay_partition, items, labels=labels, shared=shared, progress=progress,
            weights=sizes,
        )  # fmt: skip
    results: list[SimResult | None] = [None] * shared.trace.n
    for item, part in zip(items, parts, strict=True):
        replayed = part if spec.is_local else results_from_table(part)
        indices = [i for idx in item for i in idx]
        for i, result in zip(indices, replayed, strict=True):
            results[i] = result
    return results


PROGRESS_REQUESTS = 64


def _counting(replayer, progress: Progress, total: int):
    """`replayer` that calls `progress(requests replayed, total)` every PROGRESS_REQUESTS."""
    done = [0]

    def counted(requests, policy, **options):
        for result in replayer(requests, policy, **options):
            done[0] += 1
            if done[0] % PROGRESS_REQUESTS == 0 or done[0] == total:
                progress(done[0], total)
            yield result

    return counted


def _label(keys: list[tuple], members: dict, chosen: list[int], total: int) -> str:
    names = ", ".join(
        f"{k + 1}/{total} (model revision {keys[k][0]!r}, replica {keys[k][1]!r}, "
        f"{len(members[keys[k]]):,} requests)"
        for k in chosen
    )
    return f"replay partition{'s' if len(chosen) > 1 else ''} {names}"
