"""`hpa replay`: route, match, replay each (model revision, replica) partition, account.

Stages, for a static router: requests (`access.inputs`, `access.trace`) -> routing
(sim.routing) -> shared prefixes L1/L2 (`access.shared_prefixes`) -> the cache replay per
partition (sim, on an executor: `access.partitions`) -> the waterfall (metrics) -> tables
(store.runs). A live router (`Policy.live_routing`) decides as requests arrive: one fleet per
model revision replays on one clock (`sim.fleet`), and L2 follows from where each request
was actually sent.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from analyzer.access.geometry import fit_policy
from analyzer.access.inputs import request_input
from analyzer.access.partitions import ReplayShared, replay_partitions
from analyzer.access.shared_prefixes import shared_prefixes
from analyzer.access.trace import Trace
from analyzer.config.engines import engine
from analyzer.config.host_tier import NEVER_STORED
from analyzer.config.models import load_model
from analyzer.config.policy import Policy
from analyzer.executors import LOCAL, ExecutorSpec, as_spec
from analyzer.metrics.outcome import outcome_line
from analyzer.metrics.waterfall import build_levels, sparse_split_net
from analyzer.sim.dispatch import hit_alignment, load_policy, replay, replay_from_shared
from analyzer.sim.fleet import replay_fleet
from analyzer.sim.records import ResultColumns, SimResult, result_columns
from analyzer.sim.routing import route
from analyzer.store.caveats import block_size_caveat, cut_caveat, timestamp_caveats
from analyzer.store.db import (
    DEFAULT_DB,
    open_to_store,
    stored_trace_block,
    trace_fingerprint,
    transaction,
)
from analyzer.store.export import check_export_path
from analyzer.store.host_tier import has_host_tier
from analyzer.store.runs import ReplayOutcome, check_measure_from, check_name, store_run


def run_replay(
    policy: Policy,
    *,
    db_path: str | Path = DEFAULT_DB,
    out: str | Path | None = None,
    progress: Callable[[int, int], None] | None = None,
    measure_from: float = 0.0,
    executor: ExecutorSpec | str | None = None,
    dataset: str | Path | None = None,
    name: str | None = None,
    session: ReplaySession | None = None,
) -> ReplayOutcome | None:
    """Replay the stored trace under `policy`; store and return the run (`name`: what the
    report calls it; default: its engine and what its policy changes). Within a `session`
    (`replay_session`) the run is stored with the session's other runs, all or none, when
    the session ends (its outcome then in `session.outcomes`; this returns None).

    `progress(requests replayed, requests)` is called as they replay (analyzer.pipeline.
    partitions: every 64 in this process, as each partition finishes elsewhere).
    `executor` (analyzer.executors) runs the partitions and the L1/L2 matcher shards;
    tables are identical for every executor. `dataset`: read the requests from a Parquet
    dataset (analyzer.store.dataset) instead of the store's `requests` table; the driver
    then holds no token ids (a DatasetTrace) and workers read their partitions' rows.
    `measure_from` (0 <= f < 1): warm-up exclusion. Every request replays, but only those
    with arrival index >= floor(f * n) are `measured` (replay_requests.measured) and counted
    in replay_summary and in replay_runs' prompt/hit totals.

    Raises:
        StoreError: no database or no requests. ConfigError: a policy the trace cannot
            be replayed under (e.g. a match unit finer than a hash-id trace's blocks).
    """
    check_measure_from(measure_from)
    check_name(name)
    if out is not None:
        check_export_path(out)  # a bad suffix or a missing folder, before the replay
    spec = as_spec(executor)
    if session is None:
        with replay_session(db_path, dataset) as own:
            run_replay(policy, out=out, progress=progress, measure_from=measure_from,
                       executor=spec, name=name, session=own)  # fmt: skip
        return own.outcomes[0]
    con = session.con
    # the geometry first: a policy the trace cannot express fails before it loads
    policy, fitted = fit_policy(policy, stored_trace_block(con))
    mixed = block_size_caveat(con)
    cut = cut_caveat(con)  # prompts a server log may have cut: hits are a lower bound
    trace = session.source.driver_trace(con, stream=streams_tokens(policy, spec))
    started = time.perf_counter()
    rows = replay_rows(trace, policy, progress=progress, executor=spec)
    seconds = time.perf_counter() - started
    # arrival times drive a concurrent replay: say which of them an adapter made
    timed = timestamp_caveats(con) if policy.schedule == "concurrent" else []
    n, fingerprint = trace.n, session.source.fingerprint

    def store(writer) -> ReplayOutcome:
        outcome = store_run(
            writer,
            policy,
            rows,
            seconds,
            n,
            out=out,
            measure_from=measure_from,
            fingerprint=fingerprint,
            name=name,
        )
        notes = (*([mixed] if mixed else []), *([fitted] if fitted else []), *outcome.notes,
                 *timed, *([cut] if cut else []))  # fmt: skip
        return replace(outcome, notes=notes, num_caches=num_caches(policy, rows))

    session.pending.append(store)
    return None


@dataclass(frozen=True)
class ReplaySession:
    """Several replays of one command, computed on one connection and stored as one write:
    `pending` stores each run on the writable connection, `outcomes` what they stored."""

    source: object
    con: object
    pending: list = field(default_factory=list)
    outcomes: list = field(default_factory=list)


@contextmanager
def replay_session(
    db_path: str | Path = DEFAULT_DB, dataset: str | Path | None = None
) -> Iterator[ReplaySession]:
    """The runs of `hpa replay --policy a,b,...`, replayed in the block and stored when it
    ends, in one transaction: every run is stored, or (an error, a kill) none is. The
    store's own trace is read on a read-only connection, on which the store is attached
    again writable to store the runs (`open_to_store`): the store stays open to readers
    (`hpa query`) while the runs replay. A dataset's runs go to a store opened writable
    throughout (it may have to be created)."""
    source = request_input(db_path, dataset)
    stored = not source.is_dataset
    con = source.connect()
    try:
        read_from = trace_fingerprint(con)[0] if stored else None
        session = ReplaySession(source, con)
        yield session
        writer = open_to_store(db_path, read_from, reader=con) if stored else con
        try:
            with transaction(writer):
                session.outcomes.extend(store(writer) for store in session.pending)
        finally:
            writer.close()
    finally:
        con.close()


@dataclass(frozen=True)
class ReplaySetup:
    """What a replay resolves once from its policy, so that no stage asks again: KV-cache
    groups per type (the model preset), the alignment every hit is a multiple of, the
    closed form of its results (None: requests replay one by one) and whether its router is
    live (one fleet per model revision on one clock)."""

    policy: Policy
    num_groups: dict[str, int] | None
    align_tokens: int
    closed: Callable | None
    live: bool


@functools.lru_cache(maxsize=64)
def replay_setup(policy: Policy) -> ReplaySetup:
    """The setup of `policy` (kept for the policies a sweep or a plan replays again)."""
    groups = num_groups(policy)
    live = policy.live_routing
    closed = None if live else replay_from_shared(policy, num_groups=groups)
    return ReplaySetup(policy, groups, hit_alignment(policy), closed, live)


def streams_tokens(policy: Policy, spec: ExecutorSpec) -> bool:
    """Whether a replay in this process needs no token id once L1/L2 are known: its results
    follow from them (`replay_from_shared`) and no routing reads prompts. Its driver may
    then stream the ids through the matcher instead of holding them (`access.streamed`)."""
    return (
        spec.is_local
        and policy.routing != "prefix_aware"
        and replay_setup(policy).closed is not None
    )


def cache_keys(policy: Policy, revisions, replicas) -> list[tuple]:
    """Per request, the cache it replays in: (model revision, replica), or (None, replica)
    under cache_scope shared (one cache for every revision on a replica)."""
    if policy.cache_scope == "shared":
        revisions = [None] * len(revisions)
    return list(zip(revisions, replicas, strict=True))


def num_caches(policy: Policy, rows: dict) -> int:
    """The pools a replay's rows went through (memory figures are per pool)."""
    return len(set(cache_keys(policy, rows["model_revision"], rows["replica"])))


def _cached_ever(policy: Policy, results: ResultColumns) -> list[int] | None:
    """What the earlier requests had cached of each prompt, where the replay knows it: its
    own record (a bounded vLLM pool with sub-block hits); else, in an unbounded pool of an
    engine that keeps all it computes, nothing was evicted, so what full attention had
    resident is all that was ever cached (None elsewhere)."""
    kept = results["cached_ever_tokens"]
    if len(kept) and all(v is not None for v in kept):
        return kept  # the replay kept a record
    if policy.num_blocks is not None or not engine(policy.engine).keeps_computed:
        return None
    return results["attention_match_tokens"]


def namespaces(trace: Trace) -> list[tuple]:
    c = trace.columns
    return [
        (bs, salt, lora)
        for bs, salt, lora in zip(c["block_size"], c["cache_salt"], c["lora_name"], strict=True)
    ]


def routed_partitions(trace: Trace, policy: Policy) -> tuple[list, list[str], list[tuple]]:
    """Per request: its cache namespace, its routed replica, and its (model revision,
    replica) partition, the unit that replays on its own."""
    c = trace.columns
    ns = namespaces(trace)
    replicas = route(
        policy.routing,
        policy.replicas,
        trace_replicas=c["replica"],
        conversation_ids=c["conversation_id"],
        sequences=trace.prompts,
        namespaces=ns,
        unit_tokens=policy.hash_block_tokens,
        item_tokens=c["block_size"],
    )
    return ns, replicas, cache_keys(policy, c["model_revision"], replicas)


def replay_rows(
    trace: Trace, policy: Policy, replayer=None, progress=None, executor=None
) -> dict[str, np.ndarray | list]:
    """Per-request rows of one replay. `replayer(requests, policy, num_groups)` replaces the
    cache replay of one partition (default `sim.dispatch.replay`; the sweep's one-pass curve).
    `executor` runs the partitions (default: in this process)."""
    c = trace.columns
    spec = as_spec(executor)
    setup = replay_setup(policy)
    routed = None
    if setup.live:
        if replayer is not None:
            raise ValueError(f"routing {policy.routing} replays live: no partition replayer")
        ns = namespaces(trace)
        routed = replay_fleets(trace, setup, ns, progress)
        replicas = [str(k) for k in routed.replicas]
        partitions = cache_keys(policy, c["model_revision"], replicas)
    else:
        ns, replicas, partitions = routed_partitions(trace, policy)
    shared_any, shared_replica = shared_prefixes(trace, ns, partitions, spec)
    if routed is not None:
        results = result_columns(routed.results)
    else:
        results = None if replayer else _from_shared(trace, setup, shared_replica, progress)
    if results is None:
        results = result_columns(
            _replay_partitions(
                trace, setup, ns, partitions, replayer or replay, progress, executor=spec
            )
        )
    prompt_tokens = np.asarray(c["prompt_tokens"], dtype=np.int64)
    host = host_columns(results)
    levels = build_levels(
        prompt_tokens=prompt_tokens,
        shared_any_tokens=shared_any,
        shared_replica_tokens=shared_replica,
        align_tokens=setup.align_tokens,
        attention_match_tokens=results["attention_match_tokens"],
        sparse_retention_miss_tokens=results["sparse_retention_miss_tokens"],
        hit_tokens=results["hit_tokens"],
        shared_scheduled_tokens=_shared_scheduled(results),
        cached_ever_tokens=_cached_ever(policy, results),
        host_hit_tokens=host["host_hit_tokens"],
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
    rows["junction_tokens"] = np.asarray(results["junction_tokens"], dtype=np.int64)
    (
        rows["sparse_retention_miss_never_kept_tokens"],
        rows["sparse_retention_miss_evicted_tokens"],
    ) = sparse_split_net(
        results["sparse_retention_miss_never_kept_tokens"],
        results["sparse_retention_miss_evicted_tokens"],
        levels.won_back()["sparse_retention_miss_tokens"],
    )
    rows.update(host)
    rows["replay_tokens"] = np.asarray(results["replay_tokens"], dtype=np.int64)
    rows.update(schedule_columns(results))
    rows["error"] = list(results["error"])
    rows["note"] = list(results["note"])
    rows.update(levels.causes())
    rows["fresh_prefill_tokens"] = prompt_tokens - rows["hit_tokens"]
    rows.update(route_load_columns(routed.loads if routed is not None else None, trace.n))
    return rows


def check_geometry(session: ReplaySession, policies: list[Policy]) -> None:
    """Each of `policies` fitted to the session's trace blocks before any of them replays:
    one the trace cannot express fails before the others' replays are spent (ConfigError)."""
    block = stored_trace_block(session.con)
    for policy in policies:
        fit_policy(policy, block)


def where_tokens_went(outcome: ReplayOutcome, measure_from: float) -> str:
    """The line `hpa replay` prints under a run's table: its hits and loss causes as shares
    of the (measured) prompt tokens (metrics.outcome)."""
    return outcome_line(outcome.summary.to_pylist(), measured_only=measure_from > 0)


def replays_host_tier(policy: Policy) -> bool:
    """Whether `policy` sizes a host KV tier (what `hpa replay` prints a line for)."""
    return has_host_tier(policy.to_json())


HOST_COUNTS = (
    "host_hit_tokens",
    "host_wait_steps",
    "host_evicted_tokens",
    "host_never_stored_tokens",
    *(k.column for k in NEVER_STORED),
)


def host_columns(results: ResultColumns) -> dict[str, np.ndarray | list]:
    """A host KV tier's per-request columns: tokens it loaded beyond the GPU hit, the engine
    steps and seconds the request waited for the load (0, 0 and None without a load), and
    what it did not give back beyond its hit: tokens it had stored then evicted, tokens it
    never stored and those by kind (a closed-form replay gives None, which is no tier)."""
    out: dict[str, np.ndarray | list] = {
        name: np.asarray([v or 0 for v in results[name]], dtype=np.int64) for name in HOST_COUNTS
    }
    out["host_wait_s"] = list(results["host_wait_s"])
    return out


ROUTE_LOAD = ("route_waiting", "route_running", "route_kv_blocks_used")


def route_load_columns(loads, n: int) -> dict[str, list]:
    """What a live router saw of the replica it chose, per request: its waiting and running
    requests and KV blocks in use (None under a static router)."""
    if loads is None:
        return {name: [None] * n for name in ROUTE_LOAD}
    return {
        "route_waiting": [x.num_waiting for x in loads],
        "route_running": [x.num_running for x in loads],
        "route_kv_blocks_used": [x.kv_blocks_used for x in loads],
    }


@dataclass(frozen=True)
class Routed:
    """A live replay's outcome, per request in arrival order."""

    results: list[SimResult]
    replicas: list[int]
    loads: list


def replay_fleets(trace: Trace, setup: ReplaySetup, ns: list[tuple], progress=None) -> Routed:
    """One fleet per model revision (one for all under cache_scope shared), each on its own
    clock from its earliest arrival, routed live (`sim.fleet`)."""
    c = trace.columns
    policy = setup.policy
    keys = [None] * trace.n if policy.cache_scope == "shared" else c["model_revision"]
    members: dict = {}
    for i, key in enumerate(keys):
        members.setdefault(key, []).append(i)
    results: list = [None] * trace.n
    replicas = [0] * trace.n
    loads: list = [None] * trace.n
    groups = setup.num_groups
    done = 0
    for indices in members.values():
        rows, local = trace.partition(indices)
        requests = [rows.sim_request(k, ns[i]) for k, i in zip(local, indices, strict=True)]
        run = replay_fleet(
            requests,
            policy,
            num_groups=groups,
            conversation_ids=[c["conversation_id"][i] for i in indices],
            trace_replicas=[c["replica"][i] for i in indices],
        )
        for k, i in enumerate(indices):
            results[i], replicas[i], loads[i] = run.results[k], run.replicas[k], run.loads[k]
        done += len(indices)
        if progress is not None:
            progress(done, trace.n)
    return Routed(results, replicas, loads)


def _from_shared(
    trace: Trace, setup: ReplaySetup, shared_replica: np.ndarray, progress
) -> ResultColumns | None:
    """Every request's result at once from L2 (its shared prefix in its own cache), where
    the engine's results follow from it (`sim.dispatch.replay_from_shared`) and every
    request is token ids; None where requests must replay one by one."""
    closed = setup.closed
    if not trace.token_ids_only or closed is None:
        return None
    # the namespace is in L2 already: it matched within each cache namespace
    prompt_tokens = np.asarray(trace.columns["prompt_tokens"], dtype=np.int64)
    results = closed(trace.columns["request_id"], prompt_tokens, shared_replica)
    if progress is not None:
        progress(trace.n, trace.n)
    return results


def _shared_scheduled(results: ResultColumns) -> list[int] | None:
    """L2b per request (None for a serial replay; a request never admitted gets no bound)."""
    found = results["shared_scheduled_tokens"]
    if all(v is None for v in found):
        return None
    return [np.iinfo(np.int64).max if v is None else v for v in found]


SCHEDULE_TIMES = ("arrival_s", "first_scheduled_s", "first_token_s", "finished_s")


def schedule_columns(results: ResultColumns) -> dict[str, list | np.ndarray]:
    """The concurrent schedule's per-request columns (seconds on the simulated clock, from
    the earliest arrival of the request's partition; None for a serial replay): its times,
    `queue_s` (arrival to first scheduled), `ttft_s` (arrival to first token), preemptions,
    hits over every admission and the tokens recomputed after preemptions."""
    out: dict[str, list | np.ndarray] = {name: list(results[name]) for name in SCHEDULE_TIMES}
    out["queue_s"] = _elapsed(out["arrival_s"], out["first_scheduled_s"])
    out["ttft_s"] = _elapsed(out["arrival_s"], out["first_token_s"])
    out["num_preemptions"] = np.asarray(results["num_preemptions"], dtype=np.int64)
    total = results["hit_total_tokens"]
    hits = results["hit_tokens"]
    out["hit_total_tokens"] = np.asarray(
        [h if t is None else t for h, t in zip(hits, total, strict=True)], dtype=np.int64
    )
    out["recomputed_tokens"] = np.asarray(results["recomputed_tokens"], np.int64)
    out["held_blocks"] = list(results["held_blocks"])
    return out


def _elapsed(starts: list, ends: list) -> list[float | None]:
    return [None if a is None or b is None else b - a for a, b in zip(starts, ends, strict=True)]


def _replay_partitions(
    trace: Trace, setup: ReplaySetup, ns, partitions, replayer=replay, progress=None, executor=LOCAL
) -> list:
    """Per request: its SimResult; the (revision, replica) partitions run on `executor`."""
    members: dict[tuple, list[int]] = {}
    for i, key in enumerate(partitions):
        members.setdefault(key, []).append(i)
    shared = ReplayShared(trace, setup.policy, ns, replayer, setup.num_groups)
    return replay_partitions(executor, shared, members, progress)


def num_groups(policy: Policy) -> dict[str, int] | None:
    """KV-cache groups per type from the model preset (they share the pool's blocks)."""
    if policy.model is None:
        return None
    preset = load_model(policy.model)["num_groups"]
    return {group: preset.get(group, 1) for group in policy.groups}


def load_policies(sources: list[str], overrides: list[str]) -> list[Policy]:
    """Each of `sources` (a preset name or a policy file) with the `--set` overrides, made
    and checked by its engine: a policy that cannot run fails before any of them replays."""
    return [load_policy(source, overrides) for source in sources]
