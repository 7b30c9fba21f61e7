"""One setting's search, the unit of work a plan hands to a worker.

A setting is the policy keys the plan varies (retention interval, match unit, placement);
its search finds the smallest pool reaching the targets: first the unbounded replay (a
setting that misses there misses at any pool), then the floor, then the pool (`pool.py`).
A plan with a latency target searches fleets instead (`fleet.py`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from analyzer.config.hardware import Gpu, GpuPlan, gpu_plan
from analyzer.config.memory import pool_gib
from analyzer.config.policy import MAXIMUMS, Policy
from analyzer.pipeline.plan.evaluate import Evaluator, Targets
from analyzer.pipeline.plan.pool import Found, floor_blocks, smallest_pool


@dataclass(frozen=True)
class Search:
    """What every setting's search needs (shipped to a worker once). `trace`: the whole
    trace, or what a worker reads it from (a DatasetRef)."""

    trace: Any
    family: str | None
    targets: Targets
    budget_blocks: int | None  # per cache (--memory-budget / bytes per block)
    per_block: int | None  # bytes per pool block (None: costs in blocks)
    num_revisions: int  # caches per replica under cache_scope revision
    measure_from: float = 0.0
    window: tuple[float, float] | None = None  # --window: (start_s, end_s) measured
    # With --gpu / --gpu-memory-gib: the GPUs each replica runs on, the model's weights
    # (bytes, held by every replica) and a fixed tensor parallel (None: the fewest that fit).
    gpu: Gpu | None = None
    weights_bytes: int = 0
    tensor_parallel: int | None = None
    # (replicas, routing, num_blocks): like settings' answers, where a pool search starts.
    hints: tuple[tuple[int, str, int], ...] = ()

    def hint(self, policy: Policy) -> int | None:
        """The pool a like setting (same replicas and routing) needed, None if none."""
        for replicas, routing, num_blocks in self.hints:
            if (replicas, routing) == (policy.replicas, policy.routing):
                return num_blocks
        return None

    def caches(self, policy: Policy) -> int:
        """The pools a setting provisions: one per model revision x replica."""
        return (1 if policy.cache_scope == "shared" else self.num_revisions) * policy.replicas

    def cost(self, policy: Policy, num_blocks: int) -> float:
        """Every cache's pool: GiB (blocks when the model gives no bytes per block)."""
        per_cache = pool_gib(num_blocks, self.per_block) if self.per_block else num_blocks
        return self.caches(policy) * per_cache

    def gpus(self, policy: Policy, num_blocks: int) -> GpuPlan | None:
        """The GPUs a setting with `num_blocks` per cache takes (None without a GPU)."""
        if self.gpu is None or self.per_block is None:
            return None
        return gpu_plan(
            cache_bytes=num_blocks * self.per_block,
            weights_bytes=self.weights_bytes,
            num_caches=self.caches(policy),
            gpu=self.gpu,
            tensor_parallel=self.tensor_parallel,
            bytes_per_block=self.per_block,
        )

    def rank(self, policy: Policy, num_blocks: int) -> tuple[float, ...]:
        """What a plan minimises, compared as a tuple: the cache in all (`cost`); with a
        GPU first whether a replica fits its GPUs, then the GPUs in all, then the cache.
        Never smaller for a larger pool, so a setting's floor bounds its answer."""
        cost = self.cost(policy, num_blocks)
        gpus = self.gpus(policy, num_blocks)
        return (cost,) if gpus is None else (float(not gpus.fits), gpus.total_gpus, cost)


@dataclass(frozen=True)
class Outcome:
    """A setting's search: `found` (None: no pool reached the targets), the policy it was
    found for (its replicas chosen under a latency target), the floor (None: no pool a
    replay can hold schedules every request), the replays it took and how many of them
    found the floor (all a search skipped after its floor costs)."""

    policy: Policy
    found: Found | None
    floor_blocks: int | None
    replays: int
    floor_replays: int = 0
    skipped: bool = False  # dearer at its floor than `cheapest`: not searched further

    def skip_at(self, search: Search, cheapest: tuple[float, ...] | None) -> Outcome:
        """This outcome as a search told `cheapest` (the best rank found, None: none)
        would have ended it: skipped (only the floor's replays taken) when even its floor
        ranks worse."""
        if (
            self.floor_blocks is None
            or cheapest is None
            or search.rank(self.policy, self.floor_blocks) <= cheapest
        ):
            return self
        return Outcome(
            self.policy, None, self.floor_blocks, self.floor_replays, self.floor_replays, True
        )


def search_setting(
    search: Search, policy: Policy, ev: Evaluator, cheapest: tuple[float, ...] | None = None
) -> Outcome:
    """The setting's smallest pool reaching the targets: the floor first, then (unless even
    the floor ranks worse than `cheapest`, a setting found already) the unbounded replay and
    the pool."""
    before = ev.replays
    floor = floor_blocks(ev, policy, MAXIMUMS["num_blocks"])
    taken = Outcome(policy, None, floor, ev.replays - before, ev.replays - before)
    if floor is None or taken.skip_at(search, cheapest).skipped:
        return taken.skip_at(search, cheapest)
    cap = MAXIMUMS["num_blocks"]
    if search.budget_blocks is not None:
        cap = min(cap, search.budget_blocks)
    if floor <= cap:
        taken = replace(taken, found=_search_pool(search, policy, ev, floor, cap))
    return replace(taken, replays=ev.replays - before)


def _search_pool(
    search: Search, policy: Policy, ev: Evaluator, floor: int, cap: int
) -> Found | None:
    """The smallest pool reaching the targets (None: none up to `cap`), after the unbounded
    replay: a setting that misses the targets there misses at any pool."""
    unbounded = ev.measure(replace(policy, num_blocks=None), "unbounded")
    if not unbounded.meets(search.targets):
        return None
    return smallest_pool(ev, policy, search.targets, floor, cap, search.hint(policy))


def search_worker(search: Search, policy: Policy) -> Outcome:
    """A worker's search of one setting (a dataset: read once per setting)."""
    search = replace(search, trace=search.trace.whole())
    ev = Evaluator(
        search.trace,
        search.family,
        measure_from=search.measure_from,
        targets=search.targets,
        window=search.window,
    )
    return search_setting(search, policy, ev)
