"""Every request's inserted sequence streamed once out of the store, in arrival order, into
the radix trees (`prefixes.engine.match_stream`): what `hpa match` and the replay's L1/L2
hold of the token lists is then the trees' arena (each unit no earlier request had) and a
batch, instead of every list.

DuckDB streams the rows in storage order, in batches of about BATCH_BYTES of ids, under a
buffer cap (each block is read once: cached, it would only sit beside what the trees keep),
and a thread reads the next batch while the trees take this one. The column of most values
streams as DuckDB's unnest of it (`store.tokens.row_values`: twice as fast as Arrow lists),
the others' values read whole before it where they are few (HELD_FRACTION); else rows come
with their lists. Storage order is arrival order for a trace ingested from one time-sorted
file; a row that comes early waits (copied) until the rows before it came, so a trace
stored out of order costs what it is out of order by, at most the ids once. Where that
would be much (`source_parts`: files each in time order, interleaved, as a log per server),
each file streams on its own cursor and `run_merge` merges them in arrival order: what waits
is then a batch a file. Each column is checked against the lengths the caller expects
(unnested: in total; as lists: row by row).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import duckdb
import numpy as np
import pyarrow as pa

from analyzer.access.arrays import joined
from analyzer.access.run_merge import merged
from analyzer.prefixes.engine import MatchArrays, match_stream
from analyzer.prefixes.source import RequestMeta
from analyzer.store.db import cursor, load_sql
from analyzer.store.scan import scan_settings, under_each_cap
from analyzer.store.tokens import (
    TOKEN_DTYPES,
    column_values,
    positions,
    requests_changed,
    row_values,
    storage_order,
    subquery,
)
from analyzer.store.write_units import prefetched

# Rows a streamed batch holds: about this many bytes of ids (at the trace's mean row
# length), so a batch, its Arrow copy in DuckDB and its inserted layout stay small.
BATCH_BYTES = 8 << 20
MAX_BATCH_ROWS = 8192
# DuckDB's buffer limits to stream the lists under, tried in turn: the first one DuckDB
# does not run out of memory under is taken (the last, none, always is). One thread reads:
# each thread of a scan holds its own buffers. 70 M tokens stream under 48 MB (not 32).
STREAM_MEMORY_CAPS = ("48MB", "256MB", None)
# ... the first raised to this many vectors of a trace's widest rows (`stream_caps`): a scan
# of a list column holds about that much at once (26 MB vectors, 3,190-token rows, ran out
# of memory midway under 80 MB, not under 96 MB).
VECTOR_SCANS = 4
COLUMNS = ("prompt_token_ids", "block_hash_ids", "output_token_ids")
# The column of most values streams unnested; the others are read whole first where they
# hold at most 1/HELD_FRACTION as many values (at 4-8 bytes a value, well inside the
# replay's bytes a token), else every column streams as Arrow lists, a batch of rows at once.
HELD_FRACTION = 8
# A stream that would keep over 1/EARLY_FRACTION of the ids early is merged from one stream
# a source instead (`source_parts`), where there are at most MAX_MERGED_SOURCES.
EARLY_FRACTION = 4
MAX_MERGED_SOURCES = 16
# DuckDB's rows a vector (STANDARD_VECTOR_SIZE), and what a merged stream gets beyond its
# vector under `merged_cap`.
VECTOR_ROWS = 2048
MERGE_SPARE_MB = 2


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

    def by_column(self) -> dict[str, np.ndarray]:
        """Each list column's lengths (COLUMNS), by name."""
        wanted = (self.prompt_len, self.hash_len, self.output_len)
        return dict(zip(COLUMNS, wanted, strict=True))

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
    under each of `stream_caps` until DuckDB does not run out of memory."""
    return under_each_cap(lambda cap: _match(con, sql, lists, meta, cap), stream_caps(lists))


def stream_caps(lists: ExpectedLists) -> tuple[str | None, ...]:
    """STREAM_MEMORY_CAPS, the first raised to VECTOR_SCANS vectors of the trace's widest
    rows (`vector_bytes`, in arrival order) where it is below that, and the caps below it
    left out. A first try that runs out of memory costs what it read (25.5 M tokens of
    3,190-token rows: 0.03 s under 48 MB), and a cap far above the need only more of
    DuckDB's cache, which keeps every block it read up to the cap (the same trace's replay
    under 256 MB: about 3 bytes a token more than under its need, 109 MB)."""
    widest = max(
        vector_bytes(lens, TOKEN_DTYPES[name].itemsize) for name, lens in lists.by_column().items()
    )
    need_mb = -(-VECTOR_SCANS * widest // (1 << 20))
    first = STREAM_MEMORY_CAPS[0]
    if first is None or not first.endswith("MB") or int(first[:-2]) >= need_mb:
        return STREAM_MEMORY_CAPS
    higher = (c for c in STREAM_MEMORY_CAPS[1:] if c is None or int(c[:-2]) > need_mb)
    return (f"{need_mb}MB", *higher)


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
        StoreError: a streamed list column is not as long as expected, or rows are missing
            or repeated (the requests changed while they were read).
    """
    with scan_settings(con, memory_cap, threads=1 if memory_cap else None):
        order = storage_order(con, sql)
        positions(np.arange(len(lists.insert_len)), order)
        lens = {name: want[order] for name, want in lists.by_column().items()}
        primary = max(COLUMNS, key=lambda name: int(lens[name].sum()))
        others = sum(int(lens[name].sum()) for name in COLUMNS if name != primary)
        if others * HELD_FRACTION > int(lens[primary].sum()):
            batches = _listed(con, sql, lists)
        else:
            parts = source_parts(con, sql, order) if keeps_early(order, lists.insert_len) else None
            if parts:
                yield from _merged_sources(con, sql, lists, order, lens, primary, parts, memory_cap)
                return
            batches = _unnested(con, sql, lists, order, lens, primary)
        try:
            yield from _arrival_runs(batches, lists.insert_len)
        finally:
            batches.close()  # DuckDB's result first: then the settings are restored


def keeps_early(order: np.ndarray, units: np.ndarray) -> bool:
    """Whether one stream of rows in storage `order` would keep over 1/EARLY_FRACTION of
    the `units` early at its peak (`early_units`)."""
    return early_units(order, units) * EARLY_FRACTION > int(units.sum())


def source_parts(con, sql: str, order: np.ndarray) -> list | None:
    """[(source_id, storage positions)] where the rows of `sql` (storage `order`) can be
    merged from one stream a source (`run_merge`): each source's rows are in arrival order,
    there are 2..MAX_MERGED_SOURCES sources, and `requests` is the store's table (a cursor
    sees it). Else None. Worth it where one stream `keeps_early`."""
    [(is_view,)] = con.execute(load_sql("requests_is_view")).fetchall()
    if is_view:
        return None
    query = load_sql("tokens_sources").format(rows=subquery(sql))  # storage order
    source = con.execute(query).fetchnumpy()["source_id"]
    ids = np.unique(source)
    if len(source) != len(order) or not 2 <= len(ids) <= MAX_MERGED_SOURCES:
        return None
    parts = [(int(k), np.flatnonzero(source == k)) for k in ids.tolist()]
    if any(np.any(np.diff(order[at]) <= 0) for _, at in parts):
        return None  # a source out of arrival order within itself
    return parts


def _merged_sources(con, sql, lists, order, lens: dict, primary: str, parts, memory_cap):
    """`inserted_chunks`'s runs, merged from one stream a source, each on its own cursor,
    in batches of 1/k of a single stream's (k sources), under `merged_cap`."""
    cursors = [cursor(con) for _ in parts]
    streams = [
        _unnested(
            reader,
            load_sql("tokens_of_source").format(rows=subquery(sql), source_id=int(source)),
            lists,
            order[at],
            {name: value[at] for name, value in lens.items()},
            primary,
            share=len(parts),
        )
        for reader, (source, at) in zip(cursors, parts, strict=True)
    ]
    try:
        vector = vector_bytes(lens[primary], TOKEN_DTYPES[primary].itemsize)
        cap = merged_cap(memory_cap, len(parts), vector)
        with scan_settings(con, cap, threads=1 if memory_cap else None):
            yield from merged(streams, lists.insert_len)
    finally:
        for stream in streams:
            stream.close()
        for reader in cursors:
            reader.close()


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


def early_units(order: np.ndarray, units: np.ndarray) -> int:
    """The most units `_arrival_runs` keeps at once for rows that came before their turn:
    rows streamed in storage `order` (their arrival_seqs, a permutation of 0..n-1), row
    `seq` holding `units[seq]` units. 0 where they are stored in arrival order."""
    n = len(order)
    if n == 0:
        return 0
    pos = np.empty(n, dtype=np.int64)
    pos[order] = np.arange(n)
    # arrival rows 0..m-1 have all streamed once the stream is past the last of them
    last = np.maximum.accumulate(pos)
    done = np.searchsorted(last, np.arange(n), side="right")  # rows out, after each row in
    streamed = np.cumsum(units[order])
    out = np.concatenate([[0], np.cumsum(units)])[done]
    return int((streamed - out).max())


def merged_cap(cap: str | None, k: int, vector: int) -> str | None:
    """The buffer limit for k streams side by side: each open scan of a list column holds
    its current vector of rows' lists (`vector` bytes at most), so k of them and
    MERGE_SPARE_MB a stream and 8 MB, or `cap` ('48MB') where that is more. Measured on 70 M
    tokens (11.3 MB vectors): 4 streams ran out of memory under 48 MB and not 52 (this
    gives 62); 16 under 180 MB and not 198 (this gives 222). The limit is also about what
    DuckDB keeps cached, since each block is read once: more would only cost memory. None
    (no limit) stays None."""
    if cap is None:
        return None
    need_mb = -(-k * vector // (1 << 20)) + k * MERGE_SPARE_MB + 8
    return f"{max(int(cap.removesuffix('MB')), need_mb)}MB"


def vector_bytes(lens: np.ndarray, itemsize: int) -> int:
    """The most bytes of list values any VECTOR_ROWS consecutive rows hold (DuckDB scans
    a list column a vector of rows at a time)."""
    ends = np.concatenate([[0], np.cumsum(lens, dtype=np.int64)])
    rows = min(VECTOR_ROWS, len(lens))
    return int((ends[rows:] - ends[: len(ends) - rows]).max()) * itemsize


def _unnested(con, sql, lists: ExpectedLists, order, lens: dict, primary: str, share: int = 1):
    """(seqs, flat, starts) batches in storage order: `primary` (the column of most values)
    streamed unnested, the other columns' values read whole first, as `lists.dtype` (one
    query streams at a time on a connection). Batches of 1/`share` of BATCH_BYTES."""
    held = {}
    for name in COLUMNS:
        if name != primary:
            offsets = np.zeros(len(order) + 1, dtype=np.int64)
            np.cumsum(lens[name], out=offsets[1:])
            values = column_values(con, sql, name, lens[name]) if offsets[-1] else np.zeros(0)
            held[name] = (values.astype(lists.dtype, copy=False), offsets)
    runs = row_values(
        con,
        sql,
        primary,
        lens[primary],
        batch_values=max(1, BATCH_BYTES // share // TOKEN_DTYPES[primary].itemsize),
        max_rows=MAX_BATCH_ROWS,
    )
    for first, stop, values in runs:
        local = np.zeros(stop - first + 1, dtype=np.int64)
        np.cumsum(lens[primary][first:stop], out=local[1:])
        columns = {name: (v, o[first : stop + 1]) for name, (v, o) in held.items()}
        columns[primary] = (values, local)
        yield _joined(order[first:stop], columns, lists)


def _listed(con, sql: str, lists: ExpectedLists):
    """(seqs, flat, starts) batches in storage order, from batches of rows with their lists
    (Arrow lists: slower than unnested values, but nothing is held beyond a batch)."""
    reader = con.sql(sql).to_arrow_reader(lists.batch_rows())
    try:
        for batch in reader:
            seq = batch.column("arrival_seq").to_numpy(zero_copy_only=False)
            if len(seq) and (seq.min() < 0 or seq.max() >= len(lists.prompt_len)):
                raise requests_changed()
            columns = {}
            for name, want in lists.by_column().items():
                offsets, got = _list_offsets(batch.column(name))
                if not np.array_equal(got, want[seq]):
                    raise requests_changed()
                values = batch.column(name).values.to_numpy(zero_copy_only=False)
                columns[name] = (values, offsets)
            yield _joined(seq, columns, lists)
    finally:
        reader.close()  # DuckDB's result: the settings are then restored


def _joined(seq: np.ndarray, columns: dict, lists: ExpectedLists):
    """(seqs, flat, starts) of rows `seq`'s inserted sequences; `columns`: name -> (values,
    offsets): row k's list is values[offsets[k] : offsets[k + 1]] (absent: no values). The
    prompts' (or hash ids') own values where every row is them alone (no copy)."""
    hashed = lists.hashed[seq]
    kept = np.maximum(lists.output_len[seq] - lists.drop_last, 0)  # output values inserted
    if hashed.all():  # hash ids alone: a hash-id request's outputs are a count
        values, offsets = columns["block_hash_ids"]
        return seq, values.astype(lists.dtype, copy=False), offsets[:-1]
    if not hashed.any():
        values, offsets = columns["prompt_token_ids"]
        if not kept.any():
            return seq, values.astype(lists.dtype, copy=False), offsets[:-1]
        flat, starts = _with_outputs(values, offsets, *columns["output_token_ids"], kept)
        return seq, flat.astype(lists.dtype, copy=False), starts

    def row(name: str, k: int) -> np.ndarray:
        values, offsets = columns[name]
        return values[offsets[k] : offsets[k + 1]]

    firsts, seconds = [], []
    for k, is_hashed in enumerate(hashed.tolist()):
        if is_hashed:
            firsts.append(row("block_hash_ids", k))
            seconds.append(None)
        else:
            firsts.append(row("prompt_token_ids", k))
            seconds.append(row("output_token_ids", k))
    flat, starts = joined(firsts, seconds, drop_last=lists.drop_last)
    return seq, flat.astype(lists.dtype, copy=False), starts[:-1]


def _with_outputs(prompts, p_off, outputs, o_off, kept: np.ndarray):
    """(flat, starts): each row's prompt then the first `kept[k]` values of its output. The
    prompts between two rows with outputs are one run in both arrays: one copy a run."""
    p_len = np.diff(p_off)
    ends = np.cumsum(p_len + kept)
    flat = np.empty(int(ends[-1]), dtype=np.result_type(prompts, outputs))
    starts = ends - p_len - kept
    first = 0
    p_off, o_off, starts_list = p_off.tolist(), o_off.tolist(), starts.tolist()
    for k in np.flatnonzero(kept).tolist():
        a, b = p_off[first], p_off[k + 1]
        flat[starts_list[first] : starts_list[first] + b - a] = prompts[a:b]
        at, o = starts_list[k] + b - p_off[k], o_off[k]
        flat[at : at + int(kept[k])] = outputs[o : o + int(kept[k])]
        first = k + 1
    if first < len(kept):
        a, b = p_off[first], p_off[-1]
        flat[starts_list[first] : starts_list[first] + b - a] = prompts[a:b]
    return flat, starts


def _list_offsets(column: pa.ListArray) -> tuple[np.ndarray, np.ndarray]:
    """A list column's offsets into its values, and each row's length (0 where null)."""
    offsets = column.offsets.to_numpy()
    valid = column.is_valid().to_numpy(zero_copy_only=False)
    return offsets, np.where(valid, np.diff(offsets), 0)
