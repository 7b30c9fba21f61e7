"""The report's incident section (analyzer/report/incident.py)."""

from __future__ import annotations

from analyzer.pipeline.compare import compare
from analyzer.pipeline.replay import run_replay
from analyzer.report.incident import _group_rows
from analyzer.sim.dispatch import make_policy
from analyzer.store.ingest import ingest
from tests.conftest import write_jsonl


def test_a_trace_of_one_group_shows_its_row_once(tmp_path):
    """Without families or revisions (Mooncake) a comparison has one group and no total
    row: the section's table showed that group twice (its last row taken for the total)."""
    records = [
        {"request_id": f"r{i}", "timestamp": float(i), "prompt_token_ids": [1, 2, 3, 4, i]}
        for i in range(8)
    ]
    db = tmp_path / "one.duckdb"
    ingest([write_jsonl(tmp_path / "one.jsonl", records)], db_path=db)
    run_replay(make_policy({"block_size": 2}), db_path=db)
    rows = _group_rows(compare(db_path=db, window="4..", baseline="..4"))
    assert rows == [["no family", "no revision", "4", "4", "60.0%", "80.0%", "+20.0"]]
