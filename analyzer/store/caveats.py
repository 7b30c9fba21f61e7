"""Caveats that go with figures: what the input adapters made up rather than read, and
traces whose blocks differ.

A public trace without absolute arrival times (WEKA's conversations) or with a restarted
clock (RAGPulse's two weeks) gets timestamps from its adapter; any figure that depends on
arrival times (a concurrent replay, a time window, a time chart) says so where it prints.
Hash-id traces of different block sizes in one store never share a prefix, and a replay
matches all of them in one unit (their least common multiple): ingest and every replay
say so, naming each file's blocks.
"""

from __future__ import annotations

import math

import duckdb

from analyzer.store.db import column_names, load_sql, table_names
from analyzer.words import plural


def timestamp_caveat(fmt: str, requests: int) -> str | None:
    """The line for `requests` requests ingested in `fmt`, if its adapter makes timestamps."""
    # imported here: the readers (pyarrow.compute, every adapter) cost `hpa match` 0.13 s
    from analyzer.traces.readers import SOURCE_INFO

    info = SOURCE_INFO.get(fmt)
    if info is None or info.timestamps is None:
        return None
    return (
        f"timestamps of {plural(requests, 'request')} ({fmt}) are partly the adapter's: "
        f"{info.timestamps}"
    )


def timestamp_caveats(con: duckdb.DuckDBPyConnection) -> list[str]:
    """One line per stored input format whose adapter made timestamps (store order)."""
    if "sources" not in table_names(con):  # a dataset's requests have no sources here
        return []
    rows = con.execute(load_sql("source_formats")).fetchall()
    return [line for fmt, n in rows if (line := timestamp_caveat(fmt, int(n))) is not None]


def cut_caveat(con: duckdb.DuckDBPyConnection) -> str | None:
    """The line for stored prompts a server log may have cut (requests.log_cut_tokens:
    vLLM's --max-log-len), or None; match and replay print it."""
    if "log_cut_tokens" not in column_names(con, "requests"):
        return None  # a store from before the column, or a dataset: nothing flagged
    rows = con.execute(load_sql("cut_prompts")).fetchall()
    if not rows:
        return None
    (cut, n), *more = rows
    also = "".join(f", {int(k):,} at {int(at):,} tokens" for at, k in more)
    return (
        f"{plural(int(n), 'prompt')} may be cut at {int(cut):,} tokens{also} (a server log's "
        "--max-log-len): their shared prefixes are a lower bound (docs/traces.md#cut-logs)"
    )


def block_size_caveat(con: duckdb.DuckDBPyConnection) -> str | None:
    """The line for a store holding hash-id traces of more than one block size, or None."""
    if not {"requests", "sources"} <= table_names(con):
        return None
    rows = con.execute(load_sql("trace_block_geometry")).fetchall()
    sizes: dict[int, list[str]] = {}
    for size, path, requests in rows:
        sizes.setdefault(int(size), []).append(f"{path}: {plural(requests, 'request')}")
    if len(sizes) < 2:
        return None
    unit = math.lcm(*sizes)
    each = "; ".join(f"{size:,}-token blocks ({', '.join(files)})" for size, files in sizes.items())
    finest = min(sizes)
    return (
        f"hash-id traces of {len(sizes)} block sizes are stored: {each}. They never share a "
        f"prefix, and a replay matches them all in {unit:,}-token units (the least common "
        f"multiple), coarser than the {finest:,}-token trace's own blocks: ingest each into "
        "its own --db to replay it at its own size"
    )
