"""compare's defaults and TTFT fits (issue 14, item 6): the default run is the latest that
is no sweep point; a TTFT fit with no explaining power or a negative slope estimates nothing
and says why."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from analyzer.metrics.compare import MIN_FIT_R2, _usable
from analyzer.metrics.ttft import TtftFit
from analyzer.pipeline.replay import run_replay
from analyzer.pipeline.sweep import run_sweeps
from analyzer.sim.dispatch import make_policy
from analyzer.store.db import connect
from analyzer.store.ingest import ingest
from analyzer.store.runs import resolve_run

SAMPLE = Path(__file__).parents[2] / "sample_traces" / "groups_1500.jsonl"


def test_the_default_run_is_no_sweep_point(tmp_path):
    db = tmp_path / "s.duckdb"
    ingest([SAMPLE], db_path=db)
    run_replay(make_policy({"block_size": 64}), db_path=db)
    run_sweeps("vllm-default", ["block_size=64"], ["num_blocks=100,200"], db_path=db, jobs=1)
    con = connect(db, create=False)
    try:
        assert resolve_run(con, None) == 1  # runs 2 and 3 are the sweep's points
        assert resolve_run(con, 3) == 3
    finally:
        con.close()


@pytest.mark.parametrize(
    ("fit", "usable"),
    [
        (TtftFit(100.0, 0.02, 0.80, 500), True),
        (TtftFit(100.0, 0.02, MIN_FIT_R2, 500), True),
        (TtftFit(148.4, 0.02785, 0.018, 1250), False),  # issue 14: R^2 0.018
        (TtftFit(100.0, -0.01, 0.90, 500), False),  # a negative slope
        (TtftFit(50.0, 0.01, math.nan, 0), True),  # a model preset's prefill cost
        (None, False),
    ],
)
def test_only_a_fit_that_explains_ttft_estimates_it(fit, usable):
    assert _usable(fit) is usable


def test_cli_compares_two_windows_of_a_public_trace(tmp_path):
    """WEKA's fixture: two windows of one run, each with its traffic, the rate/mix split,
    the caveat of adapter-made timestamps, and no family roll-up repeating the total."""
    from click.testing import CliRunner

    from analyzer.cli import cli

    db = tmp_path / "w.duckdb"
    ingest([Path(__file__).parents[1] / "fixtures" / "external" / "weka_claude_code"], db_path=db)
    run_replay(make_policy({"model": "qwen3-next-80b-a3b"}), db_path=db)
    args = ["compare", "--db", str(db), "--baseline", "..16326", "--window", "16326.."]
    out = CliRunner().invoke(cli, args)
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert lines[:2] == [
        "baseline: run 1, window ..16326 (24 requests)",
        "current: run 1, window 16326.. (25 requests)",
    ]
    assert lines[2].startswith("note: timestamps of 49 requests (weka) are partly the adapter's")
    traffic = {line.split()[0]: line.split()[1:] for line in lines[4:16]}
    assert traffic["requests"] == ["24", "25", "+4.2%"]
    assert traffic["requests_per_s"][:2] == ["0.0201", "0.000481"]  # 3 significant digits
    assert not any(line.startswith("(none)         (all)") for line in lines)
    assert "from the groups' own hit ratios" in lines[-1] and "from the traffic mix" in lines[-1]
