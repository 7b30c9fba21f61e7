"""CSV traces: a header row names canonical fields; token lists are JSON arrays or
space-separated integers; an empty cell means the field is absent."""

from __future__ import annotations

import csv
import io
import math
import re
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson

from analyzer.errors import InputFileError
from analyzer.traces.batches import Batch, exact_batch
from analyzer.traces.jsonlines import LongLine, max_line_bytes, whole_lines
from analyzer.traces.records import (
    COUNT_FIELDS,
    NO_IDS_WHY,
    RecordError,
    first_bad_utf8,
    not_finite,
)

CSV_BATCH_ROWS = 4096
_INT = re.compile(r"[+-]?\d+")
_NOT_UTF8 = re.compile("[\udc80-\udcff]")
_LIST_FIELDS = ("prompt_token_ids", "output_token_ids", "block_hash_ids")


def _int_list(name: str, cell: str) -> Any:
    if cell.lstrip().startswith("["):
        try:
            return orjson.loads(cell)  # element types are checked by validate_record
        except orjson.JSONDecodeError as exc:
            raise RecordError(name, f"malformed JSON array ({exc})") from None
    parts = cell.split()
    for i, part in enumerate(parts):
        if not _INT.fullmatch(part):
            raise RecordError(f"{name}[{i}]", f"expected an integer, got {part!r}")
    return [int(p) for p in parts]


def _cell_value(name: str, cell: str) -> Any:
    """The typed value of one non-empty cell of a known numeric or list field."""
    if name in _LIST_FIELDS:
        return _int_list(name, cell)
    if name in COUNT_FIELDS:
        if not _INT.fullmatch(cell.strip()):
            raise RecordError(name, f"expected an integer, got {cell!r}")
        return int(cell)
    if name in ("timestamp", "ttft_ms"):
        try:
            value = float(cell)
        except ValueError:
            if name == "timestamp":
                return cell  # an RFC 3339 string; validate_record parses or rejects it
            raise RecordError(name, f"expected a number, got {cell!r}") from None
        if not math.isfinite(value):  # nan, inf, or digits past a float (1e400)
            raise not_finite(name, cell.strip())
        return value
    return cell


def _record(header: list[str], values: list[str]) -> Any:
    if len(values) != len(header):
        return RecordError(None, f"row has {len(values)} fields, the header has {len(header)}")
    for name, cell in zip(header, values, strict=True):
        if _NOT_UTF8.search(cell):  # a byte the UTF-8 decoder kept as a surrogate escape
            where = first_bad_utf8(cell.encode("utf-8", "surrogateescape"))
            return RecordError(name, f"not valid UTF-8 ({where})")
    try:
        return {
            name: _cell_value(name, cell)
            for name, cell in zip(header, values, strict=True)
            if cell != ""
        }
    except RecordError as err:
        return err


def read_csv(
    path: Path, stream: io.BufferedIOBase, progress: Callable[[], None]
) -> Iterator[Batch]:
    """Batches of a CSV file with a header row; `line_no` is the record's first line. A
    line longer than the limit (`jsonlines.whole_lines`) is a reject, read past unheld; a
    cell may be as long as a line (the csv module's own limit is 128 KiB)."""
    limit_bytes = max_line_bytes()
    csv.field_size_limit(max(csv.field_size_limit(), limit_bytes))
    long_lines: deque[LongLine] = deque()
    reader = csv.reader(_csv_lines(stream, progress, limit_bytes, long_lines))
    header = _header(path, reader, long_lines)
    if header is None:
        return
    items: list[tuple[int, Any, bytes]] = []
    line_no = reader.line_num + 1
    while True:
        try:
            values = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:
            values = RecordError(None, f"malformed CSV ({exc})")
        if long_lines:  # the record holds a line too long to read: that line's reject
            items.extend(ln.reject() for ln in long_lines)
            long_lines.clear()
        elif isinstance(values, RecordError):
            items.append((line_no, values, b""))
        elif values:
            raw = ",".join(values).encode("utf-8", "surrogateescape")
            items.append((line_no, _record(header, values), raw))
        line_no = reader.line_num + 1
        if len(items) >= CSV_BATCH_ROWS:
            yield exact_batch(items)
            progress()
            items = []
    if items:
        yield exact_batch(items)
    progress()


def _csv_lines(
    stream: io.BufferedIOBase,
    progress: Callable[[], None],
    limit_bytes: int,
    long_lines: deque[LongLine],
) -> Iterator[str]:
    """The stream's lines, each ending in a newline, for `csv.reader`. A byte that is not
    UTF-8 stays as a surrogate escape: its row is a reject (`_record`), not the file. A line
    longer than the limit comes as an empty line, and as a LongLine in `long_lines`."""
    for piece in whole_lines(stream, progress, limit_bytes=limit_bytes):
        if isinstance(piece, LongLine):
            long_lines.append(piece)
            yield "\n"
            continue
        # whole lines: StringIO splits them at "\n" alone, each kept with its newline
        yield from io.StringIO(piece[0].decode("utf-8", "surrogateescape"))


def _header(path: Path, reader, long_lines: deque[LongLine]) -> list[str] | None:
    """The header row (None for an empty file); a file error where it cannot be one."""
    try:
        header = next(reader)
    except StopIteration:
        return None
    except (csv.Error, UnicodeDecodeError) as exc:
        raise InputFileError(f"{path}: cannot read the CSV header ({exc})") from None
    if long_lines:
        line = long_lines[0]
        raise InputFileError(f"{path}:{line.line_no}: the CSV header is {line.error().reason}")
    if any(_NOT_UTF8.search(name) for name in header):
        raise InputFileError(f"{path}:1: the CSV header is not valid UTF-8")
    if "prompt_token_ids" not in header and "block_hash_ids" not in header:
        raise InputFileError(
            f"{path}:1: no column holds token ids or block hashes (got {header}): {NO_IDS_WHY}"
        )
    if "request_id" not in header or len(set(header)) != len(header):
        raise InputFileError(
            f"{path}:1: the CSV header must name request_id and each column once, got {header}"
        )
    return header
