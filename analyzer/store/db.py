"""Opening the DuckDB file, creating the schema, and loading named SQL statements."""

from __future__ import annotations

import hashlib
import math
import sys
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache
from importlib import resources
from pathlib import Path

import duckdb
import pyarrow as pa

from analyzer import interrupts
from analyzer.errors import InputFileError, StoreError
from analyzer.store import DEFAULT_DB  # noqa: F401  (defined there, light, for the CLI)
from analyzer.store.faults import check_duckdb_file, note_opened
from analyzer.store.locks import StoreLockedError, open_error

SCHEMA_VERSION = "1"


@cache
def load_sql(name: str) -> str:
    """The text of `analyzer/store/sql/<name>.sql`."""
    return resources.files("analyzer.store").joinpath("sql", f"{name}.sql").read_text()


# List lengths as SQL expressions over `requests` (the placeholders of the readers'
# SQL). Ingest stores len(prompt_token_ids) as prompt_tokens, len(output_token_ids) as
# output_tokens and ceil(prompt_tokens / block_size) hash ids, so the store's lengths read
# no list (a projected len() makes DuckDB read and cache every one); a Parquet dataset
# standing in for the table was written by someone else, so its lists are measured.
STORED_LENGTHS = {
    "prompt_len": "prompt_tokens",
    "hash_len": "(prompt_tokens + block_size - 1) // block_size",
    "output_len": "output_tokens",
}
MEASURED_LENGTHS = {
    "prompt_len": "len(prompt_token_ids)",
    "hash_len": "len(block_hash_ids)",
    "output_len": "len(output_token_ids)",
}


def with_list_lengths(con: duckdb.DuckDBPyConnection, sql: str) -> str:
    """`sql` with its list-length placeholders filled for `requests` on `con`: the stored
    counts for the store's table, the lists' own lengths for a dataset view."""
    [(is_view,)] = con.execute(load_sql("requests_is_view")).fetchall()
    return sql.format(**(MEASURED_LENGTHS if is_view else STORED_LENGTHS))


def connect(
    path: str | Path = DEFAULT_DB,
    *,
    create: bool = True,
    memory_limit: str | None = None,
    config: dict | None = None,
    reader: bool = False,
) -> duckdb.DuckDBPyConnection:
    """Open (and, with `create`, initialise) the store at `path`; `memory_limit` caps
    DuckDB's buffer memory (its own units: '2GB'); `config`: further DuckDB settings.
    `reader`: the command only reads, so the store opens read-only (`open_reader`: beside
    other readers, holding no write lock), after the recovery or upgrade a writable open
    makes where it needs one.

    Raises:
        StoreError: the file is missing while `create` is false, is not a DuckDB file,
            or was written by another schema version. InputFileError: a new store's
            folder does not exist.
    """
    path = Path(path)
    note_opened(path)
    empty = _empty_file(path)
    if not create and (empty or not path.exists()):
        raise _no_store(path, empty)
    new = empty or not path.exists()
    if new and not path.parent.is_dir():  # a new store is a file: no folder is made for it
        raise InputFileError(f"--db {path}: no such folder {path.parent}; make it first")
    if empty:  # nothing to keep: what a store that could not be created (a full disk) left
        remove_store(path)
    # One thread unless asked (ingest): DuckDB's parallel aggregates sum floats in an order
    # that varies run to run, and every figure must be the same byte for byte.
    settings = {"threads": 1, **NO_EXTENSIONS, **(config or {})}
    if memory_limit is not None:
        settings["memory_limit"] = memory_limit
    if not new:
        check_duckdb_file(path)
        if reader:
            return open_reader(path, settings)
    try:
        con = _attach(path, settings)
    except duckdb.Error as exc:
        if new:  # a store this open was to create leaves nothing behind
            remove_store(path)
        raise open_error(path, exc) from None
    _OPENED[con] = settings
    try:
        _ensure_schema(con, path)
    except BaseException:
        con.close()
        if new:
            remove_store(path)
        raise
    return con


# Every connection to a store: DuckDB fetches or loads no extension of its own accord (a
# SQLite file made it download sqlite_scanner); those hpa uses are built in.
NO_EXTENSIONS = {"autoinstall_known_extensions": False, "autoload_known_extensions": False}
# How often a writer that has its results asks again for a store another process holds.
LOCK_POLL_S = 0.2


def open_to_store(
    path: str | Path,
    read_from: str | None,
    *,
    said: Callable[[str], None] | None = None,
    reader: duckdb.DuckDBPyConnection | None = None,
) -> duckdb.DuckDBPyConnection:
    """A writable connection to the store at `path` for a command that computed its results
    on a read-only one (so `hpa query` could read the store meanwhile): where another
    process holds the store (a reader: `hpa query`, `hpa report`), it waits for it, saying
    so once (`said`; default: a line on stderr), rather than lose what it computed.
    `read_from`: the stored trace's fingerprint when the results were computed
    (`trace_fingerprint`; None: the trace is not the store's, a dataset). `reader`: that
    read-only connection, not closed yet: the store is let go of and attached again
    writable in its DuckDB instance (`reader` is returned), where it was opened so, else
    it is closed first (a new instance costs 15-20 ms of a 0.6 s `hpa match`).

    Raises:
        StoreError: the stored trace changed meanwhile (another command ingested), so the
            results are of a trace the store no longer holds; or the store cannot be opened.
    """
    said = said or (lambda line: print(f"hpa: {line}", file=sys.stderr, flush=True))
    waiting = False
    path = Path(path)
    while True:
        try:
            con = _writable(path, reader)
            break
        except StoreLockedError as exc:
            if not waiting:
                held = str(exc).split("; run this again")[0]
                said(f"{held}; waiting for it to end, to store the results")
                waiting = True
            time.sleep(LOCK_POLL_S)
    if read_from is not None and trace_fingerprint(con)[0] != read_from:
        con.close()
        raise StoreError(
            f"{path}: the stored trace changed while this command computed (another command "
            "ingested or replaced it); nothing was stored; run it again"
        )
    return con


def _writable(path: Path, reader: duckdb.DuckDBPyConnection | None) -> duckdb.DuckDBPyConnection:
    """`connect(path, create=False)`, in `reader`'s DuckDB instance where it can be."""
    if reader is None or reader not in _SWAPPABLE:
        if reader is not None:
            reader.close()
        return connect(path, create=False)
    note_opened(path)
    empty = _empty_file(path)
    if empty or not path.exists():  # removed while the command computed
        raise _no_store(path, empty)
    try:
        reader.execute(load_sql("store_detach"))
    except duckdb.ConnectionException:  # closed already (workers read meanwhile): a new one
        _SWAPPABLE.discard(reader)
        return connect(path, create=False)
    try:
        _attach_store(reader, path, read_only=False)
    except duckdb.Error as exc:
        raise open_error(path, exc) from None
    _SWAPPABLE.discard(reader)
    _ensure_schema(reader, path)
    return reader


def check_store_exists(path: Path) -> None:
    """StoreError unless `path` holds a file that is not empty: no such database, or an
    empty file (what a store that could not be created left), in every command's words."""
    empty = _empty_file(path)
    if empty or not path.exists():
        raise _no_store(path, empty)


def _no_store(path: Path, empty: bool) -> StoreError:
    what = " (an empty file)" if empty else ""
    return StoreError(f"{path}: no such database{what}; run `hpa ingest FILE --db {path}` first")


def _empty_file(path: Path) -> bool:
    try:
        return path.stat().st_size == 0
    except OSError:
        return False


def remove_store(path: Path) -> None:
    """Delete the store at `path` and its write-ahead log, where they are."""
    for leftover in (path, path.with_name(path.name + ".wal")):
        leftover.unlink(missing_ok=True)


def _attach(path: Path, settings: dict, *, read_only: bool = False) -> duckdb.DuckDBPyConnection:
    """A connection to the store at `path` that writes row groups of 2,048 rows (with
    `read_only`: that reads it, beside other readers).

    DuckDB writes a transaction's appends to the file as they go only in whole row groups:
    ingest's rows, carrying 1,400 token ids each, come 16,384 at a time, far short of the
    default 122,880, so each would pass through the write-ahead log and be written twice
    (on 70 M tokens: 2.3 s of inserts, 1.6 s in groups of 2,048). Every connection uses
    the same size: a checkpoint merges row groups smaller than its own size, which would
    rewrite the whole table on the next command that writes. A connection that may not
    touch files (`enable_external_access` false) is shut off once the store is attached."""
    closed = settings.get("enable_external_access") is False
    con = interrupts.watch(  # a signal interrupts its statement (analyzer.interrupts)
        duckdb.connect(config={k: v for k, v in settings.items() if k != "enable_external_access"})
    )
    try:
        _attach_store(con, path, read_only=read_only)
        if closed:
            con.execute(load_sql("store_no_files"))
    except BaseException:
        con.close()
        raise
    return con


def _attach_store(con: duckdb.DuckDBPyConnection, path: Path, *, read_only: bool) -> None:
    """Attach the store at `path` to `con`'s DuckDB instance as its default database."""
    con.execute(
        load_sql("store_attach_read_only" if read_only else "store_attach"), {"path": str(path)}
    )
    con.execute(load_sql("store_use"))


def cursor(con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
    """A second connection to `con`'s database that reads the same default database (the
    attached store), for a query that streams beside one of `con`'s."""
    [(name,)] = con.execute(load_sql("current_database")).fetchall()
    other = con.cursor()
    try:
        other.execute(load_sql("use_database").format(name=name.replace('"', '""')))
    except BaseException:
        other.close()
        raise
    return other


def _not_writable(exc: duckdb.Error) -> bool:
    text = str(exc)
    return any(why in text for why in _NOT_WRITABLE)


# What the system says of a file or folder it will not let us write (EROFS, EACCES, EPERM:
# an immutable folder)
_NOT_WRITABLE = ("Read-only file system", "Permission denied", "Operation not permitted")


def open_reader(path: Path, settings: dict) -> duckdb.DuckDBPyConnection:
    """A connection of a command that only reads: read-only, so other readers (`hpa query`
    while `hpa report` runs) open the store beside it and it takes no write lock. A store
    that needs the recovery or upgrade a writable open makes (what a killed ingest left,
    columns to add) is opened writable once for it, then read-only; where it cannot be
    written, StoreError says so."""
    con, why = _read_only_open(path, settings)
    if why is None:
        return con
    con.close()
    try:
        writable = _attach(path, settings)
    except duckdb.Error as exc:
        if not _not_writable(exc):
            raise open_error(path, exc) from None
        raise StoreError(
            f"{path}: the store is read-only here and {why}; open it once where it can "
            "be written (any hpa command that writes, e.g. hpa replay)"
        ) from None
    try:
        _ensure_schema(writable, path)
    finally:
        writable.close()
    con, _ = _read_only_open(path, settings)
    return con


def _read_only_open(path: Path, settings: dict) -> tuple[duckdb.DuckDBPyConnection, str | None]:
    """A read-only connection to the store at `path`, and why a writable open would change
    the store (None: it would not)."""
    try:
        con = _attach(path, settings, read_only=True)
    except duckdb.Error as exc:
        raise open_error(path, exc) from None
    try:
        _check_version(con, path)
        why = _needs_writing(con)
    except BaseException:
        con.close()
        raise
    _OPENED[con] = settings
    if settings.get("enable_external_access") is not False:
        _SWAPPABLE.add(con)  # may attach the store again, writable (`open_to_store`)
    return con, why


def _needs_writing(con: duckdb.DuckDBPyConnection) -> str | None:
    """Why a writable open would change the store (None: it would not)."""
    present = table_names(con)
    if "meta" not in present or "requests" not in present:
        return "has no tables yet"
    if killed_ingest_left(con):
        return "holds what a killed ingest left"
    if "replay_runs" in present:
        fresh = duckdb.connect()  # the current replay tables, to compare columns with
        try:
            fresh.execute(load_sql("schema"))
            fresh.execute(load_sql("replay_schema"))
            for table in table_names(fresh) & present:
                if column_names(fresh, table) - column_names(con, table):
                    return f"its table {table} was written by an earlier hpa (columns to add)"
        finally:
            fresh.close()
    return None


def killed_ingest_left(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether the store holds rows of an ingest killed midway, which the next writable
    open undoes (`_recover_ingest`)."""
    if not {"meta", "requests", "rejects", "sources"} <= table_names(con):
        return False
    return bool(
        con.execute(load_sql("ingest_open_from")).fetchall()[0][0]
        or con.execute(load_sql("ingest_unfinished")).fetchall()[0][0]
    )


def _check_version(con: duckdb.DuckDBPyConnection, path: Path) -> None:
    """Raise StoreError for a DuckDB file another program made (tables, none of them
    `meta`, the first table hpa makes), or one of another schema version."""
    present = table_names(con)
    if present and "meta" not in present:
        shown = ", ".join(sorted(present)[:4]) + (", ..." if len(present) > 4 else "")
        raise StoreError(
            f"{path}: not an hpa store (a DuckDB database of another program: tables "
            f"{shown}, no hpa meta table); give --db a store hpa made, or a new file"
        )
    if "meta" in present:
        found = con.execute(load_sql("meta_schema_version")).fetchall()
        if found and found[0][0] != SCHEMA_VERSION:
            raise StoreError(
                f"{path}: schema version {found[0][0]}, this hpa needs {SCHEMA_VERSION}; "
                "re-ingest into a new database"
            )


def _ensure_schema(con: duckdb.DuckDBPyConnection, path: Path) -> None:
    _check_version(con, path)
    with transaction(con, held=False):  # tables and version together (a kill: no meta row)
        con.execute(load_sql("schema"))
        con.execute(load_sql("meta_set_schema_version"), {"version": SCHEMA_VERSION})
    _recover_ingest(con)
    if "replay_runs" in table_names(con):
        # Replay tables gain columns over time (ALTER ... IF NOT EXISTS): a store written
        # by an earlier hpa reads like a new one, its old runs with the columns' defaults.
        con.execute(load_sql("replay_schema"))


_OPEN: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # connection -> depth
_LANDS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # connection -> what it stores
_OPENED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # connection -> its settings
_SWAPPABLE: weakref.WeakSet = weakref.WeakSet()  # read-only, may reattach the store writable


@contextmanager
def transaction(con: duckdb.DuckDBPyConnection, *, held: bool = True) -> Iterator[None]:
    """One all-or-nothing write: committed when the outermost block ends, rolled back if it
    raises (a killed process commits nothing either). A block inside another is part of it.
    What a block stores is named by `stores` inside it; the commit and the note of what
    it stored are not cut short by a signal (`analyzer.interrupts`; none waits if not `held`)."""
    depth = _OPEN.get(con, 0)
    if depth:
        _OPEN[con] = depth + 1
        named = len(_LANDS.get(con, ()))
        try:
            yield
        except BaseException:
            del _LANDS.get(con, [])[named:]  # what this block would have stored is not
            raise
        finally:
            _OPEN[con] = depth
        return
    con.begin()
    _OPEN[con] = 1
    try:
        yield
    except BaseException:
        con.rollback()
        raise
    finally:
        _OPEN.pop(con, None)
        stored = _LANDS.pop(con, [])
    if not held:  # the store's own schema as it opens: no command's write
        con.commit()
        return
    with interrupts.holding():
        con.commit()
        interrupts.note_landed(stored)


def stores(con: duckdb.DuckDBPyConnection, what: str) -> None:
    """Inside `transaction(con)`: name something it stores, in a user's words ("replay run
    7"). Once the outermost block has committed, a command stopped by a signal says so."""
    _LANDS.setdefault(con, []).append(what)


def _recover_ingest(con: duckdb.DuckDBPyConnection) -> None:
    """Undo what an ingest killed midway left (DuckDB lets one process write at a time, so
    none is running now): every file of a command that did not end goes. A store written
    by an earlier hpa (no command marker) loses its unfinished file's rows, and the files
    finished get their arrival order."""
    if con.execute(load_sql("ingest_open_from")).fetchall()[0][0]:
        with transaction(con):
            con.execute(load_sql("ingest_forget_command"))
    if con.execute(load_sql("ingest_unfinished")).fetchall()[0][0]:
        with transaction(con):
            con.execute(load_sql("ingest_forget_unfinished"))
            con.execute(load_sql("arrival_order"))


def require_tables(con: duckdb.DuckDBPyConnection, *names: str) -> None:
    """Raise StoreError naming the first missing table and the command that writes it."""
    present = table_names(con)
    writers = {"prefix_matches": "hpa match", "junctions": "hpa match"}
    for name in names:
        if name not in present:
            hint = writers.get(name, "hpa ingest")
            raise StoreError(f"table {name!r} is not in the database; run `{hint}` first")


def trace_fingerprint(con: duckdb.DuckDBPyConnection) -> tuple[str, int]:
    """(fingerprint, number of requests) of the stored trace: the ingested files' sha256s
    in ingest order and the request count, hashed (what a run or a match was computed
    from)."""
    sources, num = con.execute(load_sql("trace_fingerprint")).fetchall()[0]
    return hashlib.sha256(f"{sources}|{num}".encode()).hexdigest(), int(num)


def trace_block_tokens(block_sizes) -> int | None:
    """The unit every hash-id request of a trace can be matched in (the least common
    multiple of their block sizes, tokens); None for a token-id trace."""
    sizes = {int(b) for b in block_sizes if b}
    return math.lcm(*sizes) if sizes else None


def stored_trace_block(con: duckdb.DuckDBPyConnection) -> int | None:
    """`trace_block_tokens` of the requests on `con`, from one column: known before the
    trace is loaded."""
    return trace_block_tokens(b for (b,) in con.execute(load_sql("trace_block_sizes")).fetchall())


def derived_from(con: duckdb.DuckDBPyConnection, table: str) -> tuple[str, int] | None:
    """(trace fingerprint, number of requests) `table` was derived from; None when not
    recorded (a store written before hpa recorded it)."""
    if "derived_tables" not in table_names(con):
        return None
    rows = con.execute(load_sql("derived_lookup"), {"table_name": table}).fetchall()
    return (rows[0][0], int(rows[0][1])) if rows else None


def opened_settings(con: duckdb.DuckDBPyConnection) -> dict:
    """The DuckDB settings `connect` opened `con` with (empty for one it did not open)."""
    return _OPENED.get(con, {})


def table_names(con: duckdb.DuckDBPyConnection) -> set[str]:
    """Every table and view on `con`."""
    return {r[0] for r in con.execute(load_sql("table_names")).fetchall()}


def column_names(con: duckdb.DuckDBPyConnection, table: str) -> set[str]:
    """The columns of `table` (empty when there is no such table)."""
    return {r[0] for r in con.execute(load_sql("column_names"), {"table_name": table}).fetchall()}


def query_arrow(con: duckdb.DuckDBPyConnection, sql: str, params=None) -> pa.Table:
    """The rows of one SQL statement as a pyarrow Table (empty when it returns none)."""
    relation = con.sql(sql, params=params)
    if relation is None:
        return pa.table({})
    to_table = getattr(relation, "to_arrow_table", None) or relation.arrow
    return to_table()
