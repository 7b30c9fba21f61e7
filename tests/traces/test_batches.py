"""The vectorised fast path agrees with the exact per-record path, row for row."""

from __future__ import annotations

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analyzer.traces.batches import exact_batch
from analyzer.traces.jsonlines import decoded_lines as _decoded_lines
from analyzer.traces.readers import _jsonl_batch

token = st.integers(0, 2**31 - 1)
maybe = st.none() | st.text(max_size=4)


@st.composite
def valid_record(draw, i: int):
    rec: dict = {"request_id": f"r{i}"}
    if draw(st.booleans()):
        rec["prompt_token_ids"] = draw(st.lists(token, min_size=1, max_size=6))
        if draw(st.booleans()):
            rec["prompt_tokens"] = len(rec["prompt_token_ids"])
    else:
        size = draw(st.integers(1, 64))
        rec["block_hash_ids"] = draw(
            st.lists(st.integers(-(2**63), 2**63 - 1), min_size=1, max_size=4)
        )
        rec["block_size"] = size
        if draw(st.booleans()):
            rec["prompt_tokens"] = (len(rec["block_hash_ids"]) - 1) * size + draw(
                st.integers(1, size)
            )
    if draw(st.booleans()):
        prompt = len(rec.get("prompt_token_ids", ())) or rec.get(
            "prompt_tokens", len(rec.get("block_hash_ids", ())) * rec.get("block_size", 0)
        )
        rec["cached_tokens"] = draw(st.none() | st.integers(0, prompt))
    if draw(st.booleans()):
        rec["output_token_ids"] = draw(st.lists(token, max_size=3))
    if draw(st.booleans()):
        rec["timestamp"] = draw(st.integers(-5, 5) | st.floats(-1e9, 1e9))
    for name in ("model_revision", "prompt_family", "replica", "cache_salt"):
        if draw(st.booleans()):
            rec[name] = draw(maybe)
    if draw(st.booleans()):
        rec["ttft_ms"] = draw(st.none() | st.floats(0, 1e4))
    return rec


BAD_LINES = [
    "not json",
    '{"request_id": 1, "prompt_token_ids": [1]}',
    '{"request_id": "x"}',
    '{"request_id": "y", "prompt_token_ids": [-1]}',
    '{"request_id": "z", "prompt_token_ids": []}',
    '{"request_id": "w", "prompt_token_ids": [1], "timestamp": NaN}',
    '{"request_id": "v", "prompt_token_ids": [null]}',
    "",
    '{"request_id": "u", "prompt_token_ids": [1], "other": 3}',
    "  ",
    '{"request_id": "t", "block_hash_ids": [1]}',
    '{"request_id": "s", "prompt_token_ids": [1.0]}',
    '{"request_id": "q", "prompt_token_ids": [1, 2], "cached_tokens": 3}',
    '{"request_id": "p", "block_hash_ids": [1], "block_size": 4, "cached_tokens": 5}',
    '{"request_id": "o", "prompt_token_ids": [1], "cached_tokens": -1}',
]


@st.composite
def jsonl_body(draw):
    n = draw(st.integers(1, 12))
    lines = []
    for i in range(n):
        if draw(st.integers(0, 4)) == 0:
            lines.append(draw(st.sampled_from(BAD_LINES)))
        else:
            lines.append(orjson.dumps(draw(valid_record(i))).decode())
    return ("\n".join(lines) + "\n").encode()


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(jsonl_body())
def test_fast_path_equals_exact_path(body):
    first_line = 7
    fast = _jsonl_batch(body, first_line)
    exact = exact_batch(list(_decoded_lines(body, first_line)))
    assert fast.rows.to_pylist() == exact.rows.to_pylist()
    assert fast.rejects == exact.rejects
    non_blank = sum(1 for line in body.split(b"\n") if line.strip())
    assert fast.num_read == non_blank  # read = stored + rejected


@st.composite
def valid_body(draw):
    n = draw(st.integers(1, 10))
    return (
        "\n".join(orjson.dumps(draw(valid_record(i))).decode() for i in range(n)) + "\n"
    ).encode()


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(valid_body())
def test_valid_batches_take_the_fast_path(body):
    import analyzer.traces.readers as readers

    original = readers.exact_batch
    readers.exact_batch = None  # the fast path must not need it
    try:
        fast = readers._jsonl_batch(body, 1)
    finally:
        readers.exact_batch = original
    assert fast.rows.to_pylist() == exact_batch(list(_decoded_lines(body, 1))).rows.to_pylist()
