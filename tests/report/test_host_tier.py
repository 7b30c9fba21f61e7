"""The report's Host KV tier section: there only when a run had a tier or a host_tier_gib
sweep was stored; the hit split and the waits per run; the sweep's figure against host GiB."""

from __future__ import annotations

import json
import math

import polars as pl
import pytest

from analyzer.pipeline.replay import run_replay
from analyzer.pipeline.sweep import run_sweeps
from analyzer.report.data import load_report_data
from analyzer.report.host_tier import FIGURE_ID, host_section, host_sweep_figure
from analyzer.report.waterfall import cause_segments, segments
from analyzer.sim.dispatch import make_policy
from tests.host_trace import BASE, MODEL, TIER, host_trace_db


@pytest.fixture(scope="module")
def host_db(tmp_path_factory):
    """Run 1 without a tier, run 2 with 32 slots, then a sweep of host_tier_gib 0 and 1."""
    tmp = tmp_path_factory.mktemp("report_host")
    db = host_trace_db(tmp)
    run_replay(make_policy(BASE), db_path=db)
    run_replay(make_policy({**BASE, **TIER}), db_path=db)
    model = tmp / "model.json"
    model.write_text(json.dumps(MODEL))
    sets = [f"{k}={json.dumps(v)}" for k, v in BASE.items()] + [f"model={json.dumps(str(model))}"]
    run_sweeps(None, sets, ["host_tier_gib=0,1"], db_path=db, jobs=1)
    return db


def test_no_section_without_a_tier(tmp_path):
    db = host_trace_db(tmp_path)
    run_replay(make_policy(BASE), db_path=db)
    data = load_report_data(db)
    assert data.host_tier is None
    assert host_section(data) == ("", [])


@pytest.mark.parametrize(
    ("runs", "figure", "table"),
    [
        ([1], True, False),  # no tier in the run shown: the store's host sweep only
        ([2], True, True),
        ([1, 2], True, True),
    ],
)
def test_section_with_a_tier_or_a_host_sweep(host_db, runs, figure, table):
    body, ids = host_section(load_report_data(host_db, runs=runs))
    assert 'id="host"' in body
    assert (ids == [FIGURE_ID]) is figure
    assert ("<table" in body) is table
    assert ("<th>never stored</th>" in body) is table
    kinds = (
        "dropped for want of a slot",
        "past a prompt under prompt-only",
        "with no sparse state kept",
    )
    assert all((f"<th>never stored: {k}</th>" in body) is table for k in kinds)


def test_host_rows_split_the_hit(host_db):
    rows = load_report_data(host_db, runs=[1, 2]).host_tier
    got = [
        (r["run_id"], r["sweep_id"], r["host_tier_gib"], r["host_tier_chunks"],
         r["hit_tokens"], r["host_hit_tokens"], r["host_waited_requests"],
         r["useful_hit_ratio"], r["gpu_hit_ratio"])
        for r in rows.sort("run_id").iter_rows(named=True)
    ]  # fmt: skip
    # run 1 (no tier) is left out; the sweep's 0 GiB point is kept for its curve
    assert got == [
        (2, None, 0.0, 32, 128, 128, 2, 0.32, 0.0),
        (3, 1, 0.0, None, 0, 0, 0, 0.0, 0.0),
        (4, 1, 1.0, None, 128, 128, 2, 0.32, 0.0),
    ]
    body, _ = host_section(load_report_data(host_db, runs=[2]))
    assert "<td>32 slots</td>" in body and '<td class="num">32.0%</td>' in body


@pytest.mark.parametrize(
    ("runs", "bars"),
    [
        # no run shown has host hits: the waterfall's bars are what they always were
        ([1], ["hit_tokens", "sparse_retention_miss_tokens"]),
        # with host hits the hit splits: the GPU's, then what the host tier won back
        ([1, 2], ["gpu_hit_tokens", "host_hit_tokens", "sparse_retention_miss_tokens"]),
    ],
)
def test_waterfall_splits_the_hit_only_with_host_hits(host_db, runs, bars):
    groups = load_report_data(host_db, runs=runs).groups
    assert [col for col, _, _ in segments(groups.columns)][: len(bars)] == bars
    assert "host_hit_tokens" not in {c for c, _, _ in cause_segments(groups.columns)}
    overall = groups.filter(pl.col("is_overall")).sort("run_id")
    causes = [c for c, _, _ in cause_segments(groups.columns)]
    for row in overall.iter_rows(named=True):
        hits = [row[c] for c, _, _ in segments(groups.columns) if c not in causes]
        assert sum(hits) + sum(row[c] for c in causes) == row["prompt_tokens"] == 400


@pytest.mark.parametrize(
    ("ttft", "traces", "panels"),
    [
        ([None, None], 2, 1),  # serial: useful hit and the GPU's alone
        ([16.9, 10.7], 3, 2),  # concurrent: TTFT p99 in a second panel
    ],
)
def test_sweep_figure_draws_ttft_only_when_timed(ttft, traces, panels):
    points = pl.DataFrame(
        {
            "sweep_id": [1, 1],
            "run_id": [5, 6],
            "host_tier_gib": [0.0, 1024.0],
            "useful_hit_ratio": [0.046, 0.276],
            "gpu_hit_ratio": [0.046, 0.046],
            "host_hit_ratio": [0.0, 0.23],
            "host_waited_requests": [0, 3409],
            "ttft_p99_s": ttft,
            "memory_gib": [62.5, 62.5],
        },
        schema_overrides={"ttft_p99_s": pl.Float64},
    )
    fig = host_sweep_figure(points)
    assert len(fig.data) == traces
    assert len({t.yaxis for t in fig.data}) == panels
    assert [s.x0 for s in fig.layout.shapes] == [62.5] * panels  # the GPU pool, each panel
    assert [a.text for a in fig.layout.annotations] == ["GPU pool 62.5 GiB"]


@pytest.mark.parametrize(
    ("sizes", "log", "x", "ticks"),
    [
        # a doubling sweep goes on a log axis, no tier at half the smallest size, labelled 0
        ([0.0, 64.0, 256.0, 4096.0], True, [32.0, 64.0, 256.0, 4096.0],
         ["0", "64", "256", "4,096"]),
        ([64.0, 1024.0], True, [64.0, 1024.0], ["64", "1,024"]),
        # spans below 16x stay linear, as the figure always drew them
        ([0.0, 1024.0], False, [0.0, 1024.0], None),
        ([0.0], False, [0.0], None),
    ],
)  # fmt: skip
def test_host_sizes_go_on_a_log_axis_when_they_span_16x(sizes, log, x, ticks):
    points = pl.DataFrame(
        {
            "sweep_id": [1] * len(sizes),
            "run_id": list(range(len(sizes))),
            "host_tier_gib": sizes,
            "useful_hit_ratio": [0.5] * len(sizes),
            "gpu_hit_ratio": [0.5] * len(sizes),
            "host_hit_ratio": [0.0] * len(sizes),
            "host_waited_requests": [0] * len(sizes),
            "ttft_p99_s": [None] * len(sizes),
            "memory_gib": [62.5] * len(sizes),
        },
        schema_overrides={"ttft_p99_s": pl.Float64},
    )
    fig = host_sweep_figure(points)
    assert list(fig.data[0].x) == x
    assert [row[3] for row in fig.data[0].customdata] == sizes  # the hover's true size
    assert fig.layout.xaxis.type == ("log" if log else None)
    assert (None if fig.layout.xaxis.ticktext is None else list(fig.layout.xaxis.ticktext)) == ticks
    # the GPU pool's line at its value; its label at the value's log10 on a log axis
    assert [s.x0 for s in fig.layout.shapes] == [62.5]
    assert [a.x for a in fig.layout.annotations] == [math.log10(62.5) if log else 62.5]


def test_a_serial_sweep_beside_a_concurrent_one_draws_no_ttft_line():
    """(a serial sweep's empty TTFT trace was a legend entry with nothing drawn)"""
    points = pl.DataFrame(
        {
            "sweep_id": [1, 1, 2, 2],
            "run_id": [1, 2, 3, 4],
            "host_tier_gib": [0.0, 256.0] * 2,
            "useful_hit_ratio": [0.73, 0.85] * 2,
            "gpu_hit_ratio": [0.73] * 4,
            "host_hit_ratio": [0.0, 0.12] * 2,
            "host_waited_requests": [0, 1345] * 2,
            "ttft_p99_s": [None, None, 789.3, 545.0],
            "memory_gib": [62.5] * 4,
        },
        schema_overrides={"ttft_p99_s": pl.Float64},
    )
    names = [t.name for t in host_sweep_figure(points).data]
    assert [n for n in names if "TTFT" in n] == ["sweep 2: TTFT p99"]
    assert len(names) == 5
