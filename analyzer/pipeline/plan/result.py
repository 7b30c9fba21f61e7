"""A plan's answer: the settings searched, each with its smallest pool, and the ceilings."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from analyzer.config.hardware import GpuPlan
from analyzer.pipeline.plan.load import LoadFigures


@dataclass(frozen=True)
class Candidate:
    """One setting with the smallest pool (num_blocks per cache) that reaches the targets."""

    retention_interval: int | None
    prefix_match_unit: int | None
    replicas: int
    routing: str
    num_blocks: int | None  # None: a latency plan's fleet without a pool limit
    useful_hit_ratio: float
    memory_gib: float | None  # per cache
    cost: float  # GiB (or blocks when the preset has no bytes_per_block), every cache
    # What set the pool's size: "target" (the hit ratio), "ttft p99" (the latency target:
    # a smaller pool reached the hit ratio), or "longest request" (the smallest pool that
    # holds it already reaches both).
    sized_by: str = "target"
    num_caches: int = 1  # model revisions x replicas (replicas under cache_scope shared)
    floor_blocks: int = 0  # the smallest pool per cache in which every request schedules
    load: LoadFigures | None = None  # concurrent schedule: at num_blocks
    gpus: GpuPlan | None = None  # with --gpu or --gpu-memory-gib: at num_blocks
    # A latency plan's fleet: GPUs a replica (None: no GPU named), the pool they hold (None:
    # unbounded) and GPUs in all.
    tensor_parallel: int | None = None
    room_blocks: int | None = None
    total_gpus: int | None = None

    def setting(self) -> dict[str, Any]:
        """The policy keys the search chose (as `--set` writes them)."""
        return {
            "retention_interval": self.retention_interval,
            "prefix_match_unit": self.prefix_match_unit,
            "replicas": self.replicas,
            "routing": self.routing,
            "num_blocks": self.num_blocks,
        }

    def as_dict(self) -> dict[str, Any]:
        out = {
            **self.setting(),
            "useful_hit_ratio": self.useful_hit_ratio,
            "memory_gib": self.memory_gib,
            "caches": self.num_caches,
            "total_gib": None if self.memory_gib is None else self.cost,
            "total_blocks": None if self.num_blocks is None else self.num_blocks * self.num_caches,
            "sized_by": self.sized_by,
            "floor_blocks": self.floor_blocks,
            "tensor_parallel": self.tensor_parallel,
            "room_blocks": self.room_blocks,
            "total_gpus": self.total_gpus,
        }
        out.update(_load_keys(self.load))
        out["gpus"] = None if self.gpus is None else self.gpus.as_dict()
        return out


LOAD_KEYS = (
    *("ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s", "goodput_rps"),
    *("queue_mean_s", "max_in_flight", "saturated"),
)
# Candidate.as_dict's keys (a plan with no answer gives each as null).
CANDIDATE_KEYS = (
    *("retention_interval", "prefix_match_unit", "replicas", "routing", "num_blocks"),
    *("useful_hit_ratio", "memory_gib", "caches", "total_gib", "total_blocks", "sized_by"),
    "floor_blocks",
    *("tensor_parallel", "room_blocks", "total_gpus"),
    *LOAD_KEYS,
    "gpus",
)


def _load_keys(load: LoadFigures | None) -> dict[str, Any]:
    if load is None:
        return dict.fromkeys(LOAD_KEYS)
    return {k: getattr(load, k) for k in LOAD_KEYS}


@dataclass(frozen=True)
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
    ttft_p99_target_s: float | None = None
    # One line when the chosen setting's simulated server cannot keep up (its queue grows).
    load_warning: str | None = None
    max_num_batched_tokens: int | None = None  # the step token budget every replay used
    block_size: int | None = None  # tokens per block in every replay (fitted to the trace)
    tpot_p99_target_s: float | None = None
    # A latency plan: the answer and the fleet one step smaller, each replayed to its end.
    # A hit-ratio plan that missed: the block size that recovers the granularity loss.
    check: str | None = None
    best_unit: int | None = None  # the match unit of the ceilings (None: the block)
    unit_bounds: tuple[tuple[int | None, float], ...] = ()  # the other units' bounds
    replays_cut_short: int = 0  # replays stopped once their TTFT p99 missed the target
    host_tier: Any = None  # --host-memory-budget: a host.HostTierAnswer
    # A hit-ratio plan short at its block: the plan at the block size that reaches it.
    at_block: PlanResult | None = None

    @property
    def best(self) -> Candidate | None:
        return self.candidates[0] if self.candidates else None

    def as_dict(self) -> dict[str, Any]:
        """One JSON object: the cheapest candidate's figures at the top level (null when
        none reached the targets), then the ceilings, every candidate and the message."""
        best = self.best
        top = best.as_dict() if best else dict.fromkeys(CANDIDATE_KEYS)
        return {
            "reachable": self.reachable,
            "target_useful_hit_ratio": self.target,
            "target_ttft_p99_s": self.ttft_p99_target_s,
            "target_tpot_p99_s": self.tpot_p99_target_s,
            "schedule": self.schedule,
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "block_size": self.block_size,
            **top,
            "load_warning": self.load_warning,
            "ceilings": {
                "shared_token_ratio": self.shared_token_ratio,
                "shared_prefix_ceiling": self.shared_prefix_ceiling,
                "attention_only_bound": self.attention_only_bound,
                "unbounded_ratio": self.unbounded_ratio,
                "prefix_match_unit": self.best_unit,
                "other_units": [
                    {"prefix_match_unit": u, "attention_only_bound": b} for u, b in self.unit_bounds
                ],
            },
            "cost_unit": self.cost_unit,
            "candidates": [c.as_dict() for c in self.candidates],
            "notes": list(self.notes),
            "message": self.message,
            "check": self.check,
            "replays": self.replays,
            "replays_cut_short": self.replays_cut_short,
            "host_tier": None if self.host_tier is None else self.host_tier.as_dict(),
            "at_block": None if self.at_block is None else self.at_block.as_dict(),
        }
