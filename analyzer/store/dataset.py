"""A Parquet dataset (a folder of files) standing in for the stored `requests` table.

The dataset holds rows in the `requests` table's layout, e.g. written by
`hpa query "SELECT * FROM requests" --out part.parquet` or DuckDB's
`COPY requests TO 'dir' (FORMAT parquet, PER_THREAD_OUTPUT)`. Required columns:
`request_id`, `arrival_seq` (the dense 0..n-1 arrival order), `prompt_tokens`, and
`prompt_token_ids` and/or `block_hash_ids`; every other column of `requests` is optional
(absent = NULL). The dataset is never loaded whole: the driver's SQL scans it through
DuckDB (only the columns a query names, batch by batch), and each worker reads only its
partition's rows (`read_rows`: a pyarrow.dataset filter on arrival_seq).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import duckdb
import numpy as np
import pyarrow as pa

from analyzer.errors import InputFileError
from analyzer.store.db import load_sql
from analyzer.store.faults import first_line

# Every column of `requests` (schema.sql) with its DuckDB type: absent ones read as NULL.
COLUMNS = {
    "request_id": "VARCHAR",
    "source_id": "INTEGER",
    "line_no": "BIGINT",
    "arrival_seq": "BIGINT",
    "timestamp_s": "DOUBLE",
    "prompt_tokens": "INTEGER",
    "prompt_token_ids": "INTEGER[]",
    "block_hash_ids": "BIGINT[]",
    "block_size": "INTEGER",
    "output_tokens": "INTEGER",
    "output_token_ids": "INTEGER[]",
    "model_revision": "VARCHAR",
    "prompt_family": "VARCHAR",
    "prompt_family_source": "VARCHAR",
    "replica": "VARCHAR",
    "conversation_id": "VARCHAR",
    "parent_request_id": "VARCHAR",
    "cache_salt": "VARCHAR",
    "lora_name": "VARCHAR",
    "spec_decode": "VARCHAR",
    "tenant": "VARCHAR",
    "ttft_ms": "DOUBLE",
    "extra": "JSON",
    "cached_tokens": "INTEGER",
    "log_cut_tokens": "INTEGER",
}
REQUIRED = ("request_id", "arrival_seq", "prompt_tokens")

if TYPE_CHECKING:
    import pyarrow.dataset as pads


def open_dataset(path: str | Path) -> pads.Dataset:
    """The Parquet dataset at `path` (a folder, or one file), its columns checked.

    Raises:
        InputFileError: missing, not Parquet, or lacking a required column.
    """
    import pyarrow.dataset as pads  # imported here: 80 ms, with compute, of every command

    path = Path(path)
    if not path.exists():
        raise InputFileError(f"{path}: no such dataset (a folder of Parquet files)")
    try:
        dataset = pads.dataset(str(path), format="parquet")
        names = set(dataset.schema.names)
    except (pa.ArrowInvalid, OSError) as exc:
        raise InputFileError(f"{path}: not a Parquet dataset ({first_line(exc)})") from None
    if not dataset.files:
        raise InputFileError(f"{path}: no Parquet files in the dataset")
    for name in REQUIRED:
        if name not in names:
            raise InputFileError(f"{path}: column {name!r} is missing (see `hpa match --help`)")
    if "prompt_token_ids" not in names and "block_hash_ids" not in names:
        raise InputFileError(f"{path}: needs column 'prompt_token_ids' or 'block_hash_ids'")
    return dataset


def register_requests(con: duckdb.DuckDBPyConnection, data: pads.Dataset | pa.Table) -> None:
    """Make `requests` on `con` read `data` (shadowing any stored table of that name)."""
    con.register("requests_dataset", data)
    present = set(data.schema.names)
    cols = ",\n    ".join(
        f"CAST({name} AS {kind}) AS {name}"
        if name in present
        else f"CAST(NULL AS {kind}) AS {name}"
        for name, kind in COLUMNS.items()
    )
    con.execute(load_sql("dataset_requests_view").format(columns=cols))


def read_rows(path: str | Path, arrival_seqs: np.ndarray) -> pa.Table:
    """The rows of the dataset whose arrival_seq is in `arrival_seqs` (a worker's partition),
    read with a pushed-down filter: only matching rows are materialised."""
    import pyarrow.compute as pc

    dataset = open_dataset(path)
    wanted = pa.array(np.asarray(arrival_seqs, dtype=np.int64))
    names = [n for n in dataset.schema.names if n in COLUMNS]
    return dataset.to_table(columns=names, filter=pc.field("arrival_seq").isin(wanted))


def fingerprint(path: str | Path) -> str:
    """What the dataset is: its files' names and sizes (cheap; no data read)."""
    dataset = open_dataset(path)
    parts = sorted(f"{Path(f).name}:{Path(f).stat().st_size}" for f in dataset.files)
    return "dataset:" + ",".join(parts)
