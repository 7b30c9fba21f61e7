"""Token lists out of the store at memory speed: each list column streamed as DuckDB's
`unnest` of it (every row's values one after another, in storage order), cut back into rows
by the lengths the caller expects, and placed at their rows' arrival order.

DuckDB streams a list column's values unnested at about twice the speed it turns the lists
themselves into Arrow (70 M token ids, one thread, cold: 0.56 s against 0.86-0.92 s), and
hands them over as a plain int column, without a copy. A row's own length is not read with
them (DuckDB would read every list for `len`): each column is checked in total, so a stream
that ends early or runs on is a changed table. Sorting rows that hold lists (`ORDER BY
arrival_seq`) would make DuckDB materialise every list twice; streaming them unsorted and
placing each row by its arrival_seq (`storage_order`) holds them once.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import duckdb
import numpy as np

from analyzer.errors import StoreError
from analyzer.store.db import load_sql
from analyzer.store.scan import scan_settings, under_each_cap

# As stored: token ids INTEGER[], block hash ids BIGINT[].
TOKEN_DTYPES = {
    "prompt_token_ids": np.dtype(np.int32),
    "block_hash_ids": np.dtype(np.int64),
    "output_token_ids": np.dtype(np.int32),
}
STREAM_BYTES = 16 << 20  # values a streamed batch holds, in bytes
# DuckDB's buffer limit while token ids are copied out into arrays (`place_lists`): each
# block is read once, and cached it would only sit beside its copy. One thread reads under
# it: each thread of a scan holds its own buffers, and two ran out of memory on WEKA's
# long rows, so the read went uncapped (+1.6 GiB; one thread: +1.0 GiB, 1.8 s not 3.0 s).
STREAM_MEMORY_CAP = "256MB"


@dataclass(frozen=True)
class Placement:
    """Where one list column's rows go: row k's values (arrival order) to
    flat[starts[k] : starts[k] + lens[k]]; `lens[k]` is 0 where the list is null. A row
    whose start is negative is read past, not placed (a few rows wanted of a scan)."""

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
    memory_caps: tuple[str, ...] = (),
) -> None:
    """Stream each list column named in `placements`, one after another, and copy its
    rows to their places.

    `sql` selects `arrival_seq` and those list columns, in any order; `seqs` holds each
    row's arrival_seq, ascending and unique (row k of every Placement is `seqs[k]`).
    `memory_caps` (DuckDB's units, '256MB'): stream under each buffer limit in turn
    (`store.scan.scan_settings`, one thread) until DuckDB does not run out of memory under
    one, then without a limit. DuckDB keeps the blocks it read cached, up to the limit.

    Raises:
        StoreError: the rows streamed are not the rows `seqs` and the placements describe
            (the requests changed between the reads).
    """

    def under(cap: str | None) -> None:
        if cap is None:  # rows too long for every cap: as DuckDB likes
            _stream(con, sql, seqs, placements)
            return
        with scan_settings(con, cap, threads=1):
            _stream(con, sql, seqs, placements)

    under_each_cap(under, (*memory_caps, None))


def _stream(con, sql: str, seqs: np.ndarray, placements: dict[str, Placement]) -> None:
    if not placements:
        return
    pos = positions(seqs, storage_order(con, sql))
    for name, to in placements.items():
        lens = to.lens[pos]
        batch = max(1, STREAM_BYTES // to.flat.itemsize)
        for first, stop, values in row_values(con, sql, name, lens, batch_values=batch):
            _place(values, pos[first:stop], lens[first:stop], to)


def _place(values: np.ndarray, pos: np.ndarray, lens: np.ndarray, to: Placement) -> None:
    """Copy rows `pos` of `to` (their values one after another in `values`) to their place,
    but those whose start is negative (read past)."""
    if not len(values):
        return
    # as stored, or wider: never narrowed (which would change a value silently)
    values = values.astype(to.flat.dtype, casting="safe", copy=False)
    starts = to.starts[pos]
    ends = starts + lens
    kept = starts >= 0
    if bool(kept.all() and np.all(starts[1:] == ends[:-1])):  # one run, as stored and placed
        to.flat[starts[0] : ends[-1]] = values
        return
    src = np.zeros(len(lens) + 1, dtype=np.int64)
    np.cumsum(lens, out=src[1:])
    firsts, lasts, froms = starts[kept].tolist(), ends[kept].tolist(), src[:-1][kept].tolist()
    for a, b, s in zip(firsts, lasts, froms, strict=True):
        to.flat[a:b] = values[s : s + b - a]  # a row at a time: each a copy at memory speed


def storage_order(con: duckdb.DuckDBPyConnection, sql: str) -> np.ndarray:
    """The arrival_seq of each row of `sql`, in the order DuckDB streams them (int64)."""
    query = load_sql("tokens_storage_order").format(rows=subquery(sql))
    return con.execute(query).fetchnumpy()["arrival_seq"].astype(np.int64, copy=False)


def positions(seqs: np.ndarray, order: np.ndarray) -> np.ndarray:
    """Where each row streamed in `order` (arrival_seqs) is in `seqs` (ascending, unique).

    Raises:
        StoreError: `order` is not `seqs` in some order (rows missing, repeated or new).
    """
    pos = np.searchsorted(seqs, order)
    if len(order) != len(seqs) or (
        len(pos)
        and (
            pos.max() >= len(seqs)
            or not np.array_equal(seqs[pos], order)
            or np.bincount(pos, minlength=len(seqs)).max() > 1
        )
    ):
        raise requests_changed()
    return pos


def row_values(
    con: duckdb.DuckDBPyConnection,
    sql: str,
    column: str,
    lens: np.ndarray,
    *,
    batch_values: int,
    max_rows: int | None = None,
) -> Iterator[tuple[int, int, np.ndarray]]:
    """(first, stop, values): rows first..stop-1 of `sql` (storage order) and their lists of
    `column`, one after another (row k's is `lens[k]` long: 0 where null), streamed once as
    DuckDB's unnest of the column, in batches of about `batch_values` values.

    A run of rows is a view of one Arrow batch (no copy); a row that a batch boundary cuts
    comes alone, copied; at most `max_rows` rows come at once.

    Raises:
        StoreError: the column holds fewer or more values than `lens` says.
    """
    ends = np.cumsum(lens, dtype=np.int64)
    total = int(ends[-1]) if len(ends) else 0
    query = load_sql("tokens_unnest").format(column=column, rows=subquery(sql))
    reader = con.sql(query).to_arrow_reader(batch_values)
    try:
        row = received = 0  # rows yielded; values received
        pieces: list[np.ndarray] = []  # row `row`'s first values, where a boundary cut it
        for batch in reader:
            values = batch.column(0).to_numpy(zero_copy_only=False)
            got = received + len(values)
            if got > total:
                raise requests_changed()
            at = 0  # values[:at] are yielded
            if pieces:
                at = min(int(ends[row]) - received, len(values))
                pieces.append(values[:at])
                if received + at == ends[row]:
                    yield row, row + 1, np.concatenate(pieces)
                    row, pieces = row + 1, []
            if not pieces:
                stop = int(np.searchsorted(ends, got, side="right"))
                if stop > row:
                    cut = int(ends[stop - 1]) - received
                    yield from _runs(row, stop, values[at:cut], ends, max_rows)
                    row, at = stop, cut
                if at < len(values):
                    pieces = [values[at:]]
            received = got
        if received != total:
            raise requests_changed()
        if row < len(lens):  # rows without values, after the last that has some
            empty = np.zeros(0, dtype=reader.schema.field(0).type.to_pandas_dtype())
            yield from _runs(row, len(lens), empty, ends, max_rows)
    finally:
        reader.close()


def _runs(first: int, stop: int, values: np.ndarray, ends: np.ndarray, max_rows: int | None):
    """Rows first..stop-1 and their `values`, at most `max_rows` rows at a time."""
    step = max_rows or max(1, stop - first)
    base = int(ends[first - 1]) if first else 0
    for a in range(first, stop, step):
        b = min(a + step, stop)
        lo = (int(ends[a - 1]) if a else 0) - base
        yield a, b, values[lo : int(ends[b - 1]) - base]


def column_values(
    con: duckdb.DuckDBPyConnection, sql: str, column: str, lens: np.ndarray
) -> np.ndarray:
    """Every row's list of `column` (storage order, `lens` long each), in one array."""
    runs = [v for _, _, v in row_values(con, sql, column, lens, batch_values=STREAM_BYTES // 4)]
    return np.concatenate(runs) if len(runs) > 1 else runs[0] if runs else np.zeros(0, np.int64)


def subquery(sql: str) -> str:
    """`sql` (one SELECT, maybe with a `;` and comments) as a subquery's body."""
    return "\n" + sql.strip().rstrip(";") + "\n"


def requests_changed() -> StoreError:
    """What a reader raises when the lists it streams are not the rows it was told of."""
    return StoreError("requests changed while they were being read; run the command again")
