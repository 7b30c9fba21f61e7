"""The report's figures: pure functions of their frames, with the expected traces."""

from __future__ import annotations

import duckdb
import polars as pl
import pytest

from analyzer.report import capacity, figures, time_chart, waterfall
from analyzer.report.data import memory_gib, window_width
from analyzer.report.labels import run_labels
from analyzer.store.db import load_sql
from tests.conftest import db_rows

NUM_RUNS = 2
SEG = len(waterfall.SEGMENTS)


def test_run_labels_are_short_and_name_what_differs():
    base = {"block_size": 544, "retention_interval": 0, "routing": "trace"}
    policies = [base, {**base, "retention_interval": None}, base]
    assert run_labels([1, 2, 3], policies) == [
        "run 1 · vllm",
        "run 2 · vllm · retention_interval=null",
        "run 3 · vllm",
    ]
    assert run_labels([4], [{**base, "routing": "round_robin"}]) == ["run 4 · vllm"]
    # another engine's own options go to the hover; a long list of changes is cut
    llama = {**base, "engine": "llamacpp", "llamacpp_max_checkpoints": 32, "llamacpp_slots": 1}
    many = {**base, "block_size": 16, "retention_interval": 1024, "routing": "round_robin"}
    assert run_labels([11, 12, 13], [base, llama, many], [None, None, "after deploy"]) == [
        "run 11 · vllm",
        "run 12 · llamacpp",
        "run 13 · after deploy",
    ]
    assert run_labels([5, 6], [base, many])[1] == (
        "run 6 · vllm · block_size=16, retention_interval=1024, …"
    )


def test_window_width_and_memory():
    assert window_width(643.2) == 30.0
    assert window_width(10.0) == 1.0
    assert memory_gib({"model": "qwen3-next-80b-a3b", "num_blocks": 2000}) == pytest.approx(
        2000 * 13369344 / 2**30
    )
    assert memory_gib({"model": "qwen3-next-80b-a3b", "num_blocks": None}) is None
    assert memory_gib({"model": None, "num_blocks": 10}) is None


def test_report_data_runs(report_data):
    runs = report_data.runs
    assert runs["run_id"].to_list() == [1, 2]
    assert runs["run_label"].to_list() == ["run 1 · vllm", "run 2 · vllm · retention_interval=null"]
    assert runs["policy_changes"].to_list() == ["baseline", "retention_interval=null"]
    assert runs["trace_fingerprint"].n_unique() == 1
    assert '"retention_interval": null' in runs["policy_json"][1]


def test_waterfall_runs_sums_to_queried_tokens(report_data):
    fig = waterfall.waterfall_runs(report_data.groups)
    assert len(fig.data) == SEG
    assert "per run (tokens)" in fig.layout.title.text
    assert [t.name for t in fig.data][:2] == ["hit (reused)", "sparse-retention miss"]
    overall = report_data.groups.filter(pl.col("is_overall")).sort("run_id")
    for i, queried in enumerate(overall["prompt_tokens"].to_list()):
        assert sum(t.x[i] for t in fig.data) == queried
    shares = waterfall.waterfall_runs(report_data.groups, share=True)
    assert "(shares)" in shares.layout.title.text
    for i in range(NUM_RUNS):
        assert sum(t.x[i] for t in shares.data) == pytest.approx(100.0, abs=1e-4)
    # retention at every boundary loses fewer tokens to sparse-retention misses
    miss = fig.data[1].x
    assert miss[1] < miss[0]


def test_waterfall_groups_one_run_at_a_time(report_data):
    fig = waterfall.waterfall_groups(report_data.groups)
    assert len(fig.data) == SEG * NUM_RUNS
    assert fig.layout.title.text.startswith("Loss waterfall per prompt family")
    (menu,) = fig.layout.updatemenus
    assert [b.label for b in menu.buttons] == report_data.runs["run_label"].to_list()
    assert [t.visible for t in fig.data] == [True] * SEG + [False] * SEG
    assert menu.buttons[1].args[0]["visible"] == [False] * SEG + [True] * SEG
    # 4 families x 2 revisions, largest queried traffic first
    assert len(fig.data[0].y) == 8
    assert all(" · qwen3-next-80b-a3b@" in y for y in fig.data[0].y)
    totals = [sum(t.x[i] for t in fig.data[:SEG]) for i in range(8)]
    assert totals == sorted(totals, reverse=True)


def test_windows_are_per_window_deltas(report_data, report_db):
    frame = report_data.windows
    fig = time_chart.windows(frame, report_data.window_unit)
    assert len(fig.data) == 2 * NUM_RUNS
    assert "per-window deltas" in fig.layout.title.text
    assert report_data.window_unit == "s"
    row = frame.filter((pl.col("run_id") == 1) & (pl.col("window_idx") == 5)).row(0, named=True)
    t0 = db_rows(report_db, "SELECT min(timestamp_s) FROM replay_requests")[0][0]
    width = row["window_end"] - row["window_start"]
    hits, queries = db_rows(
        report_db,
        "SELECT sum(hit_tokens), sum(prompt_tokens) FROM replay_requests WHERE run_id = 1 "
        f"AND timestamp_s >= {t0 + 5 * width} AND timestamp_s < {t0 + 6 * width}",
    )[0]
    assert row["useful_hit_ratio"] == pytest.approx(hits / queries)
    point = fig.data[0].y[5]
    assert point == pytest.approx(hits / queries)


def test_windows_draw_at_most_8_runs_with_a_picker_and_break_at_gaps(report_data):
    one = report_data.windows.filter(pl.col("run_id") == 1)
    many = pl.concat(
        [
            one.with_columns(
                pl.lit(k).alias("run_id"), pl.lit(f"run {k} · vllm").alias("run_label")
            )
            for k in range(1, 11)
        ]
    )
    fig = time_chart.windows(many, "s")
    assert [t.visible for t in fig.data[::2]] == [True] * 8 + ["legendonly"] * 2
    picker = fig.layout.updatemenus[0]
    assert [b.label for b in picker.buttons] == ["runs 1–8", "runs 9–10"]
    assert picker.buttons[1].args[0]["visible"][16:] == [True] * 4
    # a window without requests breaks the line (no point joins windows across it)
    gap = one.filter(pl.col("window_idx") != 3)
    y = time_chart.windows(gap, "s").data[0].y
    assert y[3] is None and y[2] is not None and y[4] is not None


def test_junctions_top_losses(report_data):
    frame = report_data.junctions
    assert frame is not None and frame.height > 0
    fig = figures.junctions(frame)
    assert len(fig.data) == 2 * NUM_RUNS
    assert fig.layout.title.text.startswith("Top ")
    labels = fig.data[0].y
    assert 0 < len(labels) <= figures.TOP_JUNCTIONS
    assert all(label.startswith("@") and " tok · " in label for label in labels)
    lost = fig.data[0].x
    assert lost[0] == max(lost) and lost[0] > 0
    # every pinned request belongs to one junction: pinned sparse misses <= the run's total
    overall = report_data.groups.filter(pl.col("is_overall") & (pl.col("run_id") == 1))
    run1 = frame.filter(pl.col("run_id") == 1)
    assert run1["sparse_retention_miss_tokens"].sum() <= overall["sparse_retention_miss_tokens"][0]


def test_each_junction_names_its_conversations_and_requests(report_data, report_db):
    """(issue 47 item 7: a label like `@480,640 tok · no family · d0cc0c3f` led nowhere
    without SQL) every junction row names its conversations and first requests pinned there,
    in the hover and the section's table."""
    from analyzer.report.sections import junctions_section

    frame = report_data.junctions.filter(pl.col("run_id") == 1)
    top = frame.row(0, named=True)
    con = duckdb.connect(str(report_db), read_only=True)
    try:
        con.execute(load_sql("report_junction_paths_view"))
        pinned = con.execute(
            "SELECT q.request_id, q.conversation_id FROM requests q JOIN report_junction_paths "
            "p USING (arrival_seq) WHERE p.junction_id = $j ORDER BY q.arrival_seq",
            {"j": top["junction_id"]},
        ).fetchall()
    finally:
        con.close()
    assert len(pinned) == top["num_requests_pinned"]
    assert top["first_requests"] == ", ".join(r for r, _ in pinned[:5])
    conversations = sorted({c for _, c in pinned if c is not None})
    assert top["num_conversations"] == len(conversations)
    assert top["conversations"] == ", ".join(conversations[:3])
    fig = figures.junctions(report_data.junctions)
    assert "first requests pinned: %{customdata[7]}" in fig.data[0].hovertemplate
    assert fig.data[0].customdata[0][7] == top["first_requests"]
    body, _ = junctions_section(report_data)
    assert "<th>first requests pinned here (arrival order)</th>" in body
    assert f"{top['first_requests']} …" in body  # more than five requests are pinned there


def test_weighting_and_policy_comparison(report_data):
    fig = figures.weighting(report_data.groups)
    assert len(fig.data) == 4
    assert [t.name for t in fig.data] == [
        "useful-hit ratio, token-weighted",
        "useful-hit ratio, request-weighted",
        "sparse-loss ratio, token-weighted",
        "sparse-loss ratio, request-weighted",
    ]
    comp = figures.policy_comparison(report_data.groups)
    assert len(comp.data) == 2
    assert list(comp.data[0].y) == report_data.runs["run_label"].to_list()
    assert comp.data[0].customdata[0] == 0.0


def test_sweeps_figure():
    frame = pl.DataFrame(
        {
            "sweep_id": [1, 1, 1, 2, 2],
            "knob": ["num_blocks"] * 3 + ["retention_interval"] * 2,
            "value": ["1000", "4000", "2000", "0", "null"],
            "run_id": [3, 5, 4, 6, 7],
            "useful_hit_ratio": [0.3, 0.45, 0.4, 0.4, 0.5],
            "sparse_loss_ratio": [0.03, 0.03, 0.03, 0.03, 0.01],
            "memory_gib": [12.5, 50.0, 25.0, None, None],
        }
    )
    # pools against memory in GiB, in pool order; a target line and its smallest pool starred
    fig = capacity.sweeps(frame, target=0.4)
    assert [t.name for t in fig.data] == ["sweep 1", "sweep 1: smallest reaching 40%"]
    assert list(fig.data[0].x) == [12.5, 25.0, 50.0]
    assert list(fig.data[1].x) == [25.0] and fig.data[1].marker.symbol == "star"
    assert fig.layout.xaxis.title.text == "cache memory per cache (GiB)"
    assert fig.layout.xaxis.type == "linear"  # 4x: not log
    assert fig.layout.shapes[0].y0 == 0.4
    assert fig.layout.title.text.startswith("Capacity curves")
    # without memory: num_blocks, logarithmic past 20x
    wide = frame.with_columns(
        pl.Series("memory_gib", [None] * 5, pl.Float64),
        pl.Series("value", ["10", "4000", "2000", "0", "null"]),
    )
    fig = capacity.sweeps(wide)
    assert fig.layout.xaxis.type == "log" and list(fig.data[0].x) == [10.0, 2000.0, 4000.0]
    # only other knobs: their values on a category axis
    knobs = capacity.sweeps(frame.filter(pl.col("knob") != "num_blocks"))
    assert [t.name for t in knobs.data] == ["sweep 2: retention_interval"]
    assert knobs.layout.xaxis.type == "category"


def test_figures_are_pure(report_data):
    before = report_data.groups.clone()
    for build in (waterfall.waterfall_runs, waterfall.waterfall_groups, figures.weighting):
        assert build(report_data.groups).to_json() == build(report_data.groups).to_json()
    assert report_data.groups.equals(before)
    j = report_data.junctions
    assert figures.junctions(j).to_json() == figures.junctions(j).to_json()


def test_a_run_of_many_families_draws_the_largest_and_the_rest_as_one_bar(report_data):
    """Mooncake with --derive-families --min-family-tokens 513: 2,212 families made the
    figure 88,000 px tall for every run (40 px a bar), a run of one family a blank page.
    At most MAX_GROUP_BARS bars: the largest, then the others summed, so a run's bars
    still sum to its queried tokens."""
    groups = report_data.groups
    run1 = groups.filter((pl.col("run_id") == 1) & ~pl.col("is_overall"))
    many = pl.concat(
        [
            run1.with_columns(
                pl.format("{}-{}", pl.col("prompt_family"), pl.lit(k)).alias("prompt_family")
            )
            for k in range(10)
        ]
    )  # 80 families x revisions, each a copy of one of run 1's 8
    frame = pl.concat([many, groups.filter(pl.col("run_id") == 2)])
    fig = waterfall.waterfall_groups(frame)
    cap = waterfall.MAX_GROUP_BARS
    first = fig.data[:SEG]
    assert len(first[0].y) == cap
    assert first[0].y[-1] == f"the other {80 - cap + 1:,} families × revisions"
    assert sum(sum(t.x) for t in first) == 10 * sum(run1["prompt_tokens"].to_list())
    assert fig.layout.height < figures.bar_height(cap + 5, 40)  # 80 bars: 3,450 px
