"""store.tokens: lists streamed unnested in storage order, cut back into rows, land at
their rows' arrival order."""

import duckdb
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analyzer.errors import StoreError
from analyzer.store import tokens
from analyzer.store.tokens import flat_lists

SQL = "SELECT arrival_seq, ids FROM t"
ROWS = [  # (arrival_seq, ids): stored out of arrival order, with nulls and empty lists
    (3, [7, 8]),
    (0, [1, 2, 3]),
    (2, None),
    (1, []),
    (4, [9]),
]


def _table(rows):
    con = duckdb.connect()
    con.execute("CREATE TABLE t (arrival_seq BIGINT, ids INTEGER[])")
    con.executemany("INSERT INTO t VALUES (?, ?)", rows)
    return con


def _expected(rows):
    by_seq = dict(rows)
    return [by_seq[s] or [] for s in sorted(by_seq)]


@pytest.mark.parametrize("batch_bytes", [4, 8, 12, 1 << 20])
@pytest.mark.parametrize("rows", [ROWS, sorted(ROWS)], ids=["shuffled", "in order"])
def test_rows_land_in_arrival_order(monkeypatch, batch_bytes, rows):
    monkeypatch.setattr(tokens, "STREAM_BYTES", batch_bytes)
    con = _table(rows)
    want = _expected(rows)
    lens = {"ids": np.asarray([len(v) for v in want], dtype=np.int64)}
    flat, offsets = flat_lists(con, SQL, np.arange(5), lens, {"ids": np.dtype(np.int32)})["ids"]
    assert flat.dtype == np.int32
    assert [flat[a:b].tolist() for a, b in zip(offsets[:-1], offsets[1:], strict=True)] == want


def test_a_subset_of_arrival_seqs():
    con = _table([(10, [1]), (30, [3, 3]), (20, [2, 2, 2])])
    lens = {"ids": np.asarray([1, 3, 2])}
    flat, offsets = flat_lists(con, SQL, np.asarray([10, 20, 30]), lens, {"ids": np.int64})["ids"]
    assert flat.tolist() == [1, 2, 2, 2, 3, 3] and offsets.tolist() == [0, 1, 4, 6]


@pytest.mark.parametrize("batch_bytes", [4, 8, 1 << 20])
@pytest.mark.parametrize("wanted", [[], [0], [0, 4], [1, 2, 3], [0, 1, 2, 3, 4]])
def test_rows_with_a_negative_start_are_read_past(monkeypatch, batch_bytes, wanted):
    """A few rows of a scan placed (held junction owners): the others stream by unplaced."""
    monkeypatch.setattr(tokens, "STREAM_BYTES", batch_bytes)
    want = _expected(ROWS)
    lens = np.asarray([len(v) for v in want], dtype=np.int64)
    starts = np.full(5, -1, dtype=np.int64)
    starts[wanted] = np.concatenate([[0], np.cumsum(lens[wanted])[:-1]]) if wanted else []
    flat = np.full(int(lens[wanted].sum()), -7, dtype=np.int32)
    placements = {"ids": tokens.Placement(flat, starts, lens)}
    tokens.place_lists(_table(ROWS), SQL, np.arange(5), placements)
    assert flat.tolist() == [v for k in wanted for v in want[k]]


@pytest.mark.parametrize(
    "seqs, lens",
    [
        ([0, 1, 2, 3, 4], [3, 0, 0, 2, 2]),  # a length that is not the stored one
        ([0, 1, 2, 3], [3, 0, 0, 2]),  # a row more than described
        ([0, 1, 2, 3, 5], [3, 0, 0, 2, 1]),  # an arrival_seq not described
        ([0, 1, 2, 3, 4, 5], [3, 0, 0, 2, 1, 1]),  # a row described but not stored
    ],
)
def test_rows_that_changed_are_a_store_error(seqs, lens):
    con = _table(ROWS)
    with pytest.raises(StoreError, match="requests changed while they were being read"):
        flat_lists(con, SQL, np.asarray(seqs), {"ids": np.asarray(lens)}, {"ids": np.int32})


@settings(max_examples=60, deadline=None)
@given(
    lens=st.lists(st.integers(0, 6), max_size=12),
    batch_values=st.integers(1, 9),
    max_rows=st.none() | st.integers(1, 4),
)
def test_row_values_cut_the_stream_back_into_rows(lens, batch_values, max_rows):
    rows = [[100 * k + j for j in range(n)] if n or k % 2 else None for k, n in enumerate(lens)]
    con = duckdb.connect()
    con.execute("CREATE TABLE t (arrival_seq BIGINT, ids INTEGER[])")
    if rows:
        con.executemany("INSERT INTO t VALUES (?, ?)", list(enumerate(rows)))
    runs = list(
        tokens.row_values(
            con,
            SQL,
            "ids",
            np.asarray(lens, np.int64),
            batch_values=batch_values,
            max_rows=max_rows,
        )
    )
    bounds = [a for a, _, _ in runs] + [b for _, b, _ in runs[-1:]]
    assert bounds == ([0] + [b for _, b, _ in runs] if runs else [])
    assert (runs[-1][1] if runs else 0) == len(lens)
    for first, stop, values in runs:
        assert values.dtype == np.int32
        assert values.tolist() == [v for r in rows[first:stop] for v in r or []]
        assert max_rows is None or stop - first <= max_rows


@pytest.mark.parametrize("lens", [[3, 0, 0, 2, 0], [3, 0, 0, 2, 2], [3, 0, 0, 2]])
def test_a_column_longer_or_shorter_than_its_lengths_is_a_store_error(lens):
    con = _table(sorted(ROWS))  # 6 values: 3, 0, 0, 2, 1
    with pytest.raises(StoreError, match="requests changed while they were being read"):
        list(tokens.row_values(con, SQL, "ids", np.asarray(lens), batch_values=2))


def test_a_semicolon_and_comments_in_the_sql_are_kept_out_of_the_subquery():
    con = _table(ROWS)
    sql = "-- the rows\nSELECT arrival_seq, ids -- and their ids\nFROM t;\n"
    assert tokens.storage_order(con, sql).tolist() == [3, 0, 2, 1, 4]


@pytest.mark.parametrize(
    "failures, want_limits",
    [(0, ["61.0 MiB"]), (1, ["61.0 MiB", "122.0 MiB"]), (2, ["61.0 MiB", "122.0 MiB", None])],
)
def test_each_cap_is_tried_in_turn_then_none(monkeypatch, failures, want_limits):
    """DuckDB running out of memory under a cap: the next cap, then none at all."""
    con = _table(ROWS)
    limit = "SELECT current_setting('memory_limit')"
    uncapped, limits = con.execute(limit).fetchall()[0][0], []
    stream = tokens._stream

    def out_of_memory_at_first(con, sql, seqs, placements):  # DuckDB needing more than a cap
        limits.append(con.execute(limit).fetchall()[0][0])
        if len(limits) <= failures:
            raise duckdb.OutOfMemoryException("Out of Memory Error: failed to allocate")
        stream(con, sql, seqs, placements)

    monkeypatch.setattr(tokens, "_stream", out_of_memory_at_first)
    want = _expected(ROWS)
    lens = np.asarray([len(v) for v in want], dtype=np.int64)
    flat = np.empty(int(lens.sum()), dtype=np.int32)
    starts = np.concatenate([[0], np.cumsum(lens)[:-1]])
    placements = {"ids": tokens.Placement(flat, starts, lens)}
    tokens.place_lists(con, SQL, np.arange(5), placements, memory_caps=("64MB", "128MB"))
    assert limits == [uncapped if w is None else w for w in want_limits]
    assert con.execute(limit).fetchall()[0][0] == uncapped  # the connection as it was
    assert [flat[a : a + n].tolist() for a, n in zip(starts, lens, strict=True)] == want


def test_other_errors_under_the_cap_are_not_retried(monkeypatch):
    def broken(*args):
        raise OSError("disk on fire")

    monkeypatch.setattr(tokens, "_stream", broken)
    with pytest.raises(OSError, match="disk on fire"):
        tokens.place_lists(_table(ROWS), SQL, np.arange(5), {}, memory_caps=("64MB",))
