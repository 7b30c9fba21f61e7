"""Numbered, decoded JSON Lines of a byte stream, in bounded chunks (readers and adapters)."""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import orjson

from analyzer.errors import ConfigError, InputFileError
from analyzer.traces.batches import RAW_EXCERPT_CHARS
from analyzer.traces.records import RecordError, first_bad_utf8, not_finite

CHUNK_BYTES = 8 << 20
UTF8_BOM = b"\xef\xbb\xbf"

Item = tuple[int, Any, bytes]


# The longest line a reader takes, in MiB (its newline not counted); HPA_MAX_LINE_MIB sets
# another. A longer line is a reject, skipped without being held (`whole_lines`). The largest
# real records are far below it: a 1M-token prompt as JSON ids is about 8 MB (6-digit ids and
# a comma), and the formats that put many requests on one line stay in the tens of MB (a WEKA
# conversation: the largest of 710 published is 4.1 MB; a vllm bench run with the
# inter-token latencies of 10,000 requests of 1,000 tokens: about 200 MB). Parsing a line
# takes a few times its size in memory, so the limit also bounds what one line can cost.
DEFAULT_MAX_LINE_MIB = 256
MAX_LINE_VARIABLE = "HPA_MAX_LINE_MIB"
_HEAD_BYTES = 4 * RAW_EXCERPT_CHARS  # of an over-long line, for its reject's excerpt


def max_line_bytes() -> int:
    """The line limit in bytes: HPA_MAX_LINE_MIB MiB (a whole number, at least 1), else
    DEFAULT_MAX_LINE_MIB."""
    value = os.environ.get(MAX_LINE_VARIABLE, "").strip()
    if not value:
        return DEFAULT_MAX_LINE_MIB << 20
    if not value.isdigit() or int(value) < 1:
        raise ConfigError(
            f"{MAX_LINE_VARIABLE}={value!r}: expected the longest input line in MiB, "
            f"a whole number from 1 (default {DEFAULT_MAX_LINE_MIB})"
        )
    return int(value) << 20


@dataclass(frozen=True)
class LongLine:
    """A line longer than the limit, skipped: its number, its length in bytes (newline not
    counted) and its first bytes. It was never held whole."""

    line_no: int
    num_bytes: int
    limit_bytes: int
    head: bytes

    def error(self) -> RecordError:
        return RecordError(
            None,
            f"a line of {self.num_bytes:,} bytes, longer than the limit of "
            f"{_size(self.limit_bytes)} ({MAX_LINE_VARIABLE}): skipped unread",
        )

    def reject(self) -> Item:
        """The line as a reject item: (line_no, its error, its first bytes)."""
        return self.line_no, self.error(), self.head


def _size(num_bytes: int) -> str:
    return f"{num_bytes >> 20:,} MiB" if num_bytes % (1 << 20) == 0 else f"{num_bytes:,} bytes"


Piece = tuple[bytes, int] | LongLine


def whole_lines(
    stream: BinaryIO,
    progress: Callable[[], None],
    chunk_bytes: int = CHUNK_BYTES,
    limit_bytes: int | None = None,
) -> Iterator[Piece]:
    """(body, first line number) pieces of a byte stream: each body is whole lines ending in
    a newline (the last line gets one if the stream lacks it), about `chunk_bytes` long, so
    memory does not grow with the file. Lines are numbered from 1. A line longer than
    `limit_bytes` (default `max_line_bytes()`) comes as a LongLine in its place: it is read
    past in chunks, never held whole, so memory stays under `limit_bytes` + `chunk_bytes`."""
    lines = _Lines(max_line_bytes() if limit_bytes is None else limit_bytes)
    while True:
        progress()
        chunk = stream.read(chunk_bytes)
        if not chunk:
            yield from lines.end()
            return
        yield from lines.add(chunk)


class _Lines:
    """`whole_lines`' state: the next line's number, the line begun and not yet ended
    (`tail`, at most the limit), or the over-long line being read past (`long`)."""

    def __init__(self, limit_bytes: int) -> None:
        self.limit_bytes, self.first_line = limit_bytes, 1
        self.tail: list[bytes] = []
        self.tail_bytes = 0
        self.long: LongLine | None = None

    def add(self, chunk: bytes) -> Iterator[Piece]:
        start = 0
        if self.long is not None:
            newline = chunk.find(b"\n")
            if newline < 0:
                self._grow_long(chunk, len(chunk))
                return
            self._grow_long(chunk, newline)
            yield self._end_long()
            start = newline + 1
        cut = chunk.rfind(b"\n") + 1
        if cut <= start:
            self._hold(chunk, start)
            return
        # one copy of the chunk at most (none when it is whole lines already)
        view = memoryview(chunk)
        body = (
            chunk
            if start == 0 and not self.tail and cut == len(chunk)
            else b"".join((*self.tail, view[start:cut]))
        )
        self.tail, self.tail_bytes = [], 0
        yield from self._bodies(body)
        if cut < len(chunk):
            self._hold(chunk, cut)

    def end(self) -> Iterator[Piece]:
        if self.long is not None:
            yield self._end_long()
        elif self.tail:
            yield from self._bodies(b"".join((*self.tail, b"\n")))

    def _hold(self, chunk: bytes, start: int) -> None:
        """Keep chunk[start:], the start of a line; past the limit, read past that line."""
        size = len(chunk) - start
        if not size:
            return
        if self.tail_bytes + size <= self.limit_bytes:
            self.tail.append(chunk[start:] if start else chunk)
            self.tail_bytes += size
            return
        pieces = (*self.tail, chunk[start : start + _HEAD_BYTES])
        head = b"".join(p[:_HEAD_BYTES] for p in pieces)[:_HEAD_BYTES]  # no copy of the tail
        self.long = LongLine(self.first_line, self.tail_bytes + size, self.limit_bytes, head)
        self.tail, self.tail_bytes = [], 0

    def _grow_long(self, chunk: bytes, num_bytes: int) -> None:
        """The over-long line goes on for chunk[:num_bytes] (its head up to _HEAD_BYTES)."""
        long = self.long
        head = long.head
        if len(head) < _HEAD_BYTES:
            head += chunk[: min(num_bytes, _HEAD_BYTES - len(head))]
        self.long = LongLine(long.line_no, long.num_bytes + num_bytes, long.limit_bytes, head)

    def _end_long(self) -> LongLine:
        long, self.long = self.long, None
        self.first_line += 1
        return long

    def _bodies(self, body: bytes) -> Iterator[Piece]:
        """`body` (whole lines) numbered, its lines longer than the limit as LongLines."""
        buf = np.frombuffer(body, np.uint8)
        if len(body) <= self.limit_bytes + 1:  # no line of it can be too long
            yield body, self.first_line
            # NumPy counts 8 MiB of lines in 1.5 ms, bytes.count in 3.7 (70 M tokens: 0.08 s)
            self.first_line += int(np.count_nonzero(buf == 10))
            return
        ends = np.flatnonzero(buf == 10)
        starts = np.concatenate(([0], ends[:-1] + 1))
        first, at = self.first_line, 0  # line i is number first + i; `at`: the next not given
        for i in np.flatnonzero(ends - starts > self.limit_bytes).tolist():
            start, end = int(starts[i]), int(ends[i])
            if start > at:
                yield body[at:start], self.first_line
            head = body[start : min(end, start + _HEAD_BYTES)]
            yield LongLine(first + i, end - start, self.limit_bytes, head)
            self.first_line, at = first + i + 1, end + 1
        if at < len(body):
            yield body[at:], self.first_line
        self.first_line = first + len(ends)


def line_bodies(
    path: Path, stream: BinaryIO, progress: Callable[[], None], chunk_bytes: int = CHUNK_BYTES
) -> Iterator[Piece]:
    """`whole_lines` of a JSON Lines stream; a stream that is one JSON array is a file error.
    A UTF-8 byte order mark opening the stream is dropped (RFC 8259 lets a parser ignore it);
    anywhere else it is part of its line, which then is not JSON."""
    for piece in whole_lines(stream, progress, chunk_bytes):
        body, first_line = (piece.head, piece.line_no) if isinstance(piece, LongLine) else piece
        if first_line == 1 and body.startswith(UTF8_BOM):
            body = body[len(UTF8_BOM) :]
        if first_line == 1 and body.lstrip()[:1] == b"[":
            raise InputFileError(
                f"{path}: a JSON array, not JSON Lines (one object per line); "
                "convert it first, e.g. jq -c '.[]'"
            )
        yield piece if isinstance(piece, LongLine) else (body, first_line)


def decoded_lines(body: bytes, first_line: int) -> Iterator[Item]:
    """(line_no, decoded object or RecordError, raw line) of each non-blank line of `body`.
    An object that gives a key twice is a RecordError (a parser keeps one value silently)."""
    long_digits = has_long_digits(body)  # a line has them only if its body has
    for offset, raw in enumerate(body.split(b"\n")[:-1]):
        if not raw.strip():
            continue
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            obj = non_finite_error(raw) or RecordError(None, _undecodable(raw, exc))
        else:
            if long_digits and has_long_digits(raw):
                obj = exact_json(raw)  # orjson reads integers past 64 bits as floats
            # Every key ends in a quote and a colon: no more of those than keys, no repeat.
            elif type(obj) is dict and (marks := len(KEY_MARK.findall(raw))) > len(obj):
                if marks > num_keys(obj):  # nested objects' keys counted too
                    obj = repeated_key_error(raw) or obj
        yield first_line + offset, obj, raw


def has_long_digits(data: bytes) -> bool:
    """Whether `data` holds 20 digits in a row: maybe an integer past 64 bits (or digits in a
    string: read exactly too). The digits are mapped to one byte and the run searched for,
    12x faster than the pattern \\d{20} (3 MB of WEKA ids: 2.9 ms against 35)."""
    return _DIGIT_RUN in data.translate(_DIGITS_AS_ZERO)


_DIGITS_AS_ZERO = bytes(48 if 48 <= b <= 57 else 32 for b in range(256))  # "0"-"9": "0"
_DIGIT_RUN = b"0" * 20


def exact_json(raw: bytes) -> Any:
    """JSON line `raw` read by the standard library: every integer exact, whatever its size,
    and a key given twice a RecordError."""
    try:
        return json.loads(raw, object_pairs_hook=_unique_pairs)
    except _Repeated as repeated:
        return _repeated(repeated.key)


# A key's end: its closing quote, then a colon (JSON's blanks between allowed; a newline
# ends the line). A string value may hold one too; each object key has exactly one.
KEY_MARK = re.compile(rb'"[ \t\r]*:')


def num_keys(value: Any) -> int:
    """How many keys the objects of decoded JSON `value` hold, nested ones included. A list
    is walked only if it holds an object or a list (its elements' types looked at in C: a
    WEKA conversation's 2,000-id lists cost 10 ns an id, where reading the line again with
    the standard library cost 11 ns a byte)."""
    count, todo = 0, [value]
    while todo:
        item = todo.pop()
        if type(item) is dict:
            count += len(item)
            todo.extend(item.values())
        elif type(item) is list:
            kinds = list(map(type, item))
            if kinds.count(int) < len(kinds) and not _CONTAINERS.isdisjoint(kinds):
                todo.extend(item)
    return count


_CONTAINERS = frozenset((dict, list))


class _Repeated(Exception):
    def __init__(self, key: str) -> None:
        self.key = key


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            raise _Repeated(key)
        seen.add(key)
    return dict(pairs)


def repeated_key_error(raw: bytes) -> RecordError | None:
    """A RecordError naming the first key an object of JSON line `raw` gives twice, at any
    depth (None when every object's keys are distinct)."""
    found = exact_json(raw)
    return found if isinstance(found, RecordError) else None


def _repeated(key: str) -> RecordError:
    return RecordError(key, "given twice in one JSON object (which value counts is undefined)")


class _NotFinite:
    """A number of a JSON line that no float holds, as the line writes it."""

    def __init__(self, text: str) -> None:
        self.text = text


def _float(text: str) -> float | _NotFinite:
    value = float(text)
    return value if math.isfinite(value) else _NotFinite(text)


def non_finite_error(raw: bytes | str) -> RecordError | None:
    """A RecordError naming the first field of JSON line `raw` (an object) whose number is no
    finite float: NaN, Infinity, -Infinity (no JSON numbers, which orjson refuses; Python's
    json writes them) or digits past the largest float (1e400). None where there is none, or
    the line is not an object, or not JSON for another reason as well."""
    try:
        obj = json.loads(raw, parse_constant=_NotFinite, parse_float=_float)
    except (ValueError, RecursionError):
        return None
    if type(obj) is not dict:
        return None
    found = _first_not_finite(obj, "")
    return None if found is None else not_finite(*found)


def _first_not_finite(value: Any, path: str) -> tuple[str, str] | None:
    """(the JSON path, the text) of the first number in `value` no float holds, in the
    order of the line."""
    if isinstance(value, _NotFinite):
        return path, value.text
    if isinstance(value, dict):
        items = ((f"{path}.{k}" if path else k, v) for k, v in value.items())
    elif isinstance(value, list):
        items = ((f"{path}[{i}]", v) for i, v in enumerate(value))
    else:
        return None
    for where, v in items:
        if (found := _first_not_finite(v, where)) is not None:
            return found
    return None


def _undecodable(raw: bytes, exc: orjson.JSONDecodeError) -> str:
    """Why a line is not JSON: its first bad UTF-8 byte (orjson's message does not say
    where), else the parser's message."""
    where = first_bad_utf8(raw)
    return f"malformed JSON (not valid UTF-8: {where})" if where else f"malformed JSON ({exc})"


def json_line_chunks(
    path: Path, stream: BinaryIO, progress: Callable[[], None]
) -> Iterator[list[Item]]:
    """Lists of (line_no, decoded object or RecordError, raw line); blank lines skipped. A
    line longer than the limit is a RecordError (LongLine.error) with its first bytes."""
    for piece in line_bodies(path, stream, progress):
        if isinstance(piece, LongLine):
            yield [piece.reject()]
        else:
            yield list(decoded_lines(*piece))


def first_json_object(head: bytes) -> Any:
    """The first non-blank line of `head` decoded, or None if it is not whole JSON."""
    for raw in head.split(b"\n"):
        if raw.strip():
            try:
                return orjson.loads(raw)
            except orjson.JSONDecodeError:
                return None
    return None
