"""Ad-hoc SQL over the store, and the stored-data summary."""

from __future__ import annotations

import difflib
import re
from pathlib import Path

import duckdb
import pyarrow as pa  # noqa: F401  (return type)

from analyzer.errors import StoreError
from analyzer.store.db import DEFAULT_DB, connect, killed_ingest_left, load_sql, query_arrow
from analyzer.store.locks import open_error

# DuckDB settings of a guarded query: no files, no extensions fetched or loaded behind its back.
NO_FILES = {
    "enable_external_access": False,
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
}


def run_query(
    sql: str, *, db_path: str | Path = DEFAULT_DB, write: bool = False, files: bool = False
) -> pa.Table:
    """The result of one SQL statement as an Arrow table; raises StoreError on bad SQL.

    By default the store is opened read-only and the statement can reach no file (no
    `COPY ... TO`, `read_csv`, `ATTACH`, `INSTALL`): `write` lets it change the database,
    `files` lets it read and write files."""
    con = _open(Path(db_path), write, files)
    try:
        return query_arrow(con, sql)
    except duckdb.Error as exc:
        message = str(exc).strip().splitlines()[0]
        hint = ""
        if isinstance(exc, duckdb.PermissionException) and not files:
            hint = " (pass --files to let the query read or write files)"
        elif "read-only mode" in message and not write:
            hint = " (pass --write to let the query change the database)"
        elif isinstance(exc, duckdb.BinderException):
            hint = _column_hint(con, message, sql)
        raise StoreError(f"query failed: {message}{hint}") from None
    finally:
        con.close()


# How DuckDB names a column it cannot bind (unqualified, and qualified by a table or alias).
_UNKNOWN_COLUMN = re.compile(r'(?:Referenced column|does not have a column named) "([^"]+)"')


def _column_hint(con: duckdb.DuckDBPyConnection, message: str, sql: str) -> str:
    """For an unknown column: the stored columns closest to its name (`table.column`), those
    of the tables the statement names first; "" for any other binder error."""
    m = _UNKNOWN_COLUMN.search(message)
    if m is None:
        return ""
    name = m.group(1).lower()
    try:
        stored = con.execute(load_sql("stored_columns")).fetchall()
    except duckdb.Error:
        return ""
    named = {t for t, _ in stored if re.search(rf"\b{re.escape(t)}\b", sql, re.IGNORECASE)}
    for pool in ([r for r in stored if r[0] in named], stored):
        close = difflib.get_close_matches(name, {c.lower() for _, c in pool}, n=3, cutoff=0.6)
        if close:
            found = [f"{t}.{c}" for c in close for t, col in pool if col.lower() == c]
            return f" (closest stored columns: {', '.join(found)})"
    table = sorted(named)[0] if len(named) == 1 else "TABLE_NAME"
    return f" (no stored column is close to {m.group(1)!r}; `DESCRIBE {table}` lists its columns)"


def _open(path: Path, write: bool, files: bool) -> duckdb.DuckDBPyConnection:
    config = {} if files else NO_FILES
    if write:
        return connect(path, create=False, config=config)
    if not path.exists():
        raise StoreError(f"{path}: no such database; run `hpa ingest FILE --db {path}` first")
    con = _read_only(path, config)
    if not killed_ingest_left(con):
        return con
    # The store as the last finished command left it, as every other command sees it: the
    # recovery a writable open makes (or a StoreError saying where it can be made).
    con.close()
    connect(path, create=False, reader=True).close()
    return _read_only(path, config)


def _read_only(path: Path, config: dict) -> duckdb.DuckDBPyConnection:
    try:
        return duckdb.connect(str(path), read_only=True, config=config)
    except duckdb.Error as exc:
        raise open_error(path, exc) from None


def stored_summary(*, db_path: str | Path = DEFAULT_DB) -> pa.Table:
    """Requests and tokens per prompt family x model revision."""
    return run_query(load_sql("stored_summary"), db_path=db_path)
