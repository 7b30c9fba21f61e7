"""A stored trace whose token ids stay in the store: the replay's driver holds the scalar
columns, and the L1/L2 matcher reads the token lists once, in arrival order, a batch at a
time, through the radix trees (`prefixes.engine.match_stream`), which keep only the units
no earlier request had (their arena: the trace's unique content).

It serves the replays whose results follow from shared prefixes alone
(`sim.dispatch.replay_from_shared`: full attention, unbounded) on a token-id trace, in
this process: those need no token id after L1/L2. Holding the ids instead costs 4 bytes a
token; streamed, the peak is the arena plus one batch (70 M tokens, 20 % of them unique:
about 55 MiB of arena instead of 267 MiB of ids).

Rows are streamed in storage order, which is arrival order for a trace ingested from one
time-sorted file; a row that comes early waits (copied) until the rows before it came, so
a trace stored out of order costs what it is out of order by, at most the ids once.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import duckdb
import numpy as np
import pyarrow as pa

from analyzer.errors import StoreError
from analyzer.executors import ExecutorSpec
from analyzer.pipeline.arrays import joined
from analyzer.pipeline.trace import LoadedTrace, load_trace, read_scalars, replay_meta
from analyzer.prefixes.engine import MatchArrays, match_stream
from analyzer.prefixes.radix import COMPILED_MIN_UNITS, load_early
from analyzer.sim.records import SimRequest
from analyzer.store.db import load_sql, out_of_memory, require_tables, scan_settings
from analyzer.store.write_units import prefetched

TOKEN_DTYPE = np.dtype(np.int32)  # token ids as stored (INTEGER[])
# Rows a streamed batch holds: about this many bytes of token ids (at the trace's mean
# row length), so a batch, its Arrow copy in DuckDB and its inserted layout stay small.
BATCH_BYTES = 8 << 20
MAX_BATCH_ROWS = 8192
# DuckDB's buffer limits to stream the lists under, tried in turn: each block is read once
# (cached, it would only sit beside what the trees keep), and the first cap that DuckDB
# does not run out of memory under is taken (the last, none, always is). One thread reads:
# each thread of a scan holds its own buffers. 70 M tokens stream under 48 MB (not 32).
STREAM_MEMORY_CAPS = ("48MB", "256MB", None)


@dataclass
class StoredTrace:
    """The store's requests as the replay's driver holds them when it streams their token
    ids (see the module doc): every column but the ids (`columns`, as LoadedTrace's) and
    each request's prompt and output lengths in tokens."""

    columns: dict[str, list]
    con: duckdb.DuckDBPyConnection
    prompt_len: np.ndarray
    output_len: np.ndarray

    reads_in_worker = False
    prompts = None  # never held; prefix-aware routing, which reads them, loads the trace
    token_ids_only = True

    @property
    def n(self) -> int:
        return len(self.columns["request_id"])

    def sim_request(self, i: int, namespace: tuple) -> SimRequest:
        """Request `i` by its counts (the closed form reads no token id)."""
        c = self.columns
        return SimRequest(
            request_id=c["request_id"][i],
            prompt_tokens=int(self.prompt_len[i]),
            output_tokens=int(self.output_len[i]),
            namespace=namespace,
            timestamp_s=c["timestamp_s"][i],
        )

    def shared_units(self, ns_any: np.ndarray, ns_replica: np.ndarray, spec: ExecutorSpec):
        """L1/L2 in units (MatchArrays), the token lists streamed once (local only)."""
        if not spec.is_local:
            raise ValueError("a streamed trace is matched in this process")
        insert_len = self.prompt_len + np.maximum(self.output_len - 1, 0)
        meta = replay_meta(self.columns, ns_any, ns_replica, self.prompt_len, insert_len)
        load_early(TOKEN_DTYPE)
        for cap in STREAM_MEMORY_CAPS[:-1]:
            try:
                return self._match(meta, cap)
            except (duckdb.OutOfMemoryException, OSError) as exc:
                if not out_of_memory(exc):
                    raise
        return self._match(meta, STREAM_MEMORY_CAPS[-1])

    def _match(self, meta, memory_cap: str | None) -> MatchArrays:
        # DuckDB reads the next batch in a thread while the trees take this one
        chunks = inserted_chunks(self.con, self.prompt_len, self.output_len, memory_cap)
        stream = prefetched(chunks)
        try:
            return match_stream(meta, stream, TOKEN_DTYPE)
        finally:
            stream.close()  # joins the reading thread: the connection is ours again
            chunks.close()  # and its settings as they were


def stored_trace(con: duckdb.DuckDBPyConnection) -> StoredTrace | LoadedTrace:
    """The store's requests for a replay that needs no token id after L1/L2: a StoredTrace
    where that saves memory (token ids only, at least COMPILED_MIN_UNITS of them: below,
    loading numba costs more than holding them), else the LoadedTrace as `load_trace`."""
    require_tables(con, "requests")
    [(prompt_tokens,)] = con.execute(load_sql("requests_prompt_tokens")).fetchall()
    if prompt_tokens >= COMPILED_MIN_UNITS:
        load_early(TOKEN_DTYPE)  # numba loads (0.5 s) while the scalars are read
    columns, lens, has = read_scalars(con)
    if not columns["request_id"]:
        raise StoreError("no requests in the database; run `hpa ingest FILE` first")
    prompt_len, output_len = lens["prompt_token_ids"], lens["output_token_ids"]
    hashed = has["block_hash_ids"].any() or any(b is not None for b in columns["block_size"])
    if hashed or int(prompt_len.sum() + output_len.sum()) < COMPILED_MIN_UNITS:
        return load_trace(con)
    return StoredTrace(columns, con, prompt_len, output_len)


def inserted_chunks(
    con: duckdb.DuckDBPyConnection,
    prompt_len: np.ndarray,
    output_len: np.ndarray,
    memory_cap: str | None,
) -> Iterator[tuple[int, int, np.ndarray, np.ndarray]]:
    """(first, stop, flat, starts): the inserted sequences (prompt + output but its last
    token) of requests first..stop-1 in arrival order, as `match_stream` takes them.

    Raises:
        StoreError: a streamed list is not as long as the stored counts say, or rows are
            missing or repeated (the requests changed while they were read).
    """
    insert_len = prompt_len + np.maximum(output_len - 1, 0)
    rows = _batch_rows(prompt_len, output_len)
    with scan_settings(con, memory_cap, threads=1 if memory_cap else None):
        reader = con.sql(load_sql("replay_load_tokens")).to_arrow_reader(rows)
        try:
            batches = (_inserted(b, prompt_len, output_len) for b in reader)
            yield from _arrival_runs(batches, insert_len)
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
                raise _changed()
            early[s] = flat[a:b].copy()
        first = done
        while done in early:
            done += 1
        if done > first:
            run = [early.pop(s) for s in range(first, done)]
            flat, offsets = joined(run, [None] * len(run), drop_last=0)
            yield first, done, flat, offsets[:-1]
    if early or done != len(insert_len):
        raise _changed()


def _inserted(
    batch: pa.RecordBatch, prompt_len: np.ndarray, output_len: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(seqs, flat, starts) of the batch's inserted sequences, its rows in batch order;
    the prompts' own values where no row appends an output (no copy)."""
    seq = batch.column("arrival_seq").to_numpy(zero_copy_only=False)
    if len(seq) and (seq.min() < 0 or seq.max() >= len(prompt_len)):
        raise _changed()
    prompts, outputs = batch.column("prompt_token_ids"), batch.column("output_token_ids")
    p_off, p_len = _offsets(prompts)
    o_off, o_len = _offsets(outputs)
    if not (np.array_equal(p_len, prompt_len[seq]) and np.array_equal(o_len, output_len[seq])):
        raise _changed()
    p_vals = prompts.values.to_numpy(zero_copy_only=False)
    if not (o_len > 1).any():
        return seq, p_vals, p_off[:-1].astype(np.int64)
    o_vals = outputs.values.to_numpy(zero_copy_only=False)
    firsts = [p_vals[a : a + n] for a, n in zip(p_off.tolist(), p_len.tolist(), strict=False)]
    seconds = [o_vals[a : a + n] for a, n in zip(o_off.tolist(), o_len.tolist(), strict=False)]
    flat, offsets = joined(firsts, seconds, drop_last=1)
    return seq, flat.astype(TOKEN_DTYPE, copy=False), offsets[:-1]


def _offsets(column: pa.ListArray) -> tuple[np.ndarray, np.ndarray]:
    """A list column's offsets and lengths (0 where null)."""
    offsets = column.offsets.to_numpy()
    valid = column.is_valid().to_numpy(zero_copy_only=False)
    return offsets, np.where(valid, np.diff(offsets), 0)


def _batch_rows(prompt_len: np.ndarray, output_len: np.ndarray) -> int:
    """Rows per batch: about BATCH_BYTES of token ids at the mean row length."""
    n = len(prompt_len)
    values_bytes = int(prompt_len.sum() + output_len.sum()) * TOKEN_DTYPE.itemsize
    if not n or not values_bytes:
        return MAX_BATCH_ROWS
    return int(max(1, min(MAX_BATCH_ROWS, BATCH_BYTES * n // values_bytes)))


def _changed() -> StoreError:
    return StoreError("requests changed while they were being read; run the command again")
