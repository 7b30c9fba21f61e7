"""`hpa sweep`: move one policy knob at a time (or a grid), one stored replay run per point.

    sweeps = run_sweeps("vllm-default", ["model=qwen3.5-4b"], ["num_blocks=500,1000"], db_path=..)

Every point is a normal run (replay_runs / replay_requests / replay_summary) plus a row of
`sweep_points`. Points are replayed in worker processes (`jobs`) from the trace loaded once,
then stored in value order, so run ids and results do not depend on `jobs`.

A `num_blocks` sweep of an LRU full-attention-only policy (see `one_pass_applies`) is not
replayed point by point: one stack-distance pass (stack_distance.py) gives every capacity,
and a point where that pass is not provably exact falls back to its own replay.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from analyzer.errors import ConfigError
from analyzer.executors import ExecutorSpec, as_spec, map_partitions
from analyzer.replay import _replay_rows, load_trace, store_run
from analyzer.sim.policy import KEYS, Policy, _read_source, load_model, make_policy, parse_override
from analyzer.sim.replay import replay
from analyzer.store.db import DEFAULT_DB, connect, load_sql
from analyzer.sweep.stack_distance import capacity_curve

GIB = 2**30
AUTO_POINTS = 12


@dataclass
class SweepPoint:
    knob: str
    value: str
    run_id: int
    prompt_tokens: int
    hit_tokens: int
    sparse_retention_miss_tokens: int
    useful_hit_ratio: float | None
    sparse_loss_ratio: float | None
    memory_gib: float | None
    one_pass: bool  # hits from the stack-distance pass (False: its own replay)


@dataclass
class SweepOutcome:
    sweep_id: int
    knob: str
    base_policy: Policy
    points: list[SweepPoint] = field(default_factory=list)
    seconds: float = 0.0


# -- parsing --------------------------------------------------------------------------------


def _split_top(raw: str) -> list[str]:
    """Split on commas outside brackets: `[full_attention,mamba],[full_attention]`."""
    parts, depth, cur = [], 0, ""
    for ch in raw:
        if ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return parts


def _value(key: str, raw: str) -> Any:
    raw = raw.strip()
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        if raw.startswith("[") and raw.endswith("]"):
            return [v.strip() for v in raw[1:-1].split(",") if v.strip()]
        return raw


def parse_vary(item: str) -> tuple[str, list[Any]]:
    """`KEY=V1,V2,...` -> (key, values); `num_blocks=auto` -> (num_blocks, ["auto"])."""
    key, sep, raw = item.partition("=")
    if not sep or not key or not raw.strip():
        raise ConfigError(f"--vary {item!r}: expected KEY=V1,V2,...")
    if key not in KEYS:
        raise ConfigError(f"--vary {item!r}: unknown policy key {key!r}; known: {', '.join(KEYS)}")
    parts = _split_top(raw)
    if any(not p.strip() for p in parts):
        raise ConfigError(f"--vary {item!r}: empty value in the list")
    if key == "num_blocks" and [p.strip() for p in parts] == ["auto"]:
        return key, ["auto"]
    values = [_value(key, p) for p in parts]
    labels = [json.dumps(v) for v in values]
    if len(set(labels)) != len(labels):
        raise ConfigError(f"--vary {item!r}: a value is repeated")
    return key, values


def base_values(source: str | None, overrides: list[str]) -> dict[str, Any]:
    """The raw policy keys of a preset/file plus `--set` overrides (validated later)."""
    values = _read_source(source) if source is not None else {}
    for item in overrides:
        key, value = parse_override(item)
        values[key] = value
    return values


def _label(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


# -- one-pass eligibility -------------------------------------------------------------------


def one_pass_applies(policy: Policy) -> bool:
    """An LRU full-attention-only cache replayed serially: the stack-distance pass is exact
    (under the per-capacity conditions `CapacityCurve.valid` checks)."""
    if (
        policy.model is not None
        and load_model(policy.model)["num_groups"].get("full_attention", 1) != 1
    ):
        return False
    return (
        policy.engine == "vllm"
        and policy.groups == ("full_attention",)
        and policy.spec_decode == "none"
        and policy.max_num_batched_tokens is None
    )


class OnePass:
    """A replayer for `_replay_rows`: per partition one curve, then any capacity from it."""

    def __init__(self) -> None:
        self.curves: dict[tuple, Any] = {}
        self.fallbacks = 0
        self.seconds = 0.0

    def curve(self, requests, block_size: int):
        key = (block_size, tuple(r.request_id for r in requests))
        if key not in self.curves:
            started = time.perf_counter()
            self.curves[key] = capacity_curve(requests, block_size)
            self.seconds += time.perf_counter() - started
        return self.curves[key]

    def __call__(self, requests, policy: Policy, *, num_groups=None):
        requests = list(requests)
        curve = self.curve(requests, policy.block_size)
        if not curve.valid(policy.num_blocks):
            self.fallbacks += 1
            return list(replay(requests, policy, num_groups=num_groups))
        return curve.results(policy.num_blocks)


def auto_capacities(trace, policy: Policy, one: OnePass) -> list[int]:
    """`num_blocks=auto`: ~12 pool sizes from the smallest that fits every request to the
    saturation of the curve (or the last exact one), geometrically spaced."""
    from analyzer.replay import _sim_request, routed_partitions

    ns, _, partitions = routed_partitions(trace, policy)
    members: dict[tuple, list[int]] = {}
    for i, key in enumerate(partitions):
        members.setdefault(key, []).append(i)
    lo, hi = 2, 2
    for idx in members.values():
        curve = one.curve([_sim_request(trace, i, ns[i]) for i in idx], policy.block_size)
        lo = max(lo, curve.min_num_blocks)
        top = curve.saturation()
        if curve.exact_below is not None:
            top = min(top, curve.exact_below - 1)
        hi = max(hi, top)
    hi = max(hi, lo)
    grid = np.unique(np.geomspace(lo, hi, AUTO_POINTS).round().astype(int))
    return [int(v) for v in grid]


# -- running ---------------------------------------------------------------------------------


def _point_rows(trace, policy: Policy) -> tuple[dict, float]:
    started = time.perf_counter()
    rows = _replay_rows(trace, policy)
    return rows, time.perf_counter() - started


def _point_table(trace, policy: Policy) -> tuple[pa.Table, float]:
    """Worker (processes, ray): one point's rows as an Arrow table, and its seconds."""
    rows, seconds = _point_rows(trace, policy)
    return pa.table({k: pa.array(v) for k, v in rows.items()}), seconds


def _rows_from_table(table: pa.Table) -> dict:
    return {
        name: col.to_numpy()
        if col.null_count == 0 and pa.types.is_integer(col.type)
        else col.to_pylist()
        for name, col in zip(table.column_names, table.columns, strict=True)
    }


def _memory_gib(policy: Policy) -> float | None:
    if policy.model is None or policy.num_blocks is None:
        return None
    per_block = load_model(policy.model).get("bytes_per_block")
    if per_block is None:
        return None
    return policy.num_blocks * per_block / GIB


def _sweep_points(
    base: dict[str, Any], varies: list[tuple[str, list[Any]]], grid: bool
) -> list[tuple[str, list[tuple[str, dict[str, Any]]]]]:
    """[(knob, [(value label, policy values), ...]), ...]: one sweep per --vary, or a grid."""
    if grid:
        keys = [k for k, _ in varies]
        if len(set(keys)) != len(keys):
            raise ConfigError("--grid: each key may be varied once")
        points = []
        for combo in itertools.product(*(vals for _, vals in varies)):
            label = ",".join(f"{k}={_label(v)}" for k, v in zip(keys, combo, strict=True))
            points.append((label, {**base, **dict(zip(keys, combo, strict=True))}))
        return [("x".join(keys), points)]
    return [(k, [(_label(v), {**base, k: v}) for v in vals]) for k, vals in varies]


def run_sweeps(
    policy_source: str | None,
    overrides: list[str],
    varies: list[str],
    *,
    grid: bool = False,
    jobs: int = 2,
    db_path: str | Path = DEFAULT_DB,
    progress: Callable[[int, int], None] | None = None,
    executor: ExecutorSpec | str | None = None,
) -> list[SweepOutcome]:
    """Replay every point, store runs and sweep tables, return the sweeps in order.

    Points (configurations) are the partitions: they run on `executor` (default
    `processes` with `jobs` workers; a name gets `jobs` as its workers); results are
    stored in value order by this process, so run ids never depend on the executor.
    `progress(done, total)` is called after each point (for a progress bar).
    """
    if not varies:
        raise ConfigError("give at least one --vary KEY=V1,V2,...")
    if jobs < 1:
        raise ConfigError(f"--jobs {jobs}: expected an integer >= 1")
    spec = as_spec(executor or "processes", workers=jobs)
    parsed = [parse_vary(v) for v in varies]
    if grid and any(vals == ["auto"] for _, vals in parsed):
        raise ConfigError("--vary num_blocks=auto cannot be part of a --grid")
    base = base_values(policy_source, overrides)
    base_policy = make_policy(base)
    con = connect(db_path, create=False)
    try:
        trace = load_trace(con)
        one = OnePass()
        resolved = []
        for key, vals in parsed:
            if vals == ["auto"]:
                if not one_pass_applies(base_policy):
                    raise ConfigError(
                        "--vary num_blocks=auto needs an LRU full-attention-only policy "
                        "(groups [full_attention], spec_decode none, no "
                        "max_num_batched_tokens); give explicit values instead"
                    )
                vals = auto_capacities(trace, base_policy, one)
            resolved.append((key, vals))
        sweeps = _sweep_points(base, resolved, grid)
        # Validate every point before replaying anything (a bad value is one line, no runs).
        policies = [[(label, make_policy(vals)) for label, vals in pts] for _, pts in sweeps]
        outcomes = []
        total = sum(len(points) for points in policies)
        done = [0]

        def tick() -> None:
            done[0] += 1
            if progress:
                progress(done[0], total)

        for (knob, _), points in zip(sweeps, policies, strict=True):
            started = time.perf_counter()
            use_one = knob == "num_blocks" and all(one_pass_applies(p) for _, p in points)
            if use_one:
                computed = []
                for _, p in points:
                    before = one.fallbacks
                    t0 = time.perf_counter()
                    rows = _replay_rows(trace, p, one)
                    computed.append((rows, time.perf_counter() - t0, one.fallbacks == before))
                    tick()
            else:
                computed = [(r, s, False) for r, s in _run_points(trace, points, spec, tick, knob)]
            outcome = _store_sweep(con, base_policy, knob, points, computed)
            outcome.seconds = time.perf_counter() - started
            outcomes.append(outcome)
        return outcomes
    finally:
        con.close()


def _run_points(trace, points, spec: ExecutorSpec, tick, knob: str) -> list[tuple[dict, float]]:
    """Every point's (rows, seconds), in value order, run on `spec`."""
    labels = [f"sweep point {knob}={label}" for label, _ in points]
    policies = [p for _, p in points]
    done = [0]

    def progress(n: int, total: int) -> None:
        while done[0] < n:
            done[0] += 1
            tick()

    if spec.is_local:
        return map_partitions(
            spec, _point_rows, policies, labels=labels, shared=trace, progress=progress
        )
    parts = map_partitions(
        spec, _point_table, policies, labels=labels, shared=trace, progress=progress
    )
    return [(_rows_from_table(table), seconds) for table, seconds in parts]


def _store_sweep(con, base_policy: Policy, knob: str, points, computed) -> SweepOutcome:
    con.execute(load_sql("replay_schema"))
    con.execute(load_sql("sweep_schema"))
    sweep_id = con.execute("SELECT coalesce(max(sweep_id), 0) + 1 FROM sweeps").fetchall()[0][0]
    con.execute(
        "INSERT INTO sweeps VALUES (?, ?, ?, current_timestamp)",
        [sweep_id, base_policy.to_json(), knob],
    )
    outcome = SweepOutcome(sweep_id, knob, base_policy)
    for (label, policy), (rows, seconds, from_curve) in zip(points, computed, strict=True):
        run = store_run(con, policy, rows, seconds, len(rows["request_id"]))
        prompt = int(np.sum(rows["prompt_tokens"]))
        hit = int(np.sum(rows["hit_tokens"]))
        sparse = int(np.sum(rows["sparse_retention_miss_tokens"]))
        point = SweepPoint(
            knob,
            label,
            run.run_id,
            prompt,
            hit,
            sparse,
            hit / prompt if prompt else None,
            sparse / prompt if prompt else None,
            _memory_gib(policy),
            from_curve,
        )
        con.execute(
            "INSERT INTO sweep_points VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                sweep_id,
                knob,
                label,
                point.run_id,
                prompt,
                hit,
                sparse,
                point.useful_hit_ratio,
                point.sparse_loss_ratio,
                point.memory_gib,
            ],
        )
        outcome.points.append(point)
    return outcome
