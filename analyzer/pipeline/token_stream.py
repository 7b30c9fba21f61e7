"""Every request's inserted sequence streamed once out of the store, in arrival order, into
the radix trees (`prefixes.engine.match_stream`): what `hpa match` and the replay's L1/L2
hold of the token lists is then the trees' arena (each unit no earlier request had) and a
batch, instead of every list.

DuckDB streams the rows in storage order, in batches of about BATCH_BYTES of ids, under a
buffer cap (each block is read once: cached, it would only sit beside what the trees keep),
and a thread reads the next batch while the trees take this one. Storage order is arrival
order for a trace ingested from one time-sorted file; a row that comes early waits (copied)
until the rows before it came, so a trace stored out of order costs what it is out of
order by, at most the ids once. Each list is checked against the length the caller expects.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import duckdb
import numpy as np
import pyarrow as pa

from analyzer.pipeline.arrays import joined
from analyzer.prefixes.engine import MatchArrays, match_stream
from analyzer.prefixes.source import RequestMeta
from analyzer.store.db import out_of_memory, scan_settings
from analyzer.store.tokens import list_offsets, requests_changed
from analyzer.store.write_units import prefetched

# Rows a streamed batch holds: about this many bytes of ids (at the trace's mean row
# length), so a batch, its Arrow copy in DuckDB and its inserted layout stay small.
BATCH_BYTES = 8 << 20
MAX_BATCH_ROWS = 8192
# DuckDB's buffer limits to stream the lists under, tried in turn: the first one DuckDB
# does not run out of memory under is taken (the last, none, always is). One thread reads:
# each thread of a scan holds its own buffers. 70 M tokens stream under 48 MB (not 32).
STREAM_MEMORY_CAPS = ("48MB", "256MB", None)


@dataclass(frozen=True)
class ExpectedLists:
    """Each request's lists as the stream must find them (arrival order; 0 where null), and
    how its inserted sequence is made of them: its block hash ids where `hashed`, else its
    prompt token ids then its output token ids but the last `drop_last` (the replay drops
    the sampled last token, `hpa match` keeps it). `dtype`: the sequences' values."""

    prompt_len: np.ndarray
    hash_len: np.ndarray
    output_len: np.ndarray
    hashed: np.ndarray
    drop_last: int
    dtype: np.dtype

    @property
    def insert_len(self) -> np.ndarray:
        tokens = self.prompt_len + np.maximum(self.output_len - self.drop_last, 0)
        return np.where(self.hashed, self.hash_len, tokens)

    def batch_rows(self) -> int:
        """Rows per batch: about BATCH_BYTES of ids at the mean row length."""
        n = len(self.prompt_len)
        units = int(self.prompt_len.sum() + self.hash_len.sum() + self.output_len.sum())
        if not n or not units:
            return MAX_BATCH_ROWS
        return int(max(1, min(MAX_BATCH_ROWS, BATCH_BYTES * n // (units * self.dtype.itemsize))))


def stream_match(
    con: duckdb.DuckDBPyConnection, sql: str, lists: ExpectedLists, meta: RequestMeta
) -> MatchArrays:
    """Every view of `meta`'s answers, the inserted sequences streamed once from `sql`
    (rows: arrival_seq, prompt_token_ids, block_hash_ids, output_token_ids, any order),
    under each of STREAM_MEMORY_CAPS until DuckDB does not run out of memory."""
    for cap in STREAM_MEMORY_CAPS[:-1]:
        try:
            return _match(con, sql, lists, meta, cap)
        except (duckdb.OutOfMemoryException, OSError) as exc:
            if not out_of_memory(exc):
                raise
    return _match(con, sql, lists, meta, STREAM_MEMORY_CAPS[-1])


def _match(con, sql: str, lists: ExpectedLists, meta: RequestMeta, cap) -> MatchArrays:
    chunks = inserted_chunks(con, sql, lists, cap)
    stream = prefetched(chunks)
    try:
        return match_stream(meta, stream, lists.dtype)
    finally:
        stream.close()  # joins the reading thread: the connection is ours again
        chunks.close()  # and its settings as they were


def inserted_chunks(
    con: duckdb.DuckDBPyConnection, sql: str, lists: ExpectedLists, memory_cap: str | None
) -> Iterator[tuple[int, int, np.ndarray, np.ndarray]]:
    """(first, stop, flat, starts): the inserted sequences of requests first..stop-1 in
    arrival order, as `match_stream` takes them.

    Raises:
        StoreError: a streamed list is not as long as expected, or rows are missing or
            repeated (the requests changed while they were read).
    """
    with scan_settings(con, memory_cap, threads=1 if memory_cap else None):
        reader = con.sql(sql).to_arrow_reader(lists.batch_rows())
        try:
            yield from _arrival_runs((_inserted(b, lists) for b in reader), lists.insert_len)
        finally:
            reader.close()  # DuckDB's result: the settings are then restored


def _arrival_runs(batches, insert_len: np.ndarray):
    """(first, stop, flat, starts) runs in arrival order out of (seqs, flat, starts)
    batches in storage order: a batch that is the next run as it is (the usual case), else
    its rows kept (copied) until the rows before them came."""
    done = 0
    early: dict[int, np.ndarray] = {}  # rows streamed before their turn: seq -> sequence
    for seq, flat, starts in batches:
        k = len(seq)
        if not early and k and np.array_equal(seq, np.arange(done, done + k)):
            yield done, done + k, flat, starts
            done += k
            continue
        ends = starts + insert_len[seq]
        for s, a, b in zip(seq.tolist(), starts.tolist(), ends.tolist(), strict=True):
            if s in early or not done <= s < len(insert_len):
                raise requests_changed()
            early[s] = flat[a:b].copy()
        first = done
        while done in early:
            done += 1
        if done > first:
            run = [early.pop(s) for s in range(first, done)]
            flat, offsets = joined(run, [None] * len(run), drop_last=0)
            yield first, done, flat, offsets[:-1]
    if early or done != len(insert_len):
        raise requests_changed()


def _inserted(batch: pa.RecordBatch, lists: ExpectedLists):
    """(seqs, flat, starts) of the batch's inserted sequences, its rows in batch order;
    the prompts' own values where every row is its prompt alone (no copy)."""
    seq = batch.column("arrival_seq").to_numpy(zero_copy_only=False)
    if len(seq) and (seq.min() < 0 or seq.max() >= len(lists.prompt_len)):
        raise requests_changed()
    cols = [batch.column(n) for n in ("prompt_token_ids", "block_hash_ids", "output_token_ids")]
    offsets = [list_offsets(c) for c in cols]
    wanted = (lists.prompt_len, lists.hash_len, lists.output_len)
    for (_, got), want in zip(offsets, wanted, strict=True):
        if not np.array_equal(got, want[seq]):
            raise requests_changed()
    (p_off, p_len), (h_off, _), (o_off, o_len) = offsets
    hashed = lists.hashed[seq]
    values = [c.values.to_numpy(zero_copy_only=False) for c in cols]
    if not hashed.any() and not (o_len > lists.drop_last).any():
        return seq, values[0].astype(lists.dtype, copy=False), p_off[:-1].astype(np.int64)
    firsts, seconds = [], []
    for k in range(len(seq)):
        if hashed[k]:
            firsts.append(values[1][h_off[k] : h_off[k + 1]])
            seconds.append(None)
        else:
            firsts.append(values[0][p_off[k] : p_off[k] + p_len[k]])
            seconds.append(values[2][o_off[k] : o_off[k] + o_len[k]])
    flat, starts = joined(firsts, seconds, drop_last=lists.drop_last)
    return seq, flat.astype(lists.dtype, copy=False), starts[:-1]
