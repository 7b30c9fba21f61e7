"""`hpa replay`: route, match, replay each (model revision, replica) partition, account.

Stages: requests (store) -> routing (sim.routing) -> shared prefixes L1/L2
(replay_prefixes) -> the cache replay per partition (sim) -> the waterfall (metrics) ->
tables (replay_store).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from analyzer.errors import StoreError
from analyzer.executors import LOCAL, ExecutorSpec, as_spec
from analyzer.metrics.waterfall import build_levels
from analyzer.replay_prefixes import shared_prefixes
from analyzer.replay_store import (  # noqa: F401  (re-exported: replay's public names)
    VERSION,
    ReplayOutcome,
    check_measure_from,
    side_by_side,
    store_run,
)
from analyzer.sim.policy import Policy, load_model
from analyzer.sim.records import SimRequest
from analyzer.sim.replay import hit_alignment, replay
from analyzer.sim.routing import route
from analyzer.store.db import DEFAULT_DB, connect, load_sql, query_arrow, require_tables


@dataclass
class _Trace:
    """The stored requests as columns (arrival order) plus per-request token arrays."""

    columns: dict[str, list]
    prompts: list[np.ndarray]  # token ids, or block hash ids for hash-id requests
    outputs: list[np.ndarray | None]

    @property
    def n(self) -> int:
        return len(self.prompts)

    def __getstate__(self) -> dict:  # for workers: a few flat buffers, not an object a row
        from analyzer.executors.replay import pack_arrays

        return {
            "columns": self.columns,
            "prompts": pack_arrays(self.prompts),
            "outputs": pack_arrays(self.outputs),
        }

    def __setstate__(self, state: dict) -> None:
        from analyzer.executors.replay import unpack_arrays

        self.columns = state["columns"]
        self.prompts = unpack_arrays(state["prompts"])
        self.outputs = unpack_arrays(state["outputs"])


def run_replay(
    policy: Policy,
    *,
    db_path: str | Path = DEFAULT_DB,
    out: str | Path | None = None,
    progress: Callable[[int, int], None] | None = None,
    measure_from: float = 0.0,
    executor: ExecutorSpec | str | None = None,
    dataset: str | Path | None = None,
) -> ReplayOutcome:
    """Replay the stored trace under `policy`; store and return the run.

    `progress(partitions done, total)` is called after each (revision, replica) partition.
    `executor` (analyzer.executors) runs the partitions and the L1/L2 matcher shards;
    tables are identical for every executor. `dataset`: read the requests from a Parquet
    dataset (analyzer.executors.dataset) instead of the store's `requests` table.
    `measure_from` (0 <= f < 1): warm-up exclusion. Every request replays, but only those
    with arrival index >= floor(f * n) are `measured` (replay_requests.measured) and counted
    in replay_summary and in replay_runs' prompt/hit totals.

    Raises:
        StoreError: no database or no requests. ConfigError: a policy the trace cannot
            be replayed under (e.g. a match unit finer than a hash-id trace's blocks).
    """
    check_measure_from(measure_from)
    spec = as_spec(executor)
    con, fingerprint = _open_trace(db_path, dataset)
    try:
        if dataset is None:
            trace = load_trace(con)
        else:  # the driver holds no token ids; workers read their partitions' rows
            from analyzer.executors.replay import load_lazy_trace

            trace = load_lazy_trace(con, str(Path(dataset).resolve()))
        started = time.perf_counter()
        rows = _replay_rows(trace, policy, progress=progress, executor=spec)
        seconds = time.perf_counter() - started
        return store_run(
            con,
            policy,
            rows,
            seconds,
            trace.n,
            out=out,
            measure_from=measure_from,
            fingerprint=fingerprint,
        )
    finally:
        con.close()


def _open_trace(db_path, dataset) -> tuple:
    """(connection whose `requests` is the trace, its fingerprint or None for the store's)."""
    if dataset is None:
        return connect(db_path, create=False), None
    from analyzer.executors.dataset import fingerprint, open_dataset, register_requests

    data = open_dataset(dataset)
    con = connect(db_path, create=True)
    register_requests(con, data)
    return con, fingerprint(dataset)


def load_trace(con) -> _Trace:
    """The stored requests of an open connection, loaded once (for sweeps over policies)."""
    require_tables(con, "requests")
    trace = _load(con)
    if trace.n == 0:
        raise StoreError("no requests in the database; run `hpa ingest FILE` first")
    return trace


def _load(con) -> _Trace:
    table = query_arrow(con, load_sql("replay_load"))
    columns = {
        name: table.column(name).to_pylist()
        for name in table.column_names
        if name not in ("prompt_token_ids", "block_hash_ids", "output_token_ids")
    }
    prompts = _arrays(table.column("prompt_token_ids"), table.column("block_hash_ids"))
    outputs = _arrays(table.column("output_token_ids"), None)
    return _Trace(columns, prompts, outputs)


def _arrays(primary: pa.ChunkedArray, fallback: pa.ChunkedArray | None) -> list:
    """One numpy array (or None) per row from list columns, without per-token Python."""
    out = []
    for i, chunk in enumerate(primary.chunks):
        other = fallback.chunks[i] if fallback is not None else None
        out.extend(_chunk_arrays(chunk, other))
    return out


def _chunk_arrays(chunk: pa.ListArray, other: pa.ListArray | None) -> list:
    values = chunk.values.to_numpy(zero_copy_only=False)
    offsets = chunk.offsets.to_numpy()
    valid = chunk.is_valid().to_numpy(zero_copy_only=False)
    if other is not None:
        o_values = other.values.to_numpy(zero_copy_only=False)
        o_offsets = other.offsets.to_numpy()
    result = []
    for i in range(len(chunk)):
        if valid[i]:
            result.append(values[offsets[i] : offsets[i + 1]])
        elif other is not None and other[i].is_valid:
            result.append(o_values[o_offsets[i] : o_offsets[i + 1]])
        else:
            result.append(None)
    return result


def _namespaces(trace: _Trace) -> list[tuple]:
    c = trace.columns
    return [
        (bs, salt, lora)
        for bs, salt, lora in zip(c["block_size"], c["cache_salt"], c["lora_name"], strict=True)
    ]


def routed_partitions(trace: _Trace, policy: Policy) -> tuple[list, list[str], list[tuple]]:
    """Per request: its cache namespace, its routed replica, and its (model revision,
    replica) partition, the unit that replays on its own."""
    c = trace.columns
    ns = _namespaces(trace)
    replicas = route(
        policy.routing,
        policy.replicas,
        trace_replicas=c["replica"],
        conversation_ids=c["conversation_id"],
        sequences=trace.prompts,
        namespaces=ns,
        unit_tokens=policy.hash_block_tokens,
    )
    partitions = list(zip(c["model_revision"], replicas, strict=True))
    return ns, replicas, partitions


def _replay_rows(
    trace: _Trace, policy: Policy, replayer=None, progress=None, executor=None
) -> dict[str, np.ndarray | list]:
    """Per-request rows of one replay. `replayer(requests, policy, num_groups)` replaces the
    cache replay of one partition (default `sim.replay.replay`; the sweep's one-pass curve).
    `executor` runs the partitions (default: in this process)."""
    c = trace.columns
    spec = as_spec(executor)
    ns, replicas, partitions = routed_partitions(trace, policy)
    shared_any, shared_replica = shared_prefixes(trace, ns, partitions, spec)
    results = _replay_partitions(
        trace, policy, ns, partitions, replayer or replay, progress, executor=spec
    )
    prompt_tokens = np.asarray(c["prompt_tokens"], dtype=np.int64)
    levels = build_levels(
        prompt_tokens=prompt_tokens,
        shared_any_tokens=shared_any,
        shared_replica_tokens=shared_replica,
        align_tokens=hit_alignment(policy),
        attention_match_tokens=[r.attention_match_tokens for r in results],
        sparse_retention_miss_tokens=[r.sparse_retention_miss_tokens for r in results],
        hit_tokens=[r.hit_tokens for r in results],
    )
    rows = {
        "arrival_seq": c["arrival_seq"],
        "request_id": c["request_id"],
        "prompt_family": c["prompt_family"],
        "model_revision": c["model_revision"],
        "replica": replicas,
        "timestamp_s": c["timestamp_s"],
        "prompt_tokens": prompt_tokens,
        "shared_any_tokens": levels.shared_any_tokens,
        "shared_replica_tokens": levels.shared_replica_tokens,
        "matchable_tokens": levels.matchable_tokens,
        "attention_match_tokens": levels.attention_match_tokens,
    }
    for name in (
        "sparse_retention_miss_never_kept_tokens",
        "sparse_retention_miss_evicted_tokens",
        "junction_tokens",
    ):
        rows[name] = np.asarray([getattr(r, name) for r in results], dtype=np.int64)
    rows["replay_tokens"] = np.asarray([r.replay_tokens for r in results], dtype=np.int64)
    rows["error"] = [r.error for r in results]
    rows["note"] = [r.note for r in results]
    rows.update(levels.causes())
    rows["fresh_prefill_tokens"] = prompt_tokens - levels.hit_tokens
    return rows


def _replay_partitions(
    trace: _Trace, policy: Policy, ns, partitions, replayer=replay, progress=None, executor=LOCAL
) -> list:
    """Per request: its SimResult; the (revision, replica) partitions run on `executor`."""
    from analyzer.executors.replay import ReplayShared, replay_partitions

    members: dict[tuple, list[int]] = {}
    for i, key in enumerate(partitions):
        members.setdefault(key, []).append(i)
    shared = ReplayShared(trace, policy, ns, replayer, _num_groups(policy))
    return replay_partitions(executor, shared, members, progress)


def _num_groups(policy: Policy) -> dict[str, int] | None:
    """KV-cache groups per type from the model preset (they share the pool's blocks)."""
    if policy.model is None:
        return None
    preset = load_model(policy.model)["num_groups"]
    return {group: preset.get(group, 1) for group in policy.groups}


def _sim_request(trace: _Trace, i: int, namespace: tuple) -> SimRequest:
    c = trace.columns
    if c["block_size"][i] is not None:
        return SimRequest(
            request_id=c["request_id"][i],
            block_hash_ids=trace.prompts[i],
            trace_block_size=c["block_size"][i],
            prompt_tokens=c["prompt_tokens"][i],
            output_tokens=c["output_tokens"][i] or 0,
            namespace=namespace,
        )
    return SimRequest(
        request_id=c["request_id"][i],
        prompt_token_ids=trace.prompts[i],
        output_token_ids=trace.outputs[i],
        output_tokens=c["output_tokens"][i] or 0,
        namespace=namespace,
    )
