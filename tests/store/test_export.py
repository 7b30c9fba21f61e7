"""`--out` (and synth's OUT, report's -o, probe's folder) where no file can be made: one line
before any work, in the system's words, and nothing stored (`store.export.check_out_folder`).
Before, `hpa match --out /proc/m.csv` matched, stored its tables and then said `cannot write
(Failed to open local file '/proc/.m.csv.tmp'. Detail: [errno 2] ...)`: Arrow's words, naming
a temporary file the user never asked for."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from analyzer.cli import cli
from analyzer.pipeline.replay import run_replay
from analyzer.sim.dispatch import make_policy
from analyzer.store.ingest import ingest

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"
POLICY = ["--set", "block_size=64"]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    db = tmp_path_factory.mktemp("export") / "s.duckdb"
    ingest([SAMPLES / "groups_1500.jsonl"], db_path=db)
    run_replay(make_policy({"block_size": 64}), db_path=db)
    return db


def _tables(db: Path) -> list[str]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return sorted(
            r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()
        )
    finally:
        con.close()


# /proc is a folder no file can be made in, for root too (a read-only or immutable folder
# refuses with its own words the same way: tests/test_environment_errors.py)
@pytest.mark.parametrize(
    ("args", "where"),
    [
        (["match", "--out", "/proc/m.csv"], "--out /proc/m.csv"),
        (["match", "--out", "/proc/m.parquet"], "--out /proc/m.parquet"),
        (["replay", *POLICY, "--out", "/proc/r.jsonl"], "--out /proc/r.jsonl"),
        (["query", "SELECT 1", "--out", "/proc/q.csv"], "--out /proc/q.csv"),
        (["metrics", "--out", "/proc/m.prom"], "--out /proc/m.prom"),
        (["report", "-o", "/proc/r.html"], "--out /proc/r.html"),
        (["synth", "/proc/t.jsonl", "--num-requests", "3"], "/proc/t.jsonl"),
        (["probe", *POLICY, "--out", "/proc/probe"], "--out /proc/probe"),
    ],
)
def test_an_out_that_cannot_be_written_is_one_line_before_any_work(store, args, where):
    before = _tables(store)
    db = [] if args[0] in ("synth", "probe") else ["--db", str(store)]
    result = CliRunner().invoke(cli, [*args, *db])
    assert (result.exit_code, result.output) == (
        2,
        f"Error: {where}: cannot write (No such file or directory)\n",
    )
    assert _tables(store) == before  # match stored prefix_matches and junctions before


def test_a_folder_that_can_be_written_keeps_no_trace_of_the_check(tmp_path, store):
    out = tmp_path / "m.csv"
    result = CliRunner().invoke(cli, ["match", "--db", str(store), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert [p.name for p in tmp_path.iterdir()] == ["m.csv"]


def test_a_match_whose_out_file_fails_midway_stores_nothing(tmp_path, monkeypatch):
    """The export is part of match's transaction, as replay's is (it ran after the commit:
    prefix_matches and junctions stayed, with no file). A disk that fills while the file is
    written: a real write that fails once the match has computed."""
    import pyarrow.csv

    def full_disk(table, sink):
        sink.write(b"request_id")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(pyarrow.csv, "write_csv", full_disk)
    db = tmp_path / "m.duckdb"
    ingest([SAMPLES / "groups_1500.jsonl"], db_path=db)
    before = _tables(db)
    out = tmp_path / "m.csv"
    result = CliRunner().invoke(cli, ["match", "--db", str(db), "--out", str(out)])
    assert (result.exit_code, result.output) == (
        2,
        f"Error: --out {out}: cannot write (No space left on device)\n",
    )
    assert _tables(db) == before and "prefix_matches" not in before
    assert [p.name for p in tmp_path.iterdir()] == ["m.duckdb"]  # no file, no temporary one


# Every command that writes a file, by the file it writes (report's -o is --out)
WRITERS = [
    (["match", "--out"], ".csv", "--out "),
    (["match", "--out"], ".parquet", "--out "),
    (["replay", *POLICY, "--out"], ".jsonl", "--out "),
    (["query", "SELECT 1", "--out"], ".csv", "--out "),
    (["metrics", "--out"], ".prom", "--out "),
    (["report", "-o"], ".html", "--out "),
    (["synth", "--num-requests", "3"], ".jsonl", ""),
]


@pytest.mark.parametrize(("args", "suffix", "option"), WRITERS)
def test_an_out_name_of_255_bytes_is_written(tmp_path, store, args, suffix, option):
    """A name the folder takes is written, however long: the temporary file beside it has a
    short name of its own. Before, a name of 252 to 255 bytes failed with 'File name too
    long', the temporary file's (`.NAME.tmp`) being past 255."""
    out = tmp_path / ("o" * (255 - len(suffix)) + suffix)
    db = [] if args[0] == "synth" else ["--db", str(store)]
    result = CliRunner().invoke(cli, [*args, str(out), *db])
    assert result.exit_code == 0, result.output
    assert [p.name for p in tmp_path.iterdir()] == [out.name]  # no temporary file left
    umask = os.umask(0)
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~umask  # as open() makes it


@pytest.mark.parametrize(("args", "suffix", "option"), WRITERS)
def test_an_out_name_past_255_bytes_is_one_line(tmp_path, store, args, suffix, option):
    out = tmp_path / ("o" * (256 - len(suffix)) + suffix)
    db = [] if args[0] == "synth" else ["--db", str(store)]
    result = CliRunner().invoke(cli, [*args, str(out), *db])
    assert (result.exit_code, result.output) == (
        2,
        f"Error: {option}{out}: cannot write (File name too long)\n",
    )
    assert list(tmp_path.iterdir()) == []
