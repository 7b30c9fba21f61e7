"""Replaying a setting and measuring it: the plan's one way to look at a policy."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from analyzer.access.workers import map_partitions
from analyzer.config.policy import Policy
from analyzer.errors import ConfigError
from analyzer.executors import LOCAL
from analyzer.pipeline.plan.load import LoadFigures, load_figures
from analyzer.pipeline.replay import replay_rows
from analyzer.pipeline.sweep_points import rows_from_table, rows_table

# progress(replays so far, what the search is doing)
Progress = Callable[[int, str], None]


@dataclass(frozen=True)
class Measure:
    """One replay's figures over the measured requests."""

    useful_hit_ratio: float
    schedulable: bool  # every request (measured or not) was scheduled
    load: LoadFigures | None = None  # a concurrent replay's latency figures

    def meets(self, target: float, ttft_p99_s: float | None) -> bool:
        """Reaches the hit-ratio target (and the TTFT p99 target, when there is one)."""
        if not self.schedulable or self.useful_hit_ratio < target:
            return False
        return ttft_p99_s is None or (self.load is not None and self.load.ttft_p99_s <= ttft_p99_s)


class Evaluator:
    """Replays settings and measures them: over the requests of `family` (every one when
    None) from arrival index floor(measure_from x n) on (the warm-up before is replayed,
    never measured, as `hpa replay --measure-from` does)."""

    def __init__(
        self,
        trace,
        family: str | None,
        progress: Progress | None = None,
        executor=LOCAL,
        measure_from: float = 0.0,
    ) -> None:
        self.trace = trace
        self.replays = 0
        self.progress = progress
        self.executor = executor
        self.mask = _measured(trace.columns["prompt_family"], family, measure_from)

    def rows(self, policy: Policy, trace=None, what: str = "") -> dict:
        """One replay's rows (of `trace`, default the plan's)."""
        if self.progress:
            self.progress(self.replays, what or _described(policy))
        rows = replay_rows(self.trace if trace is None else trace, policy, executor=self.executor)
        self.replays += 1
        return rows

    def measure(self, policy: Policy, what: str = "") -> Measure:
        rows = self.rows(policy, what=what)
        ok = all(e is None for e in rows["error"])
        load = load_figures(rows, self.mask) if policy.schedule == "concurrent" else None
        return Measure(self.ratio(rows), ok, load)

    def ceilings(self, policies: list[Policy]) -> list[dict]:
        """Each policy's rows: replayed here, or (a non-local executor) each replay one task
        on the whole trace, shipped to its worker as `for_workers()` (a dataset: its path)."""
        if self.executor.is_local:
            return [self.rows(p, what="ceiling " + _described(p)) for p in policies]
        before = self.replays

        def tick(done: int, total: int) -> None:
            self.replays = before + done
            if self.progress:
                self.progress(self.replays, "ceiling replays")

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
        """sum(name) / sum(prompt_tokens) over the measured requests."""
        q = self._sum(rows, "prompt_tokens")
        return self._sum(rows, name) / q if q else 0.0


def _measured(families: list, family: str | None, measure_from: float) -> np.ndarray | None:
    """Which requests are measured (None: every one)."""
    mask = None
    if family is not None:
        mask = np.asarray([f == family for f in families])
        if not mask.any():
            known = sorted({f for f in families if f is not None})
            raise ConfigError(
                f"--family {family!r}: no such prompt family; known: {', '.join(known)}"
            )
    if measure_from:
        measured = np.arange(len(families)) >= int(np.floor(measure_from * len(families)))
        mask = measured if mask is None else mask & measured
    return mask


def _described(policy: Policy) -> str:
    pool = "unbounded" if policy.num_blocks is None else f"num_blocks={policy.num_blocks:,}"
    return (
        f"retention_interval={_j(policy.retention_interval)} prefix_match_unit="
        f"{_j(policy.prefix_match_unit)} replicas={policy.replicas} routing={policy.routing} "
        f"{pool}"
    )


def _j(value) -> str:
    return "null" if value is None else str(value)


def _ceiling_worker(shipped, policy: Policy):
    return rows_table(replay_rows(shipped.whole(), policy))
