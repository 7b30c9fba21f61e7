"""traces.jsonlines.whole_lines: any stream, cut anywhere, gives its lines whole and numbered.
decoded_lines: its quick tests (digits, key marks, nested keys) decide as reading every line
exactly would."""

import io
import re

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from analyzer.traces.jsonlines import (
    LongLine,
    decoded_lines,
    exact_json,
    has_long_digits,
    repeated_key_error,
    whole_lines,
)
from analyzer.traces.records import RecordError

lines = st.lists(st.binary(max_size=12).map(lambda b: b.replace(b"\n", b"")), max_size=12)


@settings(max_examples=300, deadline=None)
@given(lines, st.booleans(), st.integers(1, 20))
def test_bodies_are_the_lines_whole_and_numbered(rows, final_newline, chunk_bytes):
    data = b"\n".join(rows) + (b"\n" if final_newline and rows else b"")
    pieces = list(whole_lines(io.BytesIO(data), lambda: None, chunk_bytes))
    assert all(body.endswith(b"\n") for body, _ in pieces)
    assert b"".join(body for body, _ in pieces) == (
        data if data.endswith(b"\n") else data + b"\n" if data else b""
    )
    line = 1
    for body, first_line in pieces:
        assert first_line == line
        line += body.count(b"\n")


long_lines = st.lists(st.binary(max_size=30).map(lambda b: b.replace(b"\n", b"")), max_size=12)


@settings(max_examples=300, deadline=None)
@given(long_lines, st.booleans(), st.integers(1, 20), st.integers(0, 15))
def test_lines_past_the_limit_come_as_long_lines_in_their_place(
    rows, final_newline, chunk_bytes, limit_bytes
):
    """Whatever the cut: each line longer than the limit is a LongLine with its number, its
    length and first bytes; the others come whole, in order, in bodies holding no long line."""
    data = b"\n".join(rows) + (b"\n" if final_newline and rows else b"")
    pieces = list(whole_lines(io.BytesIO(data), lambda: None, chunk_bytes, limit_bytes))
    got, line = [], 1
    for piece in pieces:
        if isinstance(piece, LongLine):
            assert piece.line_no == line and piece.limit_bytes == limit_bytes
            got.append(("long", piece.num_bytes, piece.head))
            line += 1
            continue
        body, first_line = piece
        assert first_line == line and body.endswith(b"\n")
        got.extend(("line", raw) for raw in body.split(b"\n")[:-1])
        line += body.count(b"\n")
    lines = data.split(b"\n")[:-1] if data.endswith(b"\n") else data.split(b"\n") if data else []
    assert got == [
        ("long", len(raw), raw[:800]) if len(raw) > limit_bytes else ("line", raw) for raw in lines
    ]


@given(st.lists(st.tuples(st.integers(0, 24), st.sampled_from([b"a", b"/", b":", b"\n", b"\xd9"]))))
def test_long_digits_are_twenty_digits_in_a_row(runs):
    data = b"".join(b"1234567890"[:n] + b"7" * (n - 10) + sep for n, sep in runs)
    assert has_long_digits(data) == bool(re.search(rb"\d{20}", data))


# JSON text with keys given twice (or not) at any depth, quote-colons inside strings, blanks
# (a carriage return included) between a key and its colon, integers past 64 bits.
_keys = st.sampled_from(["a", "b", "a", 'q\\":'])
_blanks = st.sampled_from(["", " ", "\t", "\r", " \r\t"])
_scalars = st.sampled_from(
    ["1", "-2", "1.5", "true", "null", '"s"', '"x\\":"', "1" * 19, "1" * 20, "-" + "1" * 21]
)


def _object(values):
    pairs = st.lists(st.tuples(_keys, _blanks, values), max_size=4)
    return pairs.map(lambda kvs: "{" + ",".join(f'"{k}"{b}:{v}' for k, b, v in kvs) + "}")


_values = st.recursive(
    _scalars,
    lambda inner: _object(inner) | st.lists(inner, max_size=4).map(lambda v: f"[{','.join(v)}]"),
    max_leaves=16,
)


def _exactly(raw: bytes):
    """What reading the line exactly gives: integers past 64 bits, keys given twice."""
    obj = orjson.loads(raw)
    if re.search(rb"\d{20}", raw):
        return exact_json(raw)
    return (repeated_key_error(raw) or obj) if type(obj) is dict else obj


def _same(item):
    return (item.field, item.reason) if isinstance(item, RecordError) else item


@given(st.lists(_object(_values) | _values, min_size=1, max_size=5))
def test_decoded_lines_read_as_exactly(lines):
    body = "\n".join(lines).encode() + b"\n"
    got = [(n, _same(obj)) for n, obj, _ in decoded_lines(body, 1)]
    assert got == [(n, _same(_exactly(raw.encode()))) for n, raw in enumerate(lines, 1)]


def test_a_key_given_twice_after_a_carriage_return_is_found():
    # Before: the key mark took no CR, so one mark for an outer object of one key, no check.
    (_, obj, _), *_ = decoded_lines(b'{"a":{"x"\r:1,"x"\r:2}}\n', 1)
    assert _same(obj) == ("x", "given twice in one JSON object (which value counts is undefined)")
