"""Where the matcher's sequences come from: per-request metadata, chunks in arrival order,
and random access to earlier sequences (for verification) through a bounded archive.

A request's *inserted sequence* is what it leaves in the cache: its prompt followed by its
output tokens when the trace has them (token traces), or its prompt's block hash ids
(hash-id traces, one unit per block). Its *query* is the first `query_len` units of it.
Host-side only: everything here is NumPy; the matcher moves arrays to its `xp`.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import pyarrow as pa

_I32 = np.iinfo(np.int32)


@dataclass(frozen=True)
class RequestMeta:
    """Per-request arrays, indexed by arrival_seq (0..n-1). Namespace ids are dense ints;
    `ns_conversation` is -1 for requests without a conversation. `block_size` is 0 for
    token traces; lengths are in units (tokens, or blocks for hash-id traces).
    `namespaces[i]` describes `any` namespace i: (is_hash, block_size, cache_salt, lora)."""

    ns_any: np.ndarray
    ns_replica: np.ndarray
    ns_conversation: np.ndarray
    query_len: np.ndarray
    insert_len: np.ndarray
    block_size: np.ndarray
    prompt_tokens: np.ndarray
    namespaces: tuple[tuple, ...] = ()

    @property
    def n(self) -> int:
        return int(self.ns_any.shape[0])


@dataclass(frozen=True)
class Chunk:
    """Inserted sequences of requests start..stop-1: raw values (int32 or int64) + offsets."""

    start: int
    stop: int
    flat: np.ndarray
    offsets: np.ndarray


class SequenceSource(Protocol):
    meta: RequestMeta

    def read(self, start: int, stop: int) -> Chunk:
        """Inserted sequences of requests start..stop-1, in arrival order."""

    def fetch(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(flat, offsets) of the inserted sequences of sorted, unique request ids."""


def narrow(flat: np.ndarray) -> np.ndarray:
    """int32 when every value fits (token ids always do), else int64: halves the archive."""
    if flat.dtype == np.int32:
        return flat
    if flat.size == 0 or (int(flat.min()) >= _I32.min and int(flat.max()) <= _I32.max):
        return flat.astype(np.int32)
    return flat.astype(np.int64, copy=False)


def lists_to_flat(column: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(flat int64 values, int64 offsets) of an Arrow list column, without Python loops."""
    if isinstance(column, pa.ChunkedArray):
        empty = pa.array([], pa.list_(pa.int64()))
        column = column.combine_chunks() if column.num_chunks else empty
    import pyarrow.compute as pc  # 50 ms of import that `hpa match` and replays never use

    lens = pc.fill_null(pc.list_value_length(column), 0).to_numpy(zero_copy_only=False)
    flat = column.flatten().to_numpy(zero_copy_only=False)
    offsets = np.zeros(len(lens) + 1, dtype=np.int64)
    np.cumsum(lens, out=offsets[1:])
    return flat.astype(np.int64, copy=False), offsets


def take_sequences(
    flat: np.ndarray, offsets: np.ndarray, rows: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Sub-select rows (indices into offsets) of a flat/offsets pair, vectorised."""
    return gather(flat, offsets[rows], offsets[rows + 1] - offsets[rows])


def gather(flat: np.ndarray, starts: np.ndarray, lens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(flat, offsets) of the slices flat[starts[k] : starts[k] + lens[k]], one after
    another, vectorised."""
    out_offsets = np.zeros(len(starts) + 1, dtype=np.int64)
    np.cumsum(lens, out=out_offsets[1:])
    if len(starts) and np.array_equal(starts[1:], starts[0] + out_offsets[1:-1]):
        # back to back already (a source rebuilt in the order asked): one copy, no index
        return flat[starts[0] : starts[0] + out_offsets[-1]].copy(), out_offsets
    seg = np.repeat(np.arange(len(starts)), lens)
    local = np.arange(out_offsets[-1]) - out_offsets[:-1][seg]
    return flat[starts[seg] + local], out_offsets


class Archive:
    """Recent chunks kept in memory (up to `budget_tokens` units), older ones re-read.

    `fetch` returns uint64 values, the representation the prefix hash uses. A source that
    holds every sequence in memory already (`holds_all`) is read directly: no chunk is
    kept twice, and a fetch is one gather instead of one per chunk and a reorder.
    """

    def __init__(self, source: SequenceSource, budget_tokens: int) -> None:
        self.source = source
        self.budget_tokens = budget_tokens
        self._chunks: OrderedDict[int, Chunk] = OrderedDict()
        self._held = 0
        self.num_reread = 0
        self._direct = getattr(source, "holds_all", False)

    def add(self, chunk: Chunk) -> None:
        if self._direct:
            return
        chunk = Chunk(chunk.start, chunk.stop, narrow(chunk.flat), chunk.offsets)
        self._chunks[chunk.start] = chunk
        self._held += chunk.flat.size
        while self._held > self.budget_tokens and len(self._chunks) > 1:
            _, old = self._chunks.popitem(last=False)
            self._held -= old.flat.size

    def fetch(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        ids = np.asarray(ids, dtype=np.int64)
        if self._direct:
            flat, offsets = self.source.fetch(ids)
            return flat.astype(np.int64, copy=False).view(np.uint64), offsets
        parts_flat, parts_lens, order = [], [], []
        missing = np.ones(len(ids), dtype=bool)
        for chunk in self._chunks.values():
            inside = np.flatnonzero((ids >= chunk.start) & (ids < chunk.stop) & missing)
            if inside.size:
                flat, offs = take_sequences(chunk.flat, chunk.offsets, ids[inside] - chunk.start)
                parts_flat.append(flat.astype(np.int64))
                parts_lens.append(np.diff(offs))
                order.append(inside)
                missing[inside] = False
        if missing.any():
            rest = np.flatnonzero(missing)
            self.num_reread += rest.size
            flat, offs = self.source.fetch(ids[rest])
            parts_flat.append(flat.astype(np.int64))
            parts_lens.append(np.diff(offs))
            order.append(rest)
        return _reorder(parts_flat, parts_lens, order, len(ids))


def _reorder(parts_flat, parts_lens, order, n) -> tuple[np.ndarray, np.ndarray]:
    if not parts_flat:
        return np.zeros(0, dtype=np.uint64), np.zeros(n + 1, dtype=np.int64)
    flat = np.concatenate(parts_flat)
    lens = np.concatenate(parts_lens)
    where = np.concatenate(order)
    inner = np.zeros(len(lens) + 1, dtype=np.int64)
    np.cumsum(lens, out=inner[1:])
    rank = np.empty(n, dtype=np.int64)
    rank[where] = np.arange(n)
    out_flat, out_offsets = take_sequences(flat, inner, rank)
    return out_flat.view(np.uint64), out_offsets


class PartitionSource:
    """A partition's inserted sequences, held once and narrow (int32 token ids): the
    matcher's `SequenceSource` in a worker (and the replay's L1/L2), so its archive need
    not keep a second copy.

    Sequence i is flat[starts[i] : starts[i] + meta.insert_len[i]]: one after another
    (`starts` = offsets[:-1]), or anywhere in `flat` (`gapped`: the replay's rows, each
    a prompt and its output side by side)."""

    holds_all = True  # the archive reads it directly

    def __init__(
        self, meta: RequestMeta, flat: np.ndarray, offsets: np.ndarray | None, starts=None
    ) -> None:
        self.meta, self.flat, self.offsets = meta, narrow(flat), offsets
        self.starts = offsets[:-1] if starts is None else starts

    @classmethod
    def gapped(cls, meta: RequestMeta, flat: np.ndarray, starts: np.ndarray) -> PartitionSource:
        return cls(meta, flat, None, starts)

    def read(self, start: int, stop: int) -> Chunk:
        if self.offsets is None:
            flat, offsets = self._gather(np.arange(start, stop))
            return Chunk(start, stop, flat, offsets)
        a, b = int(self.offsets[start]), int(self.offsets[stop])
        return Chunk(start, stop, self.flat[a:b], self.offsets[start : stop + 1] - a)

    def fetch(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        ids = np.asarray(ids, dtype=np.int64)
        if self.offsets is None:
            return self._gather(ids)
        return take_sequences(self.flat, self.offsets, ids)

    def _gather(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return gather(self.flat, self.starts[ids], self.meta.insert_len[ids])
