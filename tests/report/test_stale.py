"""Derived tables know what they were computed from (issue 13, item 7): after a new ingest,
the report no longer joins the old `hpa match` tables to runs of another trace; it says
which runs it left out and which runs replayed the store before it changed."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from analyzer.pipeline.match import match_prefixes
from analyzer.pipeline.replay import run_replay
from analyzer.report.data import load_report_data
from analyzer.report.html import render_report
from analyzer.sim.dispatch import make_policy
from analyzer.store.db import connect, derived_from
from analyzer.store.ingest import ingest

SAMPLES = Path(__file__).parents[2] / "sample_traces"
POLICY = {"block_size": 64}


def _more_requests(tmp_path: Path, prefix: str = "later-", families: bool = True) -> Path:
    """groups_1600 under new request ids (`prefix`), arriving after groups_1500 (without
    their prompt families unless `families`)."""
    out = tmp_path / f"{prefix}.jsonl"
    lines = []
    for line in (SAMPLES / "groups_1600.jsonl").read_bytes().splitlines():
        record = orjson.loads(line)
        record["request_id"] = prefix + record["request_id"]
        if not families:
            del record["prompt_family"]
        record["timestamp"] = record.get("timestamp", 0) + 1e4
        lines.append(orjson.dumps(record))
    out.write_bytes(b"\n".join(lines) + b"\n")
    return out


@pytest.fixture
def db(tmp_path) -> Path:
    """Run 1 replays groups_1500 after `hpa match`; then more requests arrive; run 2."""
    path = tmp_path / "s.duckdb"
    ingest([SAMPLES / "groups_1500.jsonl"], db_path=path)
    match_prefixes(path, backend="numpy")
    run_replay(make_policy(POLICY), db_path=path)
    ingest([_more_requests(tmp_path)], db_path=path)
    run_replay(make_policy(POLICY), db_path=path)
    return path


def test_match_records_what_it_matched(db):
    con = connect(db, create=False)
    try:
        assert derived_from(con, "junctions")[1] == 32
        assert derived_from(con, "prefix_matches")[1] == 32
        assert derived_from(con, "replay_runs") is None
    finally:
        con.close()


def test_junctions_of_another_trace_are_left_out_and_said(db, tmp_path):
    data = load_report_data(db)
    assert set(data.junctions["run_id"].to_list()) == {1}  # was {1, 2}, 32 rows for 64
    assert data.junction_note == (
        "run 2 replayed another trace than the one `hpa match` matched (32 requests); "
        "run `hpa match` again to see its junctions"
    )
    text = render_report(db, tmp_path / "r.html").path.read_text(encoding="utf-8")
    assert "Run 2 replayed another trace than the one <code>hpa match</code> matched" in text
    assert "the stored trace has changed since run 1 (it now holds 64 requests)" in text


def test_matching_again_moves_the_note_to_the_older_run(db):
    match_prefixes(db, backend="numpy")
    data = load_report_data(db)
    assert set(data.junctions["run_id"].to_list()) == {2}
    assert data.junction_note.startswith("run 1 replayed another trace")
    assert load_report_data(db, runs=[2]).junction_note is None


def test_tables_of_an_earlier_hpa_are_not_trusted(db):
    con = connect(db, create=False)
    try:
        con.execute("DROP TABLE derived_tables")
    finally:
        con.close()
    data = load_report_data(db)
    assert data.junctions is None
    assert data.junction_note.startswith("the junction tables do not say which trace")


def test_a_replay_says_when_derived_families_miss_new_requests(tmp_path):
    path = tmp_path / "f.duckdb"
    ingest([SAMPLES / "groups_1500.jsonl"], db_path=path)
    match_prefixes(path, backend="numpy", derive_families=True)
    assert run_replay(make_policy(POLICY), db_path=path).notes == ()
    ingest([_more_requests(tmp_path)], db_path=path)  # with families of their own
    assert run_replay(make_policy(POLICY), db_path=path).notes == ()
    ingest([_more_requests(tmp_path, "unlabelled-", families=False)], db_path=path)
    (note,) = run_replay(make_policy(POLICY), db_path=path).notes
    assert note == (
        "prompt families were derived by `hpa match --derive-families` from 32 requests; the "
        "store holds 96 now, 32 of them with no family (run it again)"
    )


def test_a_match_of_an_earlier_hpa_without_each_requests_junction_asks_for_a_match(db):
    """The report reads the junctions `hpa match` stored; it computes none itself (issue 34
    item 3: it ran the matcher's hashing over every sequence for such a store)."""
    con = connect(db, create=False)
    try:
        con.execute("DROP TABLE junction_requests")
    finally:
        con.close()
    data = load_report_data(db)
    assert data.junctions is None
    assert data.junction_note == (
        "the junction tables were written by an earlier hpa, without each request's "
        "junction; run `hpa match` again to see them"
    )
