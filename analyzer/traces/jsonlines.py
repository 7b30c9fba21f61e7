"""Numbered, decoded JSON Lines of a byte stream, in bounded chunks (readers and adapters)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import orjson

from analyzer.errors import InputFileError
from analyzer.traces.records import RecordError, first_bad_utf8

CHUNK_BYTES = 8 << 20
UTF8_BOM = b"\xef\xbb\xbf"

Item = tuple[int, Any, bytes]


def whole_lines(
    stream: BinaryIO, progress: Callable[[], None], chunk_bytes: int = CHUNK_BYTES
) -> Iterator[tuple[bytes, int]]:
    """(body, first line number) pieces of a byte stream: each body is whole lines ending in
    a newline (the last line gets one if the stream lacks it), about `chunk_bytes` long, so
    memory does not grow with the file. Lines are numbered from 1."""
    first_line, tail = 1, b""
    while True:
        progress()
        chunk = stream.read(chunk_bytes)
        if not chunk:
            if tail:
                yield tail + b"\n", first_line
            return
        cut = chunk.rfind(b"\n") + 1
        if cut == 0:
            tail += chunk
            continue
        # one copy of the chunk at most (none when it is whole lines already)
        body = (
            chunk if not tail and cut == len(chunk) else b"".join((tail, memoryview(chunk)[:cut]))
        )
        tail = chunk[cut:]
        yield body, first_line
        # NumPy counts 8 MiB of lines in 1.5 ms, bytes.count in 3.7 (70 M tokens: 0.08 s)
        first_line += int(np.count_nonzero(np.frombuffer(body, np.uint8) == 10))


def line_bodies(
    path: Path, stream: BinaryIO, progress: Callable[[], None], chunk_bytes: int = CHUNK_BYTES
) -> Iterator[tuple[bytes, int]]:
    """`whole_lines` of a JSON Lines stream; a stream that is one JSON array is a file error.
    A UTF-8 byte order mark opening the stream is dropped (RFC 8259 lets a parser ignore it);
    anywhere else it is part of its line, which then is not JSON."""
    for body, first_line in whole_lines(stream, progress, chunk_bytes):
        if first_line == 1 and body.startswith(UTF8_BOM):
            body = body[len(UTF8_BOM) :]
        if first_line == 1 and body.lstrip()[:1] == b"[":
            raise InputFileError(
                f"{path}: a JSON array, not JSON Lines (one object per line); "
                "convert it first, e.g. jq -c '.[]'"
            )
        yield body, first_line


def decoded_lines(body: bytes, first_line: int) -> Iterator[Item]:
    """(line_no, decoded object or RecordError, raw line) of each non-blank line of `body`.
    An object that gives a key twice is a RecordError (a parser keeps one value silently)."""
    for offset, raw in enumerate(body.split(b"\n")[:-1]):
        if not raw.strip():
            continue
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            obj = RecordError(None, _undecodable(raw, exc))
        else:
            if LONG_DIGITS.search(raw):
                obj = exact_json(raw)  # orjson reads integers past 64 bits as floats
            # Every key ends in a quote and a colon: no more of those than keys, no repeat.
            elif type(obj) is dict and len(KEY_MARK.findall(raw)) > len(obj):
                obj = repeated_key_error(raw) or obj
        yield first_line + offset, obj, raw


# 20 digits or more: maybe an integer past 64 bits (or digits in a string: read exactly too).
LONG_DIGITS = re.compile(rb"\d{20}")


def exact_json(raw: bytes) -> Any:
    """JSON line `raw` read by the standard library: every integer exact, whatever its size,
    and a key given twice a RecordError."""
    try:
        return json.loads(raw, object_pairs_hook=_unique_pairs)
    except _Repeated as repeated:
        return _repeated(repeated.key)


# A key's end: its closing quote, then a colon (blanks between allowed). A string value may
# hold one too; each object key has exactly one.
KEY_MARK = re.compile(rb'"[ \t]*:')


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


def _undecodable(raw: bytes, exc: orjson.JSONDecodeError) -> str:
    """Why a line is not JSON: its first bad UTF-8 byte (orjson's message does not say
    where), else the parser's message."""
    where = first_bad_utf8(raw)
    return f"malformed JSON (not valid UTF-8: {where})" if where else f"malformed JSON ({exc})"


def json_line_chunks(
    path: Path, stream: BinaryIO, progress: Callable[[], None]
) -> Iterator[list[Item]]:
    """Lists of (line_no, decoded object or RecordError, raw line); blank lines skipped."""
    for body, first_line in line_bodies(path, stream, progress):
        yield list(decoded_lines(body, first_line))


def first_json_object(head: bytes) -> Any:
    """The first non-blank line of `head` decoded, or None if it is not whole JSON."""
    for raw in head.split(b"\n"):
        if raw.strip():
            try:
                return orjson.loads(raw)
            except orjson.JSONDecodeError:
                return None
    return None
