"""The trace a replay driver holds, behind one interface with two implementations:

- `LoadedTrace`: every column and every request's token ids in memory (the store's
  `requests`, or a dataset read whole by a worker or a local run);
- `DatasetTrace`: a Parquet dataset's scalar columns only; workers read the token ids of
  their own rows (`partition`), and the L1/L2 matcher reads each shard's rows itself.

Both give `n`, `columns` (name -> list, arrival order), `prompts` (token ids, or block hash
ids for hash-id requests), `shared_units(ns_any, ns_replica, spec)` (the replay's L1/L2 in
match units, see `analyzer.access.shared_prefixes`), `replay_bins(sizes, spec)` (how the
replay's partitions are grouped into tasks) and `partition(indices)` (a LoadedTrace of those
rows and their local indices). `for_workers()` is what a worker that needs the whole trace
is shipped (the trace itself, or a `DatasetRef` it reads); its `whole()` is the LoadedTrace.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

import duckdb
import numpy as np

from analyzer.access.arrays import joined, pack_arrays, unpack_arrays
from analyzer.access.sharded import dataset_shared_units, shared_units
from analyzer.errors import StoreError
from analyzer.executors import ExecutorSpec
from analyzer.prefixes.engine import MatchOptions, run_matcher
from analyzer.prefixes.source import (
    PartitionSource,
    RequestMeta,
    gather,
    lists_to_flat,
    narrow,
)
from analyzer.sim.records import SimRequest
from analyzer.store.dataset import open_dataset, read_rows, register_requests
from analyzer.store.db import (
    load_sql,
    query_arrow,
    require_tables,
    with_list_lengths,
)
from analyzer.store.scan import scan_settings
from analyzer.store.sequences import check_requests
from analyzer.store.tokens import (
    STREAM_MEMORY_CAP,
    TOKEN_DTYPES,
    Placement,
    flat_lists,
    place_lists,
)

TOKEN_COLUMNS = ("prompt_token_ids", "block_hash_ids", "output_token_ids")


# Units the replay's L1/L2 pass hashes at once: its transient memory (about 40 B a unit), as
# `hpa match`'s default; the answers never depend on it. Smaller chunks cost time on large
# traces (70 M tokens: 4.5 s at 1 M units a chunk, 3.2 s at 4 M, 3.5 s at 16 M).
REPLAY_CHUNK_UNITS = 1 << 22


@dataclass
class LoadedTrace:
    """The requests as columns (arrival order) plus per-request token arrays."""

    columns: dict[str, list]
    prompts: list[np.ndarray]  # token ids, or block hash ids for hash-id requests
    outputs: list[np.ndarray | None]
    # (flat, starts, lens) of the inserted sequences when the prompts are views of them:
    # request i's is flat[starts[i] : starts[i] + lens[i]] (as `read_trace` lays them out:
    # the token ids held once); not shipped to workers.
    held: tuple[np.ndarray, np.ndarray, np.ndarray] | None = field(default=None, repr=False)

    @property
    def n(self) -> int:
        return len(self.prompts)

    def __getstate__(self) -> dict:  # for workers: a few flat buffers, not an object a row
        return {
            "columns": self.columns,
            "prompts": pack_arrays(self.prompts),
            "outputs": pack_arrays(self.outputs),
        }

    def __setstate__(self, state: dict) -> None:
        self.columns = state["columns"]
        self.prompts = unpack_arrays(state["prompts"])
        self.outputs = unpack_arrays(state["outputs"])
        self.held = None

    def sim_request(self, i: int, namespace: tuple) -> SimRequest:
        """Request `i` as the replay reads it, in cache namespace `namespace`."""
        c = self.columns
        if c["block_size"][i] is not None:
            return SimRequest(
                request_id=c["request_id"][i],
                block_hash_ids=self.prompts[i],
                trace_block_size=c["block_size"][i],
                prompt_tokens=c["prompt_tokens"][i],
                output_tokens=c["output_tokens"][i] or 0,
                namespace=namespace,
                timestamp_s=c["timestamp_s"][i],
            )
        return SimRequest(
            request_id=c["request_id"][i],
            prompt_token_ids=self.prompts[i],
            output_token_ids=self.outputs[i],
            output_tokens=c["output_tokens"][i] or 0,
            namespace=namespace,
            timestamp_s=c["timestamp_s"][i],
        )

    reads_in_worker = False  # shipped whole: a worker has every row already

    @property
    def token_ids_only(self) -> bool:
        """Every request is token ids (none is block hash ids)."""
        return all(b is None for b in self.columns["block_size"])

    def partition(self, indices: list[int]) -> tuple[LoadedTrace, list[int]]:
        return self, indices

    def take(self, indices: list[int]) -> LoadedTrace:
        """A trace of the rows `indices` only (in that order; arrival order when sorted)."""
        return LoadedTrace(
            {name: [values[i] for i in indices] for name, values in self.columns.items()},
            [self.prompts[i] for i in indices],
            [self.outputs[i] for i in indices],
        )

    def for_workers(self) -> LoadedTrace:
        """What a worker that searches the whole trace is shipped: the trace itself."""
        return self

    def whole(self) -> LoadedTrace:
        return self

    def replay_bins(self, sizes: list[int], spec: ExecutorSpec) -> list[list[int]]:
        """One task per partition: the rows are in memory already."""
        return [[k] for k in range(len(sizes))]

    def shared_units(self, ns_any: np.ndarray, ns_replica: np.ndarray, spec: ExecutorSpec):
        """L1/L2 in units (MatchArrays): one pass here, or sharded on `spec`."""
        if spec.is_local:
            options = MatchOptions(chunk_tokens=REPLAY_CHUNK_UNITS)
            return run_matcher(self._held_source(ns_any, ns_replica), xp=np, options=options)
        meta, flat, offsets = self.inserted(ns_any, ns_replica)
        return shared_units(meta, flat, offsets, spec)  # identical answers

    def inserted(self, ns_any: np.ndarray, ns_replica: np.ndarray):
        """(meta, flat, offsets) of the sequences whose KV each request leaves behind: its
        prompt and its output but the last token, which is sampled and never fed back.
        `flat` is int32 when every value fits (token ids do): half the memory of int64."""
        if self.held is not None:
            flat, offsets = gather(*self.held)
        else:
            flat, offsets = inserted_sequences(self.prompts, self.outputs, self.columns)
        return self._meta(ns_any, ns_replica, np.diff(offsets)), narrow(flat), offsets

    def _held_source(self, ns_any: np.ndarray, ns_replica: np.ndarray) -> PartitionSource:
        """The inserted sequences where they are held (`held`), else as `inserted`."""
        if self.held is None:
            return PartitionSource(*self.inserted(ns_any, ns_replica))
        flat, starts, lens = self.held
        return PartitionSource.gapped(self._meta(ns_any, ns_replica, lens), flat, starts)

    def _meta(self, ns_any, ns_replica, insert_len: np.ndarray) -> RequestMeta:
        lens_q = np.asarray([len(p) for p in self.prompts], dtype=np.int64)
        return replay_meta(self.columns, ns_any, ns_replica, lens_q, insert_len)


def inserted_sequences(prompts: list, outputs: list, columns: dict):
    """(flat, offsets) of each request's inserted sequence (see `LoadedTrace.inserted`);
    hash-id requests insert their block hash ids alone."""
    tails = [
        None if b is not None else o for b, o in zip(columns["block_size"], outputs, strict=True)
    ]
    flat, offsets = joined(prompts, tails, drop_last=1)
    return narrow(flat), offsets


def replay_meta(columns: dict, ns_any, ns_replica, query_len, insert_len) -> RequestMeta:
    """The L1/L2 matcher's view of the replay's requests: the two namespaces (any, and
    within each cache), no conversations, lengths in units."""
    n = len(columns["request_id"])
    return RequestMeta(
        ns_any=ns_any,
        ns_replica=ns_replica,
        ns_conversation=np.full(n, -1, dtype=np.int64),
        query_len=query_len,
        insert_len=insert_len,
        block_size=np.asarray([b or 0 for b in columns["block_size"]], dtype=np.int64),
        prompt_tokens=np.asarray(columns["prompt_tokens"], dtype=np.int64),
    )


def load_trace(con: duckdb.DuckDBPyConnection) -> LoadedTrace:
    """The stored requests of an open connection, loaded once (for sweeps over policies)."""
    require_tables(con, "requests")
    trace = read_trace(con)
    if trace.n == 0:
        raise StoreError("no requests in the database; run `hpa ingest FILE` first")
    return trace


def read_trace(con: duckdb.DuckDBPyConnection) -> LoadedTrace:
    """Every row of `requests` on `con`, unchecked: the scalars in arrival order, then the
    token lists streamed to their places (`store.tokens`); every row's prompt and output
    is a view of those."""
    columns, lens, has = read_scalars(con)
    seqs = np.asarray(columns["arrival_seq"], dtype=np.int64)
    if has["prompt_token_ids"].all():
        return _read_token_rows(con, columns, seqs, lens, has["output_token_ids"])
    if has["block_hash_ids"].all():
        return _read_hash_rows(con, columns, seqs, lens["block_hash_ids"])
    flat = flat_lists(con, load_sql("replay_load_tokens"), seqs, lens, TOKEN_DTYPES)
    tokens, hashes = flat["prompt_token_ids"], flat["block_hash_ids"]
    prompts = [
        _row(tokens, i) if token else _row(hashes, i) if hashed else None
        for i, (token, hashed) in enumerate(
            zip(has["prompt_token_ids"].tolist(), has["block_hash_ids"].tolist(), strict=True)
        )
    ]
    outputs = [
        _row(flat["output_token_ids"], i) if out else None
        for i, out in enumerate(has["output_token_ids"].tolist())
    ]
    return LoadedTrace(columns, prompts, outputs)  # both kinds: matched as `inserted` joins


def read_scalars(con: duckdb.DuckDBPyConnection) -> tuple[dict, dict, dict]:
    """(columns, lens, has) of every row of `requests` in arrival order: the columns but the
    token lists (name -> list), and per list column its lengths (int64, 0 where null) and
    whether it is there (bool); no list is read."""
    with scan_settings(con):  # every core (no float is summed)
        table = query_arrow(con, with_list_lengths(con, load_sql("replay_load")))
    lens = {
        name: table.column(name).to_numpy(zero_copy_only=False).astype(np.int64)
        for name in TOKEN_COLUMNS
    }
    has = {
        name: table.column(f"has_{name}").to_numpy(zero_copy_only=False) for name in TOKEN_COLUMNS
    }
    table = table.drop_columns([*TOKEN_COLUMNS, *(f"has_{name}" for name in has)])
    return {name: table.column(name).to_pylist() for name in table.column_names}, lens, has


def _read_token_rows(con, columns: dict, seqs: np.ndarray, lens: dict, has_output) -> LoadedTrace:
    """A trace of token ids only, each row laid out as its prompt then its output in one
    int32 array: the prompt, the output and the inserted sequence (the prompt and the
    output but its last token) are all views of it, so it is held once."""
    prompt, output = lens["prompt_token_ids"], lens["output_token_ids"]
    row_starts = np.zeros(len(seqs) + 1, dtype=np.int64)
    np.cumsum(prompt + output, out=row_starts[1:])
    flat = np.empty(int(row_starts[-1]), dtype=TOKEN_DTYPES["prompt_token_ids"])
    starts = row_starts[:-1]
    place_lists(
        con,
        load_sql("replay_load_tokens"),
        seqs,
        {
            "prompt_token_ids": Placement(flat, starts, prompt),
            "output_token_ids": Placement(flat, starts + prompt, output),
        },
        memory_caps=(STREAM_MEMORY_CAP,),
    )
    bounds = zip(starts.tolist(), (starts + prompt).tolist(), row_starts[1:].tolist(), strict=True)
    prompts, outputs = [], []
    for (a, b, c), out in zip(bounds, has_output.tolist(), strict=True):
        prompts.append(flat[a:b])
        outputs.append(flat[b:c] if out else None)
    inserted = prompt + np.maximum(output - 1, 0)
    return LoadedTrace(columns, prompts, outputs, held=(flat, starts, inserted))


def _read_hash_rows(con, columns: dict, seqs: np.ndarray, lens: np.ndarray) -> LoadedTrace:
    """A trace of block hash ids only, read into one int64 array: each row's prompt is a
    view of it, and so is its inserted sequence (a hash-id request inserts its hash ids
    alone; its outputs are a count)."""
    starts = np.zeros(len(seqs) + 1, dtype=np.int64)
    np.cumsum(lens, out=starts[1:])
    flat = np.empty(int(starts[-1]), dtype=TOKEN_DTYPES["block_hash_ids"])
    placement = Placement(flat, starts[:-1], lens)
    sql = load_sql("replay_load_tokens")
    place_lists(con, sql, seqs, {"block_hash_ids": placement}, memory_caps=(STREAM_MEMORY_CAP,))
    prompts = [flat[a:b] for a, b in zip(starts[:-1].tolist(), starts[1:].tolist(), strict=True)]
    return LoadedTrace(columns, prompts, [None] * len(seqs), held=(flat, starts[:-1], lens))


def _row(flat_offsets: tuple[np.ndarray, np.ndarray], i: int) -> np.ndarray:
    flat, offsets = flat_offsets
    return flat[offsets[i] : offsets[i + 1]]


# -- a Parquet dataset: the driver holds scalar columns, workers read their token ids --------


@dataclass
class DatasetTrace:
    """A dataset trace as the replay's driver holds it: every column but the token ids
    (`columns`, as LoadedTrace's) and lengths in units; workers read the token ids of their
    partitions. `prompts` streams them in arrival order (only prefix-aware routing asks)."""

    columns: dict[str, list]
    dataset: str
    query_len: np.ndarray
    insert_len: np.ndarray

    token_ids_only = False  # not held here: the closed form is not taken from the driver

    @property
    def n(self) -> int:
        return len(self.columns["request_id"])

    @property
    def prompts(self) -> StreamedPrompts:
        return StreamedPrompts(self.dataset)

    def for_workers(self) -> DatasetRef:
        """What a worker that searches the whole trace is shipped: the dataset's path (it
        reads the trace itself, once)."""
        return DatasetRef(self.dataset)

    def partition(self, indices: list[int]) -> tuple[LoadedTrace, list[int]]:
        """Worker: a LoadedTrace of the rows `indices` (one read of the dataset) and where
        each of them is in it."""
        wanted = sorted(indices)
        where = {i: k for k, i in enumerate(wanted)}
        seqs = np.asarray([self.columns["arrival_seq"][i] for i in wanted], dtype=np.int64)
        con = duckdb.connect()
        try:
            register_requests(con, read_rows(self.dataset, seqs))
            rows = read_trace(con)
        finally:
            con.close()
        return rows, [where[i] for i in indices]

    def replay_bins(self, sizes: list[int], spec: ExecutorSpec) -> list[list[int]]:
        """Bins of partitions (about 2 per worker, at least 8): each task scans the dataset
        once for its rows."""
        return lpt_bins(sizes, max(8, 2 * spec.num_workers()))

    def shared_units(self, ns_any: np.ndarray, ns_replica: np.ndarray, spec: ExecutorSpec):
        """L1/L2 in units (MatchArrays): the shallow pass over each request's first K units
        (read by the driver) and the groups' shards, on `spec`, each shard's worker reading
        its own rows (see analyzer.prefixes.shallow)."""
        meta = replay_meta(self.columns, ns_any, ns_replica, self.query_len, self.insert_len)
        return dataset_shared_units(meta, self.dataset, spec)


@dataclass(frozen=True)
class DatasetRef:
    """A dataset as shipped to a worker: `whole()` reads its trace there."""

    dataset: str
    reads_in_worker = True

    def whole(self) -> LoadedTrace:
        return dataset_trace(self.dataset, whole=True)


class StreamedPrompts:
    """Iterates every prompt of a dataset in arrival order, a batch in memory at a time."""

    def __init__(self, dataset: str) -> None:
        self.dataset = dataset

    def __iter__(self):
        con = duckdb.connect()
        try:
            register_requests(con, open_dataset(self.dataset))
            reader = con.sql(load_sql("replay_stream_prompts")).to_arrow_reader(8192)
            for batch in reader:
                flat, offsets = lists_to_flat(batch.column(0))
                for k in range(batch.num_rows):
                    yield flat[offsets[k] : offsets[k + 1]]
        finally:
            con.close()


def read_dataset_trace(con: duckdb.DuckDBPyConnection, dataset: str) -> DatasetTrace:
    """The driver's part of the dataset registered as `requests` on `con`."""
    check_requests(con)
    table = query_arrow(con, load_sql("replay_load_scalars"))
    arrays = {}
    for name in ("query_len", "insert_len"):
        arrays[name] = table.column(name).to_numpy(zero_copy_only=False).astype(np.int64)
        table = table.drop_columns([name])
    columns = {name: table.column(name).to_pylist() for name in table.column_names}
    return DatasetTrace(columns, dataset, arrays["query_len"], arrays["insert_len"])


def dataset_trace(dataset: str, *, whole: bool) -> LoadedTrace | DatasetTrace:
    """A dataset's trace, checked as the replay's driver checks it (requests present, dense
    arrival order). `whole`: every column, token ids included (a LoadedTrace: what a sweep
    point's or plan setting's worker reads once, or a local run); else the driver's scalars
    (a DatasetTrace)."""
    con = duckdb.connect()
    try:
        register_requests(con, open_dataset(dataset))
        if not whole:
            return read_dataset_trace(con, dataset)
        check_requests(con)
        return read_trace(con)
    finally:
        con.close()


def lpt_bins(sizes: list[int], count: int) -> list[list[int]]:
    """Indices of `sizes` in about-equal bins (largest first, to the lightest bin; ties by
    index); each bin ascending; empty bins dropped. Deterministic."""
    heap = [(0, b) for b in range(max(1, min(count, len(sizes))))]
    bins: list[list[int]] = [[] for _ in heap]
    for k in sorted(range(len(sizes)), key=lambda k: (-sizes[k], k)):
        load, b = heapq.heappop(heap)
        bins[b].append(k)
        heapq.heappush(heap, (load + sizes[k], b))
    return [sorted(b) for b in bins if b]


Trace = LoadedTrace | DatasetTrace
