"""`hpa query` opens the store read-only and reaches no file unless told to (issue 13,
item 10: DROP TABLE, COPY ... TO, read_csv('/etc/passwd'), ATTACH and INSTALL all ran)."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from analyzer.cli import cli
from analyzer.store.ingest import ingest

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"
FILES = " (pass --files to let the query read or write files)\n"


@pytest.fixture
def db(tmp_path) -> Path:
    path = tmp_path / "q.duckdb"
    ingest([SAMPLES / "diagnostic_1088.jsonl"], db_path=path)
    return path


def query(db: Path, sql: str, *flags: str):
    return CliRunner().invoke(cli, ["query", sql, "--db", str(db), "--format", "csv", *flags])


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        (
            "DROP TABLE requests",
            "Error: query refused: 'DROP TABLE requests' is not a query; pass --write to let "
            "it change the database\n",
        ),
        (
            "SELECT * FROM read_csv('/etc/passwd')",
            'Error: query failed: Permission Error: Cannot access file "/etc/passwd" - file '
            "system operations are disabled by configuration" + FILES,
        ),
        (
            "INSTALL httpfs",
            "Error: query refused: 'INSTALL httpfs' is not a query; pass --files to let it read "
            "or write files\n",
        ),
        (
            "ATTACH '/tmp/other.duckdb'",
            "Error: query refused: \"ATTACH '/tmp/other.duckdb'\" is not a query; pass --files "
            "to let it read or write files\n",
        ),
    ],
)
def test_a_guarded_query_is_refused_in_one_line(db, sql, message):
    result = query(db, sql)
    assert result.exit_code == 1  # a store error
    assert result.output == message
    assert query(db, "SELECT count(*) AS n FROM requests").output == "n\n3\n"


def test_write_and_files_opt_in(db, tmp_path):
    out = tmp_path / "r.parquet"
    refused = query(db, f"COPY requests TO '{out}' (FORMAT parquet)")
    assert refused.exit_code == 1 and not out.exists()
    assert refused.output.endswith(" is not a query; pass --files to let it read or write files\n")
    assert query(db, f"COPY requests TO '{out}' (FORMAT parquet)", "--files").exit_code == 0
    assert duckdb.sql(f"SELECT count(*) FROM '{out}'").fetchall() == [(3,)]
    assert query(db, "CREATE TABLE notes AS SELECT 1 AS x", "--write").exit_code == 0
    assert query(db, "SELECT x FROM notes").output == "x\n1\n"


def test_a_missing_database_is_one_line(tmp_path):
    result = query(tmp_path / "none.duckdb", "SELECT 1")
    assert result.exit_code == 1  # a store error
    assert result.output == (
        f"Error: {tmp_path / 'none.duckdb'}: no such database; run `hpa ingest FILE --db "
        f"{tmp_path / 'none.duckdb'}` first\n"
    )


@pytest.mark.parametrize("flags", [[], ["--write"]])
def test_an_empty_file_is_no_database_as_every_command_says(tmp_path, flags):
    """(docs/commands.md: an empty file is no store; the read-only query called it `not a
    DuckDB database, not an hpa store`, the other commands `no such database`)"""
    empty = tmp_path / "e.duckdb"
    empty.write_bytes(b"")
    result = query(empty, "SELECT 1", *flags)
    assert (result.exit_code, result.output) == (
        1,
        f"Error: {empty}: no such database (an empty file); run `hpa ingest FILE --db {empty}` "
        "first\n",
    )
    assert empty.read_bytes() == b""


@pytest.fixture
def hostile(tmp_path) -> Path:
    """A store whose fields hold a terminal escape and a spreadsheet formula."""
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        '{"request_id": "=HYPERLINK(1)", "prompt_token_ids": [1],'
        ' "prompt_family": "a\\u001b[31mred\\u009b"}\n'
    )
    path = tmp_path / "h.duckdb"
    ingest([trace], db_path=path)
    return path


SQL = "SELECT request_id, prompt_family FROM requests"


def test_printed_tables_escape_control_characters(hostile):
    result = CliRunner().invoke(cli, ["query", SQL, "--db", str(hostile)])
    assert result.exit_code == 0
    assert "\x1b" not in result.output and "\x9b" not in result.output
    assert "=HYPERLINK(1)  a\\x1b[31mred\\x9b" in result.output


def test_csv_neutralises_formulas_and_keeps_data_through_a_pipe(hostile):
    """Not a terminal: the bytes are the data's (click would have stripped the escape),
    except the apostrophe that keeps a spreadsheet from running the cell."""
    result = query(hostile, SQL)
    assert result.output == "request_id,prompt_family\n'=HYPERLINK(1),a\x1b[31mred\x9b\n"


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("rows.csv", b'"request_id","prompt_family"\n"\'=HYPERLINK(1)","a\x1b[31mred\xc2\x9b"\n'),
        (
            "rows.jsonl",
            b'{"request_id":"=HYPERLINK(1)","prompt_family":"a\\u001b[31mred\xc2\x9b"}\n',
        ),
    ],
)
def test_out_writes_the_rows_to_a_file(hostile, tmp_path, name, expected):
    (tmp_path / "sub").mkdir()  # only the file is made (issue 47 item 10)
    out = tmp_path / "sub" / name
    result = CliRunner().invoke(cli, ["query", SQL, "--db", str(hostile), "--out", str(out)])
    assert (result.exit_code, result.output) == (0, f"wrote 1 row to {out}\n")
    assert out.read_bytes() == expected
    assert [p.name for p in out.parent.iterdir()] == [name]  # no temporary file left


@pytest.mark.parametrize(
    ("out", "message"),
    [
        ("rows.txt", "unknown format '.txt'; use one of .parquet, .jsonl, .csv"),
        ("/proc/nope/rows.csv", "no such folder /proc/nope; make it first"),
        ("/proc/rows.jsonl", "cannot write (No such file or directory)"),
    ],
)
def test_out_errors_are_one_line(db, out, message):
    result = CliRunner().invoke(cli, ["query", "SELECT 1", "--db", str(db), "--out", out])
    assert (result.exit_code, result.output) == (2, f"Error: --out {out}: {message}\n")


# A table not stored yet names the command that writes it (DuckDB's guess for `validations`
# was "junctions"); any other keeps DuckDB's closest name, which its first line left out.
@pytest.mark.parametrize(
    ("table", "hint"),
    [
        ("validations", "(nothing has stored it yet: `hpa validate` writes it)"),
        ("sweep_points", "(nothing has stored it yet: `hpa sweep` writes it)"),
        ("requets", '(did you mean "requests"?)'),
    ],
)
def test_a_table_not_stored_says_what_writes_it(db, table, hint):
    result = query(db, f"SELECT * FROM {table}")
    assert (result.exit_code, result.output) == (
        1,
        f"Error: query failed: Catalog Error: Table with name {table} does not exist! {hint}\n",
    )
