"""What an ingest killed midway leaves is undone by the next command that opens the store
(issue 13, item 2: `kill -9` during the second file of `hpa ingest a b` left rows without an
arrival order; re-ingesting said "identical", match kept asking for ingest, replay crashed)."""

from __future__ import annotations

from pathlib import Path

import duckdb
from click.testing import CliRunner

from analyzer.cli import cli
from analyzer.store.ingest import ingest

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"
FIRST, SECOND = SAMPLES / "groups_1500.jsonl", SAMPLES / "diagnostic_1088.jsonl"


def killed_during_the_second_file(db: Path) -> None:
    """The store as `hpa ingest FIRST SECOND` leaves it when killed while storing SECOND:
    FIRST complete but without arrival order, part of SECOND without its sources row."""
    ingest([FIRST], db_path=db)
    con = duckdb.connect(str(db))
    try:
        con.execute("UPDATE requests SET arrival_seq = NULL")
        con.execute(
            "INSERT INTO requests SELECT * REPLACE (2 AS source_id, request_id || '-b' AS "
            "request_id) FROM requests LIMIT 10"
        )
    finally:
        con.close()


def rows(db: Path, sql: str) -> list[tuple]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def test_the_next_command_finds_the_store_as_a_clean_stop_would_leave_it(tmp_path):
    db = tmp_path / "k.duckdb"
    killed_during_the_second_file(db)
    runner = CliRunner()
    for args in (["match"], ["replay", "--set", "block_size=64"]):
        result = runner.invoke(cli, [*args, "--db", str(db)])
        assert result.exit_code == 0, result.output
    assert rows(db, "SELECT count(*), count(arrival_seq), max(arrival_seq) FROM requests") == [
        (32, 32, 31)
    ]
    again = runner.invoke(cli, ["ingest", str(SECOND), "--db", str(db)])
    assert again.exit_code == 0 and "read 3 = stored 3 + rejected 0" in again.output
    assert rows(db, "SELECT count(*), count(DISTINCT arrival_seq) FROM requests") == [(35, 35)]
