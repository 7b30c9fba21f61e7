"""What a sweep is made of, shared by the store path (`pipeline.sweep`) and the dataset path
(`pipeline.sweep_dataset`): `--vary` parsing, the points of one knob or a grid and their
policies fitted to the trace's blocks, one point's replay (here or in a worker, as an Arrow
table) and the sweep's stored rows."""

from __future__ import annotations

import itertools
import json
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from analyzer.access.geometry import fit_policy
from analyzer.config.memory import policy_pool_gib
from analyzer.config.policy import KEYS, Policy, unknown_key
from analyzer.errors import ConfigError
from analyzer.pipeline.replay import num_caches, replay_rows
from analyzer.sim.dispatch import make_policy
from analyzer.store.db import stores, transaction
from analyzer.store.host_tier import has_host_tier
from analyzer.store.runs import store_run
from analyzer.store.sweeps import insert_sweep, insert_sweep_point


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
    memory_gib: float | None  # per cache
    one_pass: bool  # hits from the stack-distance pass (False: its own replay)
    num_caches: int = 1  # pools the point replayed (memory_gib is each one's)
    # a concurrent point's TTFT, queueing and preemption figures (replay_load_summary.sql;
    # None: a serial point)
    load: dict | None = None
    # a point whose policy sizes a host KV tier: its host hit ratio (of the measured prompt
    # tokens) and the requests that waited for a load (host_figures; None: no tier)
    host: dict | None = None


@dataclass
class SweepOutcome:
    sweep_id: int
    knob: str
    base_policy: Policy
    points: list[SweepPoint] = field(default_factory=list)
    seconds: float = 0.0  # wall time (dataset on a non-local executor: its tasks' seconds)
    notes: tuple[str, ...] = ()  # what the trace changed of the policies (geometry)


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
        raise ConfigError(f"--vary {item!r}: {unknown_key(key)}")
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


def _label(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


# -- running ---------------------------------------------------------------------------------


def point_rows(trace, policy: Policy) -> tuple[dict, float]:
    started = time.perf_counter()
    rows = replay_rows(trace, policy)
    return rows, time.perf_counter() - started


def point_table(trace, policy: Policy) -> tuple[pa.Table, float]:
    """Worker (processes, ray): one point's rows as an Arrow table, and its seconds."""
    rows, seconds = point_rows(trace, policy)
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


def sweep_points(
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
        return [(" x ".join(keys), points)]
    return [(k, [(_label(v), {**base, k: v}) for v in vals]) for k, vals in varies]


def fitted_sweeps(
    base: dict[str, Any], varies: list[tuple[str, list[Any]]], grid: bool, trace_block: int | None
) -> list[tuple[str, list[tuple[str, Policy]], tuple[str, ...]]]:
    """[(knob, [(value label, policy), ...], notes), ...]: `sweep_points` with each point's
    policy made and fitted to a trace of `trace_block`-token blocks (None: token ids) by
    `access.geometry.fit_policy`, and the notes of what that changed. Both paths make their
    points here, before anything replays: a bad value is one line and no run."""
    planned = []
    for knob, points in sweep_points(base, varies, grid):
        fitted = [(label, fit_policy(make_policy(vals), trace_block)) for label, vals in points]
        notes = tuple(note for _, (_, note) in fitted if note)
        planned.append((knob, [(label, policy) for label, (policy, _) in fitted], notes))
    return planned


def store_sweep(
    con,
    base_policy: Policy,
    knob: str,
    points,
    computed,
    fingerprint: str | None = None,
    measure_from: float = 0.0,
    name: str | None = None,
) -> SweepOutcome:
    """Store one sweep's runs (in value order) and its rows of `sweeps` / `sweep_points`.
    `fingerprint`: the runs' trace_fingerprint (None: the store's, from `sources`).
    `measure_from`: the points' figures count the requests from arrival index
    floor(f x n) on (the runs store it, as `hpa replay --measure-from`). One transaction:
    the sweep lands whole or not at all. `name`: the sweep's; its points' runs are named
    "NAME · VALUE"."""
    with transaction(con):
        return _store_sweep(
            con, base_policy, knob, points, computed, fingerprint, measure_from, name
        )


def _point_name(name: str, knob: str, label: str) -> str:
    """A point's run name: "NAME · num_blocks=200" (a grid's label names its keys)."""
    return f"{name} · {label if '=' in label else f'{knob}={label}'}"


def host_figures(policy: Policy, rows: dict, measured: np.ndarray, prompt: int) -> dict | None:
    """A point's host KV tier over its measured requests: host_hit_ratio (host hit tokens
    over prompt tokens) and host_waited_requests (those whose load made them wait); None
    where the policy sizes no tier."""
    if not has_host_tier(policy.to_json()):
        return None
    hits = int(np.sum(np.asarray(rows["host_hit_tokens"], dtype=np.int64)[measured]))
    waited = int(np.sum(np.asarray(rows["host_wait_steps"], dtype=np.int64)[measured] > 0))
    return {"host_hit_ratio": hits / prompt if prompt else None, "host_waited_requests": waited}


def _store_sweep(
    con, base_policy, knob, points, computed, fingerprint, measure_from, name
) -> SweepOutcome:
    sweep_id = insert_sweep(con, base_policy.to_json(), knob, name)
    outcome = SweepOutcome(sweep_id, knob, base_policy)
    for (label, policy), (rows, seconds, from_curve) in zip(points, computed, strict=True):
        n = len(rows["request_id"])
        run = store_run(
            con,
            policy,
            rows,
            seconds,
            n,
            fingerprint=fingerprint,
            measure_from=measure_from,
            name=None if name is None else _point_name(name, knob, label),
        )
        measured = np.arange(n) >= int(np.floor(measure_from * n))
        prompt = int(np.sum(np.asarray(rows["prompt_tokens"])[measured]))
        hit = int(np.sum(np.asarray(rows["hit_tokens"])[measured]))
        sparse = int(np.sum(np.asarray(rows["sparse_retention_miss_tokens"])[measured]))
        point = SweepPoint(
            knob,
            label,
            run.run_id,
            prompt,
            hit,
            sparse,
            hit / prompt if prompt else None,
            sparse / prompt if prompt else None,
            policy_pool_gib(policy.model, policy.num_blocks, policy.block_size),
            from_curve,
            num_caches(policy, rows),
            run.load,
            host_figures(policy, rows, measured, prompt),
        )
        insert_sweep_point(
            con,
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
    stores(con, f"sweep {sweep_id}")
    return outcome
