"""Export a query's rows to a file; the format follows the suffix (.parquet, .jsonl, .csv)."""

from __future__ import annotations

import contextlib
import functools
from pathlib import Path

import duckdb
import orjson
import pyarrow as pa

from analyzer.errors import ConfigError, InputFileError
from analyzer.store.db import query_arrow

EXPORT_SUFFIXES = (".parquet", ".jsonl", ".csv")
# How a CSV cell a spreadsheet would run as a formula starts (OWASP's list).
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def check_out_folder(out: str | Path, option: str = "--out") -> Path:
    """`out` as a Path, or InputFileError when the folder it goes in does not exist: a
    command writes the file it is given, never the folders above it (a typo in a path makes
    no tree of folders)."""
    path = Path(out)
    folder = path.parent
    if not folder.is_dir():
        where = f"{option} {path}" if option else str(path)
        if folder.exists():
            raise InputFileError(f"{where}: {folder} is not a folder")
        raise InputFileError(f"{where}: no such folder {folder}; make it first")
    return path


def check_export_path(out: str | Path) -> Path:
    """`out` as a Path, or ConfigError when its suffix names no export format, or
    InputFileError when its folder does not exist (`check_out_folder`)."""
    path = Path(out)
    if path.suffix not in EXPORT_SUFFIXES:
        raise ConfigError(
            f"--out {out}: unknown format {path.suffix or '(no suffix)'!r}; "
            f"use one of {', '.join(EXPORT_SUFFIXES)}"
        )
    return check_out_folder(path)


def export_table(
    con: duckdb.DuckDBPyConnection, sql: str, out: str | Path, params: dict | None = None
) -> int:
    """Write the rows of `sql` to `out` (`write_rows`); returns the number of rows."""
    return write_rows(query_arrow(con, sql, params), out)


def write_rows(table: pa.Table, out: str | Path) -> int:
    """Write `table` to `out` in the format its suffix names, whole or not at all (a file
    beside it, renamed over it); returns the number of rows. CSV text cells that start like
    a spreadsheet formula get a leading apostrophe (`spreadsheet_safe`).

    Deterministic: the same rows give the same bytes (no timestamps in the files).
    """
    path = check_export_path(out)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        if path.suffix == ".parquet":
            import pyarrow.parquet as pq  # imported when written: every command imports us

            pq.write_table(table, tmp, compression="zstd")
        elif path.suffix == ".csv":
            import pyarrow.csv as pacsv

            pacsv.write_csv(spreadsheet_safe(table), tmp)
        else:
            with open(tmp, "wb") as f:
                for row in table.to_pylist():
                    f.write(orjson.dumps(row) + b"\n")
        tmp.replace(path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise InputFileError(f"--out {path}: cannot write ({exc.strerror or exc})") from None
    return table.num_rows


def write_atomic(out: str | Path, data: bytes | str, *, option: str = "") -> Path:
    """Write `data` (str: UTF-8) to `out` whole or not at all: a file beside it, renamed
    over it, so a reader or a killed process never sees half a file.

    Raises:
        InputFileError: its folder does not exist (`check_out_folder`: no folder is made),
            or `out` cannot be written ("`option` PATH: cannot write (why)").
    """
    path = check_out_folder(out, option)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_bytes(data.encode() if isinstance(data, str) else data)
        tmp.replace(path)
    except OSError as exc:
        with contextlib.suppress(OSError):  # a read-only folder refuses even this
            tmp.unlink(missing_ok=True)
        where = f"{option} {path}" if option else str(path)
        raise InputFileError(f"{where}: cannot write ({exc.strerror or exc})") from None
    return path


def spreadsheet_safe(table: pa.Table) -> pa.Table:
    """Text cells a spreadsheet would run as a formula (starting with = + - @, a tab or a
    carriage return: OWASP's list) get a leading apostrophe; other cells are as they were."""
    import pyarrow.compute as pc

    for i, column in enumerate(table.columns):
        if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
            continue
        starts = (pc.starts_with(column, pattern=sign) for sign in FORMULA_STARTS)
        risky = pc.fill_null(functools.reduce(pc.or_, starts), False)
        if pc.any(risky).as_py():
            quoted = pc.binary_join_element_wise("'", column, "")
            table = table.set_column(i, table.field(i), pc.if_else(risky, quoted, column))
    return table
