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
import numpy as np
import pytest
from click.testing import CliRunner

from analyzer.cli import cli
from analyzer.store.db import NO_EXTENSIONS, connect
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
    plan open the store) holds no write lock: `hpa query` runs beside it, a command that
    writes from its start is told who holds it.
    Before, the reader's connection was writable and `hpa query` was refused: locked."""
    holder = _hold_reader(store)
    try:
        done = subprocess.run(
            [*HPA, "query", "SELECT count(*) AS n FROM requests", "--format", "csv", "--db",
             str(store)], capture_output=True, text=True,
        )  # fmt: skip
        assert (done.returncode, done.stdout, done.stderr) == (0, "n\n3\n", "")
        writer = subprocess.run(
            [*HPA, "query", "CREATE TABLE notes AS SELECT 1 AS x", "--write", "--db", str(store)],
            capture_output=True, text=True,
        )  # fmt: skip
        assert writer.returncode == 1
        assert writer.stderr.startswith(
            f"Error: {store}: locked by another process (pid {holder.pid}: "
        )
    finally:
        holder.communicate("")


def _hold_reader(store: Path) -> subprocess.Popen:
    """A process holding a read-only connection to `store` until its stdin closes."""
    holder = subprocess.Popen(
        [sys.executable, "-c", "from analyzer.store.db import connect; import sys; "
         f"con = connect({str(store)!r}, create=False, reader=True); print('open', flush=True); "
         "sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert holder.stdout.readline() == "open\n"
    return holder


@pytest.mark.parametrize("command", ["replay", "sweep", "match"])
def test_a_writer_computes_without_the_lock_and_waits_to_store(store, command):
    """replay, sweep and match read the trace read-only and let go of it while they compute:
    with a reader holding the store (a long `hpa report`), they compute, say once that they
    wait, `hpa query` runs meanwhile, and they store when the reader ends. Before, they held
    the write lock from start to end, and a reader made them fail at the start."""
    holder = _hold_reader(store)
    args = [*HPA, *COMMANDS[command], "--db", str(store)]
    writer = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        said = writer.stderr.readline()
        assert said.startswith(f"hpa: {store}: locked by another process (pid {holder.pid}: ")
        assert said.endswith("); waiting for it to end, to store the results\n")
        done = subprocess.run(
            [*HPA, "query", "SELECT count(*) AS n FROM requests", "--format", "csv", "--db",
             str(store)], capture_output=True, text=True,
        )  # fmt: skip
        assert (done.returncode, done.stdout) == (0, "n\n3\n")
    finally:
        holder.communicate("")
        out, err = writer.communicate()
    assert (writer.returncode, err) == (0, ""), err
    table = {"replay": "replay_runs", "sweep": "sweep_points", "match": "prefix_matches"}[command]
    con = duckdb.connect(str(store), read_only=True)
    try:
        assert con.execute(f"SELECT count(*) > 0 FROM {table}").fetchall() == [(True,)]
    finally:
        con.close()


def test_results_of_a_trace_that_changed_meanwhile_are_not_stored(store):
    from analyzer.errors import StoreError
    from analyzer.store.db import open_to_store, trace_fingerprint

    con = connect(store, create=False, reader=True)
    read_from = trace_fingerprint(con)[0]
    con.close()
    ingest([SAMPLES / "diagnostic_1087.jsonl"], db_path=store)
    with pytest.raises(StoreError) as caught:
        open_to_store(store, read_from)
    assert str(caught.value) == (
        f"{store}: the stored trace changed while this command computed (another command "
        "ingested or replaced it); nothing was stored; run it again"
    )


def test_a_reader_is_attached_again_writable_in_its_own_duckdb_instance(store):
    """open_to_store(reader=...) lets go of the read-only store and attaches it writable on
    the same connection: no second DuckDB instance to start (15-20 ms of `hpa match`)."""
    from analyzer.store.db import open_to_store, trace_fingerprint

    con = connect(store, create=False, reader=True)
    read_from = trace_fingerprint(con)[0]
    with pytest.raises(duckdb.Error, match="read-only"):
        con.execute("CREATE TABLE written AS SELECT 7 AS x")
    writer = open_to_store(store, read_from, reader=con)
    assert writer is con
    writer.execute("CREATE TABLE written AS SELECT 7 AS x")
    writer.close()
    check = duckdb.connect(str(store), read_only=True)
    try:
        assert check.execute("SELECT x FROM written").fetchall() == [(7,)]
    finally:
        check.close()


def test_a_reader_closed_meanwhile_gives_way_to_a_new_writable_connection(store):
    from analyzer.store.db import open_to_store, trace_fingerprint

    con = connect(store, create=False, reader=True)
    read_from = trace_fingerprint(con)[0]
    con.close()
    writer = open_to_store(store, read_from, reader=con)
    try:
        assert writer is not con
        writer.execute("CREATE TABLE written AS SELECT 8 AS x")
    finally:
        writer.close()


def test_a_store_removed_while_the_command_computed_is_not_made_again(store):
    from analyzer.errors import StoreError
    from analyzer.store.db import open_to_store, trace_fingerprint

    con = connect(store, create=False, reader=True)
    read_from = trace_fingerprint(con)[0]
    store.unlink()
    try:
        with pytest.raises(StoreError) as caught:
            open_to_store(store, read_from, reader=con)
    finally:
        con.close()
    assert str(caught.value) == (
        f"{store}: no such database; run `hpa ingest FILE --db {store}` first"
    )
    assert not store.exists()


def test_a_workers_connection_fetches_or_loads_no_extension(store, monkeypatch):
    """A worker reading its partition's sequences opens the store itself, with the same
    settings as every other connection to it."""
    from analyzer.store import sequences

    opened, real = [], duckdb.connect

    def spy(*args, **kwargs):
        opened.append(kwargs.get("config", {}))
        return real(*args, **kwargs)

    monkeypatch.setattr(sequences.duckdb, "connect", spy)
    flat, offsets = sequences.read_sequences(
        sequences.TraceInput(db_path=str(store)), np.array([0, 1])
    )
    assert len(offsets) == 3 and len(flat) == offsets[-1]
    assert opened == [NO_EXTENSIONS]
