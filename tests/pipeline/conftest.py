"""Sample databases for the sweep tests, ingested once per session."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from analyzer.access.trace import load_trace
from analyzer.pipeline.replay import namespaces
from analyzer.store.ingest import ingest

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"


def observe_replayed_ttft(db: Path) -> Path:
    """`db`'s requests given the TTFT its replay stored as their observed `ttft_ms` (what
    calibrate fits: a trace whose truth is known)."""
    con = duckdb.connect(str(db))
    try:
        con.execute(
            "UPDATE requests SET ttft_ms = r.ttft_s * 1000 FROM replay_requests AS r "
            "WHERE r.request_id = requests.request_id"
        )
    finally:
        con.close()
    return db


def _ingested(tmp_path_factory, name: str) -> Path:
    db = tmp_path_factory.mktemp("sweep") / f"{name.split('.')[0]}.duckdb"
    ingest([SAMPLES / name], db_path=db)
    return db


@pytest.fixture(scope="session")
def mixed_db(tmp_path_factory) -> Path:
    return _ingested(tmp_path_factory, "mixed.jsonl.gz")


@pytest.fixture
def groups_db(tmp_path_factory) -> Path:
    """A fresh database per test (32 requests): run and sweep ids start at 1."""
    return _ingested(tmp_path_factory, "groups_1600.jsonl")


@pytest.fixture(scope="session")
def mixed_partitions(mixed_db) -> list[list]:
    """SimRequests of each (model revision, trace replica) cache of the mixed sample."""
    con = duckdb.connect(str(mixed_db), read_only=True)
    try:
        trace = load_trace(con)
    finally:
        con.close()
    ns = namespaces(trace)
    parts: dict[tuple, list[int]] = {}
    for i in range(trace.n):
        key = (trace.columns["model_revision"][i], trace.columns["replica"][i])
        parts.setdefault(key, []).append(i)
    return [[trace.sim_request(i, ns[i]) for i in idx] for idx in parts.values()]
