"""traces.jsonlines.whole_lines: any stream, cut anywhere, gives its lines whole and numbered."""

import io

from hypothesis import given, settings
from hypothesis import strategies as st

from analyzer.traces.jsonlines import whole_lines

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
