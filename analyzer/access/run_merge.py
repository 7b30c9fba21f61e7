"""Streams of rows, each in arrival order (one a source file), merged into one stream in
arrival order: what `access.token_stream` reads when a trace's files interleave in time.

Each stream yields (seqs, flat, starts) batches: rows `seqs` (ascending within the stream)
whose inserted sequences are flat[starts[k] :][: insert_len[seqs[k]]]. Every row up to the
smallest arrival_seq the live streams have reached is known, so those rows go out, one
chunk in arrival order; then the stream that is furthest behind is read on. What waits is
at most a batch a stream, where one stream read in storage order would keep every row that
came before its turn (a trace of 4 interleaved files: 3/4 of its ids at the peak).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from analyzer.store.tokens import requests_changed

Batch = tuple[np.ndarray, np.ndarray, np.ndarray]


def merged(
    streams: list[Iterator[Batch]], insert_len: np.ndarray
) -> Iterator[tuple[int, int, np.ndarray, np.ndarray]]:
    """(first, stop, flat, starts): requests first..stop-1 in arrival order, out of
    `streams` (see the module). Raises StoreError (requests changed) where the streams'
    rows are not 0..n-1 once each, or a stream's are not ascending."""
    n = len(insert_len)
    pending: list[list[Batch]] = [[] for _ in streams]
    last = [-1] * len(streams)  # the last arrival_seq each stream gave
    live = set(range(len(streams)))
    done = 0

    def pull(k: int) -> None:
        batch = next(streams[k], None)
        if batch is None:
            live.discard(k)
        elif len(batch[0]):
            seqs = batch[0]
            if seqs[0] <= last[k] or np.any(np.diff(seqs) <= 0):
                raise requests_changed()
            pending[k].append(batch)
            last[k] = int(seqs[-1])

    for k in range(len(streams)):
        pull(k)
    while live or any(pending):
        bound = min((last[k] for k in live), default=n - 1)
        picked = [piece for batches in pending for piece in _taken(batches, bound)]
        if picked:
            flat, offsets, stop = _in_arrival_order(picked, insert_len, done)
            yield done, stop, flat, offsets[:-1]
            done = stop
        if live:
            pull(min(live, key=last.__getitem__))
    if done != n:
        raise requests_changed()


def _taken(batches: list[Batch], bound: int) -> list[Batch]:
    """The rows of `batches` (one stream's, in order) up to arrival_seq `bound`, taken out."""
    out = []
    while batches:
        seqs, flat, starts = batches[0]
        cut = int(np.searchsorted(seqs, bound, side="right"))
        if cut:
            out.append((seqs[:cut], flat, starts[:cut]))
        if cut < len(seqs):
            batches[0] = (seqs[cut:], flat, starts[cut:])
            break
        batches.pop(0)
    return out


def _in_arrival_order(picked: list[Batch], insert_len: np.ndarray, done: int):
    """(flat, offsets, stop): the picked rows' sequences one after another in arrival
    order, which must be done..stop-1. A row at a time: a copy of its slice each (index
    arrays over every value would take 16 bytes a value)."""
    seqs = np.concatenate([s for s, _, _ in picked])
    stop = done + len(seqs)
    rank = np.argsort(seqs, kind="stable")
    if stop > len(insert_len) or not np.array_equal(seqs[rank], np.arange(done, stop)):
        raise requests_changed()
    lens = insert_len[done:stop]
    offsets = np.zeros(len(seqs) + 1, dtype=np.int64)
    np.cumsum(lens, out=offsets[1:])
    owners = [flat for _, flat, starts in picked for _ in range(len(starts))]
    owners = [owners[r] for r in rank.tolist()]
    froms = np.concatenate([starts for _, _, starts in picked])[rank].tolist()
    flat = np.empty(int(offsets[-1]), dtype=np.result_type(*(f for _, f, _ in picked)))
    bounds = zip(owners, froms, offsets[:-1].tolist(), offsets[1:].tolist(), strict=True)
    for values, at, a, b in bounds:
        flat[a:b] = values[at : at + b - a]
    return flat, offsets, stop
