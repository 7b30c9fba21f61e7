"""What the report loads about its runs (analyzer/report/data.py)."""

from __future__ import annotations

from analyzer.pipeline.replay import run_replay
from analyzer.report.data import load_report_data
from analyzer.sim.dispatch import make_policy
from tests.report.conftest import MODEL


def test_a_fleet_run_is_not_named_by_its_routers_default_knobs(db_copy):
    """A live router's run stores its router's knobs at their defaults (dynamo_*, router_*),
    which the serial runs beside it do not hold: the run was named 'run 3 · vllm ·
    dynamo_active_request_weight=0.0, …' (the WEKA trace, routing=dynamo) and its hover
    listed every default as a change. Only what differs names it now."""
    fleet = {"model": MODEL, "schedule": "concurrent", "replicas": 2, "routing": "dynamo"}
    run_replay(make_policy(fleet), db_path=db_copy)
    tuned = {**fleet, "dynamo_overlap_credit": 0.5}
    run_replay(make_policy(tuned), db_path=db_copy)
    runs = load_report_data(db_copy).runs
    labels = runs["run_label"].to_list()
    assert labels[2] == "run 3 · vllm · replicas=2, routing=dynamo, schedule=concurrent"
    assert labels[3].startswith("run 4 · vllm · dynamo_overlap_credit=0.5, replicas=2")
    changes = runs["policy_changes"].to_list()
    assert "dynamo_active_request_weight" not in changes[2] + changes[3]
    assert "router_seed" not in changes[2] + changes[3]
    assert "dynamo_overlap_credit=0.5" in changes[3]


def test_a_run_measured_from_a_later_request_shows_its_measured_requests(db_copy):
    """`hpa replay --measure-from 0.5` prints and stores (replay_runs) the second half's
    figures; the report's waterfalls, runs table and summary counted every request, warm-up
    included (Mooncake: 12,031 requests and 32.6% against the CLI's 6,016 and 35.0%)."""
    from tests.conftest import db_rows

    run_replay(make_policy({"model": MODEL}), db_path=db_copy, measure_from=0.5)
    groups = load_report_data(db_copy).groups
    total = groups.filter(groups["is_overall"] & (groups["run_id"] == 3)).row(0, named=True)
    stored = db_rows(db_copy, "SELECT prompt_tokens, hit_tokens FROM replay_runs WHERE run_id = 3")
    assert (total["prompt_tokens"], total["hit_tokens"]) == stored[0]
    measured = "SELECT count(*) FROM replay_requests WHERE run_id = 3 AND measured"
    assert total["num_requests"] == db_rows(db_copy, measured)[0][0] == 1250
