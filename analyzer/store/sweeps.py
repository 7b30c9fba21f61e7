"""The sweep tables: one `sweeps` row per swept knob (or grid), one `sweep_points` row per
point, each pointing at the point's replay run."""

from __future__ import annotations

from typing import Any

import duckdb

from analyzer.store.db import load_sql


def insert_sweep(
    con: duckdb.DuckDBPyConnection, base_policy_json: str, knob: str, name: str | None = None
) -> int:
    """A new `sweeps` row (the tables created when missing); returns its sweep_id."""
    con.execute(load_sql("replay_schema"))
    con.execute(load_sql("sweep_schema"))
    sweep_id = con.execute(load_sql("sweep_next_id")).fetchall()[0][0]
    con.execute(load_sql("sweep_insert"), [sweep_id, base_policy_json, knob, name])
    return int(sweep_id)


def insert_sweep_point(con: duckdb.DuckDBPyConnection, values: list[Any]) -> None:
    """One `sweep_points` row, in the table's column order."""
    con.execute(load_sql("sweep_insert_point"), values)
