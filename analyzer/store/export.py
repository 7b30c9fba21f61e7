"""Export a query's rows to a file; the format follows the suffix (.parquet, .jsonl, .csv)."""

from __future__ import annotations

import base64
import decimal
import functools
import math
from pathlib import Path

import duckdb
import orjson
import pyarrow as pa

from analyzer.errors import ConfigError, InputFileError
from analyzer.store.db import query_arrow
from analyzer.traces.io import discard, scratch_file, written_whole

EXPORT_SUFFIXES = (".parquet", ".jsonl", ".csv")
# How a CSV cell a spreadsheet would run as a formula starts (OWASP's list).
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def check_out_folder(out: str | Path, option: str = "--out") -> Path:
    """`out` as a Path, or InputFileError when the folder it goes in does not exist: a
    command writes the file it is given, never the folders above it (a typo in a path makes
    no tree of folders)."""
    path = Path(out)
    folder = path.parent
    where = f"{option} {path}" if option else str(path)
    try:
        if not folder.is_dir():
            if folder.exists():
                raise InputFileError(f"{where}: {folder} is not a folder")
            raise InputFileError(f"{where}: no such folder {folder}; make it first")
        written_in = path.is_dir()  # a folder that exists is written in, not beside (probe)
    except OSError as exc:  # a name past 255 bytes (ENAMETOOLONG), a loop of links
        raise InputFileError(f"{where}: cannot write ({exc.strerror or exc})") from None
    if not written_in:
        _check_writable(folder, where)
    return path


def _check_writable(folder: Path, where: str) -> None:
    """InputFileError when no file can be made in `folder` (read-only, immutable, /proc):
    said before any work, not after a command has computed (and a store kept) its results.
    Tried by making a file, since access() answers yes to root wherever it is refused."""
    try:
        discard(scratch_file(folder))
    except OSError as exc:
        raise InputFileError(f"{where}: cannot write ({exc.strerror or exc})") from None


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
    beside it, `scratch_file`, renamed over it); returns the number of rows. CSV text cells
    that start like a spreadsheet formula get a leading apostrophe (`spreadsheet_safe`).

    Deterministic: the same rows give the same bytes (no timestamps in the files).
    """
    path = check_export_path(out)
    with written_whole(path, lambda why: f"--out {path}: cannot write ({why})") as tmp:
        if path.suffix == ".parquet":
            import pyarrow.parquet as pq  # imported when written: every command imports us

            with open(tmp, "wb") as f:  # opened here: a refusal is the system's own words
                pq.write_table(table, f, compression="zstd")
        elif path.suffix == ".csv":
            import pyarrow.csv as pacsv

            rows = spreadsheet_safe(csv_ready(table))
            with open(tmp, "wb") as f:
                pacsv.write_csv(rows, f)
        else:
            lines = json_lines(table)  # every value converted before the file is opened
            with open(tmp, "wb") as f:
                f.writelines(lines)
    return table.num_rows


def json_lines(table: pa.Table) -> list[bytes]:
    """Each row of `table` as one JSON object and a newline, every value exact: a DECIMAL
    (and a HUGEINT, which Arrow holds as one) as a JSON number with all its digits, a BLOB
    as base64 text, a float that is not finite as the text "NaN", "Infinity" or
    "-Infinity", a timestamp finer than microseconds as its text (Arrow's, to the
    nanosecond).

    Raises:
        ConfigError: a column of a type JSON cannot take (naming it)."""
    names = table.column_names
    columns = [_json_values(table.schema.field(i), table.column(i)) for i in range(len(names))]
    dumps = functools.partial(orjson.dumps, default=_json_default)
    return [dumps(dict(zip(names, row, strict=True))) + b"\n" for row in zip(*columns, strict=True)]


def _json_values(field: pa.Field, column: pa.ChunkedArray) -> list:
    try:
        values = column.to_pylist()
    except (ValueError, OverflowError, pa.ArrowException):  # nanoseconds, dates past 9999
        import pyarrow.compute as pc

        try:
            values = pc.cast(column, pa.string()).to_pylist()
        except pa.ArrowException as exc:
            raise ConfigError(
                f"column {field.name!r} ({field.type}) cannot be written as JSON ({exc}); "
                "cast it to VARCHAR in the query, or write .parquet"
            ) from None
    if _holds_floats(field.type):
        values = [_finite(v) for v in values]
    return values


def _holds_floats(kind: pa.DataType) -> bool:
    if pa.types.is_floating(kind):
        return True
    return any(_holds_floats(kind.field(i).type) for i in range(kind.num_fields))


def _finite(value):
    """`value` with each float that is not finite as its JSON-safe text (inside lists and
    structs too)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else _NOT_FINITE[str(value)]
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


_NOT_FINITE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


def _json_default(value):
    """What orjson cannot write itself: exact decimals, bytes as base64."""
    if isinstance(value, decimal.Decimal):
        return orjson.Fragment(format(value, "f"))
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def csv_ready(table: pa.Table) -> pa.Table:
    """`table` with the columns CSV has no cell for as text: bytes as base64, a list,
    struct or map as the JSON text of its value (`json_lines`' conventions)."""
    for i, field in enumerate(table.schema):
        kind = field.type
        if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
            text = [None if v is None else _json_default(v) for v in table.column(i).to_pylist()]
        elif pa.types.is_nested(kind):
            values = _json_values(field, table.column(i))
            text = [None if v is None else orjson.dumps(v, default=_json_default).decode()
                    for v in values]  # fmt: skip
        else:
            continue
        table = table.set_column(i, pa.field(field.name, pa.string()), pa.array(text, pa.string()))
    return table


def write_atomic(out: str | Path, data: bytes | str, *, option: str = "") -> Path:
    """Write `data` (str: UTF-8) to `out` whole or not at all: a file beside it, renamed
    over it (`scratch_file`), so a reader or a killed process never sees half a file.

    Raises:
        InputFileError: its folder does not exist (`check_out_folder`: no folder is made),
            or `out` cannot be written ("`option` PATH: cannot write (why)").
    """
    path = check_out_folder(out, option)
    where = f"{option} {path}" if option else str(path)
    with written_whole(path, lambda why: f"{where}: cannot write ({why})") as tmp:
        tmp.write_bytes(data.encode() if isinstance(data, str) else data)
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
