"""Where a sharded matcher's workers (and its driver) read inserted sequences.

Workers read the whole sequences of their own partition (`read_sequences`), from the store
opened read-only or from a Parquet dataset; the driver reads only the first K units of
every request (`read_prefixes`, for its shallow pass, see `analyzer.prefixes.shallow`).
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb
import numpy as np
import pyarrow as pa

from analyzer.errors import StoreError
from analyzer.store.dataset import read_rows, register_requests
from analyzer.store.db import NO_EXTENSIONS, load_sql, query_arrow


@dataclass(frozen=True)
class TraceInput:
    """Where workers read sequences: the store at `db_path`, or a Parquet `dataset`."""

    db_path: str | None = None
    dataset: str | None = None


def read_sequences(
    trace: TraceInput, ids: np.ndarray, *, drop_last_output: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """(flat, offsets) of the inserted sequences of `ids`, read by the worker itself."""
    wanted = pa.table({"arrival_seq": pa.array(ids, pa.int64())})
    if trace.dataset is not None:
        con = duckdb.connect()
        register_requests(con, read_rows(trace.dataset, ids))
    else:
        con = duckdb.connect(str(trace.db_path), read_only=True, config=NO_EXTENSIONS)
    try:
        con.register("match_wanted", wanted)
        sql = load_sql("match_partition_sequences")
        table = query_arrow(con, sql, {"drop_last": int(drop_last_output)})
    finally:
        con.close()
    if table.num_rows != ids.size:
        raise StoreError("requests changed while `hpa match` was reading them; run it again")
    return inserted_sequences(table)


def read_prefixes(
    con: duckdb.DuckDBPyConnection, units: int, *, drop_last_output: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """(flat, offsets) of the first `units` units of every request's inserted sequence,
    in arrival order, from the `requests` of an open connection."""
    params = {"units": int(units), "drop_last": int(drop_last_output)}
    return inserted_sequences(query_arrow(con, load_sql("match_sequence_prefixes"), params))


def inserted_sequences(table: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """(flat int64, offsets) of each row's inserted sequence from the columns `tokens` and
    `block_hash_ids` (one of them set per row); no copy beyond the flat array unless a
    partition mixes token and hash-id requests."""
    tokens, t_off = _flat(table.column("tokens"))
    hashes, h_off = _flat(table.column("block_hash_ids"))
    if hashes.size == 0:
        return tokens, t_off
    if tokens.size == 0:
        return hashes, h_off
    t_len, h_len = np.diff(t_off), np.diff(h_off)  # a row has one kind: the other is 0
    offsets = np.zeros(table.num_rows + 1, dtype=np.int64)
    np.cumsum(t_len + h_len, out=offsets[1:])
    flat = np.empty(int(offsets[-1]), dtype=np.int64)  # hash ids need 64 bits
    for values, own_off, lens in ((tokens, t_off, t_len), (hashes, h_off, h_len)):
        rows = np.flatnonzero(lens)
        dest = np.repeat(offsets[rows] - own_off[rows], lens[rows]) + np.arange(values.size)
        flat[dest] = values
    return flat, offsets


def _flat(column: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """(values in their own dtype, int64 offsets) of a list column; null rows are empty."""
    import pyarrow.compute as pc  # 50 ms of import, here only where a partition is read

    column = column.combine_chunks() if column.num_chunks else pa.array([], column.type)
    lens = pc.fill_null(pc.list_value_length(column), 0).to_numpy(zero_copy_only=False)
    offsets = np.zeros(len(lens) + 1, dtype=np.int64)
    np.cumsum(lens, out=offsets[1:])
    return column.flatten().to_numpy(zero_copy_only=False), offsets


def check_requests(con: duckdb.DuckDBPyConnection) -> int:
    """Number of requests; raises StoreError when there are none or arrival_seq is not
    the dense 0..n-1 order that ingest writes."""
    n, sequenced, distinct, low, high = con.execute(load_sql("match_check_requests")).fetchall()[0]
    if n == 0:
        raise StoreError("the database has no requests; run `hpa ingest FILE` first")
    if not (sequenced == distinct == n and low == 0 and high == n - 1):
        raise StoreError(
            "requests.arrival_seq is not a dense 0..n-1 arrival order; "
            "re-run `hpa ingest` to rebuild it"
        )
    return int(n)
