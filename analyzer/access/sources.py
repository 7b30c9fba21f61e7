"""The DuckDB `requests` table as a `SequenceSource`: metadata once, sequences by range."""

from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa

from analyzer.access.arrays import joined
from analyzer.access.token_stream import (
    STREAM_MEMORY_CAPS,
    ExpectedLists,
    keeps_early,
    source_parts,
    stream_match,
)
from analyzer.prefixes.engine import MatchArrays
from analyzer.prefixes.source import Chunk, PartitionSource, RequestMeta
from analyzer.store.db import (
    load_sql,
    query_arrow,
    require_tables,
    with_list_lengths,
)
from analyzer.store.scan import scan_settings
from analyzer.store.sequences import check_requests
from analyzer.store.tokens import Placement, place_lists, storage_order

# `hpa match` may hold every sequence in memory (`DuckDBSource.holds_better`) when they take
# at most this much: int32 token ids, int64 where hash ids are read.
HOLD_BYTES = 1 << 30
# ... and always when they take at most this much: a stream then reads the junction owners'
# lists in a second scan, which cost more than holding them (9.4 M token ids: 1.71 s against
# 1.54 s; 50 M: the same time, half the memory streamed; 70 M: 0.89x the time streamed).
HOLD_SMALL_BYTES = 64 << 20
# DuckDB's buffer limits to read lists under (`held`), tried in turn, as the token stream's:
# DuckDB keeps what it read cached up to the limit (without one, every block of 70 M
# tokens: +280 MiB beside the few junction owners copied out).
HELD_MEMORY_CAPS = tuple(cap for cap in STREAM_MEMORY_CAPS if cap)


class DuckDBSource:
    """Reads the `requests` table of an open store. Creates the temp view it reads from.

    Chunks by range (`read`, the vectorised matcher's), sequences by id (`fetch`), all of
    them held (`held`), or streamed once through the radix trees (`radix_stream`: what
    `engine.run_matcher` does with this source on the CPU)."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        require_tables(con, "requests")
        self.con = con
        check_requests(con)
        with scan_settings(con):  # list lengths and dense ranks: every core (no float sum)
            self.meta = read_meta(con)
        con.execute(load_sql("match_sequences_view"))

    def read(self, start: int, stop: int) -> Chunk:
        table = query_arrow(self.con, load_sql("match_read_chunk"), {"start": start, "stop": stop})
        flat, offsets = inserted_sequences(table)
        return Chunk(start, stop, flat, offsets)

    def fetch(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The inserted sequences of requests `ids` (ascending; a run of nearby ones reads
        the row groups around them only). Uncapped: the junction owners are fetched in
        dozens of batches that share blocks, which a 64 MB cap evicted and read again (the
        full WEKA trace: 25 s against 6.7 s)."""
        ids = np.asarray(ids, dtype=np.int64)
        wanted = pa.table({"arrival_seq": pa.array(ids)})
        bounds = {"lo": int(ids.min()), "hi": int(ids.max())} if ids.size else {"lo": 0, "hi": -1}
        self.con.register("match_wanted", wanted)
        try:
            table = query_arrow(self.con, load_sql("match_fetch_sequences"), bounds)
        finally:
            self.con.unregister("match_wanted")
        return inserted_sequences(table)

    def radix_stream(self) -> MatchArrays:
        """Every view's answers, each inserted sequence streamed once from the store into
        the radix trees (`access.token_stream`): memory is their arena (the units no
        earlier request had) and a batch, whatever the trace's size."""
        return stream_match(self.con, load_sql("match_load_tokens"), self.lists(), self.meta)

    def lists(self) -> ExpectedLists:
        """Each request's lists, as its inserted sequence is made of them: block hash ids
        (a hash-id namespace), else prompt then output token ids; int64 values where any
        hash id is read, else int32."""
        meta = self.meta
        hashed = np.asarray([ns[0] for ns in meta.namespaces], dtype=bool)[meta.ns_any]
        prompt = np.where(hashed, 0, meta.query_len)
        return ExpectedLists(
            prompt_len=prompt,
            hash_len=np.where(hashed, meta.insert_len, 0),
            output_len=np.where(hashed, 0, meta.insert_len - prompt),
            hashed=hashed,
            drop_last=0,
            dtype=np.dtype(np.int64 if hashed.any() else np.int32),
        )

    def holds_better(self) -> bool:
        """Whether `hpa match` should hold every sequence (`held()`) rather than stream
        them: where they take at most HOLD_SMALL_BYTES, or fit in HOLD_BYTES and a stream in
        arrival order would keep many of them early (`token_stream.keeps_early`: rows stored
        far out of arrival order, as the WEKA trace's 710 files, interleaved in time, which
        kept 1.7 GiB early for 0.7 GiB of hash ids) and cannot be merged from one stream a
        source (`token_stream.source_parts`). Held, they take their array and DuckDB's
        capped buffer; streamed, the trees' arena (the units no earlier request had) and
        what comes early."""
        lists = self.lists()
        units = lists.insert_len
        size = int(units.sum()) * lists.dtype.itemsize
        if size > HOLD_BYTES:
            return False
        if size <= HOLD_SMALL_BYTES:
            return True
        sql = load_sql("match_load_tokens")
        order = storage_order(self.con, sql)
        return keeps_early(order, units) and source_parts(self.con, sql, order) is None

    def held(self, ids: np.ndarray | None = None, *, allocate=np.empty) -> PartitionSource:
        """A source holding the inserted sequences of requests `ids` (ascending, unique;
        every request by default) and no other, read in one scan of every list under
        HELD_MEMORY_CAPS (an IN filter would not read fewer blocks, and its join need not
        keep storage order): the other rows are read past. `allocate(size, dtype)` makes
        the array they are read into (the GPU matcher's: page-locked host memory)."""
        meta, lists = self.meta, self.lists()
        rows = np.arange(meta.n) if ids is None else np.asarray(ids, dtype=np.int64)
        offsets = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(meta.insert_len[rows], out=offsets[1:])
        flat = allocate(int(offsets[-1]), lists.dtype)
        starts = np.full(meta.n, -1, dtype=np.int64)
        starts[rows] = offsets[:-1]
        prompt = np.where(starts >= 0, lists.prompt_len, 0)  # read past: starts stay < 0
        placements = {
            "prompt_token_ids": Placement(flat, starts, lists.prompt_len),
            "output_token_ids": Placement(flat, starts + prompt, lists.output_len),
            "block_hash_ids": Placement(flat, starts, lists.hash_len),
        }
        if len(flat):  # no junction owners: nothing to read
            sql = load_sql("match_load_tokens")
            place_lists(self.con, sql, np.arange(meta.n), placements, memory_caps=HELD_MEMORY_CAPS)
        if ids is None:
            return PartitionSource(meta, flat, offsets)
        starts[starts < 0] = 0  # never read: the source serves `ids` only
        return PartitionSource.gapped(meta, flat, starts)


def inserted_sequences(table: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """(flat, int64 offsets) of each row's inserted sequence (match_sequences_view.sql):
    its block hash ids, else its prompt token ids followed by its output token ids. Put
    together here rather than in SQL, where concatenating and widening the lists cost more
    than reading them (70 M tokens: 1.5 s against 0.6 s); int32 unless hash ids are read."""
    hashed = _row_arrays(table.column("block_hash_ids"))
    prompts = _row_arrays(table.column("prompt_token_ids"))
    outputs = _row_arrays(table.column("output_token_ids"))
    firsts = [h if h is not None else p for h, p in zip(hashed, prompts, strict=True)]
    seconds = [None if h is not None else o for h, o in zip(hashed, outputs, strict=True)]
    return joined(firsts, seconds, drop_last=0)


def _row_arrays(column: pa.ChunkedArray) -> list[np.ndarray | None]:
    """Each row's list as a view of the column's values (None where null)."""
    rows: list[np.ndarray | None] = []
    for chunk in column.chunks:
        values = chunk.values.to_numpy(zero_copy_only=False)
        offsets = chunk.offsets.to_numpy()
        valid = chunk.is_valid().to_numpy(zero_copy_only=False)
        rows.extend(
            values[offsets[k] : offsets[k + 1]] if valid[k] else None for k in range(len(chunk))
        )
    return rows


def read_meta(con: duckdb.DuckDBPyConnection) -> RequestMeta:
    table = query_arrow(con, with_list_lengths(con, load_sql("match_request_meta")))

    def col(name: str) -> np.ndarray:
        return table.column(name).to_numpy().astype(np.int64)

    return RequestMeta(
        ns_any=col("ns_any"),
        ns_replica=col("ns_replica"),
        ns_conversation=col("ns_conversation"),
        query_len=col("query_len"),
        insert_len=col("insert_len"),
        block_size=col("block_size"),
        prompt_tokens=col("prompt_tokens"),
        namespaces=tuple(
            (bool(h), (int(b) if h and b is not None else None), salt, lora)
            for _, h, b, salt, lora in con.execute(load_sql("match_namespaces")).fetchall()
        ),
    )
