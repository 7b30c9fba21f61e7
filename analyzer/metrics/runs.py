"""Resolving replay runs by id for the read-only metrics commands (metrics, compare)."""

from __future__ import annotations

import duckdb

from analyzer.errors import ConfigError, StoreError
from analyzer.store.db import load_sql, table_names


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
        raise ConfigError(f"unknown run {run}; known runs: {_listing(runs)}")
    return run


def _listing(runs: list[int]) -> str:
    shown = ", ".join(str(r) for r in runs[:20])
    return shown + (f", ... ({len(runs)} runs)" if len(runs) > 20 else "")
