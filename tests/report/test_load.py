"""The report of concurrent runs: the Load section and the lost-in-flight waterfall segment,
shown only when a run is concurrent (a serial-only report is unchanged)."""

from __future__ import annotations

import re
import shutil

import polars as pl
import pytest

from analyzer.pipeline.replay import run_replay
from analyzer.report import engines, load, waterfall
from analyzer.report.data import load_report_data
from analyzer.report.html import FIGURE_IDS, render_report
from analyzer.sim.dispatch import make_policy
from tests.conftest import db_rows
from tests.report import test_browser
from tests.report.conftest import MODEL

IN_FLIGHT = "lost in flight (not yet scheduled)"
CONCURRENT = {"model": MODEL, "schedule": "concurrent", "num_blocks": 200, "time_scale": 0.2}


@pytest.fixture(scope="module")
def concurrent_db(report_db, tmp_path_factory):
    """The report database (two serial runs) plus two concurrent runs (3: a small pool and
    compressed arrivals, so requests queue and are preempted; 4: the trace's own pace)."""
    db = tmp_path_factory.mktemp("concurrent") / "concurrent.duckdb"
    shutil.copyfile(report_db, db)
    outcomes = [
        run_replay(make_policy(CONCURRENT), db_path=db),
        run_replay(make_policy({**CONCURRENT, "num_blocks": 2000, "time_scale": 1.0}), db_path=db),
    ]
    assert outcomes[0].load["num_preemptions"] > 0
    return db, outcomes


@pytest.fixture(scope="module")
def concurrent_html(concurrent_db, tmp_path_factory):
    db, _ = concurrent_db
    return render_report(db, tmp_path_factory.mktemp("chtml") / "report.html")


def test_serial_report_has_neither(report_html, report_data):
    text = report_html.path.read_text(encoding="utf-8")
    assert load.FIGURE_ID not in report_html.figure_ids
    for absent in ('id="load"', 'href="#load"', "Load: queueing", IN_FLIGHT, "<th>in flight</th>"):
        assert absent not in text
    assert "lost_in_flight_tokens" not in report_data.groups.columns
    assert report_data.load is None and report_data.load_windows is None
    assert waterfall.segments(report_data.groups.columns) == waterfall.SEGMENTS


def test_concurrent_report_has_load_and_in_flight(concurrent_html):
    result = concurrent_html
    assert result.figure_ids == (*FIGURE_IDS[:5], load.FIGURE_ID, *FIGURE_IDS[5:])
    text = result.path.read_text(encoding="utf-8")
    assert text.count(f'id="{load.FIGURE_ID}"') == 1
    assert "Load: queueing and time to first token" in text
    assert '<a href="#load">Load</a>' in text
    assert "simulated times from vLLM's scheduler model" in text
    assert "<code>step_base_ms</code>" in text and "<code>step_token_us</code>" in text
    assert IN_FLIGHT in text and "<th>routing</th><th>in flight</th><th>dense eviction</th>" in text
    # a concurrent run is named by what differs, not by every clock key a serial one lacks
    assert "run 3 · vllm · num_blocks=200, schedule=concurrent, time_scale=0.2" in text
    assert "<b>What this means.</b>" in text[text.index('id="load"') :]


def test_concurrent_report_is_deterministic(concurrent_db, concurrent_html, tmp_path):
    db, _ = concurrent_db
    again = render_report(db, tmp_path / "again.html")
    assert again.path.read_bytes() == concurrent_html.path.read_bytes()


def test_in_flight_segment_between_routing_and_granularity(concurrent_db):
    """The waterfall's order: routing, in flight, granularity (the bars go from the hit outward)."""
    db, _ = concurrent_db
    data = load_report_data(db)
    names = [name for _, name, _ in waterfall.segments(data.groups.columns)]
    at = names.index(IN_FLIGHT)
    assert names[at - 1] == "lost to match granularity"
    assert names[at + 1] == "lost to routing"
    fig = waterfall.waterfall_runs(data.groups)
    overall = data.groups.filter(pl.col("is_overall")).sort("run_id")
    for i, queried in enumerate(overall["prompt_tokens"].to_list()):
        assert sum(t.x[i] for t in fig.data) == queried
    in_flight = next(t for t in fig.data if t.name == IN_FLIGHT).x
    assert in_flight[0] == in_flight[1] == 0 and in_flight[2] > 0  # serial runs lose none
    groups = waterfall.waterfall_groups(data.groups)
    assert len(groups.data) == len(names) * 4
    for row in overall.iter_rows(named=True):  # the engine bars still sum exactly
        assert sum(tokens_of(row) for _, _, tokens_of in engines.PARTS) == row["prompt_tokens"]


def test_load_frames_match_the_replay(concurrent_db):
    db, outcomes = concurrent_db
    data = load_report_data(db)
    assert data.load["run_id"].to_list() == [3, 4]
    for outcome, row in zip(outcomes, data.load.iter_rows(named=True), strict=True):
        for key in ("ttft_p50_s", "ttft_p99_s", "queue_mean_s", "in_flight_mean"):
            assert row[key] == pytest.approx(outcome.load[key], abs=1e-6)
        for key in ("num_preemptions", "recomputed_tokens", "in_flight_peak"):
            assert row[key] == outcome.load[key]
    w = data.load_windows
    for run_id in (3, 4):
        part = w.filter(pl.col("run_id") == run_id)
        assert part["num_requests"].sum() == outcomes[0].num_requests
        assert (
            part["num_preemptions"].sum()
            == data.load.filter(pl.col("run_id") == run_id)["num_preemptions"].item()
        )
        # each run has its own window width (about 24 windows over its own arrivals)
        t_max = db_rows(db, f"SELECT max(arrival_s) FROM replay_requests WHERE run_id = {run_id}")
        assert 10 <= part.height <= 25 and part["window_end"].max() > t_max[0][0]


def test_load_figure_one_run_at_a_time(concurrent_db):
    db, _ = concurrent_db
    w = load_report_data(db).load_windows
    fig = load.load_figure(w)
    assert len(fig.data) == 2 * load.PER_RUN
    (menu,) = fig.layout.updatemenus
    assert [b.label for b in menu.buttons] == [
        "run 3 · vllm · num_blocks=200, schedule=concurrent, time_scale=0.2",
        "run 4 · vllm · num_blocks=2000, schedule=concurrent",
    ]
    assert [t.visible for t in fig.data] == [True] * load.PER_RUN + [False] * load.PER_RUN
    assert fig.to_json() == load.load_figure(w).to_json()
    single = load.load_figure(w.filter(pl.col("run_id") == 3))
    assert not single.layout.updatemenus and len(single.data) == load.PER_RUN


def test_nonzero_in_flight_is_never_hidden(db_copy, tmp_path):
    """A serial-only database shows the segment as soon as a run lost a token in flight."""
    before = render_report(db_copy, tmp_path / "before.html").path.read_bytes()
    assert IN_FLIGHT.encode() not in before
    db_rows(db_copy, "UPDATE replay_requests SET lost_in_flight_tokens = 1 WHERE arrival_seq = 0")
    data = load_report_data(db_copy)
    assert "lost_in_flight_tokens" in data.groups.columns and data.load is None
    text = render_report(db_copy, tmp_path / "after.html").path.read_text(encoding="utf-8")
    assert IN_FLIGHT in text and 'href="#load"' not in text


def test_store_without_the_in_flight_column(db_copy, tmp_path):
    """A store written before the concurrent columns gains them and reports as before."""
    before = render_report(db_copy, tmp_path / "before.html").path.read_bytes()
    db_rows(db_copy, "ALTER TABLE replay_requests DROP COLUMN lost_in_flight_tokens")
    assert render_report(db_copy, tmp_path / "after.html").path.read_bytes() == before


@pytest.mark.skipif(not test_browser.CHROMIUM.exists(), reason="no /usr/bin/chromium")
def test_load_figure_renders(concurrent_html, tmp_path):
    url = concurrent_html.path.resolve().as_uri()
    run = test_browser._chromium(tmp_path, "--dump-dom", url)
    assert run.returncode == 0, run.stderr[-2000:]
    for fid in (load.FIGURE_ID, "fig-waterfall-runs-tokens"):
        opening, div = test_browser._figure_div(run.stdout, fid)
        assert "js-plotly-plot" in opening and 'class="main-svg"' in div
    assert re.search(r'<div id="hpa-errors" data-count="0">', run.stdout)


def test_the_load_intro_says_each_cache_has_its_own_scheduler_and_clock(concurrent_html):
    """The intro said requests 'compete for one vLLM scheduler and its cache pool' and every
    step lasts step_base_ms plus step_token_us per token: on the mixed sample (2 model
    revisions, so 2 caches, each on a clock from its own first arrival) and on any run
    priced on a GPU (the roofline), neither holds."""
    text = concurrent_html.path.read_text(encoding="utf-8")
    intro = re.sub(r"<[^>]+>", "", text[text.index('id="load"') :].split("</p>")[0])
    assert "compete for one vLLM scheduler" not in intro
    assert (
        "compete for their own cache's vLLM scheduler and pool (one per model revision x "
        "replica); each cache's clock starts at its first arrival (a live router's replicas "
        "share their model revision's), so two caches' times are not one timeline"
    ) in intro
    assert "each scheduler step lasts what the table's scheduler step says" in intro


def test_a_saturated_run_is_named_with_the_queue_times_that_show_it(concurrent_db, concurrent_html):
    """`hpa plan` has a `saturated` column; the Load section said nothing of a queue that grows
    with the trace (Mooncake with the default step model: TTFT p50 6,035 s)."""
    db, _ = concurrent_db
    data = load_report_data(db)
    text = re.sub(r"<[^>]+>", "", concurrent_html.path.read_text(encoding="utf-8"))
    assert data.load["saturated"].to_list() == [True, False]  # run 4 keeps up
    assert (
        "run 3 · vllm · num_blocks=200, schedule=concurrent, time_scale=0.2 is saturated: the "
        "simulated server cannot keep up, the queue grows with the trace (the last quarter of "
        "arrivals queued 46.332 s on average, the first quarter 11.269 s), so its times say how "
        "far behind it fell, not what a server that keeps up would serve."
    ) in text
    assert "run 4 · vllm · num_blocks=2000, schedule=concurrent is saturated" not in text
