"""`hpa sweep`: move one policy knob at a time (or a grid), one stored replay run per point.

    sweeps = run_sweeps("vllm-default", ["model=qwen3.5-4b"], ["num_blocks=500,1000"], db_path=..)

Every point is a normal run (replay_runs / replay_requests / replay_summary) plus a row of
`sweep_points`. Points are replayed in worker processes (`jobs`) from the trace loaded once,
then stored in value order, so run ids and results do not depend on `jobs`. With a Parquet
dataset and a non-local executor, this process loads none of the trace: every task's worker
reads it from the dataset itself (sweep/dataset.py), and the tables are the same.

A `num_blocks` sweep of an LRU full-attention-only policy (see `one_pass_applies`) is not
replayed point by point: one stack-distance pass (stack_distance.py, one_pass.py) gives
every capacity, and a point where that pass is not provably exact falls back to its own
replay.
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
from analyzer.replay import _open_trace, _replay_rows, load_trace, store_run
from analyzer.sim.policy import KEYS, Policy, _read_source, load_model, make_policy, parse_override
from analyzer.store.db import DEFAULT_DB, load_sql
from analyzer.sweep.one_pass import (  # noqa: F401  (re-exported: the sweep's public names)
    AUTO_POINTS,
    OnePass,
    auto_capacities,
    one_pass_applies,
    one_pass_points,
    uses_one_pass,
)

GIB = 2**30


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
    seconds: float = 0.0  # wall time (dataset on a non-local executor: its tasks' seconds)


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


# -- running ---------------------------------------------------------------------------------


def _point_rows(trace, policy: Policy) -> tuple[dict, float]:
    started = time.perf_counter()
    rows = _replay_rows(trace, policy)
    return rows, time.perf_counter() - started


def point_table(trace, policy: Policy) -> tuple[pa.Table, float]:
    """Worker (processes, ray): one point's rows as an Arrow table, and its seconds."""
    rows, seconds = _point_rows(trace, policy)
    return rows_table(rows), seconds


def rows_table(rows: dict) -> pa.Table:
    """A replay's rows as an Arrow table (what a worker sends back)."""
    return pa.table({k: pa.array(v) for k, v in rows.items()})


def rows_from_table(table: pa.Table) -> dict:
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
    dataset: str | Path | None = None,
) -> list[SweepOutcome]:
    """Replay every point, store runs and sweep tables, return the sweeps in order.

    Points (configurations) are the partitions: they run on `executor` (default
    `processes` with `jobs` workers; a name gets `jobs` as its workers); results are
    stored in value order by this process, so run ids never depend on the executor.
    `progress(done, total)` is called after each point (for a progress bar).
    `dataset`: read the requests from a Parquet dataset (analyzer.executors.dataset), the
    runs still stored in `db_path` (created when missing). With a non-local executor each
    task's worker reads the trace from it, once (see sweep/dataset.py); with `local` this
    process reads it whole, once.
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
    if any(vals == ["auto"] for _, vals in parsed) and not one_pass_applies(base_policy):
        raise ConfigError(
            "--vary num_blocks=auto needs an LRU full-attention-only policy "
            "(groups [full_attention], spec_decode none, no "
            "max_num_batched_tokens); give explicit values instead"
        )
    con, fingerprint = _open_trace(db_path, dataset)
    try:
        if dataset is not None and not spec.is_local:
            from analyzer.sweep.dataset import dataset_sweeps

            path = str(Path(dataset).resolve())
            return dataset_sweeps(con, fingerprint, path, spec, base, parsed, grid, progress)
        trace = load_trace(con) if dataset is None else _whole_dataset(dataset)
        one = OnePass()
        resolved = []
        for key, vals in parsed:
            if vals == ["auto"]:
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
            if uses_one_pass(knob, [p for _, p in points]):
                computed = one_pass_points(trace, [p for _, p in points], one, tick)
            else:
                computed = [(r, s, False) for r, s in _run_points(trace, points, spec, tick, knob)]
            outcome = store_sweep(con, base_policy, knob, points, computed, fingerprint)
            outcome.seconds = time.perf_counter() - started
            outcomes.append(outcome)
        return outcomes
    finally:
        con.close()


def _whole_dataset(dataset: str | Path):
    from analyzer.executors.replay import dataset_trace

    return dataset_trace(str(Path(dataset).resolve()), whole=True)


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
        spec, point_table, policies, labels=labels, shared=trace, progress=progress
    )
    return [(rows_from_table(table), seconds) for table, seconds in parts]


def store_sweep(
    con, base_policy: Policy, knob: str, points, computed, fingerprint: str | None = None
) -> SweepOutcome:
    """Store one sweep's runs (in value order) and its rows of `sweeps` / `sweep_points`.
    `fingerprint`: the runs' trace_fingerprint (None: the store's, from `sources`)."""
    con.execute(load_sql("replay_schema"))
    con.execute(load_sql("sweep_schema"))
    sweep_id = con.execute("SELECT coalesce(max(sweep_id), 0) + 1 FROM sweeps").fetchall()[0][0]
    con.execute(
        "INSERT INTO sweeps VALUES (?, ?, ?, current_timestamp)",
        [sweep_id, base_policy.to_json(), knob],
    )
    outcome = SweepOutcome(sweep_id, knob, base_policy)
    for (label, policy), (rows, seconds, from_curve) in zip(points, computed, strict=True):
        run = store_run(
            con, policy, rows, seconds, len(rows["request_id"]), fingerprint=fingerprint
        )
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
