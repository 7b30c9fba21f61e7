"""Reading engine server logs (vLLM, SGLang): numbered text lines and Python reprs.

Engines log requests as Python reprs (`SamplingParams(...)`, `{'meta_info': {...}}`, `'a
str'`), not JSON. Nothing here evaluates code: string literals are skipped with a regex,
token lists are cut at their closing bracket and decoded by orjson, and scalars go
through `ast.literal_eval`, so a hostile log line is at worst a reject.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, BinaryIO

import orjson
import pyarrow as pa

from analyzer.traces.batches import (
    FAST_INPUT_SCHEMA,
    Batch,
    Reject,
    exact_batch,
    excerpt,
    fast_rows,
)
from analyzer.traces.jsonlines import CHUNK_BYTES, LongLine, whole_lines
from analyzer.traces.records import ROW_SCHEMA, RecordError

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_STRINGS = {
    "'": re.compile(r"'[^'\\]*(?:\\.[^'\\]*)*'", re.S),
    '"': re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.S),
}
_STRUCTURE = re.compile(r"['\"()\[\]{},]")
_FLAT_LIST = re.compile(r"\[[^\[\](){}'\"]*\]")
_KEY = re.compile(r"\s*(?:(\w+)=|'([^'\\]*)': )")
_INT = re.compile(r"-?\d+")
_NUMBER = re.compile(r"-?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?")
_ISO = re.compile(
    r"(\d{4})-(\d\d)-(\d\d)[ T](\d\d):(\d\d):(\d\d)(?:[.,](\d{1,6}))?(Z|[+-]\d\d:?\d\d)?"
)
_CLOSERS = {"(": ")", "{": "}", "[": "]"}


def text_lines(
    stream: BinaryIO, progress: Callable[[], None], chunk_bytes: int = CHUNK_BYTES
) -> Iterator[tuple[int, list[str]] | LongLine]:
    """(first line number, lines) pieces of a text stream, about `chunk_bytes` each.

    Lines are numbered from 1 and returned without their newline (a trailing \\r is
    stripped too); undecodable bytes become U+FFFD, which never occurs in the parts
    we parse (ids, numbers, keywords). A line longer than the limit comes as a LongLine
    (`jsonlines.whole_lines`), unread: `long_line` makes it a reject."""
    for piece in whole_lines(stream, progress, chunk_bytes):
        if isinstance(piece, LongLine):
            yield piece
            continue
        body, first = piece
        text = body[:-1].decode("utf-8", "replace")  # the last newline ends the last line
        yield first, [line.rstrip("\r") for line in text.split("\n")]


def long_line(stats: LogStats, line: LongLine) -> tuple[int, RecordError, str]:
    """The reject item of a log line longer than the limit: it may be a request's, and is
    counted as one (read = stored + rejected), since it cannot be looked at."""
    stats.num_request_lines += 1
    return line.line_no, line.error(), line.head.decode("utf-8", "replace")


def plain(line: str) -> str:
    """The line without terminal colour codes (newer vLLM colours its level names)."""
    return _ANSI.sub("", line) if "\x1b" in line else line


def string_end(text: str, i: int) -> int:
    """Index after the Python string literal starting at text[i] (a quote), or -1."""
    pattern = _STRINGS.get(text[i])
    m = pattern.match(text, i) if pattern else None
    return m.end() if m else -1


def find_outside_strings(text: str, needle: str, start: int) -> int:
    """Index of `needle` in text[start:] that is not inside a string literal, or -1."""
    pattern = re.compile(re.escape(needle) + "|['\"]")
    pos = start
    while (m := pattern.search(text, pos)) is not None:
        if m.group() == needle:
            return m.start()
        pos = string_end(text, m.start())
        if pos < 0:
            return -1
    return -1


@dataclass
class LogStats:
    """How a log's lines were used: request lines (stored or rejected) and skipped ones."""

    num_request_lines: int = 0
    num_skipped: int = 0
    num_skipped_reported: int = 0  # already handed to ingest in a Batch

    def stamp(self, batch: Batch) -> Batch:
        """`batch` carrying the lines skipped since the previous batch."""
        batch.num_skipped = self.num_skipped - self.num_skipped_reported
        self.num_skipped_reported = self.num_skipped
        return batch


class ReprError(ValueError):
    """A repr that is cut off or not the shape expected; the message is the reason."""


def fields(text: str, open_at: int) -> tuple[dict[str, tuple[int, int]], int]:
    """The top-level fields of the repr opened at text[open_at] ('(' or '{').

    Returns ({name: (value start, value end)}, index after the closing bracket) for
    `Name(a=1, b=[2])` and `{'a': 1, 'b': 'x'}` alike. Nested values are spanned, not
    decoded. Raises ReprError when the repr is cut off before its closing bracket."""
    closer = _CLOSERS[text[open_at]]
    out: dict[str, tuple[int, int]] = {}
    key, value_at = _key(text, open_at + 1)
    depth, pos = 0, value_at
    while (m := _STRUCTURE.search(text, pos)) is not None:
        i, ch = m.start(), m.group()
        pos = i + 1
        if ch in "'\"":
            pos = string_end(text, i)
            if pos < 0:
                raise ReprError("a string literal is cut off (the log line was truncated)")
        elif ch == "[" and (flat := _FLAT_LIST.match(text, i)) is not None:
            pos = flat.end()  # a flat list (token ids): one jump instead of one per comma
        elif ch in "([{":
            depth += 1
        elif ch in ")]}" and depth:
            depth -= 1
        elif ch in ")]}":
            if ch != closer:
                raise ReprError(f"unbalanced {ch!r}")
            if key is not None:
                out[key] = (value_at, i)
            return out, pos
        elif ch == "," and not depth:
            name, after = _key(text, pos)
            if name is not None:  # else a comma inside a bare value: keep scanning it
                if key is not None:
                    out[key] = (value_at, i)
                key, value_at, pos = name, after, after
    raise ReprError(f"no closing {closer!r} (the log line was truncated)")


def _key(text: str, pos: int) -> tuple[str | None, int]:
    m = _KEY.match(text, pos)
    if m is None:
        return None, pos
    return m.group(1) or m.group(2), m.end()


def int_list_at(text: str, start: int) -> tuple[list[int] | None, int]:
    """(token ids, index after them) of `[1, 2, ...]` or `None` at text[start]."""
    if text.startswith("None", start):
        return None, start + 4
    if not text.startswith("[", start):
        raise ReprError(f"expected a list of token ids, got {text[start : start + 20]!r}")
    close = text.find("]", start)
    if close < 0:
        raise ReprError("the token list is cut off (no closing ']'; the log line was truncated)")
    try:
        ids = orjson.loads(text[start : close + 1])
    except orjson.JSONDecodeError:
        raise ReprError(f"not a list of integers: {text[start : start + 40]!r}") from None
    return ids, close + 1


def int_list_field(text: str, span: tuple[int, int] | None) -> list[int] | None:
    """The token ids of a field value (`[1, 2]`), None when absent or `None`."""
    if span is None:
        return None
    start, end = span
    while start < end and text[start].isspace():
        start += 1
    ids, after = int_list_at(text, start)
    rest = text[after:end].strip()
    if rest.startswith("..."):
        raise ReprError("the token list is cut in the log (its middle is replaced by ' ... ')")
    if rest or after > end:
        raise ReprError(f"not a flat list of token ids: {text[start : start + 40]!r}")
    return ids


def int_value(text: str, span: tuple[int, int] | None) -> int | None:
    """An integer field value, None when absent or `None`; raises ReprError otherwise."""
    if span is None:
        return None
    value = text[span[0] : span[1]].strip()
    if value == "None":
        return None
    if _INT.fullmatch(value) is None:
        raise ReprError(f"expected an integer, got {value[:40]!r}")
    return int(value)


def number_value(text: str, span: tuple[int, int] | None) -> float | None:
    """A numeric field value (int or float repr), None when absent or not a number."""
    if span is None:
        return None
    value = text[span[0] : span[1]].strip()
    return float(value) if _NUMBER.fullmatch(value) else None


def str_value(text: str, span: tuple[int, int] | None) -> str | None:
    """A string field value (a Python literal), None when absent, `None` or not a string."""
    if span is None:
        return None
    value = text[span[0] : span[1]].strip()
    if value[:1] not in ("'", '"') or string_end(value, 0) != len(value):
        return None
    try:
        decoded = ast.literal_eval(value)  # a lone string literal: nothing is evaluated
    except (ValueError, SyntaxError):
        return None
    return decoded if isinstance(decoded, str) else None


def iso_seconds(text: str) -> float | None:
    """Seconds since the epoch of the first `YYYY-MM-DD HH:MM:SS[.f][zone]` in `text`.

    Engines log local time without a zone: a time without one is taken as UTC."""
    m = _ISO.search(text)
    if m is None:
        return None
    year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
    micros = int((m.group(7) or "0").ljust(6, "0"))
    try:
        moment = datetime(year, month, day, hour, minute, second, micros, tzinfo=UTC)
    except ValueError:
        return None
    zone = m.group(8)
    if zone and zone != "Z":
        sign = -1 if zone[0] == "-" else 1
        digits = zone[1:].replace(":", "")
        moment -= sign * timedelta(hours=int(digits[:2]), minutes=int(digits[2:]))
    return moment.timestamp()


class YearClock:
    """Seconds from `MM-DD HH:MM:SS[.f]` stamps that carry no year (vLLM's log format).

    The year is that of `last_written` (the file's modification time, when the log was
    last written), one less if the first stamp falls after that moment, and it steps
    forward whenever the month goes backwards (a December to January rollover). The
    time zone is taken as UTC."""

    def __init__(self, last_written: datetime) -> None:
        self.last_written = last_written
        self.year: int | None = None
        self.month = 0

    def seconds(self, month: int, day: int, clock: tuple[int, int, int], micros: int) -> float:
        """The stamp's seconds since the epoch; RecordError (field `timestamp`) for a stamp
        that is no date and time, which leaves the year and month tracking untouched."""
        hour, minute, second = clock
        stamp = f"{month:02d}-{day:02d} {hour:02d}:{minute:02d}:{second:02d}"
        if not (1 <= month <= 12 and 1 <= day <= 31 and hour < 24 and minute < 60 and second < 60):
            raise RecordError("timestamp", f"log header {stamp!r} is not a date and time")
        tracked, latest, written = self.year, self.month, self.last_written
        if tracked is None:
            after = (month, day, *clock) > (
                *(written.month, written.day, written.hour, written.minute, written.second),
            )
            tracked = written.year - after  # a first stamp after the file was written: last year
        elif month < latest and latest - month > 6:
            tracked += 1  # December -> January
        year = tracked
        if month > latest + 6 and latest:
            year -= 1  # a late line from before the rollover: the previous year's month
        else:
            latest = month
        try:
            moment = datetime(year, month, day, *clock, micros, tzinfo=UTC)
        except ValueError:  # a day the month does not have (Feb 30, or Feb 29 of that year)
            raise RecordError("timestamp", f"log header {stamp!r}: no such day") from None
        self.year, self.month = tracked, latest
        return moment.timestamp()


def canonical_batch(items: list[tuple[int, Any, str]]) -> Batch:
    """The Batch of (line_no, canonical record or RecordError, raw line) items.

    Records go through the vectorised path of `batches.fast_rows` when Arrow infers
    exactly the canonical types (so a 2.0 or a true never passes as an integer), and
    otherwise, or when any record is invalid, through the exact per-record path."""
    records = [(n, obj) for n, obj, _ in items if isinstance(obj, dict)]
    rejects = [
        Reject(n, obj.field, obj.reason, excerpt(raw))
        for n, obj, raw in items
        if isinstance(obj, RecordError)
    ]
    if len(records) + len(rejects) < len(items):
        return exact_batch(items)  # something else: the exact path says what is wrong
    rows = ROW_SCHEMA.empty_table()
    if records:
        table = _typed_table([r for _, r in records])
        line_nos = pa.array([n for n, _ in records], pa.int64())
        rows = None if table is None else fast_rows(table, line_nos)
    return exact_batch(items) if rows is None else Batch(rows, rejects)


def _typed_table(records: list[dict[str, Any]]) -> pa.Table | None:
    """The records as a FAST_INPUT_SCHEMA table, or None when a value is not of its type."""
    names = {k for r in records for k in r}
    if names - set(FAST_INPUT_SCHEMA.names):
        return None
    columns = {}
    for f in FAST_INPUT_SCHEMA:
        if f.name not in names:
            continue
        try:
            column = pa.array([r.get(f.name) for r in records])
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
            return None
        if not _same_kind(column.type, f.type):
            return None
        columns[f.name] = column.cast(f.type)
    return pa.table(columns)


def _same_kind(inferred: pa.DataType, wanted: pa.DataType) -> bool:
    if pa.types.is_null(inferred):
        return True
    if pa.types.is_list(wanted):
        return pa.types.is_list(inferred) and _same_kind(inferred.value_type, wanted.value_type)
    if pa.types.is_floating(wanted):
        return pa.types.is_floating(inferred) or pa.types.is_integer(inferred)
    return inferred == wanted
