"""Whose first request the load charts' simulated clock starts at (pass over TraceLab, item
3: two model revisions 72 days apart were both drawn at 0-200 s under 's since the first
arrival'). sim/vllm/concurrent.py starts each cache's clock at its own earliest request; a
live router's replicas share their model revision's (sim/fleet.py)."""

from __future__ import annotations

import pytest

from analyzer.pipeline.replay import run_replay
from analyzer.report import load
from analyzer.report.data import load_report_data
from analyzer.report.load import ARRIVAL_AXES, arrival_axis
from analyzer.sim.dispatch import make_policy
from analyzer.store.ingest import ingest
from tests.conftest import write_jsonl

DAY_S = 86_400.0


@pytest.mark.parametrize(
    ("policies", "clock"),
    [
        ([{"replicas": 1, "routing": "trace"}], "revision"),
        ([{"replicas": 2, "routing": "least_loaded"}], "revision"),  # one fleet clock
        ([{"replicas": 2, "routing": "round_robin"}], "replica"),
        ([{"replicas": 1}, {"replicas": 2, "routing": "session"}], "cache"),
    ],
)
def test_the_axis_names_whose_first_request_the_clock_starts_at(policies, clock):
    assert arrival_axis(policies) == ARRIVAL_AXES[clock]


def test_two_revisions_apart_in_time_are_each_drawn_from_their_own_first_request(tmp_path):
    records = [
        {"request_id": f"{rev}{i}", "timestamp": start + i, "model_revision": rev,
         "prompt_token_ids": [1] * 64 + [1_000 + i] * 32, "output_tokens": 4}
        for rev, start in (("a", 0.0), ("b", 72 * DAY_S))
        for i in range(5)
    ]  # fmt: skip
    db = tmp_path / "t.duckdb"
    ingest([write_jsonl(tmp_path / "t.jsonl", records)], db_path=db)
    run_replay(make_policy({"block_size": 16, "schedule": "concurrent"}), db_path=db)
    data = load_report_data(db)
    assert data.load_windows["window_idx"].max() < 10  # both revisions start at 0 s
    fig = load.load_figure(data.load_windows, load._axis(data))
    assert fig.layout.xaxis3.title.text == (
        "simulated arrival time (s since its model revision's first request; each revision "
        "has its own clock)"
    )
