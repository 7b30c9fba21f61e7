"""Token lists out of the store at memory speed: streamed in storage order into one flat
array per column, each row's values at its place in arrival order.

Sorting rows that hold lists (`ORDER BY arrival_seq`) makes DuckDB materialise every list
twice (its sorted copy, then Arrow's); streaming them unsorted and placing each batch by
its rows' arrival_seq holds them once. Rows stored in arrival order (the usual case) and
placed one after another are a single copy per batch; any other placement is one copy a
row (the replay lays each row's prompt and output side by side: `pipeline.trace`).
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb
import numpy as np
import pyarrow as pa

from analyzer.errors import StoreError
from analyzer.store.db import out_of_memory, scan_settings

STREAM_ROWS = 8192
STREAM_BYTES = 16 << 20  # rows a batch holds: fewer than STREAM_ROWS where rows are long
# DuckDB's buffer limit while token ids are copied out into arrays (`place_lists`): each
# block is read once, and cached it would only sit beside its copy. One thread reads under
# it: each thread of a scan holds its own buffers, and two ran out of memory on WEKA's
# long rows, so the read went uncapped (+1.6 GiB; one thread: +1.0 GiB, 1.8 s not 3.0 s).
STREAM_MEMORY_CAP = "256MB"


@dataclass(frozen=True)
class Placement:
    """Where one list column's rows go: row k's values (arrival order) to
    flat[starts[k] : starts[k] + lens[k]]; `lens[k]` is 0 where the list is null."""

    flat: np.ndarray
    starts: np.ndarray
    lens: np.ndarray


def flat_lists(
    con: duckdb.DuckDBPyConnection,
    sql: str,
    seqs: np.ndarray,
    lens: dict[str, np.ndarray],
    dtypes: dict[str, np.dtype],
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """(flat values, int64 offsets) per list column of `sql`, rows in the order of `seqs`:
    `place_lists` into one new array per column (`lens[name][k]`: row k's length)."""
    out, placements = {}, {}
    for name, length in lens.items():
        offsets = np.zeros(len(length) + 1, dtype=np.int64)
        np.cumsum(length, out=offsets[1:])
        out[name] = (np.empty(int(offsets[-1]), dtype=dtypes[name]), offsets)
        placements[name] = Placement(out[name][0], offsets[:-1], np.asarray(length))
    place_lists(con, sql, seqs, placements)
    return out


def place_lists(
    con: duckdb.DuckDBPyConnection,
    sql: str,
    seqs: np.ndarray,
    placements: dict[str, Placement],
    *,
    memory_cap: str | None = None,
) -> None:
    """Stream the rows of `sql` and copy each list column named in `placements` to its
    place (other columns are not read out).

    `sql` selects `arrival_seq` and those list columns, in any order; `seqs` holds each
    row's arrival_seq, ascending and unique (row k of every Placement is `seqs[k]`).
    `memory_cap` (DuckDB's units, '256MB'): stream under that buffer limit
    (`store.db.scan_settings`), and again without it if DuckDB runs out of memory there.

    Raises:
        StoreError: the rows streamed are not the rows `seqs` and the placements describe
            (the requests changed between the two reads).
    """
    if memory_cap is None:
        _stream(con, sql, seqs, placements)
        return
    try:
        with scan_settings(con, memory_cap, threads=1):
            _stream(con, sql, seqs, placements)
    except (duckdb.OutOfMemoryException, OSError) as exc:
        if not out_of_memory(exc):
            raise
        _stream(con, sql, seqs, placements)  # rows too long for the cap: as DuckDB likes


def _stream(con, sql: str, seqs: np.ndarray, placements: dict[str, Placement]) -> None:
    seen = 0
    for batch in con.sql(sql).to_arrow_reader(_batch_rows(placements)):
        seq = batch.column("arrival_seq").to_numpy(zero_copy_only=False)
        pos = np.searchsorted(seqs, seq)
        if pos.size and (pos.max() >= len(seqs) or not np.array_equal(seqs[pos], seq)):
            raise requests_changed()
        for name, placement in placements.items():
            _place(batch.column(name), pos, placement)
        seen += batch.num_rows
    if seen != len(seqs):
        raise requests_changed()


def _batch_rows(placements: dict[str, Placement]) -> int:
    """Rows per streamed batch: STREAM_ROWS, or about STREAM_BYTES of values at the rows'
    mean length (a trace of 100 K-token prompts would otherwise stream 3 GB batches)."""
    num_rows = max((len(p.lens) for p in placements.values()), default=0)
    values_bytes = sum(int(p.lens.sum()) * p.flat.itemsize for p in placements.values())
    if not num_rows or not values_bytes:
        return STREAM_ROWS
    return int(max(1, min(STREAM_ROWS, STREAM_BYTES * num_rows // values_bytes)))


def _place(column: pa.ListArray, pos: np.ndarray, to: Placement) -> None:
    """Copy each row's list of `column` to its place (rows `pos` of `to`)."""
    src, lens = list_offsets(column)
    if not np.array_equal(lens, to.lens[pos]):
        raise requests_changed()
    if not lens.sum():
        return
    # as stored, or wider: never narrowed (which would change a value silently)
    values = column.values.to_numpy(zero_copy_only=False).astype(
        to.flat.dtype, casting="safe", copy=False
    )
    starts = to.starts[pos]
    ends = starts + lens
    if int(src[-1] - src[0]) == int(lens.sum()) and bool(np.all(starts[1:] == ends[:-1])):
        # one run, as stored and as placed: one copy
        to.flat[starts[0] : ends[-1]] = values[src[0] : src[-1]]
        return
    for a, b, s in zip(starts.tolist(), ends.tolist(), src[:-1].tolist(), strict=True):
        to.flat[a:b] = values[s : s + b - a]  # a row at a time: each a copy at memory speed


def list_offsets(column: pa.ListArray) -> tuple[np.ndarray, np.ndarray]:
    """A list column's offsets into its values, and each row's length (0 where null)."""
    offsets = column.offsets.to_numpy()
    valid = column.is_valid().to_numpy(zero_copy_only=False)
    return offsets, np.where(valid, np.diff(offsets), 0)


def requests_changed() -> StoreError:
    """What a reader raises when the lists it streams are not the rows it was told of."""
    return StoreError("requests changed while they were being read; run the command again")
