"""`hpa report`: one self-contained, deterministic HTML file."""

from __future__ import annotations

import html
import re

import duckdb
import pytest
from click.testing import CliRunner

from analyzer.cli import cli
from analyzer.report.html import FIGURE_IDS, render_report
from analyzer.report.sections import SWEEP_FIGURE_ID
from tests.report.conftest import SAMPLES

EXTERNAL = re.compile(
    r"<(?:script|link|img|iframe)\b[^>]*\b(?:src|href)\s*=\s*[\"']?\s*(?:https?:)?//",
    re.IGNORECASE,
)


def test_self_contained(report_html):
    text = report_html.path.read_text(encoding="utf-8")
    assert not EXTERNAL.search(text)
    assert '<script src="http' not in text and "<link" not in text
    assert "@import" not in text
    # plotly.js is inlined exactly once, and every figure is drawn by its own call
    assert text.count("* plotly.js v") == 1
    assert report_html.figure_ids == FIGURE_IDS
    for fid in FIGURE_IDS:
        assert text.count(f'id="{fid}"') == 1
        assert len(re.findall(rf'Plotly\.newPlot\(\s*"{fid}"', text)) == 1
    assert SWEEP_FIGURE_ID not in text  # no sweep_points table: the section is left out


def test_sections_and_labels(report_html):
    text = report_html.path.read_text(encoding="utf-8")
    for heading in (
        "Loss waterfall per run",
        "Loss waterfall per prompt family × model revision",
        "Useful hits and sparse losses over time",
        "Top shared junctions and what they lost",
        "Policy comparison",
        "Request-weighted beside token-weighted",
        "Exact configuration of each run",
    ):
        assert heading in text
    assert text.count("<b>What this means.</b>") == len(FIGURE_IDS) - 2  # one per plot section
    assert "run 2 · vllm · retention_interval=null" in text
    assert "trace fingerprint <code>" in text
    assert html.escape('"retention_interval": null') in text  # the exact policy JSON


def test_deterministic(report_db, report_html, tmp_path):
    again = render_report(report_db, tmp_path / "again.html")
    assert again.path.read_bytes() == report_html.path.read_bytes()


def test_run_selection_and_cli(report_db, tmp_path):
    out = tmp_path / "one.html"
    result = CliRunner().invoke(
        cli, ["report", "--db", str(report_db), "--run", "2", "-o", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert f"runs 2, {len(FIGURE_IDS)} figures" in result.output
    text = out.read_text(encoding="utf-8")
    assert "replay runs 2." in text and "run 1 · vllm" not in text
    bad = CliRunner().invoke(cli, ["report", "--db", str(report_db), "--run", "9", "-o", str(out)])
    assert (bad.exit_code, bad.output) == (2, "Error: unknown run 9; known runs: 1, 2\n")
    # (it said 'no run 9 in the database; runs: 1, 2' where metrics, compare and validate
    # say 'unknown run 9; known runs: ...')


def test_sweep_section_when_sweep_points_exist(db_copy, tmp_path):
    con = duckdb.connect(str(db_copy))
    con.execute(
        "CREATE TABLE sweep_points (sweep_id INTEGER, knob VARCHAR, value VARCHAR, "
        "run_id INTEGER, useful_hit_ratio DOUBLE, sparse_loss_ratio DOUBLE, memory_gib DOUBLE)"
    )
    con.execute(
        "INSERT INTO sweep_points VALUES (1, 'retention_interval', '0', 1, 0.49, 0.03, NULL), "
        "(1, 'retention_interval', 'null', 2, 0.52, 0.01, NULL)"
    )
    con.close()
    result = render_report(db_copy, tmp_path / "sweep.html")
    assert result.figure_ids == (*FIGURE_IDS, SWEEP_FIGURE_ID)
    assert "Capacity curves (sweeps)" in result.path.read_text(encoding="utf-8")


def test_without_match_tables(tmp_path):
    from analyzer.pipeline.replay import run_replay
    from analyzer.sim.dispatch import make_policy
    from analyzer.store.ingest import ingest

    db = tmp_path / "d.duckdb"
    ingest([SAMPLES / "diagnostic_1088.jsonl"], db_path=db)
    run_replay(make_policy({"block_size": 544}), db_path=db)
    result = render_report(db, tmp_path / "d.html")
    text = result.path.read_text(encoding="utf-8")
    assert "fig-junctions" not in result.figure_ids
    assert "run <code>hpa match</code>" in text
    assert not EXTERNAL.search(text)


@pytest.mark.parametrize("span_s", [0.0, 30.0, 86_400.0 * 24, 86_400.0 * 25, 3.2e11])
def test_time_windows_stay_about_24_whatever_the_span(span_s):
    from analyzer.report.data import TARGET_WINDOWS, window_width

    width = window_width(span_s)
    assert span_s / width <= TARGET_WINDOWS
    assert width <= 86_400 or width % 86_400 == 0  # past a day: whole days
