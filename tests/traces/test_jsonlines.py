"""traces.jsonlines.whole_lines: any stream, cut anywhere, gives its lines whole and numbered."""

import io

from hypothesis import given, settings
from hypothesis import strategies as st

from analyzer.traces.jsonlines import LongLine, whole_lines

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
