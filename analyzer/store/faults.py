"""What went wrong, told apart, for the one line a command ends with: a file given as the
store that is no DuckDB database (a SQLite file, a trace), the machine out of memory
(whatever error carries it), and the stores this process opened (the one a damaged block
most likely belongs to)."""

from __future__ import annotations

import errno
from collections.abc import Iterator
from pathlib import Path

import duckdb

from analyzer.errors import StoreError

# What a DuckDB file holds at bytes 8..12 (after its header's checksum), and a SQLite file's start.
_DUCKDB_MAGIC = b"DUCK"
_SQLITE_MAGIC = b"SQLite format 3\x00"


def check_duckdb_file(path: Path) -> None:
    """Raise StoreError unless the file at `path` (present, not empty) starts as a DuckDB
    database does: a SQLite file, a trace or anything else given as `--db` is named as
    such before DuckDB is asked to open it."""
    try:
        with open(path, "rb") as f:
            head = f.read(16)
    except OSError:
        return  # DuckDB's own error says why (a folder, no permission)
    if head[8:12] == _DUCKDB_MAGIC:
        return
    what = "a SQLite database" if head.startswith(_SQLITE_MAGIC) else "not a DuckDB database"
    raise StoreError(
        f"{path}: {what}, not an hpa store; give --db a store hpa made "
        f"(`hpa ingest FILE --db NEW.duckdb`)"
    )


def out_of_memory(exc: BaseException) -> bool:
    """Whether `exc` is DuckDB running out of buffer memory (pyarrow's stream reader passes
    it on as an OSError with DuckDB's message)."""
    return isinstance(exc, duckdb.OutOfMemoryException) or str(exc).startswith(
        "Out of Memory Error"
    )


def errors_behind(exc: BaseException) -> Iterator[BaseException]:
    """`exc`, then the errors it was raised from or while handling, innermost last."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def first_line(exc: BaseException) -> str:
    """The first line of `exc`'s message (its type's name where it has none)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def memory_exhausted(exc: BaseException) -> bool:
    """Whether `exc` (or an error behind it) is the machine out of memory: Python's or
    Arrow's MemoryError, DuckDB's, an allocation the system refused (ENOMEM), a thread it
    could not start."""
    for e in errors_behind(exc):
        if isinstance(e, MemoryError) or out_of_memory(e) or "bad allocation" in str(e):
            return True
        if isinstance(e, OSError) and e.errno == errno.ENOMEM:
            return True
        if isinstance(e, RuntimeError) and str(e) == "can't start new thread":
            return True
    return False


def opened_stores() -> list[Path]:
    """The stores this process opened, the last one last (the one an error most likely
    concerns)."""
    return list(_STORES)


def note_opened(path: Path) -> None:
    """Note that this process opened the store at `path` (`opened_stores`)."""
    if path in _STORES:
        _STORES.remove(path)
    _STORES.append(path)


_STORES: list[Path] = []
