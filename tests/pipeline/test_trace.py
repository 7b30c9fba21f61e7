"""pipeline.trace.read_trace: token ids held once, prompts as views of the inserted sequences."""

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
    "hash ids too": [
        {"request_id": "a", "prompt_token_ids": [1, 2, 3], "output_token_ids": [7, 8]},
        {"request_id": "h", "block_hash_ids": [2**40, -3], "block_size": 16},
    ],
}


@pytest.mark.parametrize("name", list(RECORDS))
def test_prompts_are_views_of_the_inserted_sequences(tmp_path, name):
    path = write_jsonl(tmp_path / "t.jsonl", RECORDS[name])
    ingest([path], db_path=tmp_path / "t.duckdb")
    con = connect(tmp_path / "t.duckdb")
    try:
        trace = read_trace(con)
    finally:
        con.close()
    flat, offsets = trace.held
    for i, prompt in enumerate(trace.prompts):
        assert np.shares_memory(prompt, flat)
        assert flat[offsets[i] : offsets[i] + len(prompt)].tolist() == prompt.tolist()
    rebuilt = LoadedTrace(trace.columns, trace.prompts, trace.outputs)  # nothing held
    zeros = np.zeros(trace.n, dtype=np.int64)
    _, got_flat, got_offsets = trace.inserted(zeros, zeros)
    _, want_flat, want_offsets = rebuilt.inserted(zeros, zeros)
    assert got_flat.tolist() == want_flat.tolist() and got_offsets.tolist() == want_offsets.tolist()
    by_id = dict(zip(trace.columns["request_id"], trace.prompts, strict=True))
    assert by_id["a"].tolist() == [1, 2, 3]


def test_inserted_sequences_append_outputs_but_their_last_token():
    columns = {"block_size": [None, None, 16]}
    prompts = [np.asarray([1, 2]), np.asarray([3]), np.asarray([2**40])]
    outputs = [np.asarray([5, 6, 7]), None, None]
    flat, offsets = inserted_sequences(prompts, outputs, columns)
    assert flat.tolist() == [1, 2, 5, 6, 3, 2**40] and offsets.tolist() == [0, 4, 5, 6]
