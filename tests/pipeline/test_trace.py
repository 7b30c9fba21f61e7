"""pipeline.trace.read_trace: token ids held once; prompts, outputs and inserted sequences
are views of them."""

import numpy as np
import pytest

from analyzer.pipeline.trace import LoadedTrace, inserted_sequences, read_trace
from analyzer.store.db import connect
from analyzer.store.ingest import ingest
from tests.conftest import write_jsonl

RECORDS = {
    "prompts only": [
        {"request_id": "a", "prompt_token_ids": [1, 2, 3], "timestamp": 2.0},
        {"request_id": "b", "prompt_token_ids": [1, 2], "timestamp": 1.0, "output_tokens": 5},
    ],
    "outputs": [
        {"request_id": "a", "prompt_token_ids": [1, 2, 3], "output_token_ids": [7, 8]},
        {"request_id": "b", "prompt_token_ids": [4], "output_token_ids": [9]},
        {"request_id": "c", "prompt_token_ids": [5, 6]},
    ],
    "hash ids only": [
        {"request_id": "h", "block_hash_ids": [2**40, -3], "block_size": 16},
        {"request_id": "i", "block_hash_ids": [2**40], "block_size": 16, "output_tokens": 3},
    ],
    "hash ids too": [
        {"request_id": "a", "prompt_token_ids": [1, 2, 3], "output_token_ids": [7, 8]},
        {"request_id": "h", "block_hash_ids": [2**40, -3], "block_size": 16},
    ],
}


def _read(tmp_path, records) -> LoadedTrace:
    path = write_jsonl(tmp_path / "t.jsonl", records)
    ingest([path], db_path=tmp_path / "t.duckdb")
    con = connect(tmp_path / "t.duckdb")
    try:
        return read_trace(con)
    finally:
        con.close()


@pytest.mark.parametrize("name", ["prompts only", "outputs", "hash ids only"])
def test_token_ids_are_held_once(tmp_path, name):
    """Each row's prompt, its output and its inserted sequence are views of one array."""
    trace = _read(tmp_path, RECORDS[name])
    flat, starts, lens = trace.held
    for i, (prompt, output) in enumerate(zip(trace.prompts, trace.outputs, strict=True)):
        assert np.shares_memory(prompt, flat)
        assert output is None or np.shares_memory(output, flat)
        tail = [] if output is None else output.tolist()[:-1]
        assert flat[starts[i] : starts[i] + lens[i]].tolist() == prompt.tolist() + tail
    by_id = dict(zip(trace.columns["request_id"], trace.prompts, strict=True))
    first, want = ("h", [2**40, -3]) if name == "hash ids only" else ("a", [1, 2, 3])
    assert by_id[first].tolist() == want


@pytest.mark.parametrize("name", list(RECORDS))
def test_inserted_sequences_are_the_same_held_or_not(tmp_path, name):
    trace = _read(tmp_path, RECORDS[name])
    assert (trace.held is None) == (name == "hash ids too")  # both kinds: joined when matched
    rebuilt = LoadedTrace(trace.columns, trace.prompts, trace.outputs)  # nothing held
    zeros = np.zeros(trace.n, dtype=np.int64)
    _, got_flat, got_offsets = trace.inserted(zeros, zeros)
    _, want_flat, want_offsets = rebuilt.inserted(zeros, zeros)
    assert got_flat.tolist() == want_flat.tolist() and got_offsets.tolist() == want_offsets.tolist()
    assert got_flat.dtype == want_flat.dtype


def test_inserted_sequences_append_outputs_but_their_last_token():
    columns = {"block_size": [None, None, 16]}
    prompts = [np.asarray([1, 2]), np.asarray([3]), np.asarray([2**40])]
    outputs = [np.asarray([5, 6, 7]), None, None]
    flat, offsets = inserted_sequences(prompts, outputs, columns)
    assert flat.tolist() == [1, 2, 5, 6, 3, 2**40] and offsets.tolist() == [0, 4, 5, 6]
