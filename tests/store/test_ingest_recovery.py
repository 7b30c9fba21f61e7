"""An ingest command lands whole or not at all (issue 13, items 2 and 9): a file that fails
takes the files before it in the same command with it, and what a killed command stored is
undone by the next command that opens the store. (Before: `kill -9` during the second file of
`hpa ingest a b` left rows without an arrival order; re-ingesting said "identical", match kept
asking for ingest, replay crashed.)"""

from __future__ import annotations

import gzip
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from analyzer.cli import cli
from analyzer.errors import InputFileError
from analyzer.store import db as store_db
from analyzer.store.db import connect
from analyzer.store.ingest import ingest
from tests.conftest import write_jsonl

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"
FIRST, SECOND = SAMPLES / "groups_1500.jsonl", SAMPLES / "diagnostic_1088.jsonl"


def rows(db: Path, sql: str) -> list[tuple]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def _truncated(tmp_path: Path) -> Path:
    data = gzip.compress(b'{"request_id": "t", "prompt_token_ids": [1, 2]}\n' * 1000)
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(data[: len(data) // 2])
    return path


def test_a_file_that_fails_takes_its_command_with_it(tmp_path):
    db = tmp_path / "c.duckdb"
    ingest([SECOND], db_path=db)
    before = rows(db, "SELECT * FROM requests ORDER BY arrival_seq")
    result = CliRunner().invoke(
        cli, ["ingest", str(FIRST), str(_truncated(tmp_path)), "--db", str(db)]
    )
    assert result.exit_code == 2
    assert result.output.splitlines()[-1].endswith(
        f"; nothing of this ingest was stored, {FIRST} included (a command lands whole or not "
        "at all)"
    )
    assert "cut.jsonl.gz: cannot be read" in result.output
    assert rows(db, "SELECT * FROM requests ORDER BY arrival_seq") == before
    assert rows(db, "SELECT path FROM sources") == [(str(SECOND),)]
    assert rows(db, "SELECT count(*) FROM meta WHERE key LIKE 'ingest%'") == [(0,)]
    assert ingest([FIRST], db_path=db).num_stored == 32  # not "identical": it never landed


def test_a_failed_command_keeps_the_earlier_attempt_it_would_replace(tmp_path):
    db = tmp_path / "r.duckdb"
    path = write_jsonl(tmp_path / "t.jsonl", [{"request_id": "a", "prompt_token_ids": [1, 2]}])
    ingest([path], db_path=db, fmt="mooncake")  # every record rejected
    before = [rows(db, f"SELECT * FROM {t}") for t in ("sources", "rejects")]
    with pytest.raises(InputFileError):
        ingest([path, _truncated(tmp_path)], db_path=db, fmt="jsonl")
    assert [rows(db, f"SELECT * FROM {t}") for t in ("sources", "rejects")] == before


def killed_during_the_second_file(db: Path) -> None:
    """The store as `hpa ingest FIRST SECOND` leaves it when killed while storing SECOND:
    the command's marker, FIRST read whole but without arrival order, part of SECOND
    without its sources row."""
    ingest([SECOND], db_path=db)  # an earlier command, which stays
    con = connect(db)
    try:
        con.execute("INSERT INTO meta VALUES ('ingest_open_from_source', '2')")
        con.execute(
            "INSERT INTO sources SELECT * REPLACE (2 AS source_id, 'first.jsonl' AS path, "
            "'ab' AS sha256) FROM sources"
        )
        for source_id in (2, 3):
            con.execute(
                f"INSERT INTO requests SELECT * REPLACE ({source_id} AS source_id, request_id "
                f"|| '-{source_id}' AS request_id, NULL AS arrival_seq) FROM requests"
            )
    finally:
        con.close()


def test_the_next_command_finds_the_store_as_before_the_killed_command(tmp_path):
    db = tmp_path / "k.duckdb"
    killed_during_the_second_file(db)
    runner = CliRunner()
    for args in (["match"], ["replay", "--set", "block_size=64"]):
        result = runner.invoke(cli, [*args, "--db", str(db)])
        assert result.exit_code == 0, result.output
    assert rows(db, "SELECT count(*), count(arrival_seq), max(arrival_seq) FROM requests") == [
        (3, 3, 2)
    ]
    assert rows(db, "SELECT source_id FROM sources") == [(1,)]
    again = runner.invoke(cli, ["ingest", str(FIRST), "--db", str(db)])
    assert again.exit_code == 0 and "read 32 = stored 32 + rejected 0" in again.output
    assert rows(db, "SELECT count(*), count(DISTINCT arrival_seq) FROM requests") == [(35, 35)]


def test_a_store_of_an_earlier_hpa_keeps_the_files_its_killed_ingest_finished(tmp_path):
    """Without the command marker (written before it existed): the unfinished file's rows
    go, the finished files get their arrival order."""
    db = tmp_path / "old.duckdb"
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
    connect(db).close()
    assert rows(db, "SELECT count(*), count(arrival_seq), max(arrival_seq) FROM requests") == [
        (32, 32, 31)
    ]


def test_a_read_only_query_sees_the_store_as_the_last_finished_command_left_it(tmp_path):
    """(issue 33 item 9: `hpa query` after a killed ingest showed its rows, NULL arrival_seq
    and all, where every other command saw the store without them)"""
    db = tmp_path / "q.duckdb"
    killed_during_the_second_file(db)
    result = CliRunner().invoke(
        cli,
        ["query", "SELECT count(*), count(arrival_seq) FROM requests", "--db", str(db),
         "--format", "json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert result.output == '{"count_star()":3,"count(arrival_seq)":3}\n'
    assert rows(db, "SELECT source_id FROM sources") == [(1,)]


def test_a_read_only_query_where_the_killed_ingest_cannot_be_undone_says_so(tmp_path, monkeypatch):
    db = tmp_path / "ro.duckdb"
    killed_during_the_second_file(db)

    attach = store_db._attach

    def not_writable(path, settings, *, read_only=False):  # a read-only file system
        if read_only:  # reads it
            return attach(path, settings, read_only=True)
        raise duckdb.IOException(f'IO Error: Cannot open file "{path}": Read-only file system')

    monkeypatch.setattr(store_db, "_attach", not_writable)
    result = CliRunner().invoke(cli, ["query", "SELECT 1", "--db", str(db)])
    assert result.exit_code == 1
    assert result.output == (
        f"Error: {db}: the store is read-only here and holds what a killed ingest left; open "
        "it once where it can be written (any hpa command that writes, e.g. hpa replay)\n"
    )
