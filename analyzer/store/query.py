"""Ad-hoc SQL over the store, and the stored-data summary."""

from __future__ import annotations

import difflib
import re
from pathlib import Path

import duckdb
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from analyzer import interrupts
from analyzer.errors import StoreError
from analyzer.store.db import (
    DEFAULT_DB,
    NO_EXTENSIONS,
    check_store_exists,
    connect,
    killed_ingest_left,
    load_sql,
)
from analyzer.store.faults import check_duckdb_file, first_line
from analyzer.store.locks import damage, damaged_store, open_error

# DuckDB settings of a guarded query: no files, no extensions fetched or loaded behind its back.
NO_FILES = {"enable_external_access": False, **NO_EXTENSIONS}


def run_query(
    sql: str, *, db_path: str | Path = DEFAULT_DB, write: bool = False, files: bool = False
) -> pa.Table:
    """The result of one SQL statement as an Arrow table; raises StoreError on bad SQL.

    By default the store is opened read-only and the statement can reach no file (no
    `COPY ... TO`, `read_csv`, `ATTACH`, `INSTALL`): `write` lets it change the database,
    `files` lets it read and write files. A statement that is no query (`check_statements`)
    is refused before DuckDB runs it unless `write` or `files` allows its kind."""
    check_statements(sql, write=write, files=files)
    con = _open(Path(db_path), write, files)
    try:
        return _result(con, sql)
    except duckdb.Error as exc:
        if (why := damage(exc)) is not None:
            raise StoreError(damaged_store(db_path, why)) from None
        message = str(exc).strip().splitlines()[0]
        hint = ""
        if isinstance(exc, duckdb.PermissionException) and not files:
            hint = " (pass --files to let the query read or write files)"
        elif "read-only mode" in message and not write:
            hint = " (pass --write to let the query change the database)"
        elif isinstance(exc, duckdb.BinderException):
            hint = _column_hint(con, message, sql)
        elif isinstance(exc, duckdb.CatalogException):
            hint = _table_hint(str(exc))
        raise StoreError(f"query failed: {message}{hint}") from None
    finally:
        con.close()


# What a statement that is no query may do, by DuckDB's statement type: change the database
# (--write) or reach files and extensions (--files). Anything else is a query.
_S = duckdb.StatementType
_WRITES = {_S.INSERT, _S.UPDATE, _S.DELETE, _S.MERGE_INTO, _S.CREATE, _S.CREATE_FUNC, _S.DROP,
           _S.ALTER, _S.TRANSACTION, _S.VACUUM, _S.ANALYZE, _S.SET, _S.VARIABLE_SET, _S.PREPARE,
           _S.EXECUTE, _S.CALL, _S.PRAGMA}  # fmt: skip
_FILES = {_S.COPY, _S.EXPORT, _S.LOAD, _S.ATTACH, _S.DETACH, _S.COPY_DATABASE, _S.EXTENSION}
# PRAGMAs that only read (the rest set, checkpoint or import: write), and table functions
# that only read (any other, e.g. enable_logging, checkpoint, query, needs both flags).
_READ_PRAGMAS = {"collations", "database_list", "database_size", "functions", "metadata_info",
                 "platform", "show", "show_databases", "show_tables", "show_tables_expanded",
                 "storage_info", "table_info", "user_agent", "version",
                 "extension_versions"}  # fmt: skip
_READ_TABLE_FUNCTIONS = {"generate_series", "range", "unnest", "repeat", "repeat_row",
                         "json_each", "json_tree", "glob", "histogram", "histogram_values",
                         "summary", "pg_timezone_names", "icu_calendar_names", "sniff_csv",
                         "seq_scan", "test_all_types", "which_secret"}  # fmt: skip
_READ_PREFIXES = ("duckdb_", "pragma_", "read_", "parquet_")
_NAME = re.compile(r"\s*(?:pragma|call)\s+([A-Za-z_][A-Za-z0-9_]*)", re.IGNORECASE)
_EXPLAIN = re.compile(r"\s*explain\s+(?:analy[sz]e\s+)?", re.IGNORECASE)


def check_statements(sql: str, *, write: bool = False, files: bool = False) -> None:
    """Refuse, before DuckDB runs anything, a statement of `sql` that is no query (DuckDB's
    parser says which kind each is) unless `write` (it changes the database or the session)
    or `files` (it reaches files or extensions) allows its kind.

    Raises:
        StoreError: a statement `sql` may not run (or that does not parse)."""
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise StoreError(f"query failed: {first_line(exc)}") from None
    for number, statement in enumerate(statements, start=1):
        needs = _needs(statement)
        missing = [flag for flag in needs if not {"--write": write, "--files": files}[flag]]
        if missing:
            text = " ".join(statement.query.split())
            text = text if len(text) <= 60 else text[:57] + "..."
            what = {
                "--write": "change the database",
                "--files": "read or write files",
                "--write and --files": "run (it may change the database or reach files)",
            }[" and ".join(missing)]
            where = f"statement {number} " if len(statements) > 1 else ""
            raise StoreError(
                f"query refused: {where}{text!r} is not a query; pass {' and '.join(missing)} "
                f"to let it {what}"
            )


def _needs(statement) -> list[str]:
    """The flags `statement` needs: [] for a query."""
    try:
        kind = statement.type
    except ValueError:  # a statement type this Python package has no name for
        return ["--write", "--files"]
    text = statement.query
    if kind == _S.EXPLAIN:
        inner = duckdb.extract_statements(_EXPLAIN.sub("", text, count=1))
        return sorted({flag for s in inner for flag in _needs(s)}, reverse=True)
    if kind == _S.SELECT:
        functions = _table_functions(text)
        if functions is None or not all(_reads(f) for f in functions):
            return ["--write", "--files"]
        return []
    m = _NAME.match(text)
    if kind == _S.PRAGMA and m and m.group(1).lower() in _READ_PRAGMAS:
        return []
    if kind == _S.CALL and m and m.group(0).lstrip()[:4].lower() == "call":
        # a table function known to only read, or one that may do anything (enable_logging)
        return [] if _reads(m.group(1)) else ["--write", "--files"]
    if kind in _FILES or (kind == _S.PRAGMA and m is None):  # IMPORT DATABASE parses as one
        return ["--files"]
    if kind in _WRITES:
        return ["--write"]
    return ["--write", "--files"]


def _reads(function: str) -> bool:
    name = function.lower()
    return name in _READ_TABLE_FUNCTIONS or name.startswith(_READ_PREFIXES)


def _table_functions(select: str) -> list[str] | None:
    """The table functions one SELECT statement calls, anywhere in it (DuckDB's own syntax
    tree); None where DuckDB cannot give the tree (PIVOT)."""
    con = duckdb.connect(config={"enable_external_access": False})
    try:
        [(tree,)] = con.execute(load_sql("serialize_select"), {"sql": select}).fetchall()
    finally:
        con.close()
    tree = orjson.loads(tree)
    if tree.get("error"):
        return None
    found: list[str] = []
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if node.get("type") == "TABLE_FUNCTION":
                found.append(str((node.get("function") or {}).get("function_name", "")))
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return found


# DuckDB types no export format carries as they are (Arrow drops a TIMETZ's offset, holds a
# BIT or a BIGNUM as DuckDB's own bytes; CSV and Parquet take no INTERVAL or UNION; Python's
# datetime no nanoseconds): read as DuckDB's own text of the value, in every format and on
# the screen alike.
_AS_TEXT = re.compile(
    r"\b(TIMETZ|TIME WITH TIME ZONE|TIMESTAMP_NS|BIT|BITSTRING|VARINT|BIGNUM|INTERVAL|UNION)\b"
)


def _result(con: duckdb.DuckDBPyConnection, sql: str) -> pa.Table:
    """The rows of `sql` (every statement run; the last one's rows), each column of a type
    in `_AS_TEXT` (or holding one) cast to DuckDB's text of it, and so is a date or a
    timestamp column holding a value Python's dates cannot (`infinity`, a year past 9999)."""
    relation = con.sql(sql)
    if relation is None:
        return pa.table({})
    types = [str(t) for t in relation.types]
    as_text = [bool(_AS_TEXT.search(t)) for t in types]
    table = None if any(as_text) else relation.to_arrow_table()
    if table is not None:
        as_text = [_past_python_dates(column) for column in table.columns]
        if not any(as_text):
            return table
    names = [f'"{c.replace(chr(34), chr(34) * 2)}"' for c in relation.columns]
    return relation.project(
        ", ".join(
            f"CAST(#{i} AS VARCHAR) AS {name}" if text else f"#{i} AS {name}"
            for i, (name, text) in enumerate(zip(names, as_text, strict=True), start=1)
        )
    ).to_arrow_table()


# Python's dates: 0001-01-01 to 9999-12-31, in days and in microseconds since 1970-01-01.
_PYTHON_DAYS = (-719_162, 2_932_896)
_PYTHON_US = (-62_135_596_800 * 10**6, 253_402_300_800 * 10**6 - 1)
_PER_US = {"s": 10**-6, "ms": 10**-3, "us": 1, "ns": 10**3}


def _past_python_dates(column: pa.ChunkedArray) -> bool:
    """Whether a date or timestamp `column` holds a value outside Python's dates."""
    kind = column.type
    if pa.types.is_date32(kind):
        low, high = _PYTHON_DAYS
        values = column.cast(pa.int32())
    elif pa.types.is_timestamp(kind):
        low, high = (bound * _PER_US[kind.unit] for bound in _PYTHON_US)
        values = column.cast(pa.int64())
    else:
        return False
    found = pc.min_max(values)
    least, most = found["min"].as_py(), found["max"].as_py()
    return least is not None and (least < low or most > high)


# How DuckDB names a column it cannot bind (unqualified, and qualified by a table or alias).
_UNKNOWN_COLUMN = re.compile(r'(?:Referenced column|does not have a column named) "([^"]+)"')


# The tables a command writes when it first runs (docs/traces.md#stored-tables): before it,
# DuckDB's guess at the closest name misleads ('validations': "Did you mean "junctions"?").
WRITTEN_BY = {
    "prefix_matches": "hpa match", "junctions": "hpa match", "junction_requests": "hpa match",
    "derived_tables": "hpa match", "replay_runs": "hpa replay", "replay_requests": "hpa replay",
    "replay_summary": "hpa replay", "sweeps": "hpa sweep", "sweep_points": "hpa sweep",
    "validations": "hpa validate", "validation_causes": "hpa validate",
}  # fmt: skip
_UNKNOWN_TABLE = re.compile(r'Table with name (\S+) does not exist!(?:\nDid you mean "([^"]+)"\?)?')


def _table_hint(error: str) -> str:
    """For an unknown table: the command that writes it, where it is one of hpa's not yet
    stored, else DuckDB's closest name (its second line, which the first line leaves out)."""
    m = _UNKNOWN_TABLE.search(error)
    if m is None:
        return ""
    command = WRITTEN_BY.get(m.group(1).lower())
    if command is not None:
        return f" (nothing has stored it yet: `{command}` writes it)"
    return f' (did you mean "{m.group(2)}"?)' if m.group(2) else ""


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
    config = NO_EXTENSIONS if files else NO_FILES
    if write:
        return connect(path, create=False, config=config)
    check_store_exists(path)  # an empty file too, as every command says it
    con = _read_only(path, config)
    if not killed_ingest_left(con):
        return con
    # The store as the last finished command left it, as every other command sees it: the
    # recovery a writable open makes (or a StoreError saying where it can be made).
    con.close()
    connect(path, create=False, reader=True).close()
    return _read_only(path, config)


def _read_only(path: Path, config: dict) -> duckdb.DuckDBPyConnection:
    check_duckdb_file(path)
    try:
        return interrupts.watch(duckdb.connect(str(path), read_only=True, config=config))
    except duckdb.Error as exc:
        raise open_error(path, exc) from None


def stored_summary(*, db_path: str | Path = DEFAULT_DB) -> pa.Table:
    """Requests and tokens per prompt family x model revision."""
    return run_query(load_sql("stored_summary"), db_path=db_path)
