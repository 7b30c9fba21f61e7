"""access.trace.read_trace: token ids held once; prompts, outputs and inserted sequences
are views of them."""

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from analyzer.access.trace import LoadedTrace, dataset_trace, inserted_sequences, read_trace
from analyzer.store.db import (
    MEASURED_LENGTHS,
    STORED_LENGTHS,
    connect,
    load_sql,
    query_arrow,
    with_list_lengths,
)
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


@pytest.mark.parametrize("name", list(RECORDS))
@pytest.mark.parametrize("sql", ["replay_load", "match_request_meta"])
def test_stored_list_lengths_are_the_lists_own(tmp_path, name, sql):
    """The store's readers take list lengths from the counts ingest keeps beside the lists
    (so no list is read); they equal the lists' own lengths, which a dataset gets."""
    path = write_jsonl(tmp_path / "t.jsonl", RECORDS[name])
    ingest([path], db_path=tmp_path / "t.duckdb")
    con = connect(tmp_path / "t.duckdb")
    try:
        text = load_sql(sql)
        stored = query_arrow(con, with_list_lengths(con, load_sql(sql)))
        measured = query_arrow(con, text.format(**MEASURED_LENGTHS))
        assert stored.to_pylist() == measured.to_pylist()
        assert stored.to_pylist() == query_arrow(con, text.format(**STORED_LENGTHS)).to_pylist()
    finally:
        con.close()


def test_a_dataset_view_measures_its_lists(tmp_path):
    """A Parquet dataset without output_tokens (optional there) still gets its outputs'
    lengths: its view's lists are measured, not trusted to match stored counts."""
    table = pa.table(
        {
            "request_id": ["a", "b"],
            "arrival_seq": pa.array([0, 1], pa.int64()),
            "prompt_tokens": pa.array([3, 2], pa.int32()),
            "prompt_token_ids": [[1, 2, 3], [1, 2]],
            "output_token_ids": [[7, 8], None],
        }
    )
    pq.write_table(table, tmp_path / "part.parquet")
    trace = dataset_trace(str(tmp_path), whole=True)
    assert [None if o is None else o.tolist() for o in trace.outputs] == [[7, 8], None]
    flat, starts, lens = trace.held
    assert [flat[s : s + n].tolist() for s, n in zip(starts, lens, strict=True)] == [
        [1, 2, 3, 7],
        [1, 2],
    ]
