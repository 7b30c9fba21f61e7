"""A sharded match's partition tables and how the driver merges them into one result.

Each partition (a shard of whole groups, or the driver's shallow pass) reports its answers
and junctions as Arrow tables in global arrival indices (`part_tables`). The answers are
combined per view by the rule of `analyzer.prefixes.shallow` (`combine`); junctions are
concatenated (a shard keeps only those at depth >= K, `keep_deep`; the shallow pass has
only shallower ones) and sorted by (owner, depth), as one whole pass lists them.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from analyzer.errors import StoreError
from analyzer.prefixes.engine import MatchArrays
from analyzer.prefixes.junctions import Junctions
from analyzer.prefixes.labels import dedupe

JUNCTION_COLUMNS = ("owner", "depth", "num_branches", "num_diverging")
ANSWERS = (
    "shared_any",
    "parent",
    "shared_replica",
    "shared_conversation",
    "insert_shared",
    "insert_parent",
)


def _glob(ids: np.ndarray, local: np.ndarray) -> np.ndarray:
    return np.where(local >= 0, ids[np.maximum(local, 0)], -1)


def part_tables(ids, a: MatchArrays, j: Junctions, raw, path_requests, path_junctions) -> dict:
    """A partition's answers, junctions and paths; `ids`: its requests' arrival indices."""
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
        "matched_by": pa.table({"path": pa.array([a.path], pa.string())}),
    }


def matchers_said(parts: list[dict[str, pa.Table]]) -> str:
    """The matchers the partitions ran (`MatchArrays.path`), in one phrase: the one all
    ran ('the C radix trees'), else each with how many partitions ran it, in the order
    they first ran ('the C radix trees in 2 and numpy in 3', which the caller ends with
    ' of 5 partitions ...')."""
    counts: dict[str, int] = {}
    for part in parts:
        path = part["matched_by"].column("path")[0].as_py()
        counts[path] = counts.get(path, 0) + 1
    if len(counts) == 1:
        return next(iter(counts))
    said = [f"{path} in {k}" for path, k in counts.items()]
    return ", ".join(said[:-1]) + " and " + said[-1]


def keep_deep(j: Junctions, path_junctions: np.ndarray, limit: np.ndarray):
    """A shard's junctions at depth >= `limit` of their owner (K in units; local indices)
    and (which path rows to keep, their junctions' new indices)."""
    keep = j.depth >= limit[j.owner]
    new_index = np.cumsum(keep) - 1
    rows = keep[path_junctions] if path_junctions.size else np.zeros(0, dtype=bool)
    deep = Junctions(*(getattr(j, c)[keep] for c in JUNCTION_COLUMNS))
    return deep, rows, new_index[path_junctions[rows]]


def merge_arrays(n: int, parts: list[dict[str, pa.Table]]) -> MatchArrays:
    """Every partition's answers in arrival order (-1 for requests in no partition)."""
    cols = {name: np.full(n, -1, dtype=np.int64) for name in ANSWERS}
    for part in parts:
        rows = part["requests"]
        ids = rows.column("arrival_seq").to_numpy()
        for name, values in cols.items():
            values[ids] = rows.column(name).to_numpy()
    fallbacks = sum(p["exact_fallbacks"].column("n")[0].as_py() for p in parts)
    return MatchArrays(**cols, exact_fallbacks=fallbacks, archive_rereads=0)


def combine(shallow: MatchArrays, deep: MatchArrays, limit: np.ndarray) -> MatchArrays:
    """Per view and answer: the shallow pass's, unless it reached K (`limit`, units), then
    the shard's (see `analyzer.prefixes.shallow`)."""

    def pick(short: str, *names: str) -> dict[str, np.ndarray]:
        reached = getattr(shallow, short) == limit
        if np.any(getattr(deep, short)[reached] < limit[reached]):  # never, unless rewritten
            raise StoreError("requests changed while `hpa match` was reading them; run it again")
        return {k: np.where(reached, getattr(deep, k), getattr(shallow, k)) for k in names}

    return MatchArrays(
        **pick("shared_any", "shared_any", "parent"),
        **pick("shared_replica", "shared_replica"),
        **pick("shared_conversation", "shared_conversation"),
        **pick("insert_shared", "insert_shared", "insert_parent"),
        exact_fallbacks=shallow.exact_fallbacks + deep.exact_fallbacks,
        archive_rereads=0,
    )


def merge_junctions(
    parts: list[dict[str, pa.Table]],
) -> tuple[Junctions, np.ndarray, np.ndarray, list[str]]:
    """(junctions sorted by (owner, depth), path requests, path junctions, junction ids)."""
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
    none = np.zeros(0, np.int64)
    return (
        Junctions(*(take(c) for c in JUNCTION_COLUMNS)),
        np.concatenate(path_req).astype(np.int64) if path_req else none,
        np.concatenate(path_j).astype(np.int64) if path_j else none,
        dedupe([raw[i] for i in order]),
    )
