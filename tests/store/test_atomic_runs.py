"""A replay run and a sweep are stored all or nothing, and run ids are never reused (issue 13
item 1: a killed replay left rows that the next run, reusing the id, doubled)."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

import analyzer.store.runs as runs
from analyzer.errors import InputFileError
from analyzer.pipeline.replay import run_replay
from analyzer.pipeline.sweep import run_sweeps
from analyzer.sim.dispatch import make_policy
from analyzer.store.ingest import ingest

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"


def counts(db: Path) -> tuple:
    con = duckdb.connect(str(db), read_only=True)
    try:
        tables = {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
        return tuple(
            con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] if t in tables else None
            for t in ("replay_runs", "replay_requests", "replay_summary", "sweeps", "sweep_points")
        )
    finally:
        con.close()


@pytest.fixture
def db(tmp_path) -> Path:
    path = tmp_path / "g.duckdb"
    ingest([SAMPLES / "groups_1600.jsonl"], db_path=path)
    return path


def test_a_replay_that_fails_while_storing_stores_nothing(db, monkeypatch):
    def broken(con):  # fails after the requests and the summary were written
        raise RuntimeError("killed")

    monkeypatch.setattr(runs, "trace_fingerprint", broken)
    with pytest.raises(RuntimeError, match="killed"):
        run_replay(make_policy({"block_size": 64}), db_path=db)
    assert counts(db)[:3] == (None, None, None)  # the store is as it was: no replay tables
    monkeypatch.undo()
    assert run_replay(make_policy({"block_size": 64}), db_path=db).run_id == 1
    assert counts(db)[:3] == (1, 32, 8)


def test_rows_a_killed_run_left_never_share_a_run_id(db):
    """A store written by an earlier hpa may hold a killed run's rows without its run row."""
    run_replay(make_policy({"block_size": 64}), db_path=db)
    con = duckdb.connect(str(db))
    try:
        con.execute(
            "INSERT INTO replay_requests SELECT * REPLACE (7 AS run_id) FROM replay_requests"
        )
    finally:
        con.close()
    assert run_replay(make_policy({"block_size": 64}), db_path=db).run_id == 8


def test_a_sweep_that_fails_while_storing_stores_nothing(db, monkeypatch):
    stored = []
    original = runs._store

    def second_fails(con, *args, **kwargs):
        if stored:
            raise RuntimeError("killed")
        stored.append(1)
        return original(con, *args, **kwargs)

    monkeypatch.setattr(runs, "_store", second_fails)
    with pytest.raises(RuntimeError, match="killed"):
        run_sweeps(None, ["block_size=64"], ["num_blocks=40,80"], db_path=db, jobs=1)
    assert counts(db) == (None,) * 5  # neither the first point's run nor the sweep


def test_a_replay_whose_out_file_cannot_be_written_stores_nothing(db, tmp_path):
    """Item 9: the --out export is part of the run; before, the run was stored anyway."""
    policy = make_policy({"block_size": 528, "groups": ["full_attention", "mamba"]})
    run_replay(policy, db_path=db)
    before = counts(db)
    # /proc is a folder no file can be made in: the write fails after the replay
    with pytest.raises(InputFileError, match=r"--out /proc/r\.csv: cannot write"):
        run_replay(policy, db_path=db, out="/proc/r.csv")
    assert counts(db) == before
    run_replay(policy, db_path=db, out=tmp_path / "r.csv")
    assert (tmp_path / "r.csv").exists() and counts(db)[0] == before[0] + 1
