"""Export a query's rows to a file; the format follows the suffix (.parquet, .jsonl, .csv)."""

from __future__ import annotations

from pathlib import Path

import duckdb
import orjson
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from analyzer.errors import ConfigError
from analyzer.store.db import query_arrow

EXPORT_SUFFIXES = (".parquet", ".jsonl", ".csv")


def check_export_path(out: str | Path) -> Path:
    """`out` as a Path, or ConfigError when its suffix names no export format."""
    path = Path(out)
    if path.suffix not in EXPORT_SUFFIXES:
        raise ConfigError(
            f"--out {out}: unknown format {path.suffix or '(no suffix)'!r}; "
            f"use one of {', '.join(EXPORT_SUFFIXES)}"
        )
    return path


def export_table(
    con: duckdb.DuckDBPyConnection, sql: str, out: str | Path, params: dict | None = None
) -> int:
    """Write the rows of `sql` to `out`; returns the number of rows.

    Deterministic: the same rows give the same bytes (no timestamps in the files).
    """
    path = check_export_path(out)
    table = query_arrow(con, sql, params)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".parquet":
        pq.write_table(table, path, compression="zstd")
    elif path.suffix == ".csv":
        pacsv.write_csv(table, path)
    else:
        with open(path, "wb") as f:
            for row in table.to_pylist():
                f.write(orjson.dumps(row) + b"\n")
    return table.num_rows
