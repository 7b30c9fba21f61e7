"""The report's windows over time of a run replayed with a warm-up (`hpa replay
--measure-from`): every other figure counts its measured requests only, so the time chart,
the Routing table and the routing windows do too, and the time chart shades the warm-up's
span instead of drawing it; a run measured from its first request is drawn as before."""

from __future__ import annotations

import polars as pl
import pytest

from analyzer.pipeline.replay import run_replay
from analyzer.report import time_chart
from analyzer.report.data import load_report_data
from analyzer.report.sections import windows_section
from analyzer.sim.dispatch import make_policy
from analyzer.store.ingest import ingest
from tests.conftest import db_rows, write_jsonl

POLICY = {"block_size": 16, "groups": ["full_attention"], "num_blocks": 400}
TWO = {**POLICY, "replicas": 2, "routing": "round_robin"}
NUM_REQUESTS = 40
WARM_UP = 22  # floor(0.55 x 40): requests 0..21 are the warm-up, 1 s apart
BIN_S = 5.0  # window 4, [20, 25) s, holds requests 20..24: two of the warm-up's


def _records(timestamps: bool) -> list[dict]:
    """The warm-up's 22 requests send one 64-token prompt (each after the first hits 48
    tokens); the 18 measured ones each their own (no hit)."""
    same = list(range(1, 65))
    return [
        {
            "request_id": f"r{i}",
            **({"timestamp": 1_000.0 + i} if timestamps else {}),
            "prompt_token_ids": same if i < WARM_UP else [1_000 * i + k for k in range(64)],
        }
        for i in range(NUM_REQUESTS)
    ]


def _store(folder, timestamps: bool = True):
    """Run 1 measured from the first request, run 2 from the 23rd (--measure-from 0.55),
    run 3 as run 2 over two replicas."""
    db = folder / "w.duckdb"
    ingest([write_jsonl(folder / "w.jsonl", _records(timestamps))], db_path=db)
    run_replay(make_policy(POLICY), db_path=db)
    run_replay(make_policy(POLICY), db_path=db, measure_from=0.55)
    run_replay(make_policy(TWO), db_path=db, measure_from=0.55)
    return db


@pytest.fixture(scope="module")
def warm_db(tmp_path_factory):
    return _store(tmp_path_factory.mktemp("warm"))


def _sums(db, run_id: int, measured_only: bool, clock: str, t0: float, width: float):
    """Per window, (requests, prompt tokens, hit tokens) of the stored rows, in Python."""
    rows = db_rows(
        db,
        f"SELECT {clock}, prompt_tokens, hit_tokens, measured FROM replay_requests "
        f"WHERE run_id = {run_id}",
    )
    sums: dict[int, list[int]] = {}
    for t, prompt, hit, measured in rows:
        if measured or not measured_only:
            row = sums.setdefault(int((t - t0) // width), [0, 0, 0])
            row[0], row[1], row[2] = row[0] + 1, row[1] + prompt, row[2] + hit
    return {w: tuple(s) for w, s in sorted(sums.items())}


def _windows(frame: pl.DataFrame, run_id: int) -> dict[int, tuple]:
    part = frame.filter(pl.col("run_id") == run_id).sort("window_idx")
    cols = ["window_idx", "num_requests", "prompt_tokens", "hit_tokens"]
    return {w: tuple(rest) for w, *rest in part.select(cols).iter_rows()}


@pytest.mark.parametrize(
    ("timestamps", "bin_s", "clock", "t0", "width", "straddled"),
    [
        (True, BIN_S, "timestamp_s", 1_000.0, BIN_S, 4),  # [20, 25) s from the first request
        (False, None, "arrival_seq", 0.0, 2.0, 11),  # ceil(40 / 24) requests: [22, 24)
    ],
)
def test_windows_count_the_measured_requests_only(
    tmp_path, timestamps, bin_s, clock, t0, width, straddled
):
    """Run 2's warm-up requests hit 48 of 64 tokens each, its measured ones none: its windows
    held the warm-up's 1,008 hit tokens (every window but the last ones above 0%) where
    `hpa replay`, the runs table and the waterfall say 0 hits."""
    db = _store(tmp_path, timestamps)
    data = load_report_data(db, bin_s=bin_s)
    w = data.windows
    assert _windows(w, 2) == _sums(db, 2, True, clock, t0, width)
    assert _windows(w, 2) != _sums(db, 2, False, clock, t0, width)  # what it drew before
    run_2 = w.filter(pl.col("run_id") == 2)
    assert run_2["num_requests"].sum() == NUM_REQUESTS - WARM_UP
    assert (
        run_2["hit_tokens"].sum()
        == 0
        == db_rows(db, "SELECT hit_tokens FROM replay_runs WHERE run_id = 2")[0][0]
    )
    # the window the warm-up ends in starts where the measured requests do
    first = run_2.row(0, named=True)
    assert (first["window_idx"], first["window_start"]) == (straddled, WARM_UP)
    assert first["window_end"] == (straddled + 1) * width
    # a run measured from its first request: every request, windows whole as before
    assert _windows(w, 1) == _sums(db, 1, False, clock, t0, width)
    run_1 = w.filter(pl.col("run_id") == 1)
    assert run_1["window_start"].to_list() == [i * width for i in run_1["window_idx"]]
    assert run_1["hit_tokens"].sum() == 21 * 48


def test_the_chart_shades_the_warm_up_and_draws_no_point_in_it(warm_db):
    data = load_report_data(warm_db, runs=[2], bin_s=BIN_S)
    fig = time_chart.windows(data.windows, data.window_unit)
    assert [(s.x0, s.x1) for s in fig.layout.shapes] == [(0.0, 22.0)] * 2  # both panels
    labels = [a.text for a in fig.layout.annotations if a.text == time_chart.WARM_UP]
    assert labels == [time_chart.WARM_UP]
    assert min(fig.data[0].x) == 23.5  # the middle of [22, 25): past the warm-up
    assert fig.data[0].y == (0.0, 0.0, 0.0, 0.0)


def test_runs_with_different_warm_ups_are_named_and_one_without_draws_none(warm_db):
    both = load_report_data(warm_db, runs=[1, 2], bin_s=BIN_S)
    names = [a.text for a in time_chart.windows(both.windows, "s").layout.annotations]
    assert f"run 2: {time_chart.WARM_UP}" in names
    plain = load_report_data(warm_db, runs=[1], bin_s=BIN_S)
    fig = time_chart.windows(plain.windows, "s")
    assert fig.layout.shapes == ()
    assert time_chart.WARM_UP not in windows_section(plain)[0]


def test_the_windows_prose_says_what_the_warm_up_left_out(warm_db):
    body, _ = windows_section(load_report_data(warm_db, bin_s=BIN_S))
    assert (
        "In run 2 · vllm the first 22 requests replayed as warm-up (<code>--measure-from</code>; "
        "1 other run had one too): as in every other figure of this report they are not "
        "counted. No point holds them, their span is shaded &quot;warm-up (not measured)&quot;, "
        "and the window it ends in starts at the first measured request."
    ) in body
    assert "Each point covers one 5 s window" in body


def test_routing_counts_the_measured_requests_only(warm_db):
    """Run 3's Routing table and windows counted the warm-up: its replicas' hit tokens summed
    to 960 (each replica's first warm-up request missed) where its runs-table row says 0."""
    data = load_report_data(warm_db, bin_s=BIN_S)
    table = data.routing.filter(pl.col("run_id") == 3)
    run = table.filter(pl.col("is_overall")).row(0, named=True)
    stored = db_rows(warm_db, "SELECT prompt_tokens, hit_tokens FROM replay_runs WHERE run_id = 3")
    assert (run["prompt_tokens"], run["hit_tokens"]) == stored[0] == (18 * 64, 0)
    assert run["num_requests"] == NUM_REQUESTS - WARM_UP
    assert table.filter(~pl.col("is_overall"))["num_requests"].to_list() == [9, 9]
    windows = data.routing_windows.filter(pl.col("run_id") == 3)
    assert windows["num_requests"].sum() == NUM_REQUESTS - WARM_UP
    assert windows["hit_tokens"].sum() == 0
    assert windows["window_idx"].min() == 4  # the first measured request's window
