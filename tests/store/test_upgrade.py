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


CUT_LOG = Path(__file__).resolve().parents[1] / "fixtures/external/vllm_log/vllm033_max_log_len.log"


def test_a_store_from_before_log_cut_tokens_reads_and_gains_it(tmp_path):
    """requests.log_cut_tokens (issue 49 item 2) came after stores were written: match and
    replay read such a store (no note: nothing in it is flagged), and the next ingest adds
    the column and flags the prompts a log cut."""
    db = tmp_path / "old.duckdb"
    ingest([SAMPLES / "groups_1600.jsonl"], db_path=db)
    con = duckdb.connect(str(db))
    try:
        con.execute("ALTER TABLE requests DROP COLUMN log_cut_tokens")
    finally:
        con.close()
    runner = CliRunner()
    for args in (["match", "--db", str(db)], ["replay", "--db", str(db), "--set", "block_size=64"]):
        result = runner.invoke(cli, args)
        assert result.exit_code == 0, (args, result.output)
        assert "may be cut" not in result.output
    ingest([CUT_LOG], db_path=db)
    con = duckdb.connect(str(db), read_only=True)
    try:
        got = con.execute(
            "SELECT log_cut_tokens, count(*) FROM requests GROUP BY ALL ORDER BY ALL"
        ).fetchall()
    finally:
        con.close()
    assert got == [(512, 6), (None, 32)]
