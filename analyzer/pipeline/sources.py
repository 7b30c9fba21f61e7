"""The DuckDB `requests` table as a `SequenceSource`: metadata once, sequences by range."""

from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa

from analyzer.prefixes.source import Chunk, RequestMeta, lists_to_flat
from analyzer.store.db import load_sql, query_arrow, require_tables
from analyzer.store.sequences import check_requests


class DuckDBSource:
    """Reads the `requests` table of an open store. Creates the temp view it reads from."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        require_tables(con, "requests")
        self.con = con
        check_requests(con)
        self.meta = read_meta(con)
        con.execute(load_sql("match_sequences_view"))

    def read(self, start: int, stop: int) -> Chunk:
        table = query_arrow(self.con, load_sql("match_read_chunk"), {"start": start, "stop": stop})
        flat, offsets = lists_to_flat(table.column("seq"))
        return Chunk(start, stop, flat, offsets)

    def fetch(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        wanted = pa.table({"arrival_seq": pa.array(np.asarray(ids, dtype=np.int64))})
        self.con.register("match_wanted", wanted)
        try:
            table = query_arrow(self.con, load_sql("match_fetch_sequences"))
        finally:
            self.con.unregister("match_wanted")
        return lists_to_flat(table.column("seq"))


def read_meta(con: duckdb.DuckDBPyConnection) -> RequestMeta:
    table = query_arrow(con, load_sql("match_request_meta"))

    def col(name: str) -> np.ndarray:
        return table.column(name).to_numpy().astype(np.int64)

    return RequestMeta(
        ns_any=col("ns_any"),
        ns_replica=col("ns_replica"),
        ns_conversation=col("ns_conversation"),
        query_len=col("query_len"),
        insert_len=col("insert_len"),
        block_size=col("block_size"),
        prompt_tokens=col("prompt_tokens"),
        namespaces=tuple(
            (bool(h), (int(b) if h and b is not None else None), salt, lora)
            for _, h, b, salt, lora in con.execute(load_sql("match_namespaces")).fetchall()
        ),
    )
