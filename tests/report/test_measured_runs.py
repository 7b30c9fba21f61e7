"""Runs measured over other requests (`hpa replay --measure-from`) are told apart: their
labels and the Policies table name measure_from, the summary compares the headline only with
runs measured over the same requests, and the Policies sentence says when a change is over
other requests. (Mooncake: a run and the same policy from 0.2 were both 'run N · vllm', and
the summary said the second 'reuses the most (+1.6 points)'.)"""

from __future__ import annotations

import re

import pytest

from analyzer.pipeline.replay import run_replay
from analyzer.report.data import load_report_data
from analyzer.report.sections import policy_section
from analyzer.report.summary import verdict_sentences
from analyzer.sim.dispatch import make_policy
from tests.report.test_warm_up import POLICY, _store


@pytest.fixture(scope="module")
def runs_db(tmp_path_factory):
    """Run 1 from the first request (the warm-up's repeats hit), runs 2 and 3 from the 23rd
    (no hit), run 4: run 1's requests again, on a bounded pool twice as large."""
    db = _store(tmp_path_factory.mktemp("measured"))
    run_replay(make_policy({**POLICY, "num_blocks": 800}), db_path=db)
    return db


def test_labels_name_the_measured_requests(runs_db):
    data = load_report_data(runs_db)
    assert data.runs["run_label"].to_list() == [  # the tie of 0.0 and 0.55: the first run's
        "run 1 · vllm",
        "run 2 · vllm · measure_from=0.55",
        "run 3 · vllm · measure_from=0.55, replicas=2, routing=round_robin",
        "run 4 · vllm · num_blocks=800",
    ]
    assert data.runs["measure_from"].to_list() == [0.0, 0.55, 0.55, 0.0]


def test_the_summary_compares_runs_of_the_same_requests(runs_db):
    data = load_report_data(runs_db)
    assert data.headline_run == 1
    text = " ".join(verdict_sentences(data))
    # runs 2 and 3 leave out the warm-up's repeats, which run 1 counts: not compared
    assert "run 2" not in text and "run 3" not in text


def test_a_run_without_warm_ups_is_labelled_as_before(tmp_path):
    from analyzer.store.ingest import ingest
    from tests.conftest import write_jsonl
    from tests.report.test_warm_up import _records

    db = tmp_path / "plain.duckdb"
    ingest([write_jsonl(tmp_path / "p.jsonl", _records(True))], db_path=db)
    run_replay(make_policy(POLICY), db_path=db)
    run_replay(make_policy({**POLICY, "num_blocks": 800}), db_path=db)
    data = load_report_data(db)
    assert data.runs["run_label"].to_list() == ["run 1 · vllm", "run 2 · vllm · num_blocks=800"]
    body, _ = policy_section(data)
    assert "measure_from" not in body and "over other requests" not in body


def test_the_policies_table_and_sentence_name_them(runs_db):
    body, _ = policy_section(load_report_data(runs_db))
    text = re.sub(r"<[^>]+>", " ", body)
    assert re.search(r"measure_from\s+0\.0\s+0\.55\s+0\.55\s+0\.0", text)
    assert '<tr class="differs"><th>measure_from</th>' in body
    changes = re.search(r"Useful-hit ratio against the first run: (.*?points)\. In the", text)
    said = changes.group(1)
    assert "run 2 · vllm · measure_from=0.55: -39.38 points (over other requests: its " in said
    assert said.endswith("; run 4 · vllm · num_blocks=800: +0.00 points")


def _later_repeats(tmp_path, second: dict):
    """40 requests, 1 s apart: the first 20 unique, the last 20 one prompt (each after the
    first hits); run 1 under POLICY from the first request, run 2 under POLICY with
    `second` from the 21st (--measure-from 0.5). Its report data."""
    from analyzer.store.ingest import ingest
    from tests.conftest import write_jsonl

    records = [
        {
            "request_id": f"r{i}",
            "timestamp": float(i),
            "prompt_token_ids": [1_000 * i + k for k in range(64)] if i < 20 else list(range(64)),
        }
        for i in range(40)
    ]
    db = tmp_path / "later.duckdb"
    ingest([write_jsonl(tmp_path / "l.jsonl", records)], db_path=db)
    run_replay(make_policy(POLICY), db_path=db)
    run_replay(make_policy({**POLICY, **second}), db_path=db, measure_from=0.5)
    return load_report_data(db)


def test_a_run_of_other_requests_is_not_said_to_reuse_more(tmp_path):
    """The Mooncake case: the same policy measured from the half where prompts repeat has
    the higher ratio, from the requests it leaves out, not from a setting."""
    data = _later_repeats(tmp_path, {})
    ratios = [r["hit_tokens"] / r["prompt_tokens"] for r in data.runs.iter_rows(named=True)]
    assert ratios[1] > ratios[0]  # what the summary used to call the run that reuses the most
    assert data.headline_run == 1
    assert "Of the runs shown" not in " ".join(verdict_sentences(data))


def test_the_engine_section_compares_ratios(tmp_path):
    """Engines measured over different requests: the one that reuses the most is by share of
    its own queried tokens (by tokens, the run counting more requests won a tie)."""
    from analyzer.report.engines import engine_section

    data = _later_repeats(tmp_path, {"engine": "sglang"})
    hits = data.runs["hit_tokens"].to_list()
    assert hits[0] == hits[1]  # the first half has no hit: the same hits, fewer queries
    body, _ = engine_section(data)
    share = hits[1] / data.runs["prompt_tokens"].to_list()[1]
    assert f"run 2 · sglang · measure_from=0.5 reuses the most ({share:.1%} of" in body
