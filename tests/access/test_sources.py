"""Reading sequences from DuckDB: chunks, re-reads of old sequences, arrival-order checks."""

from __future__ import annotations

import duckdb
import numpy as np
import pytest

from analyzer.access import sources, token_stream
from analyzer.access.sources import DuckDBSource
from analyzer.errors import StoreError
from analyzer.pipeline.match import compute, match_prefixes
from analyzer.prefixes import radix
from analyzer.prefixes.engine import MatchOptions
from analyzer.prefixes.memory import Request
from analyzer.store.ingest import ingest
from tests.conftest import write_jsonl
from tests.prefixes.helpers import assert_same_as_trie, store

REQUESTS = [
    Request(
        f"r{i}", prompt=(1, 2, 3, i % 4, 5, i % 3), output=(i % 2, 7), conversation_id=f"c{i % 3}"
    )
    for i in range(25)
] + [Request("h", block_hash_ids=(-5, 2**40, 3), block_size=16, num_prompt_tokens=40)]


def test_sequences_round_trip(tmp_path):
    db = store(tmp_path / "t.duckdb", REQUESTS)
    source = DuckDBSource(duckdb.connect(str(db)))
    chunk = source.read(3, 6)
    got = [chunk.flat[chunk.offsets[k] : chunk.offsets[k + 1]].tolist() for k in range(3)]
    assert got == [list(REQUESTS[i].inserted) for i in range(3, 6)]
    flat, offsets = source.fetch(np.asarray([0, 25]))
    assert flat[offsets[1] : offsets[2]].tolist() == [-5, 2**40, 3]
    assert source.meta.block_size.tolist()[-1] == 16


def test_rereading_old_chunks_from_duckdb_gives_the_same_answers(tmp_path):
    db = store(tmp_path / "t.duckdb", REQUESTS)
    source = DuckDBSource(duckdb.connect(str(db)))
    result = compute(source, xp=np, options=MatchOptions(chunk_requests=2, archive_tokens=1))
    assert result.arrays.archive_rereads > 0
    assert_same_as_trie(REQUESTS, result.arrays)


def test_arrival_seq_must_be_dense(tmp_path):
    db = store(tmp_path / "t.duckdb", REQUESTS[:3])
    con = duckdb.connect(str(db))
    con.execute("UPDATE requests SET arrival_seq = 7 WHERE request_id = 'r1'")
    con.close()
    with pytest.raises(StoreError, match="not a dense 0..n-1 arrival order"):
        match_prefixes(db, backend="numpy")


@pytest.mark.parametrize("ids", [[], [0], [1, 4, 25], list(range(26))])
def test_held_sequences_are_the_inserted_sequences_of_those_requests(tmp_path, ids):
    db = store(tmp_path / "t.duckdb", REQUESTS)
    source = DuckDBSource(duckdb.connect(str(db)))
    held = source.held(np.asarray(ids, dtype=np.int64))
    flat, offsets = held.fetch(np.asarray(ids, dtype=np.int64))
    got = [flat[a:b].tolist() for a, b in zip(offsets[:-1], offsets[1:], strict=True)]
    assert got == [list(REQUESTS[i].inserted) for i in ids]
    assert held.flat.size == sum(len(REQUESTS[i].inserted) for i in ids)  # no other request


def _tables(db) -> list:
    """Rows of the tables `hpa match` wrote, as stored."""
    con = duckdb.connect(str(db))
    try:
        return [
            con.execute(f"SELECT * FROM {t}").fetchall() for t in ("prefix_matches", "junctions")
        ]
    finally:
        con.close()


@pytest.mark.parametrize("batch_rows, batch_bytes", [(2, 20), (8192, 8 << 20)])
@pytest.mark.parametrize("held_fraction", [1, 10**9], ids=["unnested", "listed"])
@pytest.mark.parametrize("compiled_min_units", [0, 1 << 40])
@pytest.mark.parametrize("hold_small_bytes", [0, 1 << 30], ids=["streamed", "held"])
def test_streamed_held_or_read_in_chunks_the_tables_are_the_same(
    tmp_path, monkeypatch, batch_rows, batch_bytes, held_fraction, compiled_min_units,
    hold_small_bytes,
):  # fmt: skip
    """hpa match streams the sequences once through the radix trees (>= compiled_min_units;
    hash ids and token ids, unnested or as lists, in batches of any size), holds them all
    (a small trace), or reads chunks for the vectorised matcher: the same tables."""
    monkeypatch.setattr(sources, "HOLD_SMALL_BYTES", hold_small_bytes)

    want = store(tmp_path / "want.duckdb", REQUESTS)
    match_prefixes(
        want, backend="numpy", options=MatchOptions(chunk_requests=3, compiled_min_units=1 << 40)
    )
    db = store(tmp_path / "t.duckdb", REQUESTS)
    monkeypatch.setattr(token_stream, "MAX_BATCH_ROWS", batch_rows)
    monkeypatch.setattr(token_stream, "BATCH_BYTES", batch_bytes)
    monkeypatch.setattr(token_stream, "HELD_FRACTION", held_fraction)
    options = MatchOptions(chunk_requests=3, compiled_min_units=compiled_min_units)
    match_prefixes(db, backend="numpy", options=options)
    assert _tables(db) == _tables(want)


def test_rows_stored_far_out_of_arrival_order_are_held_not_streamed(tmp_path, monkeypatch):
    """A stream in arrival order would keep such rows early: `hpa match` holds them all
    instead (where they fit), with the same tables as the stream's."""
    db = store(tmp_path / "t.duckdb", REQUESTS)
    con = duckdb.connect(str(db))
    assert DuckDBSource(con).holds_better()  # small: held whatever its order
    monkeypatch.setattr(sources, "HOLD_SMALL_BYTES", 0)
    assert not DuckDBSource(con).holds_better()  # stored in arrival order: streamed
    con.execute(f"UPDATE requests SET arrival_seq = {len(REQUESTS) - 1} - arrival_seq")
    assert DuckDBSource(con).holds_better()
    with monkeypatch.context() as patched:
        patched.setattr(sources, "HOLD_BYTES", 8 * 100)  # too many to hold: streamed
        assert not DuckDBSource(con).holds_better()
    con.close()
    always = MatchOptions(compiled_min_units=0)
    match_prefixes(db, backend="numpy", options=always)
    held = _tables(db)
    monkeypatch.setattr(DuckDBSource, "holds_better", lambda self: False)
    match_prefixes(db, backend="numpy", options=always)
    assert _tables(db) == held


def test_files_that_interleave_in_time_are_streamed_merged_not_held(tmp_path, monkeypatch):
    """One stream a file, merged in arrival order: nothing comes early, so nothing is held;
    the tables are the held matcher's."""
    monkeypatch.setattr(sources, "HOLD_SMALL_BYTES", 0)
    monkeypatch.setattr(token_stream, "BATCH_BYTES", 8 << 20)
    monkeypatch.setattr(token_stream, "HELD_FRACTION", 1)  # outputs held, prompts unnested
    records = [
        {
            "request_id": f"r{k}",
            "timestamp": float(k),
            "prompt_token_ids": [1, 2, 3, k % 4, 5, k % 3, 6],
            "output_token_ids": [k % 2, 7],
        }
        for k in range(40)
    ]
    db = tmp_path / "t.duckdb"
    ingest([write_jsonl(tmp_path / f"p{j}.jsonl", records[j::3]) for j in range(3)], db_path=db)
    assert not DuckDBSource(duckdb.connect(str(db))).holds_better()
    merges = []
    merged = token_stream.merged
    monkeypatch.setattr(token_stream, "merged", lambda *a: merges.append(1) or merged(*a))
    always = MatchOptions(compiled_min_units=0)
    match_prefixes(db, backend="numpy", options=always)
    streamed = _tables(db)
    assert merges
    monkeypatch.setattr(DuckDBSource, "holds_better", lambda self: True)
    match_prefixes(db, backend="numpy", options=always)
    assert _tables(db) == streamed


def test_a_streamed_match_reads_each_list_once(tmp_path, monkeypatch):
    """The stream reads every list column once (prompts unnested, the others whole), and the
    junction ids hash the owners rebuilt from the radix trees' arena up to their deepest
    junction: no second read of any list (no held source, no fetch, no chunk)."""
    monkeypatch.setattr(sources, "HOLD_SMALL_BYTES", 0)
    monkeypatch.setattr(token_stream, "HELD_FRACTION", 1)  # prompts unnested, others whole
    reads: list[str] = []
    for name in ("row_values", "column_values"):
        read = getattr(token_stream, name)

        def spy(con, sql, column, *args, read=read, **kwargs):
            reads.append(column)
            return read(con, sql, column, *args, **kwargs)

        monkeypatch.setattr(token_stream, name, spy)
    again: list[str] = []
    for name in ("held", "fetch", "read"):
        method = getattr(DuckDBSource, name)
        monkeypatch.setattr(
            DuckDBSource,
            name,
            lambda self, *a, name=name, method=method: again.append(name) or method(self, *a),
        )
    rebuilt = []
    prefixes = radix.ArenaSequences.prefixes
    monkeypatch.setattr(
        radix.ArenaSequences,
        "prefixes",
        lambda self, ids, lens: (
            rebuilt.append((int(np.sum(lens)), int(self.meta.insert_len[ids].sum())))
            or prefixes(self, ids, lens)
        ),
    )
    db = store(tmp_path / "t.duckdb", REQUESTS)
    match_prefixes(db, backend="numpy", options=MatchOptions(compiled_min_units=0))
    assert sorted(reads) == ["block_hash_ids", "output_token_ids", "prompt_token_ids"]
    assert again == []
    [(hashed, whole)] = rebuilt
    assert 0 < hashed < whole  # the owners up to their deepest junction, not whole
    want = store(tmp_path / "want.duckdb", REQUESTS)  # the vectorised matcher, by chunks
    match_prefixes(want, backend="numpy", options=MatchOptions(compiled_min_units=1 << 40))
    assert _tables(db) == _tables(want)
