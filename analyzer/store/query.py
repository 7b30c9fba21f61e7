"""Ad-hoc SQL over the store, and the stored-data summary."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow as pa  # noqa: F401  (return type)

from analyzer.errors import StoreError
from analyzer.store.db import DEFAULT_DB, connect, load_sql, query_arrow


def run_query(sql: str, *, db_path: str | Path = DEFAULT_DB) -> pa.Table:
    """The result of one SQL statement as an Arrow table; raises StoreError on bad SQL."""
    con = connect(db_path, create=False)
    try:
        return query_arrow(con, sql)
    except duckdb.Error as exc:
        message = str(exc).strip().splitlines()[0]
        raise StoreError(f"query failed: {message}") from None
    finally:
        con.close()


def stored_summary(*, db_path: str | Path = DEFAULT_DB) -> pa.Table:
    """Requests and tokens per prompt family x model revision."""
    return run_query(load_sql("stored_summary"), db_path=db_path)
