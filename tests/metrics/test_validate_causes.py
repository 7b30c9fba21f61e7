"""`hpa validate`'s error by cause and worst requests (issue 14, item 7): each request's
error given back to the replay's losses from the hit up the waterfall, table-driven; on
TraceLab's public rounds, a warning that another engine's cache reported them."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from click.testing import CliRunner

from analyzer.cli import cli
from analyzer.metrics.validate_causes import UNDER, cause_table, engine_warning, split, worst
from analyzer.pipeline.replay import run_replay
from analyzer.pipeline.validate import validate
from analyzer.sim.dispatch import make_policy
from analyzer.store.ingest import ingest
from tests.conftest import db_rows

TRACELAB = Path(__file__).parents[1] / "fixtures" / "external" / "tracelab"
LOSSES = [column for _, column, _ in UNDER]


def compared(*requests: dict) -> pa.Table:
    """Requests of predicted / observed tokens and the replay's losses (0 unless given)."""
    rows = []
    for i, r in enumerate(requests):
        row = dict.fromkeys(LOSSES, 0) | {"request_id": f"r{i}", "prompt_family": "f"}
        row |= {"model_revision": "m", "prompt_tokens": 10_000} | r
        rows.append(row)
    return pa.Table.from_pylist(rows)


@pytest.mark.parametrize(
    ("request_", "expected"),
    [
        # the replay hit all the engine cached: no error
        ({"predicted_tokens": 500, "observed_tokens": 500}, {}),
        # 300 more cached: the replay's sparse loss (200) first, then eviction (100 of 400)
        (
            {
                "predicted_tokens": 500,
                "observed_tokens": 800,
                "sparse_retention_miss_tokens": 200,
                "lost_eviction_tokens": 400,
                "unshared_tokens": 9_000,
            },
            {"sparse_retention": -200, "eviction": -100},
        ),
        # a first round the engine had cached from outside the trace
        (
            {"predicted_tokens": 0, "observed_tokens": 6_912, "unshared_tokens": 9_000},
            {"unshared": -6_912},
        ),
        # speculative decoding is the replay's last loss, so it is given back first
        (
            {
                "predicted_tokens": 0,
                "observed_tokens": 64,
                "lost_spec_decode_tokens": 16,
                "lost_granularity_tokens": 100,
            },
            {"spec_decode": -16, "granularity": -48},
        ),
        ({"predicted_tokens": 544, "observed_tokens": 0}, {"over_uncached": 544}),
        ({"predicted_tokens": 544, "observed_tokens": 500}, {"over_partial": 44}),
    ],
)
def test_each_request_error_goes_to_the_replay_losses_last_applied_first(request_, expected):
    parts = split(compared(request_))
    got = {cause: int(v[0]) for cause, v in parts.items() if v[0]}
    assert got == expected
    error = request_["predicted_tokens"] - request_["observed_tokens"]
    assert sum(int(v[0]) for v in parts.values()) == error


def test_cause_table_adds_up_and_worst_requests_are_ranked_by_abs_error():
    table = compared(
        {"predicted_tokens": 100, "observed_tokens": 400, "lost_eviction_tokens": 1_000},
        {"predicted_tokens": 600, "observed_tokens": 0},
        {"predicted_tokens": 50, "observed_tokens": 50},
        {"predicted_tokens": 0, "observed_tokens": 300, "unshared_tokens": 9_000},
    )
    parts = split(table)
    causes = {r["cause"]: r for r in cause_table(parts).to_pylist()}
    assert causes["eviction"]["error_tokens"] == -300
    assert causes["over_uncached"]["error_tokens"] == 600
    assert causes["unshared"]["requests"] == 1
    assert causes["over_uncached"]["share_of_abs_error"] == pytest.approx(600 / 1_200)
    top = worst(table, parts).to_pylist()
    assert [(r["request_id"], r["error_tokens"], r["cause"]) for r in top] == [
        ("r1", 600, "over_uncached"),
        ("r0", -300, "eviction"),  # ties keep arrival order
        ("r3", -300, "unshared"),
    ]


def test_warning_names_other_engines_only():
    assert engine_warning({"vllm": 5, "unknown": 3}, "vllm") is None
    text = engine_warning({"sglang": 7}, "vllm")
    assert text.startswith("warning: the observed cached_tokens come from sglang (7 requests)")


@pytest.fixture
def tracelab_db(tmp_path) -> Path:
    db = tmp_path / "t.duckdb"
    ingest([TRACELAB / "round_trace.sanitized.jsonl"], db_path=db, fmt="tracelab")
    run_replay(make_policy({"block_size": 16}), db_path=db)
    return db


def test_tracelab_rounds_decompose_their_error_and_warn_of_the_providers(tracelab_db):
    result = validate(db_path=tracelab_db)
    overall = result.table("requests.cached_tokens").to_pylist()[-1]
    causes = result.causes.to_pylist()
    assert sum(r["error_tokens"] for r in causes) == overall["error_tokens"]
    assert {r["cause"] for r in causes if r["requests"]} <= {"sparse_retention", "unshared"}
    assert result.worst.num_rows == 10
    assert result.warning.startswith(
        "warning: the observed cached_tokens come from claude's API cache (10 requests), "
        "codex's API cache (9 requests), not from vllm, the engine replayed"
    )
    stored = db_rows(tracelab_db, "SELECT sum(error_tokens) FROM validation_causes")
    assert stored == [(overall["error_tokens"],)]


def test_cli_prints_causes_worst_requests_and_the_warning(tracelab_db):
    out = CliRunner().invoke(cli, ["validate", "--db", str(tracelab_db)])
    assert out.exit_code == 0, out.output
    assert "the per-request error by cause" in out.output
    assert "worst requests (largest |error|" in out.output
    assert "over_partial" not in out.output  # causes that explain nothing are not printed
    assert "warning: the observed cached_tokens come from claude's API cache" in out.output


def test_the_report_shows_the_validation_and_its_causes(tracelab_db, tmp_path):
    from analyzer.report.html import render_report

    validate(db_path=tracelab_db)
    page = render_report(tracelab_db, tmp_path / "r.html").path.read_text(encoding="utf-8")
    assert '<section id="validation">' in page and 'href="#validation"' in page
    assert "Validation 1 of run 1" in page
    assert "<td>sparse_retention</td>" in page and "<td>unshared</td>" in page
