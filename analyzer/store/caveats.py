"""Caveats that go with figures: what the input adapters made up rather than read.

A public trace without absolute arrival times (WEKA's conversations) or with a restarted
clock (RAGPulse's two weeks) gets timestamps from its adapter; any figure that depends on
arrival times (a concurrent replay, a time window, a time chart) says so where it prints.
"""

from __future__ import annotations

import duckdb

from analyzer.store.db import load_sql, table_names
from analyzer.traces.readers import SOURCE_INFO


def timestamp_caveat(fmt: str, requests: int) -> str | None:
    """The line for `requests` requests ingested in `fmt`, if its adapter makes timestamps."""
    info = SOURCE_INFO.get(fmt)
    if info is None or info.timestamps is None:
        return None
    return (
        f"timestamps of {requests:,} requests ({fmt}) are partly the adapter's: {info.timestamps}"
    )


def timestamp_caveats(con: duckdb.DuckDBPyConnection) -> list[str]:
    """One line per stored input format whose adapter made timestamps (store order)."""
    if "sources" not in table_names(con):  # a dataset's requests have no sources here
        return []
    rows = con.execute(load_sql("source_formats")).fetchall()
    return [line for fmt, n in rows if (line := timestamp_caveat(fmt, int(n))) is not None]
