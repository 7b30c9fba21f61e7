"""A latency plan beside a host KV tier (`hpa plan --ttft-p99 --host-memory-budget`): how
many GPUs a tier of host memory on every replica saves at the same targets.

With a latency target (`--ttft-p99`, `--tpot-p99`) the plan is a fleet search (`fleet.py`):
after its answer without a tier (G GPUs, or replicas without a GPU), the same search runs
again with the whole budget as every replica's own tier (`host_tier_gib` on each replica of
the fleet replay), bounded by G (no fleet with more GPUs is tried: one replay rules out a
tensor parallel and router that misses at G), and answers with the fewest GPUs it finds and
how many fewer than G. Where that is fewer, the tier is cut down at that fleet as the
hit-ratio plan cuts it (`host.smallest_tier`; each bisection replay a fleet replay, stopped
once its TTFT p99 has missed) and the fleet checked at the tier kept (it and the fleet one
step smaller, both with that tier, replayed to their end); else the whole budget is said,
with the search's own check (`FleetHostAnswer`).

The budget is per replica (each replica's own tier, vLLM's `--kv-offloading-size` on each
server). The tier is modelled on vLLM's synchronous loop only (`Planner` refuses async
scheduling with a budget before any replay).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from analyzer.config.host_tier import host_slots
from analyzer.config.policy import Policy
from analyzer.pipeline.plan.answer import Answer, Framing, fleet_answer
from analyzer.pipeline.plan.evaluate import Evaluator, Targets
from analyzer.pipeline.plan.fleet import FleetOutcome, FleetSearch
from analyzer.pipeline.plan.host import smallest_tier
from analyzer.pipeline.plan.result import Candidate
from analyzer.words import plural


@dataclass(frozen=True)
class FleetHostAnswer:
    """A latency plan beside a host tier: the fleet with the fewest GPUs (replicas without a
    GPU) without a tier and with the tier on every replica (cut down where it saves GPUs),
    their GPUs, and the lines that say it and check the tier's fleet."""

    budget_gib: float  # per replica, as asked: each replica's own tier
    host_gib: float  # the tier each replica keeps: cut down where it saves GPUs, else whole
    host_chunks: int  # the slots it holds
    without: Candidate | None
    with_tier: Candidate | None
    gpus_without: int | None  # GPUs in all (replicas without a GPU); None: no fleet met
    gpus_with: int | None
    replays: int  # the replays of the search with the tier (its check included)
    message: str = ""
    check: str | None = None  # the tier's fleet and the one a step smaller, replayed
    notes: tuple[str, ...] = ()  # the search's with the tier (the plan adds the new ones)

    @property
    def gpus_saved(self) -> int | None:
        """GPUs (replicas) fewer with the tier; None where no fleet with it met."""
        if self.gpus_with is None:
            return None
        if self.gpus_without is None:
            return None
        return self.gpus_without - self.gpus_with

    def as_dict(self) -> dict[str, Any]:
        return {
            "host_memory_budget_gib": self.budget_gib,
            "host_tier_gib": self.host_gib if self.with_tier is not None else None,
            "host_tier_chunks": self.host_chunks if self.with_tier is not None else None,
            "per": "replica",
            "useful_hit_ratio": None if self.with_tier is None else self.with_tier.useful_hit_ratio,
            "gpus_without_tier": self.gpus_without,
            "gpus_with_tier": self.gpus_with,
            "gpus_saved": self.gpus_saved,
            "without_tier": None if self.without is None else self.without.as_dict(),
            "with_tier": None if self.with_tier is None else self.with_tier.as_dict(),
            "replays": self.replays,
            "message": self.message,
            "check": self.check,
        }


def fleet_host_line(answer: FleetHostAnswer, tiered: str, what: str) -> str:
    """The latency plan's line about the host tier: `tiered` is the search's own line with
    the tier (its fewest GPUs, or why none met), `what` says GPUs ("8 x H200") or replicas."""
    budget = f"{answer.budget_gib:g} GiB of host memory on each replica"
    if answer.host_gib < answer.budget_gib:
        budget += (
            f", cut to host_tier_gib={answer.host_gib:.2f} ({answer.host_chunks:,} slots: the "
            "smallest, within 5%, with which the fleet below still meets the targets)"
        )
    else:
        budget += f" (host_tier_gib={answer.host_gib:g}, {answer.host_chunks:,} slots)"
    searched = f"[{plural(answer.replays, 'replay')} with the tier]"
    if answer.gpus_with is None:
        if answer.gpus_without is None:
            return f"host tier: with {budget}: {tiered} {searched}"
        return (
            f"host tier: {budget} saves nothing at these targets: no fleet with it meets them "
            f"within the {what} the plan needs without it ({tiered}) {searched}"
        )
    if answer.gpus_without is None:
        return (
            f"host tier: with {budget}, {tiered}, where no fleet meets the targets without "
            f"it {searched}"
        )
    saved = answer.gpus_saved
    said = (
        f"{saved} fewer than the {what} without it at the same targets"
        if saved
        else f"the same {what} as without it: it saves none at these targets"
    )
    return f"host tier: with {budget}, {tiered}: {said} {searched}"


@dataclass(frozen=True)
class TierFleets:
    """What the search with a tier needs of its plan: its evaluator and targets, the budget
    (GiB a replica), a host slot's bytes, the GPU's name (None: replicas), `search(make,
    most_gpus)` a fleet search of the plan making its policies by `make`, and `policy(**keys)`
    the plan's policy."""

    ev: Evaluator
    targets: Targets
    budget_gib: float
    slot_bytes: int
    gpu_name: str | None
    search: Callable[..., FleetSearch]
    policy: Callable[..., Policy]

    def answer(
        self, framing: Framing, ceilings, outcome: FleetOutcome, answer: Answer, fs: FleetSearch
    ) -> FleetHostAnswer:
        """The fleets searched again with the whole budget as every replica's tier, within
        the GPUs (replicas) of `outcome`'s answer; where fewer meet, the tier cut down."""
        budget = self.budget_gib
        most = fs.gpus(outcome.fleets[0].shape) if outcome.fleets else None
        before = self.ev.replays
        tiered_fs = self.search(self._with_tier(budget), most_gpus=most)
        tiered = tiered_fs.run()
        gib = budget
        if tiered.fleets and (most is None or tiered_fs.gpus(tiered.fleets[0].shape) < most):
            gib, tiered_fs, tiered = self._cut(tiered, tiered_fs, most)
        with_tier = fleet_answer(framing, ceilings, tiered, tiered_fs)
        host = FleetHostAnswer(
            budget,
            gib,
            host_slots(gib, self.slot_bytes),
            answer.candidates[0] if answer.candidates else None,
            with_tier.candidates[0] if with_tier.candidates else None,
            most,
            tiered_fs.gpus(tiered.fleets[0].shape) if tiered.fleets else None,
            self.ev.replays - before,
            check=None if with_tier.check is None else f"host tier {with_tier.check}",
            notes=tiered.notes,
        )
        what = ""  # what the answer without the tier takes
        if most is not None:
            what = f"{most} x {self.gpu_name}" if self.gpu_name else plural(most, "replica")
        return replace(host, message=fleet_host_line(host, with_tier.message, what))

    def _with_tier(self, gib: float) -> Callable[..., Policy]:
        """A fleet search's `make`: the plan's policy with a host tier of `gib` a replica."""
        return lambda **keys: self.policy(**{"host_tier_gib": gib, **keys})

    def _cut(self, tiered: FleetOutcome, tiered_fs: FleetSearch, most: int | None):
        """(GiB, search, outcome): the tier of the fleet that needs fewer GPUs cut down to
        the smallest (in slots, within 5%) with which it still meets the targets, and that
        fleet confirmed at it as the search confirms its answer (it and the fleet one step
        smaller, with that tier, replayed to their end; a smaller one that meets is the
        answer). Where the tier kept misses after all, the whole budget stays."""
        best = tiered.fleets[0]
        blocks = best.found.num_blocks if best.found is not None else best.room_blocks
        _, gib, _ = smallest_tier(
            self.ev,
            lambda g: tiered_fs.policy(best.shape, blocks, host_tier_gib=g),
            self.targets,
            self.slot_bytes,
            self.budget_gib,
            stop_early=True,
        )
        cut_fs = self.search(self._with_tier(gib), most_gpus=most)
        at = cut_fs.policy(best.shape, blocks)
        measure = self.ev.measure(at, f"host tier {gib:.2f} GiB")  # smallest_tier's last
        if gib >= self.budget_gib or not measure.meets(self.targets):
            return self.budget_gib, tiered_fs, tiered
        found = None if best.found is None else replace(best.found, measure=measure)
        fleet = replace(best, policy=at, measure=measure, found=found)
        fleet, check = cut_fs.confirm(fleet, list(tiered.searched_tp), tiered.floor_blocks)
        return gib, cut_fs, replace(tiered, fleets=[fleet, *tiered.fleets[1:]], check=check)
