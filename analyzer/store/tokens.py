"""Token lists out of the store at memory speed: streamed in storage order into one flat
array per column, each row's values at its place in arrival order.

Sorting rows that hold lists (`ORDER BY arrival_seq`) makes DuckDB materialise every list
twice (its sorted copy, then Arrow's); streaming them unsorted and placing each batch by
its rows' arrival_seq holds them once. Rows stored in arrival order (the usual case) are a
single copy per batch.
"""

from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa

from analyzer.errors import StoreError

STREAM_ROWS = 8192


def flat_lists(
    con: duckdb.DuckDBPyConnection,
    sql: str,
    seqs: np.ndarray,
    lens: dict[str, np.ndarray],
    dtypes: dict[str, np.dtype],
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """(flat values, int64 offsets) per list column of `sql`, rows in the order of `seqs`.

    `sql` selects `arrival_seq` and the list columns named in `lens`, in any order; `seqs`
    holds each row's arrival_seq, ascending and unique; `lens[name][k]` is the length of
    row k's list (0 where it is null).

    Raises:
        StoreError: the rows streamed are not the rows `seqs` and `lens` describe (the
            requests changed between the two reads).
    """
    out = {}
    for name, length in lens.items():
        offsets = np.zeros(len(length) + 1, dtype=np.int64)
        np.cumsum(length, out=offsets[1:])
        out[name] = (np.empty(int(offsets[-1]), dtype=dtypes[name]), offsets)
    seen = 0
    for batch in con.sql(sql).to_arrow_reader(STREAM_ROWS):
        seq = batch.column("arrival_seq").to_numpy(zero_copy_only=False)
        pos = np.searchsorted(seqs, seq)
        if pos.size and (pos.max() >= len(seqs) or not np.array_equal(seqs[pos], seq)):
            raise _changed()
        for name, (flat, offsets) in out.items():
            _place(batch.column(name), pos, flat, offsets)
        seen += batch.num_rows
    if seen != len(seqs):
        raise _changed()
    return out


def _place(column: pa.ListArray, pos: np.ndarray, flat: np.ndarray, offsets: np.ndarray) -> None:
    """Copy each row's list of `column` to flat[offsets[pos] : offsets[pos + 1]]."""
    src = column.offsets.to_numpy()
    lens = np.where(column.is_valid().to_numpy(zero_copy_only=False), np.diff(src), 0)
    if not np.array_equal(lens, offsets[pos + 1] - offsets[pos]):
        raise _changed()
    if not lens.sum():
        return
    # as stored, or wider: never narrowed (which would change a value silently)
    values = column.values.to_numpy(zero_copy_only=False).astype(
        flat.dtype, casting="safe", copy=False
    )
    first, last = int(pos[0]), int(pos[-1])
    in_order = last - first + 1 == len(pos) and bool(np.all(np.diff(pos) == 1))
    if in_order and int(src[-1] - src[0]) == int(lens.sum()):  # one run, as stored
        flat[offsets[first] : offsets[last + 1]] = values[src[0] : src[-1]]
        return
    owner = np.repeat(np.arange(len(pos)), lens)
    local = np.arange(owner.size) - np.repeat(np.cumsum(lens) - lens, lens)
    flat[offsets[pos][owner] + local] = values[src[:-1][owner] + local]


def _changed() -> StoreError:
    return StoreError("requests changed while they were being read; run the command again")
