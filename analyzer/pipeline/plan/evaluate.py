"""Replaying a setting and measuring it: the plan's one way to look at a policy."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from analyzer.access.workers import map_partitions
from analyzer.config.policy import Policy
from analyzer.errors import ConfigError
from analyzer.executors import LOCAL
from analyzer.pipeline.plan.load import LoadFigures, load_figures
from analyzer.pipeline.replay import replay_rows
from analyzer.pipeline.sweep_points import rows_from_table, rows_table
from analyzer.sim.vllm.host_tier import host_tier_spec, slots_used, tiers_built
from analyzer.sim.watch import LateWatch, TargetMissed, stop_when_late

# progress(replays so far, what the search is doing)
Progress = Callable[[int, str], None]


@dataclass(frozen=True)
class Targets:
    """What a plan must meet: a useful hit ratio, and under load a TTFT p99 and a TPOT p99
    (seconds; None: no target)."""

    hit_ratio: float
    ttft_p99_s: float | None = None
    tpot_p99_s: float | None = None

    @property
    def latency(self) -> bool:
        """Whether a latency target is set."""
        return self.ttft_p99_s is not None or self.tpot_p99_s is not None


@dataclass(frozen=True)
class Measure:
    """One replay's figures over the measured requests. `stopped`: the replay was cut short
    once its TTFT p99 could no longer meet the target (`sim/watch.py`): it misses, and its
    hit ratio and load are not known (nan, None)."""

    useful_hit_ratio: float
    schedulable: bool  # every request (measured or not) was scheduled
    load: LoadFigures | None = None  # a concurrent replay's latency figures
    stopped: bool = False

    def meets(self, targets: Targets) -> bool:
        """Reaches every target."""
        return not self.misses(targets)

    def misses(self, targets: Targets) -> tuple[str, ...]:
        """The targets it misses, by name: "schedulable", "hit ratio", "ttft p99",
        "tpot p99" (empty: it meets them all)."""
        if self.stopped:
            return ("ttft p99",)
        out = []
        if not self.schedulable:
            out.append("schedulable")
        if not self.useful_hit_ratio >= targets.hit_ratio:
            out.append("hit ratio")
        load = self.load
        if targets.ttft_p99_s is not None and (
            load is None or load.ttft_p99_s > targets.ttft_p99_s
        ):
            out.append("ttft p99")
        if targets.tpot_p99_s is not None and (
            load is None or load.tpot_p99_s is None or load.tpot_p99_s > targets.tpot_p99_s
        ):
            out.append("tpot p99")
        return tuple(out)


class Evaluator:
    """Replays settings and measures them: over the requests of `family` (every one when
    None) from arrival index floor(measure_from x n) on (the warm-up before is replayed,
    never measured, as `hpa replay --measure-from` does), and with `window` (start_s,
    end_s) only those with start_s <= timestamp_s < end_s (`hpa plan --window`)."""

    def __init__(
        self,
        trace,
        family: str | None,
        progress: Progress | None = None,
        executor=LOCAL,
        measure_from: float = 0.0,
        targets: Targets | None = None,
        window: tuple[float, float] | None = None,
    ) -> None:
        self.trace = trace
        self.replays = 0
        self.stopped = 0  # replays cut short once their TTFT p99 missed the target
        self.progress = progress
        self.executor = executor
        self.mask = _measured(trace.columns["prompt_family"], family, measure_from)
        if window is not None:
            start, end = window
            inside = np.asarray(
                [t is not None and start <= t < end for t in trace.columns["timestamp_s"]]
            )
            self.mask = inside if self.mask is None else self.mask & inside
        self.targets = targets
        self.outputs = np.asarray([o or 0 for o in trace.columns["output_tokens"]], dtype=np.int64)
        self.memo: dict[str, Measure] = {}
        # Replays with a host tier that evicted nothing, by their policy less the tier's size:
        # (the most slots a replica's tier took, the figures, whether a watch could stop it)
        self.roomy: dict[str, tuple[int, Measure, bool]] = {}

    def rows(self, policy: Policy, trace=None, what: str = "") -> dict:
        """One replay's rows (of `trace`, default the plan's)."""
        if self.progress:
            self.progress(self.replays, what or _described(policy))
        rows = replay_rows(self.trace if trace is None else trace, policy, executor=self.executor)
        self.replays += 1
        return rows

    def measure(self, policy: Policy, what: str = "", *, stop_early: bool = False) -> Measure:
        """The replay's figures. `stop_early` (under a TTFT target, local replays): cut
        the replay short once its TTFT p99 misses the target. A policy measured before is
        not replayed again (a replay cut short is, when asked to run to its end), nor one
        whose host tier has the slots of one measured (`_key`), or at least the slots that
        a larger tier measured took without evicting (`_roomy`): their replays are the same,
        step for step."""
        key, slots = _key(policy), _slots(policy)
        known = self.memo.get(key)
        if known is None and slots is not None:
            known = self._roomy(policy, slots, stop_early)
        if known is not None and not (known.stopped and not stop_early):
            return known
        watch = self._watch() if stop_early and policy.schedule == "concurrent" else None
        try:
            with stop_when_late(watch), tiers_built() as tiers:
                rows = self.rows(policy, what=what)
        except TargetMissed:
            self.replays += 1  # (rows() counts the replays that end)
            self.stopped += 1
            measured = Measure(float("nan"), True, None, stopped=True)
        else:
            ok = all(e is None for e in rows["error"])
            load = None
            if policy.schedule == "concurrent":
                load = load_figures(rows, self.mask, self.outputs, self.targets)
            measured = Measure(self.ratio(rows), ok, load)
            used = slots_used(tiers) if self.executor.is_local else None
            if slots is not None and used is not None:
                room = (used, measured, watch is not None)
                self.roomy.setdefault(_key(policy, sized=False), room)
        self.memo[key] = measured
        return measured

    def _roomy(self, policy: Policy, slots: int, stop_early: bool) -> Measure | None:
        """The figures of `policy` (a host tier of `slots` a replica) where a replay with a
        larger tier evicted nothing and took at most `slots` (`host_tier.slots_used`): its
        own replay is that one, step for step (None: no such replay). Asked to stop early,
        one that ran unwatched serves where its TTFT p99 met the target (a watch stops only
        a replay whose p99 is above it), else it is replayed as asked."""
        used, measured, watched = self.roomy.get(_key(policy, sized=False), (0, None, False))
        if measured is None or slots < used:
            return None
        limit = None if self.targets is None else self.targets.ttft_p99_s
        watch = stop_early and policy.schedule == "concurrent" and self.executor.is_local
        if watch and limit is not None and not watched:
            if measured.load is None or measured.load.ttft_p99_s > limit:
                return None
        return measured

    def memo_of(self, policy: Policy) -> Measure | None:
        """The figures of `policy` if it was measured (None: not yet)."""
        return self.memo.get(_key(policy))

    def _watch(self) -> LateWatch | None:
        """A watch on the TTFT target, for replays in this process."""
        limit = None if self.targets is None else self.targets.ttft_p99_s
        if limit is None or not self.executor.is_local:
            return None
        ids = self.trace.columns["request_id"]
        if self.mask is None:
            return LateWatch(limit, len(ids), None)
        measured = [r for r, m in zip(ids, self.mask, strict=True) if m]
        return LateWatch(limit, len(measured), measured)

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


def _key(policy: Policy, sized: bool = True) -> str:
    """Policies that replay alike have one key: with one replica every router sends every
    request to it (its knobs read nothing), and host tiers of the same slots are one tier
    (`host_tier_gib` 0.32 and 0.3113 on 13.4 MB slots both hold 25). `sized` False: the
    key without the tier's size."""
    if policy.replicas == 1 and policy.routing not in ("trace",):
        policy = replace(policy, routing="round_robin", router_options=())
    slots = _slots(policy)
    if slots is not None:
        size = ("host_tier_gib", "host_tier_chunks")
        options = [(k, v) for k, v in policy.options if k not in size]
        options += [("host_tier_chunks", slots if sized else None)]
        policy = replace(policy, options=tuple(sorted(options)))
    return policy.to_json()


def _slots(policy: Policy) -> int | None:
    """The slots of the policy's host tier (None: none, or a size the engine refuses, which
    its replay says)."""
    options = dict(policy.options)
    if not options.get("host_tier_gib") and options.get("host_tier_chunks") is None:
        return None
    try:
        spec = host_tier_spec(policy)
    except ConfigError:
        return None
    return None if spec is None else spec.num_chunks


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
