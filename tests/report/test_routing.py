"""The report's Routing section: absent when every run has one replica; per replica, the
table's numbers are the plain sums and quantiles of replay_requests; the figure draws one
colour per replica in both panels; the same database gives the same bytes."""

from __future__ import annotations

import html
import re

import numpy as np
import polars as pl
import pytest

from analyzer.pipeline.replay import run_replay
from analyzer.report import load, routing
from analyzer.report.data import load_report_data
from analyzer.report.html import FIGURE_IDS, render_report
from analyzer.sim.dispatch import make_policy
from analyzer.store.ingest import ingest
from analyzer.traces.synth import generate
from tests.conftest import db_rows, write_jsonl

BASE = {"block_size": 16, "groups": ["full_attention"], "num_blocks": 400}
ONE = {**BASE, "routing": "round_robin", "replicas": 1}
CONCURRENT = {**BASE, "schedule": "concurrent", "time_scale": 0.2}
THREE = {**CONCURRENT, "routing": "round_robin", "replicas": 3}
TWO_SERIAL = {**BASE, "routing": "round_robin", "replicas": 2}
# run 2's router view, as a live router records it (the routing here was round robin)
SEEN = (
    "UPDATE replay_requests SET route_waiting = arrival_seq % 3, route_running = "
    "arrival_seq % 5 + 1, route_kv_blocks_used = 2 * arrival_seq WHERE run_id = 2"
)


@pytest.fixture(scope="module")
def routing_db(tmp_path_factory):
    """A 150-request trace; run 1: one replica; run 2: three, concurrent, with a router's
    view; run 3: two, serial."""
    folder = tmp_path_factory.mktemp("routing")
    trace = write_jsonl(folder / "t.jsonl", list(generate("mixed", seed=1, num_requests=150)))
    db = folder / "routing.duckdb"
    ingest([trace], db_path=db)
    for values in (ONE, THREE, TWO_SERIAL):
        run_replay(make_policy(values), db_path=db)
    db_rows(db, SEEN)
    return db


@pytest.fixture(scope="module")
def routing_html(routing_db, tmp_path_factory):
    return render_report(routing_db, tmp_path_factory.mktemp("rhtml") / "report.html")


def _plain(db, run_id: int) -> dict[str, dict]:
    """Per replica of a run, its figures computed in Python from the stored rows."""
    rows = db_rows(
        db,
        "SELECT replica, prompt_tokens, hit_tokens, lost_routing_tokens, ttft_s, queue_s, "
        f"measured, route_waiting, route_running, route_kv_blocks_used "
        f"FROM replay_requests WHERE run_id = {run_id}",
    )
    out: dict[str, dict] = {}
    for replica in sorted({r[0] for r in rows}):
        mine = [r for r in rows if r[0] == replica]
        ttft = [r[4] for r in mine if r[6] and r[4] is not None]
        seen = [r for r in mine if r[7] is not None]
        out[replica] = {
            "num_requests": len(mine),
            "prompt_tokens": sum(r[1] for r in mine),
            "hit_tokens": sum(r[2] for r in mine),
            "lost_routing_tokens": sum(r[3] for r in mine),
            "ttft_p50_s": float(np.quantile(ttft, 0.5)) if ttft else None,
            "ttft_p99_s": float(np.quantile(ttft, 0.99)) if ttft else None,
            "seen_waiting_mean": float(np.mean([r[7] for r in seen])) if seen else None,
            "seen_running_max": max(r[8] for r in seen) if seen else None,
            "seen_kv_blocks_peak": max(r[9] for r in seen) if seen else None,
        }
    return out


def test_absent_when_every_run_has_one_replica(routing_db, tmp_path):
    assert load_report_data(routing_db, [1]).routing is None
    result = render_report(routing_db, tmp_path / "one.html", runs=[1])
    text = result.path.read_text(encoding="utf-8")
    assert routing.FIGURE_ID not in result.figure_ids
    assert 'id="routing"' not in text and 'href="#routing"' not in text


def test_one_row_per_replica_with_the_plain_figures(routing_db):
    data = load_report_data(routing_db)
    assert data.routing["run_id"].unique().sort().to_list() == [2, 3]  # run 1 has one replica
    for run_id, replicas in ((2, ["0", "1", "2"]), (3, ["0", "1"])):
        rows = data.routing.filter(pl.col("run_id") == run_id)
        assert rows["replica"].to_list() == [*replicas, None]  # the run's own row last
        plain = _plain(routing_db, run_id)
        for row in rows.filter(~pl.col("is_overall")).iter_rows(named=True):
            for key, expected in plain[row["replica"]].items():
                if isinstance(expected, float):
                    assert row[key] == pytest.approx(expected, abs=1e-6), key
                else:
                    assert row[key] == expected, key
        whole = rows.filter(pl.col("is_overall")).row(0, named=True)
        assert whole["num_requests"] == 150
        assert whole["hit_tokens"] == sum(p["hit_tokens"] for p in plain.values())
    serial = data.routing.filter(pl.col("run_id") == 3)
    assert serial["ttft_p50_s"].is_null().all() and (serial["num_seen"] == 0).all()


def test_the_section_states_the_plain_figures(routing_db, routing_html):
    text = routing_html.path.read_text(encoding="utf-8")
    ids = routing_html.figure_ids  # after the load figure, as in FIGURE_IDS after fig-windows
    assert ids.index(routing.FIGURE_ID) == ids.index(load.FIGURE_ID) + 1
    assert FIGURE_IDS.index(routing.FIGURE_ID) == FIGURE_IDS.index("fig-windows") + 1
    assert '<a href="#load">Load</a><a href="#routing">Routing</a>' in text
    section = html.unescape(text[text.index('<section id="routing">') :].split("</section>")[0])
    tables = re.findall(r"<table>.*?</table>", section)
    assert len(tables) == 2
    assert [t.count("<tr") - 1 for t in tables] == [3 + 1, 2 + 1]  # replicas and the run
    assert "router round_robin</code> (static: in arrival order, round robin), 3 replicas" in (
        re.sub(r"<code>", "", tables[0])
    )
    assert "seen at picks" in tables[0] and "seen at picks" not in tables[1]
    assert "TTFT p50 (s)" in tables[0] and "TTFT p50 (s)" not in tables[1]
    plain = _plain(routing_db, 2)
    for replica, p in plain.items():
        assert f"<td>{replica}</td>" in tables[0]
        assert f">{p['hit_tokens'] / p['prompt_tokens']:.1%}<" in tables[0]
    # the sentence: the busiest replica of run 2 (the headline run, 1, has one replica)
    requests = sum(p["num_requests"] for p in plain.values())
    hits = sum(p["hit_tokens"] for p in plain.values())
    lost = sum(p["lost_routing_tokens"] for p in plain.values())
    prompt = sum(p["prompt_tokens"] for p in plain.values())
    top = min(plain, key=lambda r: (-plain[r]["num_requests"], -plain[r]["hit_tokens"], r))
    said = (
        f"replica {top} took {plain[top]['num_requests'] / requests:.1%} of the requests and "
        f"{plain[top]['hit_tokens'] / hits:.1%} of the hit tokens; {lost / prompt:.1%} of the "
        "prompt tokens were shared with a prefix that another replica held"
    )
    assert said in section
    assert "Of the 2 runs over several replicas, routing lost the least in run " in section


def test_windows_follow_the_load_and_time_windows(routing_db):
    data = load_report_data(routing_db)
    w = data.routing_windows
    for run_id, clock in ((2, "arrival"), (3, "trace")):
        part = w.filter(pl.col("run_id") == run_id)
        assert part["clock"].unique().to_list() == [clock]
        assert part["num_requests"].sum() == 150
    load = data.load_windows.filter(pl.col("run_id") == 2)
    concurrent = w.filter(pl.col("run_id") == 2)
    assert set(concurrent["window_width"]) == set(load["window_end"] - load["window_start"])
    per_window = concurrent.group_by("window_idx").agg(pl.col("num_requests").sum()).sort("*")
    assert per_window.rows() == load.select("window_idx", "num_requests").sort("*").rows()


def test_figure_one_colour_per_replica_and_a_run_menu(routing_db):
    w = load_report_data(routing_db).routing_windows
    fig = routing.routing_figure(w)
    assert len(fig.data) == 2 * (3 + 2)
    for hit, busy in zip(fig.data[0::2], fig.data[1::2], strict=True):
        assert hit.legendgroup == busy.legendgroup and hit.line.color == busy.line.color
        assert hit.showlegend is not False and busy.showlegend is False
    assert len({t.line.color for t in fig.data[:6]}) == 3
    (menu,) = fig.layout.updatemenus
    serial = menu.buttons[1].args[1]
    assert serial["xaxis2.title.text"] == routing.CLOCKS["trace"]
    assert serial["annotations[1].text"] == routing.LOAD_TITLES[False]
    assert fig.layout.annotations[1].text == routing.LOAD_TITLES[True]  # run 2 saw its picks
    assert [t.visible for t in fig.data] == [True] * 6 + [False] * 4
    assert fig.to_json() == routing.routing_figure(w).to_json()


def test_many_replicas_draw_eight_and_keep_their_colours():
    n = 12
    windows = pl.DataFrame(
        {
            "run_id": [7] * n,
            "run_label": ["run 7"] * n,
            "clock": ["order"] * n,
            "replica": [str(i) for i in range(n)],
            "window_idx": [0] * n,
            "window_width": [10.0] * n,
            "num_requests": [1] * n,
            "prompt_tokens": [100] * n,
            "hit_tokens": [50] * n,
            "num_seen": [0] * n,
            "seen_load_mean": [None] * n,
        },
        schema_overrides={"seen_load_mean": pl.Float64},
    )
    fig = routing.routing_figure(windows)
    names = [t.name for t in fig.data[0::2]]
    assert names == [f"replica {i}" for i in range(n)]  # numeric order: 10 after 9
    shown = [t.visible for t in fig.data[0::2]]
    assert shown == [True] * routing.MAX_SHOWN + ["legendonly"] * (n - routing.MAX_SHOWN)
    assert len({t.line.color for t in fig.data[0::2]}) == n


def test_deterministic(routing_db, routing_html, tmp_path):
    again = render_report(routing_db, tmp_path / "again.html")
    assert again.path.read_bytes() == routing_html.path.read_bytes()


def test_the_sample_traces_own_replicas(report_html, report_data):
    """The mixed sample's records name two replicas: its runs (routing: trace) are shown,
    and two runs that lost the same share to routing are said to, not ranked."""
    text = html.unescape(report_html.path.read_text(encoding="utf-8"))
    runs = report_data.routing.filter(pl.col("is_overall"))
    lost = (runs["lost_routing_tokens"] / runs["prompt_tokens"]).to_list()
    assert len(lost) == 2 and lost[0] == lost[1]
    assert f"Each of the 2 runs over several replicas lost {lost[0]:.1%} of its prompt" in text
    caption = "router <code>trace</code> (static: each record's own replica), 2 replicas in"
    assert caption in text
