"""`hpa query` refuses a statement that is no query before DuckDB runs it, by DuckDB's own
parse (issue 48, item 2: `CALL enable_logging(storage='file', ...)` aborted the process,
exit 134), and `--out` writes every type DuckDB returns exactly (a DECIMAL traced back and
left an empty `.x.jsonl.tmp`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from analyzer.cli import cli
from analyzer.errors import StoreError
from analyzer.store import export
from analyzer.store.ingest import ingest
from analyzer.store.query import check_statements

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"
HPA = [sys.executable, "-c", "from analyzer.cli import main; main()"]
WRITE = "pass --write to let it change the database"
FILES = "pass --files to let it read or write files"
BOTH = "pass --write and --files to let it run (it may change the database or reach files)"


@pytest.fixture
def db(tmp_path) -> Path:
    path = tmp_path / "q.duckdb"
    ingest([SAMPLES / "diagnostic_1088.jsonl"], db_path=path)
    return path


@pytest.mark.parametrize(
    ("sql", "refused"),
    [
        ("SELECT 1", None),
        ("FROM requests", None),
        ("DESCRIBE requests", None),
        ("SHOW TABLES", None),
        ("SUMMARIZE requests", None),
        ("EXPLAIN SELECT 1", None),
        ("VALUES (1)", None),
        ("PRAGMA table_info('requests')", None),
        ("PRAGMA version", None),
        ("CALL pragma_table_info('requests')", None),
        ("SELECT * FROM range(3) r, duckdb_tables()", None),
        ("SELECT * FROM read_csv('x.csv')", None),  # DuckDB refuses the file itself
        ("PRAGMA threads=4", WRITE),
        ("PRAGMA force_checkpoint", WRITE),
        ("SET threads=1", WRITE),
        ("RESET threads", WRITE),
        ("SET VARIABLE x = 1", WRITE),
        ("USE memory", WRITE),
        ("CHECKPOINT", WRITE),
        ("VACUUM", WRITE),
        ("BEGIN", WRITE),
        ("DROP TABLE requests", WRITE),
        ("INSERT INTO sources VALUES (1)", WRITE),
        ("CREATE SECRET (TYPE s3)", WRITE),
        ("LOAD httpfs", FILES),
        ("INSTALL httpfs", FILES),
        ("ATTACH 'x.duckdb'", FILES),
        ("DETACH x", FILES),
        ("EXPORT DATABASE 'd'", FILES),
        ("IMPORT DATABASE 'd'", FILES),
        ("COPY requests TO 'x.csv'", FILES),
        ("CALL enable_logging(storage='file', storage_path='d')", BOTH),
        ("SELECT * FROM enable_logging(storage='file')", BOTH),
        ("WITH a AS (FROM query('CHECKPOINT')) FROM a", BOTH),
        ("EXPLAIN ANALYZE SELECT * FROM checkpoint()", BOTH),
        ("UPDATE EXTENSIONS", BOTH),
        ("PIVOT requests ON model_revision", BOTH),  # no syntax tree to check
    ],
)
def test_each_kind_of_statement_needs_its_flag(sql, refused):
    if refused is None:
        check_statements(sql)
        return
    with pytest.raises(StoreError) as caught:
        check_statements(sql)
    assert str(caught.value) == f"query refused: {sql!r} is not a query; {refused}"
    flags = {"write": "--write" in refused, "files": "--files" in refused}
    check_statements(sql, **flags)  # the flags it names let it run


def test_every_statement_is_checked_and_a_parse_error_is_one_line():
    with pytest.raises(StoreError) as caught:
        check_statements("SELECT 1; CHECKPOINT")
    assert str(caught.value) == f"query refused: statement 2 'CHECKPOINT' is not a query; {WRITE}"
    with pytest.raises(StoreError) as caught:
        check_statements("SELEC 1")
    assert str(caught.value) == 'query failed: Parser Error: syntax error at or near "SELEC"'


def test_enable_logging_is_refused_before_duckdb_runs_it(db, tmp_path):
    """A process of its own: DuckDB aborted it (exit 134) before the refusal."""
    sql = f"CALL enable_logging(storage='file', storage_path='{tmp_path / 'd'}')"
    done = subprocess.run([*HPA, "query", sql, "--db", str(db)], capture_output=True, text=True)
    text = " ".join(sql.split())
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == f"Error: query refused: {text[:57] + '...'!r} is not a query; {BOTH}\n"
    assert not (tmp_path / "d").exists()


TYPES = (
    "SELECT sum(prompt_tokens) AS s, 1.500::DECIMAL(18,3) AS d, "
    "(-170141183460469231731687303715884105728)::HUGEINT AS h, "
    "INTERVAL '1 month 2 days 3 seconds' AS i, '00000000-0000-0000-0000-000000000001'::UUID AS u, "
    "'ab\\x00c\\xff'::BLOB AS b, TIME '12:34:56.789' AS t, TIMETZ '12:00:00+02' AS tz, "
    "TIMESTAMP_NS '2020-01-01 01:02:03.123456789' AS ns, "
    "{'a': 1.5::DECIMAL(5,2), 'b': ['nan'::DOUBLE]} AS st, MAP {'k': 1} AS m, "
    "union_value(n := 1) AS un, '101'::BIT AS bt, '-inf'::DOUBLE AS inf FROM requests"
)
TEXTS = {
    "i": "1 month 2 days 00:00:03",
    "u": "00000000-0000-0000-0000-000000000001",
    "tz": "12:00:00+02",
    "ns": "2020-01-01 01:02:03.123456789",
    "un": "1",
    "bt": "101",
}


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (
            "x.jsonl",
            '{"s":6528,"d":1.500,"h":-170141183460469231731687303715884105728,'
            '"i":"1 month 2 days 00:00:03","u":"00000000-0000-0000-0000-000000000001",'
            '"b":"YWIAY/8=","t":"12:34:56.789000","tz":"12:00:00+02",'
            '"ns":"2020-01-01 01:02:03.123456789","st":{"a":1.50,"b":["NaN"]},"m":[["k",1]],'
            '"un":"1","bt":"101","inf":"-Infinity"}\n',
        ),
        (
            "x.csv",
            '"s","d","h","i","u","b","t","tz","ns","st","m","un","bt","inf"\n'
            '6528,1.500,-170141183460469231731687303715884105728,"1 month 2 days 00:00:03",'
            '"00000000-0000-0000-0000-000000000001","YWIAY/8=",12:34:56.789000,"12:00:00+02",'
            '"2020-01-01 01:02:03.123456789","{""a"":1.50,""b"":[""NaN""]}","[[""k"",1]]","1",'
            '"101",-inf\n',
        ),
    ],
)
def test_out_writes_every_type_exactly(db, tmp_path, name, expected):
    out = tmp_path / name
    result = CliRunner().invoke(cli, ["query", TYPES, "--db", str(db), "--out", str(out)])
    assert (result.exit_code, result.output) == (0, f"wrote 1 row to {out}\n")
    assert out.read_text() == expected
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["q.duckdb", name])


def test_out_parquet_keeps_decimals_and_reads_back(db, tmp_path):
    out = tmp_path / "x.parquet"
    result = CliRunner().invoke(cli, ["query", TYPES, "--db", str(db), "--out", str(out)])
    assert result.exit_code == 0, result.output
    table = pq.read_table(out)
    assert table.schema.field("h").type == pa.decimal128(38, 0)
    row = table.to_pylist()[0]
    assert str(row["h"]) == "-170141183460469231731687303715884105728"
    assert {k: row[k] for k in TEXTS} == TEXTS
    assert duckdb.sql(f"SELECT s, d::VARCHAR FROM '{out}'").fetchall() == [(6528, "1.500")]


def test_a_failed_write_leaves_no_temporary_file(tmp_path, monkeypatch):
    """Any failure, not only the machine's: the half-written file beside the target goes."""

    def half_written(table, where, **kwargs):  # `where`: the file write_rows opened
        where.write(b"PAR1")
        raise KeyboardInterrupt

    monkeypatch.setattr(pq, "write_table", half_written)
    with pytest.raises(KeyboardInterrupt):
        export.write_rows(pa.table({"x": [1]}), tmp_path / "x.parquet")
    assert list(tmp_path.iterdir()) == []


# Dates and timestamps Python's dates cannot hold (year 1 to 9999): DuckDB's text of the
# column, on the screen and in --out (they traced back: "OverflowError: date value out of
# range", and --out wrote "<value out of range: 9223372036854775807>"); a column in range
# keeps its type.
PAST_PYTHON = (
    "SELECT 'infinity'::TIMESTAMP AS t, '-infinity'::DATE AS d, "
    "'294000-01-01'::TIMESTAMP AS big, 'infinity'::TIMESTAMPTZ AS tz, "
    "'-infinity'::TIMESTAMP_S AS s, '2024-05-01 10:00:00'::TIMESTAMP AS ok"
)


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--format", "json"], '{"t":"infinity","d":"-infinity","big":"294000-01-01 00:00:00",'
         '"tz":"infinity","s":"-infinity","ok":"2024-05-01T10:00:00"}\n'),
        # a text cell that starts like a formula gets its apostrophe, as every text cell
        (["--format", "csv"], "t,d,big,tz,s,ok\ninfinity,'-infinity,294000-01-01 00:00:00,"
         "infinity,'-infinity,2024-05-01 10:00:00\n"),
    ],
)  # fmt: skip
def test_dates_past_python_are_duckdbs_text(db, args, expected):
    result = CliRunner().invoke(cli, ["query", PAST_PYTHON, "--db", str(db), *args])
    assert (result.exit_code, result.output) == (0, expected)


def test_dates_past_python_in_out_and_in_range_keep_their_type(db, tmp_path):
    out = tmp_path / "x.parquet"
    result = CliRunner().invoke(cli, ["query", PAST_PYTHON, "--db", str(db), "--out", str(out)])
    assert result.exit_code == 0, result.output
    table = pq.read_table(out)
    assert table.schema.field("t").type == pa.string()
    assert table.schema.field("ok").type == pa.timestamp("us")
    assert table.column("t").to_pylist() == ["infinity"]
