"""traces.token_scan: token arrays read out before Arrow parses a batch change nothing.

Every batch is read twice, with the scanner and without it (Arrow's JSON reader alone, or
the exact path): the rows and rejects must be identical, whatever the lines hold."""

import json

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analyzer.traces import readers, token_scan
from analyzer.traces.token_scan import strip_token_arrays


def _both(body: bytes):
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(readers, "SCAN_MIN_BYTES", 0)
        scanned = readers._jsonl_batch(body, 1)
        patch.setattr(readers, "SCAN_MIN_BYTES", 1 << 60)
        plain = readers._jsonl_batch(body, 1)
    return scanned, plain


def _assert_same(body: bytes) -> None:
    scanned, plain = _both(body)
    assert scanned.rows.equals(plain.rows)
    assert scanned.rejects == plain.rejects


LINES = {
    "compact": b'{"request_id":"a","prompt_token_ids":[1,2,3],"output_token_ids":[4]}',
    "spaces": b'{"request_id": "a", "prompt_token_ids": [1, 2, 3] , "timestamp": 1.5}',
    "empty array": b'{"request_id":"a","prompt_token_ids":[],"output_token_ids":[]}',
    "null output": b'{"request_id":"a","prompt_token_ids":[7],"output_token_ids":null}',
    "nested key": b'{"request_id":"a","prompt_token_ids":[1],"x":{"prompt_token_ids":[2]}}',
    "key in a string": b'{"request_id":"\\"prompt_token_ids\\":[9]","prompt_token_ids":[1]}',
    "escaped key": b'{"request_id":"a","prompt_tok\\u0065n_ids":[1,2]}',
    "hash ids": b'{"request_id":"a","block_hash_ids":[-5,1099511627776],"block_size":16}',
    "fraction": b'{"request_id":"a","prompt_token_ids":[1.5,2]}',
    "exponent": b'{"request_id":"a","prompt_token_ids":[1e3]}',
    "leading zero": b'{"request_id":"a","prompt_token_ids":[01,2]}',
    "19 digits": b'{"request_id":"a","block_hash_ids":[9223372036854775807],"block_size":1}',
    "past int64": b'{"request_id":"a","block_hash_ids":[9223372036854775808],"block_size":1}',
    "20 digits": b'{"request_id":"a","block_hash_ids":[12345678901234567890],"block_size":1}',
    "negative": b'{"request_id":"a","prompt_token_ids":[-1,2]}',
    "too wide": b'{"request_id":"a","prompt_token_ids":[3000000000]}',
    "string inside": b'{"request_id":"a","prompt_token_ids":[1,"2"]}',
    "trailing comma": b'{"request_id":"a","prompt_token_ids":[1,2,]}',
    "comma, blank, bracket": b'{"request_id":"a","prompt_token_ids":[1, ]}',
    "blanks inside": b'{"request_id":"a","prompt_token_ids":[ 1 ,\t2 , 3 ]}',
    "blank array": b'{"request_id":"a","prompt_token_ids":[ ]}',
    "lone minus": b'{"request_id":"a","prompt_token_ids":[-]}',
    "minus, blank": b'{"request_id":"a","prompt_token_ids":[- 1]}',
    "minus zero": b'{"request_id":"a","block_hash_ids":[-0,-10],"block_size":16}',
    "ends inside": b'{"request_id":"a","prompt_token_ids":[1,',
    "given twice": b'{"request_id":"a","prompt_token_ids":[1],"prompt_token_ids":[2]}',
    "twice, once null": b'{"request_id":"a","prompt_token_ids":[1],"prompt_token_ids":null}',
    "not an object": b'[{"prompt_token_ids":[1]}]',
    "unclosed": b'{"request_id":"a","prompt_token_ids":[1,2',
    "string value": b'{"request_id":"a","prompt_token_ids":"1,2"}',
    "crlf": b'{"request_id":"a","prompt_token_ids":[1,2]}\r',
    "bad utf-8": b'{"request_id":"a\xff","prompt_token_ids":[1]}',
}


@pytest.mark.parametrize("name", list(LINES))
def test_a_line_alone_or_among_good_ones_reads_the_same(name):
    good = b'{"request_id":"g%d","prompt_token_ids":[5,6,7]}'
    lines = [good % 0, LINES[name].replace(b'"a"', b'"zz"'), good % 1]
    _assert_same(LINES[name] + b"\n")
    _assert_same(b"\n".join(lines) + b"\n")


@pytest.mark.parametrize(
    "name", ["fraction", "exponent", "leading zero", "past int64", "escaped key", "given twice"]
)
def test_what_the_scan_cannot_vouch_for_is_left_to_the_parser(name):
    assert strip_token_arrays(LINES[name] + b"\n", 1) is None


# Lines that end inside a string: the scan cannot say which line a later array is on.
ENDS_IN_A_STRING = {
    "raw newline": b'{"request_id":"a\n","prompt_token_ids":[1]}\n',
    "escaped raw newline": b'{"request_id":"a\\\n","prompt_token_ids":[1]}\n',
    "escaped backslash, raw newline": b'{"request_id":"a\\\\\n","prompt_token_ids":[1]}\n',
    "escaped raw newline in a key": b'{"request_\\\nid":"a","prompt_token_ids":[1]}\n',
}


@pytest.mark.parametrize("name", list(ENDS_IN_A_STRING))
def test_a_line_that_ends_inside_a_string_is_left_to_the_parser(name):
    """A raw newline ends a line, escaped or not. The scan took a backslash and a raw
    newline for an escape inside the string, so it counted one line fewer and gave line 2's
    array to line 1 (issue 48; Arrow's parse caught it later)."""
    body = ENDS_IN_A_STRING[name]
    assert strip_token_arrays(body, 2) is None
    _assert_same(body)


def test_a_body_that_is_not_whole_lines_is_left_to_the_parser():
    assert strip_token_arrays(LINES["compact"], 1) is None  # no final newline
    assert strip_token_arrays(LINES["compact"] + b"\n", 1) is not None


def test_the_arrays_leave_empty_brackets_behind():
    body = LINES["compact"] + b"\n" + LINES["nested key"] + b"\n"
    found = strip_token_arrays(body, 2)
    assert found.body == (
        b'{"request_id":"a","prompt_token_ids":[],"output_token_ids":[]}\n'
        b'{"request_id":"a","prompt_token_ids":[],"x":{"prompt_token_ids":[2]}}\n'
    )
    assert found.columns["prompt_token_ids"].to_pylist() == [[1, 2, 3], [1]]
    assert found.columns["output_token_ids"].to_pylist() == [[4], None]
    assert found.columns["block_hash_ids"].to_pylist() == [None, None]


ids = st.lists(st.integers(0, 2**31 - 1), max_size=8)
record = st.fixed_dictionaries(
    {"request_id": st.text(max_size=4)},
    optional={
        "prompt_token_ids": ids,
        "output_token_ids": st.one_of(st.none(), ids),
        "prompt_family": st.text(max_size=6),
        "timestamp": st.floats(0, 1e6),
        "block_hash_ids": st.lists(st.integers(-(2**63) + 1, 2**63 - 1), max_size=4),
        "block_size": st.sampled_from([16, 32]),
        "extra_field": st.dictionaries(st.sampled_from(["prompt_token_ids", "k"]), ids),
    },
)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(record, st.sampled_from(["orjson", "json", "json-indent0"]))))
def test_random_records_in_any_spelling_read_the_same(rows):
    lines = []
    for rec, style in rows:
        if style == "orjson":
            lines.append(orjson.dumps(rec))
        elif style == "json":
            lines.append(json.dumps(rec).encode())
        else:
            lines.append(json.dumps(rec, separators=(" , ", " : ")).encode())
    body = b"".join(line + b"\n" for line in lines)
    if body:
        assert strip_token_arrays(body, len(lines)) is not None  # the scan did read them
        _assert_same(body)


def test_the_c_loop_is_built_and_refuses_arrays_it_cannot_read():
    """This install built `token_scan_loop`; arrays of another type, or too small for the
    batch, are an error naming them, never a write out of bounds."""
    scan = token_scan._compiled()
    assert scan is not None
    body = np.frombuffer(b'{"prompt_token_ids": [5, 6]}\n' * 3, dtype=np.uint8)
    keys, starts = token_scan._KEYS, token_scan._KEY_STARTS
    most = body.size // 2 + 1

    def arrays(ids=None, out=None):
        return (
            np.empty(body.size, np.uint8) if out is None else out,
            np.empty((2, most), np.int32) if ids is None else ids,
            np.empty(most, np.int64),
            np.zeros(3, np.int64),
            np.full((3, 3), -1, np.int64),
        )

    with pytest.raises(TypeError, match="^strip: ids: "):
        scan(body, keys, starts, *arrays(ids=np.empty((2, most), np.int64)))
    with pytest.raises(ValueError, match="too small"):
        scan(body, keys, starts, *arrays(out=np.empty(body.size - 1, np.uint8)))
    assert scan(body, keys, starts, *arrays()) == body.size - 3 * len("5, 6")


def test_without_the_c_loop_every_batch_goes_to_the_parser(monkeypatch):
    body = b'{"prompt_token_ids": [5, 6]}\n' * 3
    monkeypatch.setattr(token_scan, "token_scan_loop", None)
    assert token_scan.strip_token_arrays(body, 3) is None
