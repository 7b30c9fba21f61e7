"""CSV traces: a header row names canonical fields; token lists are JSON arrays or
space-separated integers; an empty cell means the field is absent."""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson

from analyzer.errors import InputFileError
from analyzer.traces.batches import Batch, exact_batch
from analyzer.traces.records import COUNT_FIELDS, RecordError, first_bad_utf8

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
            return float(cell)
        except ValueError:
            if name == "timestamp":
                return cell  # an RFC 3339 string; validate_record parses or rejects it
            raise RecordError(name, f"expected a number, got {cell!r}") from None
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
    """Batches of a CSV file with a header row; `line_no` is the record's first line."""
    # A byte that is not UTF-8 stays in its cell as a surrogate escape: that row is a
    # reject (`_record`), not the file.
    text = io.TextIOWrapper(stream, encoding="utf-8", errors="surrogateescape", newline="")
    reader = csv.reader(text)
    try:
        header = next(reader)
    except StopIteration:
        return
    except (csv.Error, UnicodeDecodeError) as exc:
        raise InputFileError(f"{path}: cannot read the CSV header ({exc})") from None
    if any(_NOT_UTF8.search(name) for name in header):
        raise InputFileError(f"{path}:1: the CSV header is not valid UTF-8")
    if "request_id" not in header or len(set(header)) != len(header):
        raise InputFileError(
            f"{path}:1: the CSV header must name request_id and each column once, got {header}"
        )
    items: list[tuple[int, Any, bytes]] = []
    line_no = reader.line_num + 1
    while True:
        try:
            values = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:
            items.append((line_no, RecordError(None, f"malformed CSV ({exc})"), b""))
            line_no = reader.line_num + 1
            continue
        if values:
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
