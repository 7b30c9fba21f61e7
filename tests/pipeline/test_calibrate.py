"""`hpa calibrate`: the step-time fit recovers a known time model, writes a usable policy,
and refuses a trace without observed TTFT in one line."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from analyzer.cli import cli
from analyzer.pipeline.calibrate import calibrate
from analyzer.pipeline.replay import run_replay
from analyzer.sim.dispatch import load_policy, make_policy
from analyzer.store.ingest import ingest

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"
TRUTH = {"block_size": 64, "schedule": "concurrent", "step_base_ms": 12.0, "step_token_us": 40.0}


@pytest.fixture(scope="module")
def observed_db(tmp_path_factory) -> Path:
    """The groups sample whose ttft_ms is what the concurrent replay gives under TRUTH."""
    db = tmp_path_factory.mktemp("calibrate") / "g.duckdb"
    ingest([SAMPLES / "groups_1600.jsonl"], db_path=db)
    run_replay(make_policy({**TRUTH, "time_scale": 0.05}), db_path=db)
    con = duckdb.connect(str(db))
    try:
        con.execute(
            "UPDATE requests SET ttft_ms = r.ttft_s * 1000 FROM replay_requests AS r "
            "WHERE r.request_id = requests.request_id"
        )
    finally:
        con.close()
    return db


def test_recovers_a_known_time_model(observed_db, tmp_path):
    """32 requests barely tell a step's base time from its per-token time (their step and
    token counts move together), so the fit is judged by what it predicts: TTFT within a
    fraction of a percent (R^2), the per-token time within 10%."""
    out = tmp_path / "fitted.json"
    overrides = ["block_size=64", "time_scale=0.05"]
    fit = calibrate(None, overrides, db_path=observed_db, out=out)
    assert fit.r2 > 0.99 and fit.num_requests == 32
    assert fit.policy.step_token_us == pytest.approx(40.0, rel=0.1)
    assert fit.median_abs_error_ms < 0.02 * fit.mean_observed_ms
    assert load_policy(str(out)) == fit.policy  # the written file is a policy file
    defaults = calibrate_quality(observed_db, overrides)
    assert fit.sse_ms2 < defaults / 100


def calibrate_quality(db: Path, overrides: list[str]) -> float:
    """The squared TTFT error of the default time model (5 ms, 100 us)."""
    from analyzer.pipeline import calibrate as module

    trace, observed = module._load(db)
    policy = load_policy(None, [*overrides, "schedule=concurrent"])
    return module._evaluate(trace, policy, observed)[0].sse_ms2


def test_cli_prints_the_fit_and_its_quality(observed_db):
    r = CliRunner().invoke(
        cli,
        ["calibrate", "--db", str(observed_db), "--policy", "vllm-concurrent"]
        + ["--set", "block_size=64", "--set", "time_scale=0.05"],
    )
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert lines[0].startswith("fitted step_base_ms=")
    assert lines[1].startswith("quality over 32 requests with ttft_ms: R^2 0.99")


def test_a_trace_without_ttft_is_a_one_line_error(tmp_path):
    db = tmp_path / "d.duckdb"
    ingest([SAMPLES / "diagnostic_1088.jsonl"], db_path=db)
    r = CliRunner().invoke(cli, ["calibrate", "--db", str(db), "--set", "block_size=544"])
    assert r.exit_code == 2
    assert r.output == (
        "Error: the trace has no ttft_ms: calibrate fits the step time model to observed "
        "TTFT; ingest records that carry ttft_ms\n"
    )
