"""Shared fixtures: a temporary database path, the mixed sample ingested once per module, and
helpers to write trace files and read rows."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import duckdb
import orjson
import pytest
from hypothesis import HealthCheck, Phase, settings

SAMPLES = Path(__file__).parents[1] / "sample_traces"

# No timing in tests: on a shared 2-core machine a property's example can take longer than
# hypothesis's 200 ms deadline, or its data generation look "too slow", without anything
# being wrong (tests/prefixes/test_strict.py failed so once, its properties holding).
settings.register_profile(
    "hpa", deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
# CI (`.ci/run` sets HPA_NO_SHRINK): a property that fails is reported with the example that
# failed, not after minutes of shrinking it (one such shrink took over 5 minutes, and make test
# must stay under 15); every example found becomes an explicit @example all the same.
settings.register_profile(
    "hpa-ci",
    parent=settings.get_profile("hpa"),
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target],
)
settings.load_profile("hpa-ci" if os.environ.get("HPA_NO_SHRINK") else "hpa")


@pytest.fixture(autouse=True)
def _no_progress_lines(monkeypatch):
    """Progress lines on a pipe depend on how long a command takes: none in a test that
    does not ask for them (set analyzer.cli.base.PROGRESS_QUIET_S), so a slow machine adds
    no line to an exact stderr."""
    from analyzer.cli import base

    monkeypatch.setattr(base, "PROGRESS_QUIET_S", float("inf"))


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """An empty store (a failed ingest leaves it as it was; into no store, it leaves none)."""
    from analyzer.store.db import connect

    path = tmp_path / "test.duckdb"
    connect(path).close()
    return path


@pytest.fixture(scope="module")
def mixed_db(tmp_path_factory) -> Path:
    """sample_traces/mixed.jsonl.gz ingested, one database per test module."""
    from analyzer.store.ingest import ingest

    db = tmp_path_factory.mktemp("mixed") / "m.duckdb"
    ingest([SAMPLES / "mixed.jsonl.gz"], db_path=db)
    return db


def write_jsonl(path: Path, records: list) -> Path:
    """Records (dicts, or raw strings written as-is) as JSON Lines; .gz compresses."""
    lines = [r if isinstance(r, str) else orjson.dumps(r).decode() for r in records]
    data = ("\n".join(lines) + "\n").encode()
    if path.suffix == ".gz":
        data = gzip.compress(data, mtime=0)
    path.write_bytes(data)
    return path


def shared_head_db(tmp_path: Path, head_tokens: int = 1_024) -> Path:
    """A store of ten requests, 1 s apart, sharing a head of `head_tokens` (1,024: two
    512-token chunks, a RAGPulse system prompt) inside 2,000 tokens of their own: what
    whole blocks keep of a prefix shared inside earlier prompts."""
    from analyzer.store.ingest import ingest

    head = list(range(1, head_tokens + 1))
    records = [
        {"request_id": f"r{i}", "timestamp": float(i),
         "prompt_token_ids": head + [100_000 + 3_000 * i + k for k in range(2_000)]}
        for i in range(10)
    ]  # fmt: skip
    db = tmp_path / "c.duckdb"
    ingest([write_jsonl(tmp_path / "c.jsonl", records)], db_path=db)
    return db


def db_rows(db: Path, sql: str) -> list[tuple]:
    """All rows of `sql` run on the database file `db`."""
    con = duckdb.connect(str(db))
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()
