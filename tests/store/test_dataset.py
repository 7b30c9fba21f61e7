"""The Parquet dataset a command reads in place of the store's `requests` (`--dataset`)."""

from __future__ import annotations

import duckdb

from analyzer.store import dataset
from analyzer.store.db import column_names, connect


def test_the_dataset_view_has_every_column_of_requests(tmp_path):
    """A column `requests` gains (schema.sql) must join `dataset.COLUMNS`, where an absent
    one reads as NULL: `log_cut_tokens` did not, and every command on a dataset stopped on
    the query that reads it ('Referenced column "log_cut_tokens" not found')."""
    con = connect(tmp_path / "s.duckdb")
    try:
        stored = column_names(con, "requests")
    finally:
        con.close()
    assert set(dataset.COLUMNS) == stored


def test_a_dataset_without_a_column_reads_it_as_null():
    import pyarrow as pa

    con = duckdb.connect()
    data = pa.table({"request_id": ["a"], "arrival_seq": [0], "prompt_tokens": [3]})
    dataset.register_requests(con, data)
    assert con.execute("SELECT log_cut_tokens, cached_tokens FROM requests").fetchall() == [
        (None, None)
    ]
