"""store.db.connect: how every connection writes the store."""

import os

import duckdb
import pytest

from analyzer.store.db import connect
from analyzer.store.ingest import ingest
from analyzer.store.scan import scan_settings, under_each_cap
from tests.conftest import write_jsonl

ROW_GROUPS = "SELECT count(DISTINCT row_group_id) FROM pragma_storage_info('requests')"


def test_ingest_writes_small_row_groups_that_later_writers_keep(tmp_path):
    """Rows reach the file in row groups of 2,048 (not once through the write-ahead log and
    again at the checkpoint), and a later command's checkpoint does not merge them, which
    would rewrite the whole table."""
    records = [{"request_id": f"r{i}", "prompt_token_ids": [i % 7, 1, 2]} for i in range(5000)]
    db = tmp_path / "t.duckdb"
    ingest([write_jsonl(tmp_path / "t.jsonl", records)], db_path=db)
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute(ROW_GROUPS).fetchall() == [(3,)]  # 2,048 + 2,048 + 904
    con = connect(db)
    try:
        con.execute("CREATE TABLE notes AS SELECT 1 AS x")
        con.execute("CHECKPOINT")
        assert con.execute(ROW_GROUPS).fetchall() == [(3,)]
    finally:
        con.close()


@pytest.mark.parametrize("opened_with", ["1GB", None])
def test_scan_settings_restore_the_connection_even_after_an_error(tmp_path, opened_with):
    con = connect(tmp_path / "t.duckdb", memory_limit=opened_with)
    settings = "SELECT current_setting('memory_limit'), current_setting('threads')"
    try:
        before = con.execute(settings).fetchall()
        assert before[0][1] == 1  # one thread: DuckDB's parallel float sums vary by run
        for _ in range(3):  # exactly as opened, however often
            with scan_settings(con, "64MB"):
                assert con.execute(settings).fetchall() == [("61.0 MiB", os.cpu_count())]
            assert con.execute(settings).fetchall() == before
        with scan_settings(con):  # every core, the memory limit as it was
            assert con.execute(settings).fetchall() == [(before[0][0], os.cpu_count())]
        assert con.execute(settings).fetchall() == before
        with pytest.raises(ZeroDivisionError), scan_settings(con, "64MB"):
            1 / 0  # noqa: B018
        assert con.execute(settings).fetchall() == before
    finally:
        con.close()


def test_a_connection_connect_did_not_open_gets_duckdbs_defaults_back():
    con = duckdb.connect()
    settings = "SELECT current_setting('memory_limit'), current_setting('threads')"
    before = con.execute(settings).fetchall()
    with scan_settings(con, "64MB"):
        pass
    assert con.execute(settings).fetchall() == before


def _runs_out_under(caps_short: set):
    tried = []

    def run(cap):
        tried.append(cap)
        if cap in caps_short:
            raise duckdb.OutOfMemoryException("Out of Memory Error: failed to pin block")
        return f"done under {cap}"

    return run, tried


@pytest.mark.parametrize(
    ("short", "want", "tried"),
    [
        (set(), "done under 48MB", ["48MB"]),
        ({"48MB"}, "done under 256MB", ["48MB", "256MB"]),
        ({"48MB", "256MB"}, "done under None", ["48MB", "256MB", None]),
    ],
)
def test_under_each_cap_tries_the_next_only_when_out_of_memory(short, want, tried):
    run, got = _runs_out_under(short)
    assert under_each_cap(run, ("48MB", "256MB", None)) == want
    assert got == tried


def test_under_each_cap_the_last_is_final_and_other_errors_pass():
    run, _ = _runs_out_under({"48MB", None})
    with pytest.raises(duckdb.OutOfMemoryException):
        under_each_cap(run, ("48MB", None))

    def broken(cap):
        raise OSError("disk gone")  # not DuckDB's memory: no other cap is tried

    with pytest.raises(OSError, match="disk gone"):
        under_each_cap(broken, ("48MB", None))


def test_the_tables_and_their_schema_version_land_together(tmp_path, monkeypatch):
    """A store cut between creating its tables and writing its version (a kill there, under
    load, in test_faults) showed a read-only `hpa query` an empty meta that the next writer
    filled: an open that fails before the version is written leaves no table behind."""
    from analyzer.store import db as store_db

    path = tmp_path / "t.duckdb"
    duckdb.connect(str(path)).close()  # a DuckDB file holding nothing yet: kept on failure
    real = store_db.load_sql

    def failing(name):
        if name == "meta_set_schema_version":
            raise KeyboardInterrupt
        return real(name)

    monkeypatch.setattr(store_db, "load_sql", failing)
    with pytest.raises(KeyboardInterrupt):
        connect(path)
    with duckdb.connect(str(path), read_only=True) as con:
        assert con.execute("SHOW TABLES").fetchall() == []
    monkeypatch.setattr(store_db, "load_sql", real)
    connect(path).close()
    with duckdb.connect(str(path), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM meta").fetchall() == [(1,)]
