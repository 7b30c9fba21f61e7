"""access.run_merge: streams each in arrival order, merged into one in arrival order."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analyzer.access.run_merge import merged
from analyzer.errors import StoreError


def _row(seq: int, n: int) -> np.ndarray:
    return np.arange(n, dtype=np.int32) + 1000 * seq


def _stream(seqs: list[int], lens: np.ndarray, cuts: list[int]):
    """(seqs, flat, starts) batches of rows `seqs`, cut after the given row counts, each
    batch's rows laid out in a flat array with a gap before each (as a joined batch may)."""
    bounds = sorted({c for c in cuts if 0 < c < len(seqs)} | {0, len(seqs)})
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        rows = seqs[a:b]
        pieces, starts, at = [], [], 0
        for s in rows:
            pieces += [np.full(1, -1, np.int32), _row(s, int(lens[s]))]
            starts.append(at + 1)
            at += 1 + int(lens[s])
        yield np.asarray(rows, np.int64), np.concatenate(pieces), np.asarray(starts, np.int64)


@settings(max_examples=200, deadline=None)
@given(
    n=st.integers(0, 30),
    k=st.integers(1, 4),
    data=st.data(),
)
def test_the_merge_is_every_row_once_in_arrival_order(n, k, data):
    owner = data.draw(st.lists(st.integers(0, k - 1), min_size=n, max_size=n))
    lens = np.asarray(data.draw(st.lists(st.integers(0, 4), min_size=n, max_size=n)), np.int64)
    streams = []
    for j in range(k):
        seqs = [s for s in range(n) if owner[s] == j]
        cuts = data.draw(st.lists(st.integers(0, n), max_size=4))
        streams.append(_stream(seqs, lens, cuts))
    done, got = 0, []
    for first, stop, flat, starts in merged(streams, lens):
        assert first == done and stop > first
        rows = zip(range(first, stop), starts, strict=True)
        got += [flat[a : a + lens[s]].tolist() for s, a in rows]
        done = stop
    assert done == n
    assert got == [_row(s, int(lens[s])).tolist() for s in range(n)]


@pytest.mark.parametrize(
    "streams",
    [
        [[0, 2], [1]],  # row 3 never comes
        [[0, 1, 2, 3], [1]],  # row 1 twice
        [[0, 2, 1, 3]],  # a stream out of arrival order
        [[0, 1, 2, 3, 4]],  # a row more than there are
    ],
)
def test_streams_that_are_not_the_rows_are_a_store_error(streams):
    lens = np.ones(4, np.int64)
    with pytest.raises(StoreError, match="requests changed while they were being read"):
        list(merged([_stream(s, np.ones(5, np.int64), []) for s in streams], lens))
