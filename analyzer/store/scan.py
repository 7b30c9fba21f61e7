"""DuckDB settings for the scans that read lists once into arrays: every core, a cap on
the buffer memory, and each cap of a list tried in turn until DuckDB does not run out of
memory (moved out of `analyzer.store.db`, which opens the store)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TypeVar

import duckdb

from analyzer.store.db import load_sql, opened_settings
from analyzer.store.faults import out_of_memory

T = TypeVar("T")


@contextmanager
def scan_settings(
    con: duckdb.DuckDBPyConnection, memory_limit: str | None = None, *, threads: int | None = None
) -> Iterator[None]:
    """For a scan that sums no float (rows, list lengths, token ids copied out): every core
    (or `threads`) inside the block, and DuckDB's buffer memory capped at `memory_limit`
    (its units: '256MB') if given; after it, the connection as `connect` opened it
    (DuckDB's defaults for one it did not open). The cap is for lists read once into
    arrays: cached, their blocks (the full WEKA trace's hash ids: 721 MB) would sit beside
    the copy."""
    if memory_limit is not None:
        con.execute(load_sql("memory_limit_set"), {"limit": memory_limit})
    con.execute(load_sql("threads_set"), {"threads": threads or os.cpu_count() or 1})
    try:
        yield
    except BaseException:
        # an error (a damaged block, no memory) may have aborted the transaction, which
        # then refuses the reset: the error is what the user hears of, not the reset's
        with contextlib.suppress(duckdb.Error):
            _restore_settings(con)
        raise
    _restore_settings(con)


def _restore_settings(con: duckdb.DuckDBPyConnection) -> None:
    """`con`'s buffer memory and threads as `connect` opened it (DuckDB's defaults for one
    it did not open)."""
    opened = opened_settings(con)
    if "memory_limit" in opened:
        con.execute(load_sql("memory_limit_set"), {"limit": opened["memory_limit"]})
    else:
        con.execute(load_sql("memory_limit_reset"))
    if "threads" in opened:
        con.execute(load_sql("threads_set"), {"threads": opened["threads"]})
    else:
        con.execute(load_sql("threads_reset"))


def under_each_cap(run: Callable[[str | None], T], caps: Sequence[str | None]) -> T:
    """`run(cap)` under each DuckDB buffer limit of `caps` in turn ('48MB', ..., None for
    none) until DuckDB does not run out of memory under one; the last is final."""
    for cap in caps[:-1]:
        try:
            return run(cap)
        except (duckdb.OutOfMemoryException, OSError) as exc:
            if not out_of_memory(exc):
                raise
    return run(caps[-1])
