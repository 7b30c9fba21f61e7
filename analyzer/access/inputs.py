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
from typing import TYPE_CHECKING

import duckdb

from analyzer.executors import ExecutorSpec
from analyzer.store.dataset import fingerprint, open_dataset, register_requests
from analyzer.store.db import DEFAULT_DB, connect
from analyzer.store.sequences import TraceInput

if TYPE_CHECKING:
    from analyzer.access.trace import Trace

# The traces (access.trace, access.streamed: the replay's, with the sharded matcher and the
# simulator's records) are imported where a trace is read: `hpa match` reads none, and
# importing them cost it 0.03 s.


@dataclass(frozen=True)
class StoredRequests:
    """The store's own `requests` table; workers open the store read-only."""

    db_path: str
    is_dataset = False

    def connect(self) -> duckdb.DuckDBPyConnection:
        """A read-only connection: `hpa query` reads the store while the command computes;
        the driver opens a writable one to store its results (`store.db.open_to_store`)."""
        return connect(self.db_path, create=False, reader=True)

    @property
    def fingerprint(self) -> str | None:
        return None

    @property
    def workers(self) -> TraceInput:
        return TraceInput(db_path=str(self.db_path))

    @property
    def dataset(self) -> str | None:
        return None

    def whole_trace(self, con: duckdb.DuckDBPyConnection) -> Trace:
        """Every column and token id, loaded here (the store's requests on `con`)."""
        from analyzer.access.trace import load_trace

        return load_trace(con)

    def driver_trace(self, con: duckdb.DuckDBPyConnection, *, stream: bool = False) -> Trace:
        """What a replay's driver holds: the store's requests, loaded whole; with `stream`
        (the replay needs no token id after L1/L2), their token ids may stay in the store
        and stream through the matcher once (`access.streamed`)."""
        from analyzer.access.streamed import stored_trace
        from analyzer.access.trace import load_trace

        return stored_trace(con) if stream else load_trace(con)

    def read_only_trace(self, spec: ExecutorSpec) -> Trace:
        """For a driver that writes nothing (plan): the store's requests, loaded whole, and
        the store closed again."""
        from analyzer.access.trace import load_trace

        con = self.connect()
        try:
            return load_trace(con)
        finally:
            con.close()

    def hand_over(self, con: duckdb.DuckDBPyConnection) -> None:
        """Before workers read: they open the store read-only, so this process lets go."""
        con.close()

    def take_back(self, con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
        """After the workers: the driver's connection again."""
        return self.connect()


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

    def whole_trace(self, con: duckdb.DuckDBPyConnection) -> Trace:
        """Every column and token id of the dataset, read here once."""
        from analyzer.access.trace import dataset_trace

        return dataset_trace(self.path, whole=True)

    def driver_trace(self, con: duckdb.DuckDBPyConnection, *, stream: bool = False) -> Trace:
        """What a replay's driver holds: the scalar columns (workers read the token ids)."""
        from analyzer.access.trace import read_dataset_trace

        return read_dataset_trace(con, self.path)

    def read_only_trace(self, spec: ExecutorSpec) -> Trace:
        """For a driver that writes nothing (plan; no store is created): the dataset read
        whole with a local `spec`, else only its scalars (workers read the rest)."""
        from analyzer.access.trace import dataset_trace

        return dataset_trace(self.path, whole=spec.is_local)

    def hand_over(self, con: duckdb.DuckDBPyConnection) -> None:
        """Workers read the dataset's files; the driver's connection stays open."""

    def take_back(self, con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
        return con


RequestInput = StoredRequests | DatasetRequests


def request_input(
    db_path: str | Path = DEFAULT_DB, dataset: str | Path | None = None
) -> RequestInput:
    """The requests of the store at `db_path`, or of the Parquet `dataset` (resolved to an
    absolute path, so workers started elsewhere find it)."""
    if dataset is None:
        return StoredRequests(str(db_path))
    return DatasetRequests(str(db_path), str(Path(dataset).resolve()))
