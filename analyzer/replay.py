"""`hpa replay`: route, match, replay each (model revision, replica) partition, account.

Stages: requests (store) -> routing (sim.routing) -> shared prefixes L1/L2 (prefixes)
-> the cache replay per partition (sim) -> the waterfall (metrics) -> tables (store).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from analyzer.errors import ConfigError, StoreError
from analyzer.executors import LOCAL, ExecutorSpec, as_spec
from analyzer.metrics.waterfall import build_levels
from analyzer.prefixes.engine import MatchOptions, run_matcher
from analyzer.prefixes.memory import MemorySource
from analyzer.prefixes.source import RequestMeta
from analyzer.sim.policy import Policy, load_model
from analyzer.sim.records import SimRequest
from analyzer.sim.replay import hit_alignment, replay
from analyzer.sim.routing import route
from analyzer.store.db import DEFAULT_DB, connect, load_sql, query_arrow, require_tables
from analyzer.store.export import export_table

VERSION = "0.1.0"


@dataclass(frozen=True)
class ReplayOutcome:
    run_id: int
    num_requests: int
    summary: pa.Table
    seconds: float
    num_errors: int  # requests vLLM could not schedule at all (pool too small)


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


def check_measure_from(fraction: float) -> float:
    """`fraction` if it is a valid --measure-from (0 <= f < 1), else a one-line ConfigError."""
    if isinstance(fraction, bool) or not isinstance(fraction, int | float) or not 0 <= fraction < 1:
        raise ConfigError(f"--measure-from: expected a fraction 0 <= f < 1, got {fraction!r}")
    return float(fraction)


def store_run(
    con,
    policy: Policy,
    rows: dict,
    seconds: float,
    n: int,
    *,
    out: str | Path | None = None,
    measure_from: float = 0.0,
    fingerprint: str | None = None,
) -> ReplayOutcome:
    """Store replay rows (from `_replay_rows`) as a normal run and return its outcome.

    Rows are in arrival order; those before floor(measure_from * n) are warm-up (not measured).
    """
    check_measure_from(measure_from)
    count = len(rows["request_id"])
    rows = {**rows, "measured": np.arange(count) >= int(np.floor(measure_from * count))}
    run_id = _store(con, policy, rows, seconds, measure_from, fingerprint)
    summary = query_arrow(
        con,
        "SELECT * EXCLUDE (run_id) FROM replay_summary "
        "WHERE run_id = ? ORDER BY prompt_tokens DESC, "
        "prompt_family, model_revision",
        [run_id],
    )
    if out is not None:
        export_table(
            con,
            "SELECT * EXCLUDE (run_id) FROM replay_requests WHERE run_id = "
            f"{int(run_id)} ORDER BY arrival_seq",
            out,
        )
    num_errors = sum(e is not None for e in rows["error"])
    return ReplayOutcome(run_id, n, summary, seconds, num_errors)


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
    shared_any, shared_replica = _shared_prefixes(trace, ns, partitions, spec)
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
    rows.update(levels.causes())
    rows["fresh_prefill_tokens"] = prompt_tokens - levels.hit_tokens
    return rows


def _shared_prefixes(trace: _Trace, ns: list[tuple], partitions: list[tuple], spec=LOCAL):
    """L1 (any earlier request, same namespace) and L2 (+ same revision and replica), tokens.

    An earlier request offers the tokens whose KV it computed: its prompt and its output
    but the last output token, which is sampled and never fed back (so never cached).
    """
    ns_any = _dense(ns)
    ns_replica = _dense([(a, b) for a, b in zip(ns, partitions, strict=True)])
    if not isinstance(trace, _Trace):  # a dataset (executors.replay.LazyTrace)
        from analyzer.executors.replay import lazy_shared_prefixes

        found = lazy_shared_prefixes(trace, ns_any, ns_replica, spec)
        return _to_tokens(found, trace)
    lens_q = np.asarray([len(p) for p in trace.prompts], dtype=np.int64)
    inserted = [
        p
        if trace.columns["block_size"][i] is not None or trace.outputs[i] is None
        else np.concatenate([p, trace.outputs[i][:-1]])
        for i, p in enumerate(trace.prompts)
    ]
    lens_i = np.asarray([len(s) for s in inserted], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lens_i)]).astype(np.int64)
    flat = np.concatenate(inserted).astype(np.int64) if inserted else np.zeros(0, np.int64)
    block = np.asarray([b or 0 for b in trace.columns["block_size"]], dtype=np.int64)
    prompt_tokens = np.asarray(trace.columns["prompt_tokens"], dtype=np.int64)
    meta = RequestMeta(
        ns_any=ns_any,
        ns_replica=ns_replica,
        ns_conversation=np.full(trace.n, -1, dtype=np.int64),
        query_len=lens_q,
        insert_len=lens_i,
        block_size=block,
        prompt_tokens=prompt_tokens,
    )
    if spec.is_local:
        found = run_matcher(MemorySource(meta, flat, offsets), xp=np, options=MatchOptions())
    else:  # sharded by first unit: identical answers (analyzer.executors.match)
        from analyzer.executors.match import shared_units
        from analyzer.executors.replay import first_units

        found = shared_units(meta, first_units(trace.prompts), flat, offsets, spec)
    return _to_tokens(found, trace)


def _to_tokens(found, trace) -> tuple[np.ndarray, np.ndarray]:
    """Matched units -> tokens (hash-id blocks x block size, capped at the prompt)."""
    block = np.asarray([b or 0 for b in trace.columns["block_size"]], dtype=np.int64)
    prompt_tokens = np.asarray(trace.columns["prompt_tokens"], dtype=np.int64)
    unit = np.where(block > 0, block, 1)
    return (
        np.minimum(found.shared_any * unit, prompt_tokens),
        np.minimum(found.shared_replica * unit, prompt_tokens),
    )


def _dense(keys: list) -> np.ndarray:
    ids: dict = {}
    return np.asarray([ids.setdefault(k, len(ids)) for k in keys], dtype=np.int64)


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


def _fingerprint(con) -> str:
    sources, num = con.execute(load_sql("trace_fingerprint")).fetchall()[0]
    return hashlib.sha256(f"{sources}|{num}".encode()).hexdigest()


def _store(
    con, policy: Policy, rows: dict, seconds: float, measure_from: float = 0.0, fingerprint=None
) -> int:
    con.execute(load_sql("replay_schema"))
    measured = np.asarray(rows["measured"], dtype=bool)
    run_id = con.execute("SELECT coalesce(max(run_id), 0) + 1 FROM replay_runs").fetchall()[0][0]
    table = pa.table(
        {
            "run_id": pa.array([run_id] * len(rows["request_id"]), pa.int32()),
            **{k: pa.array(v) for k, v in rows.items()},
        }
    )
    con.register("replay_rows", table)
    con.execute("INSERT INTO replay_requests BY NAME SELECT * FROM replay_rows")
    con.unregister("replay_rows")
    con.execute(load_sql("replay_summary"), {"run_id": run_id})
    con.execute(
        "INSERT INTO replay_runs (run_id, policy, trace_fingerprint, num_requests, "
        "prompt_tokens, hit_tokens, replay_seconds, created_at, hpa_version, measure_from) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, current_timestamp, ?, ?)",
        [
            run_id,
            policy.to_json(),
            fingerprint or _fingerprint(con),
            len(rows["request_id"]),
            int(np.sum(np.asarray(rows["prompt_tokens"])[measured])),
            int(np.sum(np.asarray(rows["hit_tokens"])[measured])),
            seconds,
            VERSION,
            measure_from,
        ],
    )
    return run_id


def side_by_side(names: list[str], outcomes: list[ReplayOutcome]) -> pa.Table:
    """One row per replayed policy (measured requests only): the SPEC 3 headline figures."""
    out: dict[str, list] = {
        "policy": [],
        "run_id": [],
        "prompt_tokens": [],
        "hit_tokens": [],
        "sparse_retention_miss_tokens": [],
        "replay_tokens": [],
        "useful_hit_ratio": [],
        "sparse_loss_ratio": [],
    }
    for name, outcome in zip(names, outcomes, strict=True):
        s = outcome.summary
        prompt = sum(s.column("prompt_tokens").to_pylist())
        hit = sum(s.column("hit_tokens").to_pylist())
        miss = sum(s.column("sparse_retention_miss_tokens").to_pylist())
        out["policy"].append(name)
        out["run_id"].append(outcome.run_id)
        out["prompt_tokens"].append(prompt)
        out["hit_tokens"].append(hit)
        out["sparse_retention_miss_tokens"].append(miss)
        out["replay_tokens"].append(sum(s.column("replay_tokens").to_pylist()))
        out["useful_hit_ratio"].append(hit / prompt if prompt else 0.0)
        out["sparse_loss_ratio"].append(miss / prompt if prompt else 0.0)
    return pa.table(out)
