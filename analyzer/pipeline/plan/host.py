"""A plan beside a host KV tier (`hpa plan --host-memory-budget`): how much GPU cache a
tier of host memory saves at the target, and the smallest tier that saves it.

Host DRAM is priced apart from HBM: the plan first answers without a tier (its usual
answer), then searches the same settings again with the whole host budget on every cache
(vLLM's `--kv-offloading-size`, policy key `host_tier_gib`), the cheapest GPU pool first.
Where that pool is smaller, the host tier is cut down at it, by bisection on the tier's
slots, to the smallest that still reaches the target (within `TOLERANCE`, each end
replayed). Where it is not, the tier adds nothing at this target, and the plan says so: a
host hit is a hit only beyond the GPU's, and vLLM writes every computed chunk through to
the host, so a tier no larger than the GPU pool holds nothing the pool does not (vLLM's own
docs; analyzer/sim/vllm/offload.py).

A host hit counts as a hit in the useful hit ratio (its tokens are loaded, not computed);
the wait it costs is the concurrent replay's, in its TTFT. With a latency target the budget
sizes fleets instead: `host_fleet.py`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from analyzer.config.host_tier import GIB, host_slots
from analyzer.config.policy import Policy
from analyzer.errors import ConfigError
from analyzer.pipeline.plan.evaluate import Evaluator, Targets
from analyzer.pipeline.plan.result import Candidate

TOLERANCE = 0.05  # the tier found is at most this share above the smallest that meets


def check_budget(
    policy_of: Callable[..., Policy], budget_gib: float, asked: str, latency: bool
) -> None:
    """What the engine refuses of a tier of the whole budget (one smaller than a slot, a
    model without bytes per block, ...), said before any replay and naming the flag (`asked`:
    the budget as written): after 172 replays it was `policy key 'host_tier_gib':
    0.0009765625 GiB holds no slot ...`. The serial search replays the tier at the block's
    match unit; a latency plan's fleets at the policy's."""
    from analyzer.sim.vllm.host_tier import host_tier_spec

    unit = {} if latency else {"prefix_match_unit": None}
    try:
        host_tier_spec(policy_of(host_tier_gib=budget_gib, **unit))
    except ConfigError as exc:
        why = str(exc).removeprefix("policy key 'host_tier_gib': ")
        why = why.removeprefix(f"{budget_gib} GiB ")  # '... holds no slot'
        raise ConfigError(f"--host-memory-budget {asked}: {why}") from None


@dataclass(frozen=True)
class HostTierAnswer:
    """What a host budget changes: the cheapest candidate without a tier and with the
    whole budget, the tier cut down at that pool, and the line that says it."""

    budget_gib: float  # per cache, as asked
    without: Candidate | None
    with_tier: Candidate | None  # at the whole budget
    host_gib: float | None = None  # the tier kept (None: none kept)
    host_chunks: int | None = None
    useful_hit_ratio: float | None = None  # at with_tier's pool and the tier kept
    message: str = ""
    check: str | None = None  # (a latency plan's FleetHostAnswer checks its fleet)

    @property
    def saves_gpu(self) -> bool:
        if self.with_tier is None:
            return False
        return self.without is None or self.with_tier.cost < self.without.cost

    def as_dict(self) -> dict[str, Any]:
        return {
            "host_memory_budget_gib": self.budget_gib,
            "host_tier_gib": self.host_gib,
            "host_tier_chunks": self.host_chunks,
            "useful_hit_ratio": self.useful_hit_ratio,
            "saves_gpu_memory": self.saves_gpu,
            "without_tier": None if self.without is None else self.without.as_dict(),
            "with_tier": None if self.with_tier is None else self.with_tier.as_dict(),
            "message": self.message,
        }


def smallest_tier(
    ev: Evaluator,
    with_tier: Callable[[float], Policy],
    targets: Targets,
    slot_bytes: int,
    budget_gib: float,
    stop_early: bool = False,
) -> tuple[int, float, float]:
    """(slots, GiB, useful hit ratio): the smallest host tier, in whole slots and within
    TOLERANCE, with which the setting `with_tier(GiB)` still reaches `targets` (it reaches
    them with the whole budget; without a tier its pool misses, or the tier would save no
    GPU memory), and the ratio there (that replay runs to its end; with `stop_early`, those
    of the bisection stop once their TTFT p99 has missed)."""

    def measure(gib: float, stop: bool = False):
        return ev.measure(with_tier(gib), f"host tier {gib:.2f} GiB", stop_early=stop)

    hi, lo = host_slots(budget_gib, slot_bytes), 0
    while hi - lo > max(1, int(TOLERANCE * hi)):
        mid = (lo + hi) // 2
        if measure(mid * slot_bytes / GIB, stop_early).meets(targets):
            hi = mid
        else:
            lo = mid
    # as a user writes it back (host_tier_gib=X.XX): rounded up, so it holds every slot
    said = min(math.ceil(hi * slot_bytes / GIB * 100) / 100, budget_gib)
    return host_slots(said, slot_bytes), said, measure(said).useful_hit_ratio


def host_line(answer: HostTierAnswer, cost_unit: str) -> str:
    """The plan's line about the host tier."""
    budget = f"{answer.budget_gib:g} GiB of host memory per cache"
    with_tier, without = answer.with_tier, answer.without
    if with_tier is None:
        return f"host tier: even with {budget} no setting reaches the target"
    if not answer.saves_gpu:
        return (
            f"host tier: {budget} saves no GPU memory at this target (the cheapest pool "
            f"with it is the same, {without.cost:,.2f} {cost_unit}): a host tier adds "
            "nothing here, and one no larger than the GPU pool never does (vLLM writes "
            "every computed chunk through to it)"
        )
    was = (
        "no pool reaches it without"
        if without is None
        else (f"{without.cost:,.2f} {cost_unit} without")
    )
    setting = " ".join(f"{k}={_j(v)}" for k, v in with_tier.setting().items())
    return (
        f"host tier: with {budget}, the cheapest: {setting} "
        f"host_tier_gib={answer.host_gib:.2f} -> useful hit ratio "
        f"{answer.useful_hit_ratio:.3f} for {with_tier.cost:,.2f} {cost_unit} of GPU cache "
        f"in all ({was}) and {answer.host_gib:,.2f} GiB of host memory per cache "
        f"({answer.host_chunks:,} slots)"
    )


def _j(value) -> str:
    return "null" if value is None else str(value)
