"""What `--db` names is checked before anything reads or changes it, and a store that only
one command reads is opened read-only (issue 48, items 2 and 5): a DuckDB file of another
program traced back in every command but query (and gained hpa's tables), a SQLite file
made DuckDB try to download an extension, a damaged data block traced back in match,
replay, sweep and plan, and a command that only reads took the write lock."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from analyzer.cli import cli
from analyzer.store.db import connect
from analyzer.store.ingest import ingest

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"
HPA = [sys.executable, "-c", "from analyzer.cli import main; main()"]
POLICY = ["--set", "model=qwen3-next-80b-a3b"]
COMMANDS = {
    "match": ["match"],
    "replay": ["replay", *POLICY],
    "sweep": ["sweep", *POLICY, "--vary", "num_blocks=500,1000"],
    "plan": ["plan", "--target-useful-hit-ratio", "0.4", "--model", "qwen3-next-80b-a3b"],
    "metrics": ["metrics"],
    "report": ["report", "--out", "r.html"],
    "ingest": ["ingest", str(SAMPLES / "diagnostic_1088.jsonl")],
}
NOT_A_STORE = "give --db a store hpa made (`hpa ingest FILE --db NEW.duckdb`)"


def run(db: Path, command: str):
    return CliRunner().invoke(cli, [*COMMANDS[command], "--db", str(db)])


def _sqlite(path: Path) -> None:
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE requests (a INTEGER)")
    con.commit()
    con.close()


def _other_duckdb(path: Path) -> None:
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE requests (id INTEGER, name VARCHAR)")
    con.execute("CREATE TABLE users (id INTEGER)")
    con.close()


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize(
    ("make", "message"),
    [
        (_sqlite, "a SQLite database, not an hpa store; " + NOT_A_STORE),
        (lambda p: p.write_text('{"a": 1}\n'), "not a DuckDB database, not an hpa store; "
         + NOT_A_STORE),
        (_other_duckdb, "not an hpa store (a DuckDB database of another program: tables "
         "requests, users, no hpa meta table); give --db a store hpa made, or a new file"),
    ],
)  # fmt: skip
def test_a_file_that_is_no_hpa_store_is_one_line_and_left_as_it_was(
    tmp_path, monkeypatch, command, make, message
):
    monkeypatch.chdir(tmp_path)
    db = tmp_path / "other.db"
    make(db)
    before = db.read_bytes()
    result = run(db, command)
    assert (result.exit_code, result.output) == (1, f"Error: {db}: {message}\n")
    assert db.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["other.db"]


@pytest.fixture
def store(tmp_path) -> Path:
    db = tmp_path / "s.duckdb"
    ingest([SAMPLES / "diagnostic_1088.jsonl"], db_path=db)
    return db


@pytest.mark.parametrize("reader", [False, True])
def test_no_connection_fetches_or_loads_an_extension(store, reader):
    con = connect(store, create=False, reader=reader)
    try:
        settings = con.execute(
            "SELECT name, value FROM duckdb_settings() WHERE name IN "
            "('autoinstall_known_extensions', 'autoload_known_extensions') ORDER BY name"
        ).fetchall()
    finally:
        con.close()
    assert settings == [
        ("autoinstall_known_extensions", "false"),
        ("autoload_known_extensions", "false"),
    ]


def _damage_token_ids(db: Path) -> None:
    """Flip bytes inside the data block that holds the requests' token ids: its checksum no
    longer matches (DuckDB's file: three 4 KiB headers, then blocks of 256 KiB)."""
    con = duckdb.connect(str(db), read_only=True)
    [(block,)] = con.execute(
        "SELECT DISTINCT block_id FROM pragma_storage_info('requests') "
        "WHERE column_name = 'prompt_token_ids' AND segment_type = 'INTEGER' AND block_id >= 0"
    ).fetchall()
    con.close()
    data = bytearray(db.read_bytes())
    start = 3 * 4096 + block * 262144 + 1024
    data[start : start + 64] = bytes(b ^ 0xFF for b in data[start : start + 64])
    db.write_bytes(bytes(data))


@pytest.mark.parametrize("command", ["match", "replay", "sweep", "plan"])
def test_a_damaged_data_block_is_one_line_naming_the_store(store, command):
    _damage_token_ids(store)
    result = run(store, command)
    assert result.exit_code == 1
    assert result.output.startswith(
        f"Error: {store}: the store is damaged (Corrupt database file: computed checksum "
    ) or result.output.startswith(
        f"Error: {store}: the store is damaged (Data Corruption Error: Corrupt database file: "
    ), result.output
    assert result.output.endswith(
        "); nothing was stored; restore it from a copy, or ingest the traces into a new store\n"
    )
    assert result.output.count("\n") == 1


def test_a_command_that_only_reads_leaves_the_store_open_to_others(store):
    """A process holding a reader's connection (as report, metrics, compare, calibrate and
    plan open the store) holds no write lock: `hpa query` runs beside it, a writer is told
    who holds it.
    Before, the reader's connection was writable and `hpa query` was refused: locked."""
    holder = subprocess.Popen(
        [sys.executable, "-c", "from analyzer.store.db import connect; import sys; "
         f"con = connect({str(store)!r}, create=False, reader=True); print('open', flush=True); "
         "sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline() == "open\n"
        done = subprocess.run(
            [*HPA, "query", "SELECT count(*) AS n FROM requests", "--format", "csv", "--db",
             str(store)], capture_output=True, text=True,
        )  # fmt: skip
        assert (done.returncode, done.stdout, done.stderr) == (0, "n\n3\n", "")
        writer = subprocess.run([*HPA, *COMMANDS["match"], "--db", str(store)],
                                capture_output=True, text=True)  # fmt: skip
        assert writer.returncode == 1
        assert writer.stderr.startswith(
            f"Error: {store}: locked by another process (pid {holder.pid}: "
        )
    finally:
        holder.communicate("")
