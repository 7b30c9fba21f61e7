"""The report's engine comparison (section g): shown only when runs use several engines."""

from __future__ import annotations

import html
import re

import pytest

from analyzer.config.engines import ENGINES
from analyzer.pipeline.replay import run_replay
from analyzer.report import engines
from analyzer.report.data import load_report_data
from analyzer.report.html import FIGURE_IDS, render_report
from analyzer.sim.dispatch import make_policy
from tests.report import test_browser


@pytest.fixture(scope="module")
def engines_db(report_db, tmp_path_factory):
    """The report database plus the two bound runs (runs 3 and 4)."""
    import shutil

    db = tmp_path_factory.mktemp("engines") / "engines.duckdb"
    shutil.copyfile(report_db, db)
    for engine in ("oracle", "attention_only"):
        run_replay(make_policy({"model": "qwen3-next-80b-a3b", "engine": engine}), db_path=db)
    return db


def test_left_out_with_one_engine(report_html):
    text = report_html.path.read_text(encoding="utf-8")
    assert engines.FIGURE_ID not in text and "Engine designs compared" not in text


def test_section_parts_sum_and_name_the_designs(engines_db, tmp_path):
    result = render_report(engines_db, tmp_path / "r.html")
    assert result.figure_ids == (*FIGURE_IDS[:-1], engines.FIGURE_ID, FIGURE_IDS[-1])
    text = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert "Engine designs compared" in text and 'href="#engines"' in text
    for engine in ("vllm", "oracle", "attention_only"):
        assert html.escape(ENGINES[engine].design) in text
    data = load_report_data(engines_db)
    overall = data.groups.filter(data.groups["is_overall"]).sort("run_id")
    parts_of = {name: tokens_of for name, _, tokens_of in engines.PARTS}
    for row in overall.iter_rows(named=True):
        parts = [tokens_of(row) for tokens_of in parts_of.values()]
        assert min(parts) >= 0 and sum(parts) == row["prompt_tokens"]
        # each label holds one cause: granularity is not "not reusable", eviction is its own
        below = parts_of["below the block or match unit (a finer geometry reuses it)"]
        assert below(row) == row["lost_granularity_tokens"]
        held = [n for n in parts_of if n.startswith("full-attention KV not held")]
        assert parts_of[held[0]](row) == row["lost_eviction_tokens"]
    # the bounds reach at least what vLLM reuses; the table shows vLLM's share of the best bound
    hits = overall["hit_tokens"].to_list()
    assert max(hits[2:]) >= max(hits[:2])
    share = f"{hits[0] / max(hits[2:]):.1%}"
    assert re.search(rf"<td class=\"num\">{re.escape(share)}</td>", text)


@pytest.mark.skipif(not test_browser.CHROMIUM.exists(), reason="no /usr/bin/chromium")
def test_engine_figure_renders(engines_db, tmp_path):
    out = tmp_path / "r.html"
    render_report(engines_db, out)
    run = test_browser._chromium(tmp_path, "--dump-dom", out.resolve().as_uri())
    assert run.returncode == 0, run.stderr[-2000:]
    opening, div = test_browser._figure_div(run.stdout, engines.FIGURE_ID)
    assert "js-plotly-plot" in opening and 'class="main-svg"' in div
    assert re.search(r'<div id="hpa-errors" data-count="0">', run.stdout)
