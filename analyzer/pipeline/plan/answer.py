"""A plan's last step: the searched settings as candidates, cheapest first, and what to say."""

from __future__ import annotations

from dataclasses import dataclass, replace

from analyzer.config.memory import pool_gib
from analyzer.config.policy import Policy
from analyzer.pipeline.plan.ask import PlanAsk
from analyzer.pipeline.plan.evaluate import Measure
from analyzer.pipeline.plan.fleet import Fleet, FleetOutcome, FleetSearch, Shape
from analyzer.pipeline.plan.result import Candidate
from analyzer.pipeline.plan.search import Outcome, Search
from analyzer.store.runs import saturation_words
from analyzer.words import plural


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
    check: str | None = None  # a latency plan: the answer and the fleet one step smaller


def unreachable_above_bound(plan: Framing, c) -> str:
    shared = c.ceiling + c.granularity
    unit = f"{plan.block}-token blocks" if c.unit is None else f"match units of {c.unit} tokens"
    others = ""
    if c.others:
        others = (
            " (the other match units searched: "
            + ", ".join(f"{_unit(u, plan.block)} {b:.3f}" for u, b in c.others)
            + ")"
        )
    return (
        f"unreachable: target {plan.ask.target:.3f} is above the attention-only bound "
        f"{c.bound:.3f} at the best match unit searched, {unit}{others} (an unbounded "
        f"full-attention-only cache; the model's groups with every sparse state kept reach "
        f"{c.dense:.3f}); the shared-prefix ceiling is {c.ceiling:.3f} (matchable tokens / "
        f"queries; {shared:.3f} is shared at token level, {c.granularity:.3f} of it below "
        f"whole {unit}). No pool size or retention can reuse more than that; a finer match "
        f"unit or block only can."
    )


def _unit(unit: int | None, block: int) -> str:
    return f"{block} (the block)" if unit is None else str(unit)


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
    note = (
        f" ({plural(skipped, 'setting')} skipped: dearer than that at any pool size)"
        if skipped
        else ""
    )
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
    budget = ""
    if search.budget_blocks is not None:
        budget = f" within the memory budget {plan.ask.memory_budget}"
    return (
        f"unreachable within the search: no candidate reaches {plan.ask.target:.3f}"
        f"{budget} (attention-only bound {c.bound:.3f}, shared-prefix ceiling "
        f"{c.ceiling:.3f}, model groups with every state kept {c.dense:.3f})"
    )


def _load_warning(plan: Framing, best: Candidate | None) -> str | None:
    """One line when the chosen setting's simulated server cannot keep up."""
    if best is None or best.load is None or not best.load.saturated:
        return None
    load, p = best.load, plan.base
    if p.step_time == "linear":
        step = (
            f"step time {p.step_base_ms:g} ms + {p.step_token_us:g} us a token, the default "
            "model unless set"
        )
    else:
        step = f"steps priced on the {p.gpu} by the {p.step_time}"
    return (
        f"saturated: {saturation_words(load.queue_first_quarter_s, load.queue_last_quarter_s)}"
        f"; {load.arrivals_per_s:,.2f} requests/s {_busiest(best.replicas)} at time_scale "
        f"{p.time_scale:g}; {step}: fit it to the trace's observed TTFT with `hpa calibrate`; "
        "more replicas (--ttft-p99) or a larger time_scale ask what would keep up"
    )


def _busiest(replicas: int) -> str:
    return "on its one replica" if replicas == 1 else f"on the busiest of {replicas} replicas"


def _seconds(value: float) -> str:
    """Seconds to three significant figures, without an exponent (6,999, 3.54, 0.0123;
    "under 0.001" below a millisecond)."""
    if 0 < value < 0.001:
        return "under 0.001"
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def _fine(value: float) -> str:
    """Seconds to four significant figures: a figure beside its target (1.999 s, not 2)."""
    if 0 < value < 0.001:
        return "under 0.001"
    return f"{value:,.0f}" if value >= 1000 else f"{value:.4g}"


def _j(value) -> str:
    return "null" if value is None else str(value)


# -- a latency plan ----------------------------------------------------------------------------


def fleet_answer(plan: Framing, c, outcome: FleetOutcome, fs: FleetSearch) -> Answer:
    """The fleets found (the answer first), the line that says the answer, and its check."""
    candidates = [_fleet_candidate(plan, f, fs, outcome.floor_blocks) for f in outcome.fleets]
    if not candidates:
        return Answer([], _no_fleet(plan, c, outcome, fs))
    best = candidates[0]
    return Answer(
        candidates,
        _fewest(plan, best, outcome.fleets[0], fs),
        _load_warning(plan, best),
        _check_line(fs, outcome),
    )


def _fleet_candidate(plan: Framing, f: Fleet, fs: FleetSearch, floor: int | None) -> Candidate:
    search = plan.search
    tp = f.shape.tensor_parallel
    found = f.found
    blocks = found.num_blocks if found is not None else f.room_blocks
    measure = found.measure if found is not None else f.measure
    gpus = None
    if blocks is not None and tp is not None:
        gpus = replace(search, tensor_parallel=tp).gpus(f.policy, blocks)
    return Candidate(
        f.policy.retention_interval,
        f.policy.prefix_match_unit,
        f.shape.replicas,
        f.shape.routing,
        blocks,
        measure.useful_hit_ratio,
        None if blocks is None else plan.pool_gib(blocks),
        search.cost(f.policy, blocks) if blocks is not None else float("inf"),
        found.sized_by if found is not None else ("gpus' room" if tp else "unbounded"),
        search.caches(f.policy),
        floor or 0,
        measure.load,
        gpus,
        tensor_parallel=tp,
        room_blocks=f.room_blocks,
        total_gpus=fs.gpus(f.shape) if tp is not None else None,
    )


def _fewest(plan: Framing, best: Candidate, fleet: Fleet, fs: FleetSearch) -> str:
    load = best.load
    figures = f"useful hit ratio {best.useful_hit_ratio:.3f}"
    if load is not None:
        figures += f", TTFT p50 {_fine(load.ttft_p50_s)} s p99 {_fine(load.ttft_p99_s)} s"
        if load.tpot_p99_s is not None:
            figures += f", TPOT p99 {_fine(load.tpot_p99_s)} s"
        figures += f", goodput {load.goodput_rps:,.2f} requests/s within the targets"
    pool = _pool_said(plan, best)
    each = f" for each of {fs.revisions} model revisions" if fs.revisions > 1 else ""
    shape = f"{_routed(fleet.shape)}{each}"
    if best.tensor_parallel is not None:
        gpu = plan.search.gpu.name
        head = f"fewest GPUs: {best.total_gpus} x {gpu} ({shape}, {pool})"
    else:
        head = f"fewest replicas: {fs.gpus(fleet.shape)} in all ({shape}, {pool})"
    return f"{head} -> {figures}"


def _routed(shape: Shape) -> str:
    said = shape.said()
    return said if shape.replicas == 1 else f"{said} routing"


def _pool_said(plan: Framing, c: Candidate) -> str:
    if c.num_blocks is None:
        return "no pool limit"
    gib = f" ({c.memory_gib:,.2f} GiB)" if c.memory_gib is not None else ""
    room = ""
    if c.room_blocks is not None and c.room_blocks != c.num_blocks:
        room = (
            f" of the {c.room_blocks:,} its GPUs hold"
            if c.tensor_parallel
            else (f" of the {c.room_blocks:,} the budget allows")
        )
    return f"{c.num_blocks:,} blocks a replica{gib}{room}"


def _check_line(fs: FleetSearch, outcome: FleetOutcome) -> str | None:
    """The answer and the fleet one step smaller, each replayed to its end."""
    check = outcome.check
    if check is None:
        return None
    answer = outcome.fleets[0].shape
    line = f"checked: {answer.said()} meets every target ({_figures(check.answer)})"
    if check.smaller is None:
        return f"{line}; {check.why}"
    missed = short_of(check.smaller_measure.misses(fs.targets))
    return f"{line}; {check.smaller.said()} {missed} ({_figures(check.smaller_measure)})"


# The targets a replay did not meet (`Measure.misses`), as the check line says them: "miss"
# is a cache's word in hpa (hit / miss / lost), not a target's.
TARGET_WORDS = {
    "schedulable": "every request scheduled",
    "hit ratio": "the hit ratio",
    "ttft p99": "TTFT p99",
    "tpot p99": "TPOT p99",
}


def short_of(missed: tuple[str, ...]) -> str:
    """'falls short of the hit ratio and TTFT p99' for the targets `missed`."""
    words = [TARGET_WORDS.get(name, name) for name in missed]
    said = words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]
    return f"falls short of {said}"


def _figures(m: Measure) -> str:
    if m.load is None:
        return f"hit ratio {m.useful_hit_ratio:.3f}"
    out = f"TTFT p99 {_fine(m.load.ttft_p99_s)} s"
    if m.load.tpot_p99_s is not None:
        out += f", TPOT p99 {_fine(m.load.tpot_p99_s)} s"
    return out + f", hit ratio {m.useful_hit_ratio:.3f}"


def _no_fleet(plan: Framing, c, outcome: FleetOutcome, fs: FleetSearch) -> str:
    """Why no fleet met the targets, with the nearest miss."""
    ask = plan.ask
    wants = [f"useful hit ratio {ask.target:.3f}"]
    if ask.ttft_p99_s is not None:
        wants.append(f"TTFT p99 <= {ask.ttft_p99_s:g} s")
    if ask.tpot_p99_s is not None:
        wants.append(f"TPOT p99 <= {ask.tpot_p99_s:g} s")
    if outcome.floor_blocks is None:
        return "unreachable: no pool a replay can hold schedules the heaviest requests"
    if not outcome.searched_tp:
        return (
            f"unreachable: no tensor parallel up to {max(8, ask.tensor_parallel or 0)} of "
            f"{plan.search.gpu.name} holds the weights and the {outcome.floor_blocks:,}-block "
            "floor"
        )
    tps = ", ".join(str(t) for t in outcome.searched_tp if t is not None)
    shape = f"tensor parallel {tps}, " if tps else ""
    nearest = ""
    if outcome.nearest is not None:
        s, m = outcome.nearest
        nearest = f"; the nearest: {_routed(s)} ({_figures(m)})"
    return (
        f"unreachable within the search: no fleet meets {', '.join(wants)} ({shape}up to "
        f"{fs.max_replicas} replicas, routers {', '.join(fs.routers)}){nearest} (attention-only "
        f"bound {c.bound:.3f})"
    )


__all__ = ["Answer", "Framing", "Shape", "answer_for", "fleet_answer", "unreachable_above_bound"]
