"""The replay that streams token ids from the store through L1/L2 (access.streamed) gives
exactly the rows of the replay that holds them: in arrival order or not, whatever the
batches, under a memory cap DuckDB runs out of or not."""

from __future__ import annotations

import random
import tracemalloc

import duckdb
import numpy as np
import pytest

from analyzer.access import streamed, token_stream
from analyzer.access.streamed import StoredTrace, stored_trace
from analyzer.access.trace import LoadedTrace
from analyzer.errors import StoreError
from analyzer.executors import LOCAL
from analyzer.pipeline import replay as replay_module
from analyzer.pipeline.replay import run_replay
from analyzer.sim.dispatch import make_policy
from analyzer.store.db import connect
from analyzer.store.ingest import ingest
from analyzer.traces.synth import generate
from tests.conftest import write_jsonl

FA = {"groups": ["full_attention"], "block_size": 16}
SETTINGS = "SELECT current_setting('threads'), current_setting('memory_limit')"
ROWS = "SELECT * EXCLUDE (run_id) FROM replay_requests WHERE run_id = ? ORDER BY arrival_seq"


def _records(shuffle: bool) -> list[dict]:
    """A mixed trace with outputs, conversations, two revisions and two replicas; shuffled,
    its file order (the store's order) is not its arrival order."""
    records = list(generate("mixed", seed=3, num_requests=120))
    for k, r in enumerate(records):
        r["replica"] = "ab"[k % 2]
        if k % 3 == 0:
            r["output_token_ids"] = [7, 8, k % 5]
            r.pop("output_tokens", None)
    if shuffle:
        random.Random(5).shuffle(records)
    return records


@pytest.fixture
def always_streams(monkeypatch):
    """Stream whatever the trace's size, a few rows (or 250 token ids) a batch; -> the
    chunks matched."""
    monkeypatch.setattr(streamed, "COMPILED_MIN_UNITS", 0)
    monkeypatch.setattr(token_stream, "MAX_BATCH_ROWS", 7)
    monkeypatch.setattr(token_stream, "BATCH_BYTES", 1000)
    chunks = []
    match = token_stream.match_stream

    def spy(meta, stream, dtype):
        return match(meta, (chunks.append(c[:2]) or c for c in stream), dtype)

    monkeypatch.setattr(token_stream, "match_stream", spy)
    return chunks


def _both_ways(tmp_path, monkeypatch, records, policy=FA, num_files=1) -> tuple[list, list]:
    """Rows of the streamed and the held replay of `records`, ingested from `num_files`
    files (record k in file k % num_files: each file in its records' order)."""
    db = tmp_path / "t.duckdb"
    files = [tmp_path / f"t{j}.jsonl" for j in range(num_files)]
    ingest([write_jsonl(f, records[j::num_files]) for j, f in enumerate(files)], db_path=db)
    streamed_run = run_replay(make_policy(policy), db_path=db).run_id
    with monkeypatch.context() as m:
        m.setattr(replay_module, "streams_tokens", lambda *a: False)
        held_run = run_replay(make_policy(policy), db_path=db).run_id
    con = duckdb.connect(str(db))
    try:
        return [con.execute(ROWS, [run]).fetchall() for run in (streamed_run, held_run)]
    finally:
        con.close()


@pytest.mark.parametrize("held_fraction", [8, 10**9], ids=["unnested", "listed"])
@pytest.mark.parametrize("shuffle", [False, True], ids=["in arrival order", "shuffled"])
def test_streamed_rows_are_the_held_rows(
    tmp_path, monkeypatch, always_streams, shuffle, held_fraction
):
    monkeypatch.setattr(token_stream, "HELD_FRACTION", held_fraction)
    got, want = _both_ways(tmp_path, monkeypatch, _records(shuffle))
    assert len(got) == 120 and got == want
    runs = always_streams  # streamed, in arrival order, a batch (or what it completes) at a time
    assert [a for a, _ in runs] == [0] + [b for _, b in runs[:-1]] and runs[-1][1] == 120
    assert len(runs) > (2 if shuffle else 120 // 7)
    assert sum(r[7] for r in got) > 0  # something was shared (shared_any_tokens)


@pytest.mark.parametrize("num_files", [2, 3])
@pytest.mark.parametrize("batch_bytes", [1000, 8 << 20], ids=["small batches", "one batch"])
def test_files_that_interleave_in_time_stream_merged(
    tmp_path, monkeypatch, always_streams, num_files, batch_bytes
):
    """Each file in time order, the files interleaved (a log per server): one stream a
    file, merged in arrival order (`run_merge`), the same rows as held."""
    monkeypatch.setattr(token_stream, "BATCH_BYTES", batch_bytes)
    monkeypatch.setattr(token_stream, "MAX_BATCH_ROWS", 8192 if batch_bytes > 1000 else 7)
    merges = []
    merged = token_stream.merged
    monkeypatch.setattr(token_stream, "merged", lambda *a: merges.append(1) or merged(*a))
    got, want = _both_ways(tmp_path, monkeypatch, _records(False), num_files=num_files)
    assert merges and len(got) == 120 and got == want
    runs = always_streams
    assert [a for a, _ in runs] == [0] + [b for _, b in runs[:-1]] and runs[-1][1] == 120


def test_routing_by_replica_and_a_shared_cache_stream_too(tmp_path, monkeypatch, always_streams):
    policy = {**FA, "routing": "round_robin", "replicas": 3, "cache_scope": "shared"}
    got, want = _both_ways(tmp_path, monkeypatch, _records(True), policy)
    assert got == want


def test_a_cap_duckdb_runs_out_of_is_raised_until_none(tmp_path, monkeypatch, always_streams):
    tried = []
    match = token_stream._match

    def spy(con, sql, lists, meta, cap):
        tried.append(cap)
        return match(con, sql, lists, meta, cap)

    monkeypatch.setattr(token_stream, "_match", spy)
    monkeypatch.setattr(token_stream, "STREAM_MEMORY_CAPS", ("1KB", None))
    monkeypatch.setattr(token_stream, "MAX_BATCH_ROWS", 8192)
    got, want = _both_ways(tmp_path, monkeypatch, _records(False))
    assert tried == ["1KB", None] and got == want


def test_the_connection_keeps_its_settings(tmp_path, always_streams):
    db = tmp_path / "t.duckdb"
    ingest([write_jsonl(tmp_path / "t.jsonl", _records(True))], db_path=db)
    con = connect(db)
    try:
        before = con.execute(SETTINGS).fetchall()
        trace = stored_trace(con)
        assert isinstance(trace, StoredTrace)
        ns = np.zeros(trace.n, dtype=np.int64)
        trace.shared_units(ns, ns, LOCAL)
        assert con.execute(SETTINGS).fetchall() == before
    finally:
        con.close()


def test_lengths_that_disagree_with_the_lists_are_an_error(tmp_path, always_streams):
    db = tmp_path / "t.duckdb"
    ingest([write_jsonl(tmp_path / "t.jsonl", _records(False))], db_path=db)
    con = duckdb.connect(str(db))
    con.execute("UPDATE requests SET output_tokens = 9 WHERE output_token_ids IS NOT NULL")
    con.close()
    with pytest.raises(StoreError, match="requests changed while they were being read"):
        run_replay(make_policy(FA), db_path=db)


def test_small_or_hash_id_traces_are_loaded(tmp_path):
    """Below COMPILED_MIN_UNITS holding the ids costs less than numba; hash-id traces are
    not replayed from shared prefixes by the driver."""
    db = tmp_path / "t.duckdb"
    ingest([write_jsonl(tmp_path / "t.jsonl", _records(False))], db_path=db)
    con = connect(db)
    try:
        assert isinstance(stored_trace(con), LoadedTrace)
    finally:
        con.close()


def test_the_streamed_replay_holds_one_array_of_ids(tmp_path, monkeypatch):
    """What NumPy and Python allocate at the peak of an unbounded full-attention replay that
    streams its ids is one id array (the radix trees' arena: 4 bytes a unit, int32) and its
    answers per request: a second copy of the ids (held lists beside the arena, widened to
    int64, a list of rows) would add at least 4 bytes a unit. DuckDB's own memory (its cache
    under the stream's cap: `store/tokens.py`, `token_stream.stream_caps`) is not counted here."""
    monkeypatch.setattr(streamed, "COMPILED_MIN_UNITS", 0)
    monkeypatch.setattr(token_stream, "BATCH_BYTES", 1 << 16)
    records = list(generate("mixed", seed=3, num_requests=1200))
    db = tmp_path / "t.duckdb"
    ingest([write_jsonl(tmp_path / "t.jsonl", records)], db_path=db)
    units = sum(
        len(r["prompt_token_ids"]) + max(len(r.get("output_token_ids") or []) - 1, 0)
        for r in records
    )
    chunks = []
    match = token_stream.match_stream
    monkeypatch.setattr(
        token_stream, "match_stream", lambda *a: chunks.append(1) or match(*a)
    )  # streamed, not held
    tracemalloc.start()
    try:
        run_replay(make_policy(FA), db_path=db)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert chunks and units > 1_000_000
    # measured: 5.0 bytes a unit (1,757,653 units, 1,200 requests)
    assert peak < 4 * units * 1.1 + 2048 * len(records) + (1 << 20)
