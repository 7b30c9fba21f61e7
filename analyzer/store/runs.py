"""`hpa replay`'s tables: a replay's rows stored as one run (replay_runs, replay_requests,
replay_summary), and several runs side by side."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa

from analyzer.config.policy import Policy
from analyzer.errors import ConfigError, StoreError
from analyzer.store.db import (
    derived_from,
    load_sql,
    query_arrow,
    stores,
    table_names,
    trace_fingerprint,
    transaction,
)
from analyzer.store.export import export_table

VERSION = "0.1.0"


@dataclass(frozen=True)
class ReplayOutcome:
    run_id: int
    num_requests: int
    summary: pa.Table
    seconds: float
    num_errors: int  # requests vLLM could not schedule at all (pool too small)
    notes: tuple[str, ...] = ()  # engines' notes per partition, in arrival order
    load: dict | None = None  # the concurrent schedule's figures (replay_load_summary.sql)
    policy: Policy | None = None  # what was replayed (the trace may have fitted its geometry)
    num_caches: int = 1  # pools replayed: (model revision, replica) pairs, or replicas
    host_waits: dict | None = None  # host-tier loads waited for (replay_host_waits.sql)


def check_measure_from(fraction: float) -> float:
    """`fraction` if it is a valid --measure-from (0 <= f < 1), else a one-line ConfigError."""
    if isinstance(fraction, bool) or not isinstance(fraction, int | float) or not 0 <= fraction < 1:
        raise ConfigError(f"--measure-from: expected a fraction 0 <= f < 1, got {fraction!r}")
    return float(fraction)


def store_run(
    con,
    policy: Policy,
    rows: dict,
    seconds: float,
    n: int,
    *,
    out: str | Path | None = None,
    measure_from: float = 0.0,
    fingerprint: str | None = None,
    name: str | None = None,
) -> ReplayOutcome:
    """Store replay rows (`pipeline.replay.replay_rows`) as a normal run; return its outcome.
    `name`: what the user calls it (the report's label), or None.

    Rows are in arrival order; those before floor(measure_from * n) are warm-up (not measured).
    """
    check_measure_from(measure_from)
    count = len(rows["request_id"])
    rows = {**rows, "measured": np.arange(count) >= int(np.floor(measure_from * count))}
    # Requests, summary and run row land together or not at all, and with the --out file:
    # an export that cannot be written stores nothing.
    with transaction(con):
        run_id = _store(con, policy, rows, seconds, measure_from, fingerprint, name)
        stores(con, f"replay run {run_id}")
        if out is not None:
            export_table(con, load_sql("replay_export_requests"), out, {"run_id": int(run_id)})
    summary = query_arrow(con, load_sql("replay_run_summary"), [run_id])
    num_errors = sum(e is not None for e in rows["error"])
    notes = tuple(
        f"replica {replica}, model revision {revision}: {note}"
        for note, replica, revision in zip(
            rows["note"], rows["replica"], rows["model_revision"], strict=True
        )
        if note is not None
    )
    if fingerprint is None:
        notes += _stale_families(con)
    return ReplayOutcome(
        run_id, n, summary, seconds, num_errors, notes, load_figures(con, run_id), policy,
        host_waits=host_wait_figures(con, run_id),
    )  # fmt: skip


def _stale_families(con) -> tuple[str, ...]:
    """A note when the prompt families `hpa match --derive-families` wrote were derived
    from fewer requests than the store holds now (the new ones have none)."""
    origin = derived_from(con, "requests.prompt_family")
    now, num = trace_fingerprint(con)
    if origin is None or origin[0] == now:
        return ()
    unlabelled = con.execute(load_sql("count_unlabelled")).fetchall()[0][0]
    if not unlabelled:
        return ()
    return (
        f"prompt families were derived by `hpa match --derive-families` from {origin[1]:,} "
        f"requests; the store holds {num:,} now, {unlabelled:,} of them with no family "
        "(run it again)",
    )


# Saturation (`hpa plan`'s `saturated`, `hpa replay`'s load line, the report's Load section):
# the simulated server cannot keep up when requests queue longer the later they arrive. The
# last quarter of arrivals queued on average more than SATURATED_MIN_QUEUE_S (below it a
# growing queue is noise, not a server falling behind) and more than SATURATED_GROWTH times
# the first quarter did. A queue that keeps up comes and goes; one that grows linearly with the
# trace makes the last quarter's mean about 7x the first's.
SATURATED_MIN_QUEUE_S = 1.0
SATURATED_GROWTH = 2.0


def is_saturated(first_quarter_s: float, last_quarter_s: float) -> bool:
    """Whether mean queue times of the first and last quarter of arrivals say saturated."""
    return last_quarter_s > SATURATED_MIN_QUEUE_S and last_quarter_s > (
        SATURATED_GROWTH * first_quarter_s
    )


def saturation_words(first_quarter_s: float, last_quarter_s: float) -> str:
    """What a saturated run is, in the words `hpa replay`, `hpa plan` and the report share:
    'the simulated server cannot keep up, the queue grows with the trace (the last quarter
    of arrivals queued 46.332 s on average, the first quarter 11.269 s)'."""
    return (
        "the simulated server cannot keep up, the queue grows with the trace (the last "
        f"quarter of arrivals queued {last_quarter_s:,.3f} s on average, the first quarter "
        f"{first_quarter_s:,.3f} s)"
    )


def load_row(con, run_id: int) -> dict:
    """replay_load_summary.sql's row for run `run_id`, with `saturated` (is_saturated)."""
    row = query_arrow(con, load_sql("replay_load_summary"), {"run_id": int(run_id)}).to_pylist()[0]
    first, last = row["queue_first_quarter_s"], row["queue_last_quarter_s"]
    return {**row, "saturated": bool(row["num_timed"]) and is_saturated(first, last)}


def load_figures(con, run_id: int) -> dict | None:
    """TTFT, queueing, preemption and in-flight figures of a concurrent run (None: serial)."""
    row = load_row(con, run_id)
    return row if row["num_timed"] else None


def host_wait_figures(con, run_id: int) -> dict | None:
    """How many measured requests waited for a host-tier load, their mean and p99 seconds
    (None where none waited: no tier, or no load)."""
    row = query_arrow(con, load_sql("replay_host_waits"), {"run_id": int(run_id)}).to_pylist()
    return row[0] if row[0]["waited"] else None


NAME_MAX_CHARS = 80


def check_name(name: str | None, option: str = "--name") -> str | None:
    """A run's or sweep's name as given, or None.

    Raises:
        ConfigError: empty, longer than NAME_MAX_CHARS, or with a control character.
    """
    if name is None:
        return None
    if not name.strip():
        raise ConfigError(f"{option}: empty; give a short name such as 'after-deploy'")
    if len(name) > NAME_MAX_CHARS:
        raise ConfigError(f"{option}: {len(name)} characters; at most {NAME_MAX_CHARS}")
    if any(ord(c) < 32 or 127 <= ord(c) < 160 for c in name):
        raise ConfigError(f"{option} {name!r}: no control characters")
    return name


def _store(
    con,
    policy: Policy,
    rows: dict,
    seconds: float,
    measure_from: float = 0.0,
    fingerprint=None,
    name: str | None = None,
) -> int:
    con.execute(load_sql("replay_schema"))
    measured = np.asarray(rows["measured"], dtype=bool)
    run_id = con.execute(load_sql("replay_next_run_id")).fetchall()[0][0]
    table = pa.table(
        {
            "run_id": pa.array([run_id] * len(rows["request_id"]), pa.int32()),
            **{k: pa.array(v) for k, v in rows.items()},
        }
    )
    con.register("replay_rows", table)
    con.execute(load_sql("replay_insert_requests"))
    con.unregister("replay_rows")
    con.execute(load_sql("replay_summary"), {"run_id": run_id})
    con.execute(
        load_sql("replay_insert_run"),
        [
            run_id,
            policy.to_json(),
            fingerprint or trace_fingerprint(con)[0],
            len(rows["request_id"]),
            int(np.sum(np.asarray(rows["prompt_tokens"])[measured])),
            int(np.sum(np.asarray(rows["hit_tokens"])[measured])),
            seconds,
            VERSION,
            measure_from,
            name,
        ],
    )
    return run_id


def side_by_side(names: list[str], outcomes: list[ReplayOutcome]) -> pa.Table:
    """One row per replayed policy (measured requests only): the headline figures
    (docs/definitions.md#aggregates)."""
    out: dict[str, list] = {
        "policy": [],
        "run_id": [],
        "prompt_tokens": [],
        "hit_tokens": [],
        "sparse_retention_miss_tokens": [],
        "replay_tokens": [],
        "useful_hit_ratio": [],
        "sparse_loss_ratio": [],
    }
    for name, outcome in zip(names, outcomes, strict=True):
        s = outcome.summary
        prompt = sum(s.column("prompt_tokens").to_pylist())
        hit = sum(s.column("hit_tokens").to_pylist())
        miss = sum(s.column("sparse_retention_miss_tokens").to_pylist())
        out["policy"].append(name)
        out["run_id"].append(outcome.run_id)
        out["prompt_tokens"].append(prompt)
        out["hit_tokens"].append(hit)
        out["sparse_retention_miss_tokens"].append(miss)
        out["replay_tokens"].append(sum(s.column("replay_tokens").to_pylist()))
        out["useful_hit_ratio"].append(hit / prompt if prompt else 0.0)
        out["sparse_loss_ratio"].append(miss / prompt if prompt else 0.0)
    return pa.table(out)


# -- resolving stored runs by id (report, compare, metrics, validate) -------------------


def known_runs(con: duckdb.DuckDBPyConnection) -> list[int]:
    """Run ids in `replay_runs`, ascending; StoreError when no replay ran yet."""
    if not {"replay_runs", "replay_requests"} <= table_names(con):
        raise StoreError("no replay runs in the database; run `hpa replay` first")
    runs = [r[0] for r in con.execute(load_sql("replay_run_ids")).fetchall()]
    if not runs:
        raise StoreError("no replay runs in the database; run `hpa replay` first")
    return runs


def resolve_run(con: duckdb.DuckDBPyConnection, run: int | None) -> int:
    """`run`, checked against the stored runs; when None the latest run that is no point
    of a sweep (after `hpa sweep`, its last point is rarely what was meant), else the latest.

    Raises:
        StoreError: no replay tables or runs. ConfigError: `run` is not a stored run.
    """
    runs = known_runs(con)
    if run is None:
        swept = set()
        if "sweep_points" in table_names(con):
            swept = {r[0] for r in con.execute(load_sql("sweep_run_ids")).fetchall()}
        return ([r for r in runs if r not in swept] or runs)[-1]
    if run not in runs:
        raise unknown_run(run, runs)
    return run


def unknown_run(run: int, runs: list[int]) -> ConfigError:
    """The error for a run id no stored run has, in every command's words (`--run`)."""
    return ConfigError(f"unknown run {run}; known runs: {_listing(runs)}")


def _listing(runs: list[int]) -> str:
    shown = ", ".join(str(r) for r in runs[:20])
    return shown + (f", ... ({len(runs)} runs)" if len(runs) > 20 else "")
