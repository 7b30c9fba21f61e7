"""Readers: one trace file in, a stream of `Batch`es out (JSONL, Parquet, CSV).

Each reader streams in bounded batches, so memory does not grow with the file. A file
that cannot be read at all raises InputFileError; a bad record becomes a Reject.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson
import pyarrow.parquet as pq

from analyzer.errors import InputFileError
from analyzer.traces.adapters import adapters
from analyzer.traces.batches import (
    FAST_INPUT_SCHEMA,
    Batch,
    SourceInfo,
    exact_batch,
    fast_rows,
)
from analyzer.traces.csv_rows import read_csv
from analyzer.traces.io import COMPRESSED, CountingReader, open_binary
from analyzer.traces.jsonlines import (
    LongLine,
    decoded_lines,
    first_json_object,
    line_bodies,
    repeated_key_error,
)
from analyzer.traces.records import RecordError, first_bad_utf8
from analyzer.traces.threads import default_workers, ordered_map
from analyzer.traces.token_scan import strip_token_arrays

BATCH_BYTES = 8 << 20
BATCH_ROWS = 8192
# Batches at least this long have their token arrays scanned out before Arrow parses them
# (the scanner compiles on first use: small inputs never pay for that).
SCAN_MIN_BYTES = 1 << 20
_SUFFIX_FORMATS = {
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "jsonl",
    ".parquet": "parquet",
    ".pq": "parquet",
    ".csv": "csv",
}
# What a file in a directory given to ingest is named to be taken as a trace (server logs:
# .log, .txt; any of them compressed).
TRACE_SUFFIXES = (*_SUFFIX_FORMATS, ".log", ".txt")


def trace_file_name(path: Path) -> bool:
    """Whether `path`'s name ends like a trace (a suffix of TRACE_SUFFIXES, then .gz/.zst)."""
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] in COMPRESSED:
        suffixes = suffixes[:-1]
    return bool(suffixes) and suffixes[-1] in TRACE_SUFFIXES


def side_table(path: Path) -> str | None:
    """Why `path` is another file's part, not a trace (a RAGPulse side table next to its
    trace, which reads it); None for a file that may be a trace."""
    for adapter in ADAPTERS:
        if adapter.side_table is not None and (why := adapter.side_table(path)):
            return why
    return None


def not_a_trace(path: Path) -> str | None:
    """Why a file of a directory given to ingest is left out; None to read it."""
    if not trace_file_name(path):
        return "not named like a trace file (give it by name to read it)"
    return side_table(path)


# The adapters (analyzer/traces/adapters), in detection order, and their formats.
ADAPTERS = adapters()
ADAPTER_FORMATS = tuple(adapter.name for adapter in ADAPTERS)
_BLANK_START = np.array([10, 13, 32, 9], dtype=np.uint8)  # \n \r space tab


def detect_format(path: Path) -> str:
    """Format name from the suffix (after .gz/.zst), else from the first bytes."""
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] in COMPRESSED:
        suffixes = suffixes[:-1]
    if suffixes and suffixes[-1] in _SUFFIX_FORMATS:
        fmt = _SUFFIX_FORMATS[suffixes[-1]]
        return _jsonl_flavour(path) if fmt == "jsonl" else fmt
    with open_binary(path, CountingReader(open(path, "rb"))) as f:
        head = f.read(4)
    if head == b"PAR1":
        return "parquet"
    if head.lstrip()[:1] == b"{":
        return _jsonl_flavour(path)
    if (log_format := _log_flavour(path)) is not None:
        return log_format
    raise InputFileError(
        f"{path}: cannot tell the format from the name or content; "
        f"pass --format ({', '.join(f for f in READERS if f not in ADAPTER_FORMATS)})"
    )


def _jsonl_flavour(path: Path) -> str:
    """An adapter's name when the first JSON Lines record is unambiguously its format."""
    try:
        with open_binary(path, CountingReader(open(path, "rb"))) as f:
            head = f.read(1 << 20)
    except Exception:  # corrupt gzip/zstd: the reader reports what is wrong with the file
        return "jsonl"
    first = first_json_object(head)  # (a WEKA conversation may be longer than `head`)
    for adapter in ADAPTERS:
        if adapter.record is not None and adapter.record(first, head):
            return adapter.name
    return "jsonl"


def _log_flavour(path: Path) -> str | None:
    """vllm_log or sglang_log when the first MiB of a text file has their request lines."""
    try:
        with open_binary(path, CountingReader(open(path, "rb"))) as f:
            head = f.read(1 << 20)
    except Exception:  # corrupt gzip/zstd: not recognised; the error names the formats
        return None
    for adapter in ADAPTERS:
        if adapter.text is not None and adapter.text(head):
            return adapter.name
    return None


def read_jsonl(path: Path, stream: BinaryIO, progress: Callable[[], None]) -> Iterator[Batch]:
    """Batches of a JSON Lines stream; lines are numbered from 1, blank lines skipped.
    Batches are parsed side by side (`threads.ordered_map`) and come in order."""
    bodies = line_bodies(path, stream, progress, BATCH_BYTES)
    yield from ordered_map(_parsed, bodies, workers=default_workers())


def _parsed(piece: tuple[bytes, int] | LongLine) -> Batch:
    if isinstance(piece, LongLine):
        return exact_batch([piece.reject()])
    return _jsonl_batch(*piece)


def _jsonl_batch(body: bytes, first_line: int) -> Batch:
    """One batch of whole lines (ending in newline) starting at line `first_line`."""
    buf = np.frombuffer(body, dtype=np.uint8)
    ends = np.flatnonzero(buf == 10)
    starts = np.concatenate(([0], ends[:-1] + 1))
    # The fast reader skips blank lines silently, so any line starting with white space
    # sends the batch to the exact path, which numbers lines itself.
    if not np.isin(buf[starts], _BLANK_START).any():
        table = _fast_table(body, buf, starts, ends)
        if table is not None:
            line_nos = pa.array(np.arange(first_line, first_line + len(ends), dtype=np.int64))
            rows = fast_rows(table, line_nos)
            if rows is not None:
                return Batch(rows)
    return exact_batch(list(decoded_lines(body, first_line)))


def _fast_table(body: bytes, buf: np.ndarray, starts: np.ndarray, ends: np.ndarray):
    """The batch typed as FAST_INPUT_SCHEMA by Arrow's JSON reader, or None where it may not
    be read that way. A large batch has its token arrays read out first (`token_scan`):
    Arrow then parses a tenth of the bytes, and the arrays it finds empty are put back."""
    stripped = strip_token_arrays(body, len(ends)) if len(body) >= SCAN_MIN_BYTES else None
    if stripped is not None:
        body = stripped.body
        buf = np.frombuffer(body, dtype=np.uint8)
        ends = np.flatnonzero(buf == 10)
        starts = np.concatenate(([0], ends[:-1] + 1))
    table = _arrow_json(body)
    if table is None or table.num_rows != len(ends) or _repeats(body, buf, starts, ends, table):
        return None
    return table if stripped is None else _put_back(table, stripped.columns)


def _arrow_json(body: bytes) -> pa.Table | None:
    try:
        table = pajson.read_json(
            io.BytesIO(body),
            read_options=pajson.ReadOptions(block_size=1 << 20),
            parse_options=pajson.ParseOptions(
                explicit_schema=FAST_INPUT_SCHEMA, unexpected_field_behavior="infer"
            ),
        )
        # Arrow's JSON reader copies string bytes unchecked: a line with invalid UTF-8
        # must reach the exact path, which rejects that line alone.
        table.validate(full=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    return table


def _put_back(table: pa.Table, columns: dict[str, pa.ListArray]) -> pa.Table | None:
    """`table` with the scanned arrays in place of the `[]` left for them; None unless
    Arrow found exactly that: an empty list where an array was read, null elsewhere."""
    for name, scanned in columns.items():
        parsed = table.column(name)
        read = scanned.is_valid()
        if not pc.all(pc.equal(pc.is_valid(parsed), read)).as_py():
            return None
        lengths = pc.fill_null(pc.list_value_length(parsed), 0)
        if pc.max(lengths).as_py():
            return None
        table = table.set_column(table.schema.get_field_index(name), name, scanned)
    return table


def _repeats(
    body: bytes, buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, table: pa.Table
) -> bool:
    """Whether a line of the batch gives a key twice (Arrow's reader keeps one silently).
    A line has a key end (quote, blanks, colon) per key it holds; one with more than its
    non-null fields is checked exactly (a null value, a quote and colon in a string)."""
    colons = np.flatnonzero(buf == 58)
    before = buf[np.maximum(colons - 1, 0)]
    marks = colons[(before == 34) | (before == 32) | (before == 9)]  # '"', ' ', tab
    per_line = np.bincount(np.searchsorted(ends, marks), minlength=len(ends))
    fields = np.zeros(len(ends), dtype=np.int64)
    for column in table.columns:
        fields += pc.is_valid(column).to_numpy(zero_copy_only=False)
    return any(
        repeated_key_error(body[starts[i] : ends[i]]) is not None
        for i in np.flatnonzero(per_line > fields)
    )


def read_parquet(path: Path, stream: BinaryIO, progress: Callable[[], None]) -> Iterator[Batch]:
    """Batches of a Parquet file; rows are numbered from 1 as `line_no`.

    Parquet needs random access, so `stream` is not used: the file is opened by path.
    """
    try:
        parquet = pq.ParquetFile(path)
    except (pa.ArrowInvalid, OSError) as exc:
        raise InputFileError(f"{path}: not a readable Parquet file ({exc})") from None
    first = 1
    for record_batch in parquet.iter_batches(batch_size=BATCH_ROWS):
        table = _timestamps_as_seconds(pa.Table.from_batches([record_batch]))
        line_nos = pa.array(np.arange(first, first + table.num_rows, dtype=np.int64))
        utf8 = _valid_utf8(table)
        rows = fast_rows(table, line_nos) if utf8 else None
        if rows is not None:
            yield Batch(rows)
        else:
            records = table.to_pylist() if utf8 else _records_checking_utf8(path, table)
            yield exact_batch(
                [(first + i, rec, orjson.dumps(rec, default=str)) for i, rec in enumerate(records)]
            )
        first += table.num_rows
        progress()


def _valid_utf8(table: pa.Table) -> bool:
    """Whether every string of `table` is UTF-8 (a Parquet writer need not check)."""
    try:
        table.validate(full=True)
    except pa.ArrowInvalid:
        return False
    return True


def _records_checking_utf8(path: Path, table: pa.Table) -> list:
    """The rows of `table` as records, a row with a string that is not UTF-8 a RecordError
    naming its column (one bad value costs its row, not the file)."""
    text = [f.name for f in table.schema if pa.types.is_string(f.type)]
    raw = table.cast(
        pa.schema(pa.field(f.name, pa.binary()) if f.name in text else f for f in table.schema)
    )
    if not _valid_utf8(raw):  # a string inside a list or struct: not one row's to lose
        raise InputFileError(f"{path}: a nested string column is not valid UTF-8")
    return [_decoded(rec, text) for rec in raw.to_pylist()]


def _decoded(rec: dict, text: list[str]) -> Any:
    for name in text:
        value = rec[name]
        if value is None:
            continue
        where = first_bad_utf8(value)
        if where:
            return RecordError(name, f"not valid UTF-8 ({where})")
        rec[name] = value.decode("utf-8")
    return rec


def _timestamps_as_seconds(table: pa.Table) -> pa.Table:
    """A Parquet timestamp column becomes float seconds since the epoch."""
    if "timestamp" not in table.column_names:
        return table
    column = table.column("timestamp")
    if not pa.types.is_timestamp(column.type):
        return table
    micros = column.cast(pa.timestamp("us", tz=column.type.tz)).cast(pa.int64())
    seconds = pc.divide(micros.cast(pa.float64()), 1e6)
    return table.set_column(table.schema.get_field_index("timestamp"), "timestamp", seconds)


Reader = Callable[[Path, BinaryIO, Callable[[], None]], Iterator[Batch]]
READERS: dict[str, Reader] = {
    "jsonl": read_jsonl,
    "parquet": read_parquet,
    "csv": read_csv,
    **{adapter.name: adapter.read for adapter in ADAPTERS},
}
# Block size and provenance of each adapter's format, recorded in the `sources` table.
SOURCE_INFO: dict[str, SourceInfo] = {adapter.name: adapter.source for adapter in ADAPTERS}
