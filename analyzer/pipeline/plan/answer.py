"""A plan's last step: the searched settings as candidates, cheapest first, and what to say."""

from __future__ import annotations

from dataclasses import dataclass

from analyzer.config.memory import pool_gib
from analyzer.config.policy import Policy
from analyzer.pipeline.plan.ask import PlanAsk
from analyzer.pipeline.plan.result import Candidate
from analyzer.pipeline.plan.search import MAX_REPLICAS, Outcome, Search


@dataclass(frozen=True)
class Framing:
    """What the answer's words need of a plan."""

    ask: PlanAsk
    block: int  # tokens per block of the searched policies
    search: Search
    cost_unit: str  # "GiB" with a model's bytes per block, else "blocks"
    base: Policy  # the policy every setting starts from (schedule, step model)

    def pool_gib(self, num_blocks: int) -> float | None:
        """GiB of one cache of `num_blocks` blocks; None without bytes per block."""
        per_block = self.search.per_block
        return pool_gib(num_blocks, per_block) if per_block else None


@dataclass(frozen=True)
class Answer:
    """The candidates, cheapest first, the line that sums them up, and a load warning."""

    candidates: list[Candidate]
    message: str
    load_warning: str | None = None


def unreachable_above_bound(plan: Framing, c) -> str:
    shared = c.ceiling + c.granularity
    return (
        f"unreachable: target {plan.ask.target:.3f} is above the attention-only bound "
        f"{c.bound:.3f} (an unbounded full-attention-only cache; the model's groups with every "
        f"sparse state kept reach {c.dense:.3f}); the shared-prefix ceiling is {c.ceiling:.3f} "
        f"(matchable tokens / queries; {shared:.3f} is shared at token level, "
        f"{c.granularity:.3f} of it below whole {plan.block}-token blocks or match units). "
        f"No pool size or retention can reuse more than that; a finer match unit or "
        f"block only can."
    )


def answer_for(plan: Framing, ceilings, outcomes: list[Outcome]) -> Answer:
    """The answer of the searched settings."""
    found = [o for o in outcomes if o.found is not None]
    found.sort(
        key=lambda o: (
            plan.search.rank(o.policy, o.found.num_blocks),
            -o.found.measure.useful_hit_ratio,
        )
    )
    candidates = [_candidate(plan, o) for o in found]
    skipped = sum(o.skipped for o in outcomes)
    if candidates:
        message = _cheapest(plan, candidates[0], skipped)
    else:
        message = _none_reached(plan, ceilings, outcomes)
    best = candidates[0] if candidates else None
    return Answer(candidates, message, _load_warning(plan, best))


def _candidate(plan: Framing, outcome: Outcome) -> Candidate:
    policy, found, search = outcome.policy, outcome.found, plan.search
    caches = search.caches(policy)
    memory = plan.pool_gib(found.num_blocks)
    return Candidate(
        policy.retention_interval,
        policy.prefix_match_unit,
        policy.replicas,
        policy.routing,
        found.num_blocks,
        found.measure.useful_hit_ratio,
        memory,
        search.cost(policy, found.num_blocks),
        found.sized_by,
        caches,
        found.floor_blocks,
        found.measure.load,
        search.gpus(policy, found.num_blocks),
    )


def _cheapest(plan: Framing, best: Candidate, skipped: int) -> str:
    unit = "cache" if best.num_caches == 1 else "caches"
    note = f" ({skipped} settings skipped: dearer than that at any pool size)" if skipped else ""
    latency = ""
    if best.load is not None:
        latency = f", TTFT p99 {_seconds(best.load.ttft_p99_s)} s"
    hardware = ""
    if best.gpus is not None:
        hardware = f"; {best.gpus.total_gpus} x {best.gpus.gpu} in all"
    return (
        f"cheapest: retention_interval={_j(best.retention_interval)} "
        f"prefix_match_unit={_j(best.prefix_match_unit)} replicas={best.replicas} "
        f"routing={best.routing} num_blocks={best.num_blocks} -> useful hit ratio "
        f"{best.useful_hit_ratio:.3f}{latency} for {best.cost:,.2f} {plan.cost_unit} of "
        f"cache in all ({best.num_caches} {unit}, one per model revision x replica)"
        f"{hardware}{note}"
    )


def _none_reached(plan: Framing, c, outcomes: list[Outcome]) -> str:
    """Why no setting reached the targets: the budget cannot hold the longest request, or
    none reached them within the search."""
    floors = [o.floor_blocks for o in outcomes if o.floor_blocks is not None]
    search = plan.search
    if search.budget_blocks is not None and floors and min(floors) > search.budget_blocks:
        need = min(floors)
        return (
            f"unreachable within the memory budget: --memory-budget {plan.ask.memory_budget} "
            f"holds {search.budget_blocks:,} blocks per cache, and the longest request needs "
            f"{need:,} ({plan.pool_gib(need):,.2f} GiB per cache) to be scheduled at all"
        )
    latency = ""
    if plan.ask.ttft_p99_s is not None:
        latency = f" with TTFT p99 <= {plan.ask.ttft_p99_s:g} s (up to {MAX_REPLICAS} replicas"
        latency += f"{_closest(plan.ask.target, outcomes)})"
    budget = ""
    if search.budget_blocks is not None:
        budget = f" within the memory budget {plan.ask.memory_budget}"
    return (
        f"unreachable within the search: no candidate reaches {plan.ask.target:.3f}"
        f"{latency}{budget} (attention-only bound {c.bound:.3f}, shared-prefix ceiling "
        f"{c.ceiling:.3f}, model groups with every state kept {c.dense:.3f})"
    )


def _closest(target: float, outcomes: list[Outcome]) -> str:
    """What the nearest miss reached at the most replicas: of the settings that miss the
    latency target, one reaching the hit-ratio target if any, then the lowest TTFT p99."""
    unmet = [o for o in outcomes if o.unmet is not None and o.unmet.load is not None]
    if not unmet:
        return ""
    o = min(unmet, key=lambda o: (o.unmet.useful_hit_ratio < target, o.unmet.load.ttft_p99_s))
    load = o.unmet.load
    return (
        f"; the nearest: {o.policy.replicas} replicas ({o.policy.routing} routing, no pool "
        f"limit) reach {o.unmet.useful_hit_ratio:.3f} with TTFT p99 "
        f"{_seconds(load.ttft_p99_s)} s and a mean queue of {_seconds(load.queue_mean_s)} s"
    )


def _load_warning(plan: Framing, best: Candidate | None) -> str | None:
    """One line when the chosen setting's simulated server cannot keep up."""
    if best is None or best.load is None or not best.load.saturated:
        return None
    load, p = best.load, plan.base
    return (
        f"saturated: the simulated server cannot keep up: the last quarter of arrivals "
        f"queued {load.queue_last_quarter_s:,.1f} s on average, the first quarter "
        f"{load.queue_first_quarter_s:,.1f} s ({load.arrivals_per_s:,.2f} requests/s "
        f"{_busiest(best.replicas)} at time_scale {p.time_scale:g}; step time "
        f"{p.step_base_ms:g} ms + {p.step_token_us:g} us a token, the default model unless set: "
        f"fit it to the trace's observed TTFT with `hpa calibrate`); more replicas "
        f"(--ttft-p99) or a larger time_scale ask what would keep up"
    )


def _busiest(replicas: int) -> str:
    return "on its one replica" if replicas == 1 else f"on the busiest of {replicas} replicas"


def _seconds(value: float) -> str:
    """Seconds to three significant figures, without an exponent (6,999, 3.54, 0.0123;
    "under 0.001" below a millisecond)."""
    if 0 < value < 0.001:
        return "under 0.001"
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def _j(value) -> str:
    return "null" if value is None else str(value)
