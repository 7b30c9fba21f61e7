"""The plan as steps: what was asked, the ceilings, the settings, their searches, the answer."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from analyzer.access.geometry import fit_policy
from analyzer.access.inputs import request_input
from analyzer.access.workers import map_partitions
from analyzer.config.hardware import gpu_memory
from analyzer.config.host_tier import GIB, chunk_bytes
from analyzer.config.memory import bytes_per_block, parse_size
from analyzer.config.models import DEFAULT_GEOMETRY_MODEL, load_model
from analyzer.config.policy import Policy
from analyzer.config.routers import ROUTER_KEYS
from analyzer.config.schedule import CONCURRENT_KEYS
from analyzer.errors import ConfigError
from analyzer.executors import ExecutorSpec, as_spec
from analyzer.pipeline.plan.answer import (
    Framing,
    answer_for,
    fleet_answer,
    unreachable_above_bound,
)
from analyzer.pipeline.plan.ask import PlanAsk
from analyzer.pipeline.plan.block_check import block_check, plan_at_block
from analyzer.pipeline.plan.evaluate import Evaluator, Progress, Targets
from analyzer.pipeline.plan.fleet import MAX_REPLICAS, FleetSearch
from analyzer.pipeline.plan.host import HostTierAnswer, check_budget, host_line, smallest_tier
from analyzer.pipeline.plan.host_fleet import FleetHostAnswer, TierFleets
from analyzer.pipeline.plan.result import PlanResult
from analyzer.pipeline.plan.search import Outcome, Search, search_setting, search_worker
from analyzer.pipeline.plan.window import up_to_window_end, window_bounds
from analyzer.sim.dispatch import make_policy
from analyzer.store.db import DEFAULT_DB, trace_block_tokens

# The keys the search sets itself (a --set of one of them is replaced).
SEARCHED = ("retention_interval", "prefix_match_unit", "replicas", "routing", "num_blocks")
# Policy keys of the step time (the concurrent schedule's), left out of serial replays.
STEP_KEYS = ("step_model", "gpu", "tensor_parallel", "step_efficiency")
# The keys a latency plan searches (the cache settings are the policy's).
FLEET_SEARCHED = ("replicas", "routing", "num_blocks")
# The routers a latency plan searches unless --routers names others, the likeliest to need
# the fewest replicas first (a fleet found early bounds the later ones' searches).
PLANNED_ROUTERS = ("dynamo", "prefix_aware", "llm-d", "sglang", "least_loaded", "round_robin")


class Planner:
    """One plan over one trace: `run()` takes its steps in order."""

    def __init__(
        self, ask: PlanAsk, trace, executor: ExecutorSpec, progress: Progress | None, nested=False
    ) -> None:
        ask.check()
        self.ask, self.trace, self.spec, self.nested = ask, trace, executor, nested
        searched = FLEET_SEARCHED if ask.latency else SEARCHED
        values = {k: v for k, v in (ask.policy or {}).items() if k not in searched}
        self.model = ask.model if ask.model is not None else values.get("model")
        schedule = ask.schedule or values.get("schedule", "serial")
        if ask.latency and schedule != "concurrent":
            flag = "--ttft-p99" if ask.ttft_p99_s is not None else "--tpot-p99"
            raise ConfigError(
                f"{flag} needs --schedule concurrent (a serial replay has no queue, so no "
                "latency to plan for)"
            )
        self.preset = load_model(self.model) if self.model is not None else None
        self.budget = parse_size(ask.memory_budget) if ask.memory_budget is not None else None
        host = ask.host_memory_budget
        self.host_budget_gib = (
            None if host is None else parse_size(host, "--host-memory-budget") / GIB
        )
        for flag, asked in (("--memory-budget", self.budget), ("--host-memory-budget", host)):
            if asked is not None and not (self.preset or {}).get("bytes_per_block"):
                raise ConfigError(
                    f"{flag} needs a --model preset with bytes_per_block"
                    + (f" ({self.model} has none)" if self.model else "")
                )
        geometry = self.preset or load_model(DEFAULT_GEOMETRY_MODEL)  # groups, block; no bytes
        defaulted = [k for k in ("groups", "block_size") if not values.get(k)]
        values.update(groups=list(values.get("groups") or geometry["groups"]), model=self.model)
        values.update(
            schedule=schedule, block_size=values.get("block_size") or geometry["block_size"]
        )
        if ask.time_scale is not None:
            values["time_scale"] = ask.time_scale
        priced = _priced_on(ask, schedule, self.preset, values)
        self.trace_block = trace_block_tokens(trace.columns["block_size"])
        fitted, fit_note = fit_policy(make_policy(values), self.trace_block)
        self.base = {**values, "block_size": fitted.block_size}
        if self.host_budget_gib is not None and ask.latency:
            self._check_fleet_tier()
        if self.host_budget_gib is not None:
            check_budget(self._policy, self.host_budget_gib, ask.host_memory_budget, ask.latency)
        self.block = fitted.block_size
        self.notes = [fit_note] if fit_note else []
        if self.preset is None:
            self.notes.append(_no_model_note(self.block, defaulted))
        if priced is not None:
            self.notes.append(priced)
        self.priced_tp = values.get("gpu") is not None and ask.latency and ask.in_gpus
        self.per_block = bytes_per_block(self.model, self.block) if self.preset else None
        self.targets = Targets(ask.target, ask.ttft_p99_s, ask.tpot_p99_s)
        self.window = None if ask.window is None else window_bounds(ask.window)
        self.ev = Evaluator(
            trace, ask.family, progress, executor, ask.measure_from, self.targets, self.window
        )
        self.progress = progress
        self.cost_unit = "GiB" if self.per_block else "blocks"
        self.search = self._search_spec()  # checks the GPU options before any replay
        self.units = self._units()

    def run(self) -> PlanResult:
        ceilings = self._ceilings()
        framing = Framing(self.ask, self.block, self.search, self.cost_unit, self._policy())
        if self.ask.target > ceilings.bound:
            check = {} if self.ask.latency else self._block_check()
            return self._result(ceilings, unreachable_above_bound(framing, ceilings), [], **check)
        if self.ask.latency:
            return self._run_fleet(framing, ceilings)
        answer = answer_for(framing, ceilings, self._search(self._settings()))
        # the block size's line where the ratio falls short, not where the memory does
        ratio_short = not answer.candidates and ceilings.dense < self.ask.target
        host = None
        if self.host_budget_gib is not None:
            host = self._host_tier(framing, ceilings, answer.candidates)
        return self._result(
            ceilings,
            answer.message,
            answer.candidates,
            load_warning=answer.load_warning,
            host_tier=host,
            **(self._block_check() if ratio_short else {}),
        )

    def _block_check(self) -> dict:
        """The line on a block size that recovers the granularity loss, and the plan at that
        size where it reaches the target (`block_check.py`)."""
        found = block_check(self.ev, self.block_rows, self._policy, self.base, self.trace_block)
        if found is None:
            return {}
        return {"check": found.line, "at_block": plan_at_block(self, found)}

    def _host_tier(self, framing: Framing, ceilings: _Ceilings, without: list) -> HostTierAnswer:
        """The same settings searched with the whole host budget on every cache; where the
        cheapest GPU pool is smaller, the tier cut down at that pool (`host.py`)."""
        budget = self.host_budget_gib
        # the tier keeps whole blocks: a match unit below the block is not modelled with it
        settings = self._settings(units=[None], host_tier_gib=budget)
        tiered = answer_for(framing, ceilings, self._search(settings))
        answer = HostTierAnswer(
            budget,
            without[0] if without else None,
            tiered.candidates[0] if tiered.candidates else None,
        )
        if answer.saves_gpu:
            setting = answer.with_tier.setting()
            slots, gib, ratio = smallest_tier(
                self.ev,
                lambda gib: self._policy(**setting, host_tier_gib=gib),
                self.targets,
                chunk_bytes(self.per_block),
                budget,
            )
            answer = replace(answer, host_gib=gib, host_chunks=slots, useful_hit_ratio=ratio)
        return replace(answer, message=host_line(answer, self.cost_unit))

    def _ceilings(self) -> _Ceilings:
        """The ceilings at each match unit the plan searches, the highest kept: what no
        pool size or retention can exceed at that unit (a latency plan's from the serial
        schedule on one replica: contention and more replicas only lower them)."""
        make = self._serial_policy if self.ask.latency else self._policy
        policies = []
        for unit in self.units:
            # full attention alone matches at its block: at a finer unit, blocks of that size
            attention = {"groups": ["full_attention"], "retention_interval": None}
            if unit is not None:
                attention["block_size"] = unit
            policies += [make(**attention), make(retention_interval=None, prefix_match_unit=unit)]
        rows = self.ev.ceilings(policies)
        self.block_rows = rows[0]  # attention only, at the block (the first unit: None)
        each = [
            _Ceilings(
                bound=self.ev.ratio(attention),
                ceiling=self.ev.ratio(attention, "matchable_tokens"),
                granularity=self.ev.ratio(attention, "lost_granularity_tokens"),
                dense=self.ev.ratio(dense),
                unit=unit,
            )
            for unit, attention, dense in zip(self.units, rows[::2], rows[1::2], strict=True)
        ]
        best = max(each, key=lambda c: c.bound)  # the first of equal bounds
        return replace(best, others=tuple((c.unit, c.bound) for c in each if c is not best))

    def _run_fleet(self, framing: Framing, ceilings: _Ceilings) -> PlanResult:
        """A latency target: the fewest GPUs (replicas without a GPU) meeting every target;
        with a host budget, then with the tier on every replica (`_fleet_host_tier`)."""
        fs = self._fleet_search(self._policy)
        outcome = fs.run()
        self.notes.extend(outcome.notes)
        answer = fleet_answer(framing, ceilings, outcome, fs)
        host = None
        if self.host_budget_gib is not None:
            host = self._fleet_host_tier(framing, ceilings, outcome, answer, fs)
        return self._result(
            ceilings,
            answer.message,
            answer.candidates,
            load_warning=answer.load_warning,
            check=answer.check,
            host_tier=host,
        )

    def _fleet_search(self, make, most_gpus: int | None = None) -> FleetSearch:
        return FleetSearch(
            self.search,
            self.ev,
            make,
            self.ask.routers or PLANNED_ROUTERS,
            self.ask.max_replicas or MAX_REPLICAS,
            priced=self.priced_tp,
            most_gpus=most_gpus,
        )

    def _fleet_host_tier(self, framing, ceilings, outcome, answer, fs) -> FleetHostAnswer:
        """The fleets searched again with the host tier on every replica (`host_fleet.py`)."""
        tiers = TierFleets(
            self.ev,
            self.targets,
            self.host_budget_gib,
            chunk_bytes(self.per_block),
            self.search.gpu.name if self.search.gpu else None,
            self._fleet_search,
            self._policy,
        )
        host = tiers.answer(framing, ceilings, outcome, answer, fs)
        self.notes.extend(n for n in host.notes if n not in self.notes)
        return host

    def _check_fleet_tier(self) -> None:
        """A latency plan beside a host tier: what the tier's fleet replays refuse, before
        any replay (vLLM's synchronous loop; the engine's own checks of the tier)."""
        flag = "--ttft-p99" if self.ask.ttft_p99_s is not None else "--tpot-p99"
        if self.base.get("async_scheduling", CONCURRENT_KEYS["async_scheduling"].default):
            raise ConfigError(
                f"--host-memory-budget with {flag}: a host tier is modelled on vLLM's "
                "synchronous loop only; add --set async_scheduling=false (the fleets with "
                "and without the tier are then both searched on it)"
            )
        self._policy(host_tier_gib=self.host_budget_gib)

    def _policy(self, **keys) -> Policy:
        return make_policy({**self.base, **keys})

    def _serial_policy(self, **keys) -> Policy:
        """The base policy on one replica under the serial schedule (no clock, no step
        time, no router knobs)."""
        clock = {*CONCURRENT_KEYS, *ROUTER_KEYS, *STEP_KEYS}
        values = {k: v for k, v in self.base.items() if k not in clock}
        return make_policy({**values, "schedule": "serial", "replicas": 1, **keys})

    def _units(self) -> list[int | None]:
        """The match units searched: the block (None) and on a Mamba model a quarter block;
        a latency plan keeps the policy's."""
        if self.ask.latency:
            return [self.base.get("prefix_match_unit")]
        groups = self.base["groups"]
        units: list[int | None] = [None]
        if "mamba" in groups and "sliding_window" not in groups and self.block % 4 == 0:
            if self.trace_block and (self.block // 4) % self.trace_block:
                self.notes.append(
                    f"match unit {self.block // 4} (a quarter block) not searched: it is not "
                    f"whole {self.trace_block}-token trace blocks"
                )
            else:
                units.append(self.block // 4)
        return units

    def _settings(self, units: list[int | None] | None = None, **keys) -> list[Policy]:
        """Retention {0, null} x match unit {block, block/4 on Mamba; or `units`} x
        placement (each with `keys` besides)."""
        groups = self.base["groups"]
        retentions: list[int | None] = [0, None] if len(groups) > 1 else [None]
        return [
            self._policy(
                retention_interval=r,
                prefix_match_unit=u,
                replicas=replicas,
                routing=routing,
                **keys,
            )
            for r in retentions
            for u in (self.units if units is None else units)
            for replicas, routing in self._placements()
        ]

    def _placements(self) -> list[tuple[int, str]]:
        """(replicas, routing): the trace's, prefix-aware over its replicas and one
        replica."""
        replicas = len({r for r in self.trace.columns["replica"] if r is not None}) or 1
        placements = [(replicas, "trace")]
        if replicas > 1:
            placements += [(replicas, "prefix_aware"), (1, "round_robin")]
        return placements

    def _search_spec(self) -> Search:
        per_block = self.per_block
        return Search(
            trace=self.trace.for_workers(),
            family=self.ask.family,
            targets=self.targets,
            budget_blocks=None if self.budget is None else self.budget // per_block,
            per_block=per_block,
            num_revisions=len(set(self.trace.columns["model_revision"])),
            measure_from=self.ask.measure_from,
            window=self.window,
            **self._gpus(),
        )

    def _gpus(self) -> dict[str, Any]:
        """Search's GPU fields, with --gpu or --gpu-memory-gib (checked here)."""
        ask = self.ask
        if not ask.in_gpus:
            return {}
        gpu = gpu_memory(ask.gpu, ask.gpu_memory_gib)
        weights = (self.preset or {}).get("weights_bytes")
        if self.per_block is None or weights is None:
            lacks = ""
            if self.model is not None:
                key = "bytes_per_block" if self.per_block is None else "weights_bytes"
                lacks = f" ({self.model} has no {key})"
            raise ConfigError(
                "--gpu and --gpu-memory-gib need a --model with bytes_per_block and "
                f"weights_bytes{lacks}"
            )
        return {"gpu": gpu, "weights_bytes": weights, "tensor_parallel": ask.tensor_parallel}

    def _search(self, settings: list[Policy]) -> list[Outcome]:
        """Each setting's outcome, in order; one whose floor ranks worse than a setting
        found before it is skipped. The first setting of each placement is searched from
        its floor; the later ones start from the answer of their placement's first
        (`Search.hints`). A non-local executor searches the first settings, then the
        others, each whole, and the same skips are applied to its results: the answer is
        the local one."""
        first = len(self._placements())  # placements vary fastest in `settings`
        outcomes: list[Outcome] = []
        cheapest: tuple[float, ...] | None = None
        for wave in (settings[:first], settings[first:]):
            search = self.search if not outcomes else replace(self.search, hints=_hints(outcomes))
            done = None
            if not self.spec.is_local and wave:
                done = _search_all(self.spec, search, wave, self.progress)
            for k, policy in enumerate(wave):
                if done is None:
                    outcome = search_setting(search, policy, self.ev, cheapest)
                else:
                    outcome = done[k].skip_at(search, cheapest)
                    self.ev.replays += outcome.replays
                outcomes.append(outcome)
                if outcome.found is not None:
                    rank = search.rank(outcome.policy, outcome.found.num_blocks)
                    cheapest = rank if cheapest is None else min(cheapest, rank)
        return outcomes

    def _result(self, ceilings, message: str, candidates: list, **more) -> PlanResult:
        return PlanResult(
            self.ask.target,
            ceilings.bound,
            ceilings.ceiling,
            ceilings.dense,
            bool(candidates),
            candidates,
            self.cost_unit,
            self.ev.replays,
            message,
            self.base["schedule"],
            tuple(self.notes),
            ceilings.ceiling + ceilings.granularity,
            ttft_p99_target_s=self.ask.ttft_p99_s,
            tpot_p99_target_s=self.ask.tpot_p99_s,
            best_unit=ceilings.unit,
            unit_bounds=ceilings.others,
            replays_cut_short=self.ev.stopped,
            max_num_batched_tokens=self._policy().step_token_budget,
            block_size=self.block,
            **more,
        )


@dataclass(frozen=True)
class _Ceilings:
    bound: float  # the attention-only bound: hits of an unbounded full-attention cache
    ceiling: float  # the shared-prefix ceiling: matchable tokens / queries
    granularity: float  # what whole blocks or match units lose of the token-level share
    dense: float  # the model's groups, every sparse state kept, unbounded
    unit: int | None = None  # the match unit they are at (None: the block)
    others: tuple[tuple[int | None, float], ...] = ()  # (unit, bound) at the other units


def _hints(outcomes: list[Outcome]) -> tuple[tuple[int, str, int], ...]:
    """(replicas, routing, num_blocks) of each setting found."""
    return tuple(
        (o.policy.replicas, o.policy.routing, o.found.num_blocks)
        for o in outcomes
        if o.found is not None
    )


def _search_all(spec: ExecutorSpec, search: Search, settings: list[Policy], progress):
    """Every setting searched on `spec`, one task each."""
    labels = [f"plan setting {p.to_json()}" for p in settings]
    tick = (lambda done, total: progress(done, f"{done} of {total} settings")) if progress else None
    return map_partitions(
        spec,
        search_worker,
        settings,
        labels=labels,
        shared=search,
        progress=tick,
        in_worker=search.trace.reads_in_worker,
    )


def plan(
    target: float,
    *,
    db_path: str | Path = DEFAULT_DB,
    dataset: str | Path | None = None,
    executor: ExecutorSpec | str | None = None,
    progress: Progress | None = None,
    **asked: Any,
) -> PlanResult:
    """Search the cheapest settings that reach `target` (useful hit ratio); see the package
    doc. `asked`: the other fields of `PlanAsk` (model, memory_budget, family, schedule,
    time_scale, policy, measure_from, ttft_p99_s, tpot_p99_s, gpu, gpu_memory_gib,
    tensor_parallel, routers, max_replicas).
    The requests come from the store at `db_path`, or from a Parquet `dataset` (nothing is
    created or written). `progress(replays so far, what)` is called before each replay
    (with a non-local `executor`: as each setting's search finishes)."""
    unknown = sorted(set(asked) - set(PlanAsk.__dataclass_fields__))
    if unknown:
        raise TypeError(f"plan() got unexpected keyword arguments: {', '.join(unknown)}")
    ask = PlanAsk(target, **asked)
    ask.check()
    spec = as_spec(executor)
    if ask.window is not None and dataset is not None:
        raise ConfigError("--window selects the database's requests by time; not with --dataset")
    trace = request_input(db_path, dataset).read_only_trace(spec)
    if ask.window is not None:
        trace = up_to_window_end(trace, ask.window)
    return Planner(ask, trace, spec, progress).run()


def _priced_on(ask, schedule: str, preset: dict | None, values: dict) -> str | None:
    """Under the concurrent schedule, --gpu with --tensor-parallel prices every replay's
    steps on that GPU (the roofline from the model's figures), unless the policy names its
    own step model; a note says which step time the latencies rest on."""
    if schedule != "concurrent" or values.get("gpu") is not None:
        return None
    if values.get("step_model") not in (None, "auto"):
        return None
    linear = any(k in values for k in ("step_base_ms", "step_token_us"))
    if ask.latency and ask.gpu is not None and (preset or {}).get("figures") and not linear:
        values.update(gpu=ask.gpu, tensor_parallel=ask.tensor_parallel or 1)
        at = (
            f"{ask.tensor_parallel} x {ask.gpu}"
            if ask.tensor_parallel is not None
            else f"{ask.gpu} at each tensor parallel searched"
        )
        return f"steps priced on {at} from the model (the roofline)"
    if ask.gpu is None or linear:
        base = values.get("step_base_ms", CONCURRENT_KEYS["step_base_ms"].default)
        token = values.get("step_token_us", CONCURRENT_KEYS["step_token_us"].default)
        return (
            f"steps priced at {base:g} ms + {token:g} us per scheduled token (no GPU "
            "named: --gpu G --tensor-parallel N prices them from the model and the GPU)"
        )
    if ask.tensor_parallel is None or not (preset or {}).get("figures"):
        return (
            f"steps priced by step_base_ms + step_token_us, not on the {ask.gpu}: give "
            "--tensor-parallel and a --model with compute figures (a config.json) to price "
            "them from the model and the GPU"
        )
    values.update(gpu=ask.gpu, tensor_parallel=ask.tensor_parallel)
    return f"steps priced on {ask.tensor_parallel} x {ask.gpu} from the model (the roofline)"


def _no_model_note(block: int, defaulted: list[str]) -> str:
    """What a plan without --model counts in, and what it took from the default geometry."""
    names = {"groups": "groups", "block_size": "block size"}
    what = " and ".join(names[k] for k in defaulted)
    verb = "is" if defaulted == ["block_size"] else "are"
    took = f"; its {what} {verb} {DEFAULT_GEOMETRY_MODEL}'s" if defaulted else ""
    return (
        f"no --model: memory is counted in {block:,}-token blocks, not GiB (a model preset "
        f"prices a block){took}"
    )
