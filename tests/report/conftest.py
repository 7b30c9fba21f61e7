"""A small report database shared by the report tests: the mixed sample trace, `hpa match`
and two replay runs (vLLM default, and retention at every boundary)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from analyzer.pipeline.match import match_prefixes
from analyzer.pipeline.replay import run_replay
from analyzer.report.data import load_report_data
from analyzer.report.html import render_report
from analyzer.sim.dispatch import make_policy
from analyzer.store.ingest import ingest

SAMPLES = Path(__file__).parents[2] / "sample_traces"
MODEL = "qwen3-next-80b-a3b"


@pytest.fixture(scope="session")
def report_db(tmp_path_factory) -> Path:
    db = tmp_path_factory.mktemp("report") / "mixed.duckdb"
    ingest([SAMPLES / "mixed.jsonl.gz"], db_path=db)
    match_prefixes(db, backend="numpy")
    run_replay(make_policy({"model": MODEL}), db_path=db)
    run_replay(make_policy({"model": MODEL, "retention_interval": None}), db_path=db)
    return db


@pytest.fixture
def db_copy(report_db, tmp_path) -> Path:
    """A private copy of the report database that a test may change."""
    copy = tmp_path / "copy.duckdb"
    shutil.copyfile(report_db, copy)
    return copy


@pytest.fixture(scope="session")
def report_data(report_db):
    return load_report_data(report_db)


@pytest.fixture(scope="session")
def report_html(report_db, tmp_path_factory):
    out = tmp_path_factory.mktemp("html") / "report.html"
    return render_report(report_db, out)
