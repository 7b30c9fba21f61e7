"""`hpa plan`: the cheapest cache settings that reach a target useful hit ratio on this trace.

Every figure is measured by replaying the stored trace (nothing is stored as a run). The
search is deliberately small:

1. Ceilings, from two unbounded replays: the model's groups with retention null (every sparse
   state kept) and full attention only (the `attention_only` bound: no sparse group can veto a
   hit, nothing is evicted). The shared-prefix ceiling is sum(matchable_tokens) / queries
   of the latter (what any cache could reuse at this alignment). A target above the
   attention-only bound is unreachable by any setting searched here; the answer says so.
2. Candidate settings, each first replayed unbounded: retention interval {0, null} x match
   unit {block size, block size / 4 when the model has a Mamba group} x placement {the
   trace's replicas with its routing, the same replicas with prefix-aware routing, one
   replica holding them all}. Those whose unbounded ratio misses the target are dropped.
3. For each remaining candidate, the smallest pool (num_blocks per replica) reaching the target:
   doubling from the smallest pool that fits every request, then bisection to within 5%
   (about 10 replays). With --memory-budget the pool never exceeds the budget.

Cost = cache occupancy of every cache: caches x num_blocks x bytes_per_block (GiB) when the
model preset gives bytes_per_block, else caches x num_blocks (blocks); a cache is one model
revision x replica (one replica under cache_scope shared), so a trace of 6 revisions on 1
replica costs 6 pools. num_blocks and --memory-budget are per cache. Candidates are printed
cheapest first.

The requests come from a request input (pipeline/inputs.py): the store's, or a Parquet
dataset's without creating a store. With a dataset and a non-local executor this process
holds only the per-request scalars (a DatasetTrace: families, replicas, prompt lengths); the
ceiling replays read their partitions in workers, as `hpa replay --dataset` does, and every
setting's search is a task whose worker reads the whole trace from the dataset once. The
answer is the store's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from analyzer.config.memory import bytes_per_block, parse_size, pool_gib
from analyzer.config.models import DEFAULT_GEOMETRY_MODEL, load_model
from analyzer.config.policy import MAXIMUMS, Policy
from analyzer.errors import ConfigError
from analyzer.executors import LOCAL, ExecutorSpec, as_spec, map_partitions
from analyzer.pipeline.geometry import fit_policy
from analyzer.pipeline.inputs import request_input
from analyzer.pipeline.replay import replay_rows
from analyzer.pipeline.sweep_points import rows_from_table, rows_table
from analyzer.sim.policy import make_policy
from analyzer.store.db import DEFAULT_DB, trace_block_tokens
from analyzer.store.runs import check_measure_from

# The keys the search sets itself (a --set of one of them is replaced).
SEARCHED = ("retention_interval", "prefix_match_unit", "replicas", "routing", "num_blocks")


@dataclass
class Candidate:
    retention_interval: int | None
    prefix_match_unit: int | None
    replicas: int
    routing: str
    num_blocks: int | None
    useful_hit_ratio: float
    memory_gib: float | None  # per cache
    cost: float  # GiB (or blocks when the preset has no bytes_per_block), every cache
    # Why the pool is this size: the target, or the longest request (the smallest pool that
    # holds it already reaches the target).
    sized_by: str = "target"
    num_caches: int = 1  # model revisions x replicas (replicas under cache_scope shared)


@dataclass
class PlanResult:
    target: float
    attention_only_bound: float
    shared_prefix_ceiling: float
    unbounded_ratio: float  # the model's groups, retention null, unbounded
    reachable: bool
    candidates: list[Candidate]
    cost_unit: str
    replays: int
    message: str
    schedule: str = "serial"  # every replay's (see analyzer/config/schedule.py)
    notes: tuple[str, ...] = ()  # what the trace changed or ruled out (its block geometry)
    # Shared prefix at token level (same replica, capped at prompt - 1 as a hit is): what
    # the geometry's ceiling (`shared_prefix_ceiling`) floors to blocks or match units.
    shared_token_ratio: float = 0.0


class _Evaluator:
    """Replays settings and measures them: over the requests of `family` (every one when
    None) from arrival index floor(measure_from x n) on (the warm-up before is replayed,
    never measured, as `hpa replay --measure-from` does)."""

    def __init__(
        self, trace, family: str | None, progress=None, executor=LOCAL, measure_from: float = 0.0
    ) -> None:
        self.trace = trace
        self.replays = 0
        self.progress = progress
        self.executor = executor
        fam = trace.columns["prompt_family"]
        self.mask = None
        if family is not None:
            self.mask = np.asarray([f == family for f in fam])
            if not self.mask.any():
                known = sorted({f for f in fam if f is not None})
                raise ConfigError(
                    f"--family {family!r}: no such prompt family; known: {', '.join(known)}"
                )
        if measure_from:
            measured = np.arange(len(fam)) >= int(np.floor(measure_from * len(fam)))
            self.mask = measured if self.mask is None else self.mask & measured

    def rows(self, policy: Policy) -> dict:
        rows = replay_rows(self.trace, policy, executor=self.executor)
        self.replays += 1
        if self.progress:
            self.progress(self.replays)
        return rows

    def ceilings(self, policies: list[Policy]) -> list[dict]:
        """Each policy's rows: replayed here, or (a non-local executor) each replay one task
        on the whole trace, shipped to its worker as `for_workers()` (a dataset: its path)."""
        if self.executor.is_local:
            return [self.rows(p) for p in policies]
        before = self.replays

        def tick(done: int, total: int) -> None:
            self.replays = before + done
            if self.progress:
                self.progress(self.replays)

        parts = map_partitions(
            self.executor,
            _ceiling_worker,
            policies,
            labels=[f"plan ceiling replay {p.to_json()}" for p in policies],
            shared=self.trace.for_workers(),
            progress=tick,
            in_worker=True,
        )
        self.replays = before + len(policies)
        return [rows_from_table(table) for table in parts]

    def _sum(self, rows: dict, name: str) -> int:
        values = np.asarray(rows[name], dtype=np.int64)
        return int(values[self.mask].sum() if self.mask is not None else values.sum())

    def ratio(self, rows: dict, name: str = "hit_tokens") -> float:
        q = self._sum(rows, "prompt_tokens")
        ok = np.asarray([e is None for e in rows["error"]])
        if not (ok if self.mask is None else ok[self.mask]).all():
            return -1.0  # some request could not be scheduled: this pool is too small
        return self._sum(rows, name) / q if q else 0.0


def plan(
    target: float,
    *,
    model: str | None = None,
    memory_budget: str | None = None,
    family: str | None = None,
    db_path: str | Path = DEFAULT_DB,
    progress: Callable[[int], None] | None = None,
    executor: ExecutorSpec | str | None = None,
    dataset: str | Path | None = None,
    schedule: str | None = None,
    time_scale: float | None = None,
    policy: dict[str, Any] | None = None,
    measure_from: float = 0.0,
) -> PlanResult:
    """Search the settings that reach `target` (useful hit ratio); see the module doc.

    `progress(replays so far)` is called after each replay of the search (with a non-local
    `executor`: after each candidate setting). With a non-local executor the ceiling
    replays run their partitions on it, and the candidate settings are the partitions,
    each searched whole by one worker; the answer is the same as the local search.
    `dataset`: read the requests from a Parquet dataset instead of the store (see the
    module doc; with `local` this process reads it whole, once). `schedule`: every replay's
    (`concurrent`: vLLM's scheduler on the trace's arrival times, `time_scale` compressing
    or stretching them: queueing, in-flight producers and preemption count; default:
    the policy's, else serial). `policy`: the keys every replay starts from (`--policy`,
    `--set`; `model` overrides its model); the search sets its own keys over them.
    `measure_from` (0 <= f < 1): measure only the requests from arrival index floor(f x n)
    on; every request replays (a warm-up), as `hpa replay --measure-from`."""
    check_measure_from(measure_from)
    spec = as_spec(executor)
    if not 0.0 < target <= 1.0:
        raise ConfigError(f"--target-useful-hit-ratio {target}: expected a number in (0, 1]")
    values = {k: v for k, v in (policy or {}).items() if k not in SEARCHED}
    model = model if model is not None else values.get("model")
    schedule = schedule or values.get("schedule", "serial")
    preset = load_model(model) if model is not None else None
    budget = parse_size(memory_budget) if memory_budget is not None else None
    per_block = preset.get("bytes_per_block") if preset else None
    if budget is not None and per_block is None:
        raise ConfigError(
            "--memory-budget needs a --model preset with bytes_per_block"
            + (f" ({model} has none)" if model else "")
        )
    geometry = preset or load_model(DEFAULT_GEOMETRY_MODEL)  # groups and block, never bytes
    groups = list(values.get("groups") or geometry["groups"])
    values.update(groups=groups, model=model, schedule=schedule)
    values["block_size"] = values.get("block_size") or geometry["block_size"]
    trace = request_input(db_path, dataset).read_only_trace(spec)
    trace_block = trace_block_tokens(trace.columns["block_size"])
    fitted, fit_note = fit_policy(make_policy(values), trace_block)
    block = fitted.block_size
    per_block = bytes_per_block(model, block) if preset else None
    notes = [fit_note] if fit_note else []
    ev = _Evaluator(trace, family, progress, spec, measure_from)
    num_trace_replicas = len({r for r in trace.columns["replica"] if r is not None}) or 1
    num_revisions = len(set(trace.columns["model_revision"]))

    def caches(policy: Policy) -> int:
        """The pools a setting provisions: one per model revision x replica."""
        return (1 if policy.cache_scope == "shared" else num_revisions) * policy.replicas

    base = {**values, "block_size": block}
    if time_scale is not None:
        base["time_scale"] = time_scale
    attention, dense_rows = ev.ceilings(
        [
            make_policy({**base, "groups": ["full_attention"], "retention_interval": None}),
            make_policy({**base, "retention_interval": None}),
        ]
    )
    bound = ev.ratio(attention)
    ceiling = ev.ratio(attention, "matchable_tokens")
    shared = ceiling + ev.ratio(attention, "lost_granularity_tokens")
    dense = ev.ratio(dense_rows)
    cost_unit = "GiB" if per_block else "blocks"

    def answer(reachable: bool, found: list[Candidate], msg: str) -> PlanResult:
        return PlanResult(
            target, bound, ceiling, dense, reachable, found, cost_unit, ev.replays, msg,
            schedule, tuple(notes), shared,
        )  # fmt: skip

    if target > bound:
        msg = (
            f"unreachable: target {target:.3f} is above the attention-only bound {bound:.3f} "
            f"(an unbounded full-attention-only cache; the model's groups with every sparse "
            f"state kept reach {dense:.3f}); the shared-prefix ceiling is {ceiling:.3f} "
            f"(matchable tokens / queries; {shared:.3f} is shared at token level, "
            f"{shared - ceiling:.3f} of it below whole {block}-token blocks or match units). "
            f"No pool size or retention can reuse more than that; a finer match unit or "
            f"block only can."
        )
        return answer(False, [], msg)

    placements = [(num_trace_replicas, "trace")]
    if num_trace_replicas > 1:
        placements += [(num_trace_replicas, "prefix_aware"), (1, "round_robin")]
    units: list[int | None] = [None]
    if "mamba" in groups and "sliding_window" not in groups and block % 4 == 0:
        if trace_block and (block // 4) % trace_block:
            notes.append(
                f"match unit {block // 4} (a quarter block) not searched: it is not whole "
                f"{trace_block}-token trace blocks"
            )
        else:
            units.append(block // 4)
    retentions: list[int | None] = [0, None] if len(groups) > 1 else [None]
    settings = [
        make_policy(
            {
                **base,
                "retention_interval": ret,
                "prefix_match_unit": unit,
                "replicas": replicas,
                "routing": routing,
            }
        )
        for ret in retentions
        for unit in units
        for replicas, routing in placements
    ]
    search = _Search(trace.for_workers(), family, target, budget, per_block, measure_from)
    evaluated = None if spec.is_local else _evaluate_all(spec, search, settings, progress)
    candidates: list[Candidate] = []
    pruned = 0
    for k, policy in enumerate(settings):
        floor = (
            caches(policy) * _min_pool(policy, trace) * (pool_gib(1, per_block) if per_block else 1)
        )
        if candidates and floor > min(c.cost for c in candidates):
            pruned += 1  # even its smallest pool costs more than a found candidate
            continue
        found, replays = evaluated[k] if evaluated else _search_one(search, policy, ev)
        ev.replays += replays if evaluated else 0
        if found is None:
            continue
        num_blocks, ratio = found
        mem = pool_gib(num_blocks, per_block) if per_block else None
        cost = caches(policy) * (mem if mem is not None else num_blocks)
        sized_by = "longest request" if num_blocks == _min_pool(policy, trace) else "target"
        candidates.append(
            Candidate(
                policy.retention_interval,
                policy.prefix_match_unit,
                policy.replicas,
                policy.routing,
                num_blocks,
                ratio,
                mem,
                cost,
                sized_by,
                caches(policy),
            )
        )
    candidates.sort(key=lambda c: (c.cost, -c.useful_hit_ratio))
    note = f" ({pruned} settings skipped: dearer than that at any pool size)" if pruned else ""
    if candidates:
        best = candidates[0]
        msg = (
            f"cheapest: retention_interval={_j(best.retention_interval)} "
            f"prefix_match_unit={_j(best.prefix_match_unit)} replicas={best.replicas} "
            f"routing={best.routing} num_blocks={best.num_blocks} -> useful hit ratio "
            f"{best.useful_hit_ratio:.3f} for {best.cost:,.2f} {cost_unit} of cache in all "
            f"({best.num_caches} {'cache' if best.num_caches == 1 else 'caches'}, one per "
            f"model revision x replica){note}"
        )
    else:
        msg = (
            f"unreachable within the search: no candidate reaches {target:.3f}"
            + (f" within the memory budget {memory_budget}" if budget is not None else "")
            + f" (attention-only bound {bound:.3f}, shared-prefix ceiling {ceiling:.3f}, "
            f"model groups with every state kept {dense:.3f})"
        )
    return answer(bool(candidates), candidates, msg)


@dataclass(frozen=True)
class _Search:
    """What one candidate setting's search needs (shipped to a worker once). `trace`: the
    whole trace, or what a worker reads it from (a DatasetRef)."""

    trace: Any
    family: str | None
    target: float
    budget: int | None
    per_block: int | None
    measure_from: float = 0.0


def _search_one(search: _Search, policy: Policy, ev: _Evaluator):
    """((num_blocks, ratio) or None, replays): the unbounded check, then the smallest pool."""
    before = ev.replays
    if ev.ratio(ev.rows(policy)) < search.target:
        return None, ev.replays - before
    found = _smallest_pool(ev, policy, search.target, search.budget, search.per_block, search.trace)
    return found, ev.replays - before


def _ceiling_worker(shipped, policy: Policy):
    return rows_table(replay_rows(shipped.whole(), policy))


def _search_worker(search: _Search, policy: Policy):
    search = replace(search, trace=search.trace.whole())  # a dataset: read once per setting
    ev = _Evaluator(search.trace, search.family, measure_from=search.measure_from)
    return _search_one(search, policy, ev)


def _evaluate_all(spec: ExecutorSpec, search: _Search, settings: list[Policy], progress):
    """Every setting searched on `spec` (the local search skips some; see `plan`)."""
    labels = [
        f"plan setting retention_interval={_j(p.retention_interval)} prefix_match_unit="
        f"{_j(p.prefix_match_unit)} replicas={p.replicas} routing={p.routing}"
        for p in settings
    ]
    tick = (lambda done, total: progress(done)) if progress else None
    return map_partitions(
        spec,
        _search_worker,
        settings,
        labels=labels,
        shared=search,
        progress=tick,
        in_worker=search.trace.reads_in_worker,
    )


def _j(value) -> str:
    return "null" if value is None else str(value)


def _min_pool(policy: Policy, trace) -> int:
    """A pool no smaller than this can hold the longest prompt in every group (search start)."""
    if policy.model:
        groups = sum(load_model(policy.model)["num_groups"].get(g, 1) for g in policy.groups)
    else:
        groups = len(policy.groups)
    longest = max(int(p) for p in trace.columns["prompt_tokens"])
    return max(2, groups * (-(-longest // policy.block_size) + 2))


def _smallest_pool(ev: _Evaluator, policy: Policy, target, budget, per_block, trace):
    """(num_blocks, ratio): the smallest pool per replica reaching `target`, within 5%."""
    lo = _min_pool(policy, trace)
    cap = (
        MAXIMUMS["num_blocks"]
        if budget is None
        else min(budget // per_block, MAXIMUMS["num_blocks"])
    )
    if cap < lo:
        return None

    def measure(n: int) -> float:
        return ev.ratio(ev.rows(replace(policy, num_blocks=n)))

    low, hi, r_hi = lo - 1, lo, measure(lo)
    while r_hi < target:
        if hi >= cap:  # the budget, or the largest pool a replay can hold
            return None
        low, hi = hi, min(hi * 2, cap)
        r_hi = measure(hi)
    while hi - low > max(1, hi // 20):
        mid = (low + hi) // 2
        r = measure(mid)
        if r >= target:
            hi, r_hi = mid, r
        else:
            low = mid
    return hi, r_hi
