"""A store written before the replay tables gained their latest columns reads like a new one:
opening it adds the columns (their defaults for the old runs), so every reader works."""

from __future__ import annotations

from pathlib import Path

import duckdb
from click.testing import CliRunner

from analyzer.cli import cli
from analyzer.pipeline.replay import run_replay
from analyzer.sim.dispatch import make_policy
from analyzer.store.ingest import ingest

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"
LATER = {  # columns added after stores were written (and a sample of their readers)
    "replay_requests": ("lost_in_flight_tokens", "held_blocks", "ttft_s", "queue_s"),
    "replay_summary": ("lost_in_flight_tokens", "ttft_p50_s", "num_preemptions"),
}


def test_old_replay_tables_gain_the_new_columns(tmp_path):
    db = tmp_path / "old.duckdb"
    ingest([SAMPLES / "groups_1600.jsonl"], db_path=db)
    run_replay(make_policy({"block_size": 64}), db_path=db)
    con = duckdb.connect(str(db))
    try:
        for table, columns in LATER.items():
            for column in columns:
                con.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
    finally:
        con.close()
    runner = CliRunner()
    for args in (
        ["report", "--db", str(db), "-o", str(tmp_path / "r.html")],
        ["compare", "--db", str(db), "--run", "1", "--run", "1"],
        ["metrics", "--db", str(db)],
        ["replay", "--db", str(db), "--set", "block_size=64"],
    ):
        result = runner.invoke(cli, args)
        assert result.exit_code == 0, (args, result.output)
    con = duckdb.connect(str(db), read_only=True)
    try:
        got = con.execute(
            "SELECT run_id, lost_in_flight_tokens, held_blocks FROM replay_requests "
            "WHERE arrival_seq = 0 ORDER BY run_id"
        ).fetchall()
    finally:
        con.close()
    assert got == [(1, 0, None), (2, 0, None)]
