"""access.token_stream: a batch's inserted sequences, however its columns arrive, are the
plain joins of `access.arrays.joined` (prompt then output but the last `drop_last`, or
hash ids alone)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analyzer.access.arrays import joined
from analyzer.access.token_stream import (
    COLUMNS,
    VECTOR_ROWS,
    ExpectedLists,
    _joined,
    early_units,
    merged_cap,
    stream_caps,
    vector_bytes,
)

ROW = st.tuples(
    st.integers(0, 5),  # prompt tokens
    st.integers(0, 3),  # hash ids
    st.integers(0, 4),  # output tokens
    st.booleans(),  # hashed
)


def _columns(rows, lens: dict) -> dict:
    """name -> (values, offsets) of `rows`' lists, with values before and after them (as a
    run cut out of a longer stream)."""
    out = {}
    for c, name in enumerate(COLUMNS):
        pieces = [np.full(3, -1, np.int64)]
        pieces += [
            np.arange(n, dtype=np.int64) + 1000 * k + 100 * c for k, n in enumerate(lens[name])
        ]
        offsets = 3 + np.concatenate([[0], np.cumsum(lens[name])])
        out[name] = (np.concatenate([*pieces, np.full(2, -1, np.int64)]), offsets)
    return out


@settings(max_examples=150, deadline=None)
@given(rows=st.lists(ROW, min_size=1, max_size=8), drop_last=st.integers(0, 1))
def test_a_batch_is_its_rows_joined(rows, drop_last):
    prompt, hashes, output, hashed = (np.asarray(v) for v in zip(*rows, strict=True))
    hashes = np.where(hashed, hashes, 0)
    lists = ExpectedLists(prompt, hashes, output, hashed, drop_last, np.dtype(np.int64))
    lens = lists.by_column()
    columns = _columns(rows, lens)
    seq = np.arange(len(rows))
    got_seq, flat, starts = _joined(seq, columns, lists)

    def row(name, k):
        values, offsets = columns[name]
        return values[offsets[k] : offsets[k + 1]]

    firsts = [row("block_hash_ids" if h else "prompt_token_ids", k) for k, h in enumerate(hashed)]
    seconds = [None if h else row("output_token_ids", k) for k, h in enumerate(hashed)]
    want, want_offsets = joined(firsts, seconds, drop_last=drop_last)
    assert got_seq.tolist() == seq.tolist()
    assert flat.dtype == np.int64
    ends = starts + lists.insert_len
    assert [flat[a:b].tolist() for a, b in zip(starts, ends, strict=True)] == [
        want[a:b].tolist() for a, b in zip(want_offsets[:-1], want_offsets[1:], strict=True)
    ]


@settings(max_examples=150, deadline=None)
@given(st.permutations(range(9)), st.lists(st.integers(0, 5), min_size=9, max_size=9))
def test_early_units_are_what_the_stream_keeps_before_their_turn(order, units):
    """Against the stream played row by row: a row is kept until every earlier one came."""
    order, units = np.asarray(order), np.asarray(units)
    kept, done, most = {}, 0, 0
    for seq in order.tolist():
        kept[seq] = units[seq]
        while done in kept:
            del kept[done]
            done += 1
        most = max(most, sum(kept.values()))
    assert early_units(order, units) == most
    assert early_units(np.arange(9), units) == 0  # stored in arrival order: none early


def test_no_rows_none_early():
    assert early_units(np.zeros(0, np.int64), np.zeros(0, np.int64)) == 0


MIB = 1 << 20


@pytest.mark.parametrize(
    ("cap", "k", "vector", "want"),
    [
        ("48MB", 1, 11 * MIB, "48MB"),  # one stream: the single stream's cap
        ("48MB", 4, 11 * MIB, "60MB"),  # 4 x (11 + 2) + 8
        ("48MB", 4, 11 * MIB + 1, "61MB"),  # a byte over rounds up
        ("48MB", 16, 11 * MIB, "216MB"),
        ("256MB", 16, 11 * MIB, "256MB"),  # the fallback cap is more
        (None, 16, 11 * MIB, None),  # no limit stays none
    ],
)
def test_merged_streams_get_a_vector_each(cap, k, vector, want):
    assert merged_cap(cap, k, vector) == want


@given(st.lists(st.integers(0, 50), min_size=1, max_size=3 * VECTOR_ROWS))
@settings(max_examples=25, deadline=None)
def test_vector_bytes_is_the_fullest_run_of_vector_rows(lens):
    lens = np.asarray(lens, np.int64)
    rows = min(VECTOR_ROWS, len(lens))
    want = max(int(lens[i : i + rows].sum()) for i in range(0, len(lens) - rows + 1))
    assert vector_bytes(lens, 4) == 4 * want


@pytest.mark.parametrize(
    "rows, prompt_tokens, hash_ids, caps",
    [
        (2048, 3190, 0, ("100MB", "256MB", None)),  # 4 x 26.1 MB vectors: 48 MB ran out
        (8000, 1000, 0, ("48MB", "256MB", None)),  # 4 x 8.2 MB: the first cap holds them
        (100, 3190, 0, ("48MB", "256MB", None)),  # fewer rows than a vector: 1.3 MB
        (2048, 9000, 0, ("282MB", None)),  # past the second cap: it is left out
        (2048, 0, 1600, ("100MB", "256MB", None)),  # int64 hash ids: 8 bytes each
    ],
)
def test_the_first_stream_cap_holds_four_vectors_of_the_widest_rows(
    rows, prompt_tokens, hash_ids, caps
):
    """A stream that ran out of memory under its first cap starts again under the next: the
    first is raised to what a scan of the trace's widest 2,048 rows holds, not the cache of
    a cap far above it."""
    lens = np.full(rows, prompt_tokens, dtype=np.int64)
    none = np.zeros(rows, dtype=np.int64)
    hashed = np.full(rows, bool(hash_ids))
    lists = ExpectedLists(
        lens, none + hash_ids, none, hashed, 0, np.dtype(np.int64 if hash_ids else np.int32)
    )
    assert stream_caps(lists) == caps
