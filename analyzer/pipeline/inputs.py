"""Where a command's requests come from: the store's `requests` table, or a Parquet dataset
in the same layout (`--dataset DIR`), behind one interface.

    source = request_input(db_path, dataset)
    con = source.connect()              # `requests` is the trace on this connection
    source.fingerprint                  # stored with each run (None: the store's own)
    source.workers                      # where workers read their own rows (TraceInput)

Runs and tables are always written to the store at `db_path` (created for a dataset).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import duckdb

from analyzer.store.dataset import fingerprint, open_dataset, register_requests
from analyzer.store.db import DEFAULT_DB, connect
from analyzer.store.sequences import TraceInput


@dataclass(frozen=True)
class StoredRequests:
    """The store's own `requests` table; workers open the store read-only."""

    db_path: str
    is_dataset = False

    def connect(self) -> duckdb.DuckDBPyConnection:
        return connect(self.db_path, create=False)

    @property
    def fingerprint(self) -> str | None:
        return None

    @property
    def workers(self) -> TraceInput:
        return TraceInput(db_path=str(self.db_path))

    @property
    def dataset(self) -> str | None:
        return None


@dataclass(frozen=True)
class DatasetRequests:
    """A Parquet dataset registered as `requests` on a connection to the store (which
    receives the runs); workers read their rows from the dataset themselves."""

    db_path: str
    path: str
    is_dataset = True

    def connect(self) -> duckdb.DuckDBPyConnection:
        data = open_dataset(self.path)
        con = connect(self.db_path, create=True)
        register_requests(con, data)
        return con

    @property
    def fingerprint(self) -> str | None:
        return fingerprint(self.path)

    @property
    def workers(self) -> TraceInput:
        return TraceInput(dataset=self.path)

    @property
    def dataset(self) -> str | None:
        return self.path


RequestInput = StoredRequests | DatasetRequests


def request_input(
    db_path: str | Path = DEFAULT_DB, dataset: str | Path | None = None
) -> RequestInput:
    """The requests of the store at `db_path`, or of the Parquet `dataset` (resolved to an
    absolute path, so workers started elsewhere find it)."""
    if dataset is None:
        return StoredRequests(str(db_path))
    return DatasetRequests(str(db_path), str(Path(dataset).resolve()))
