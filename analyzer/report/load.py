"""The report's Load section: queueing, time to first token and preemptions of the runs
replayed under the concurrent schedule (vLLM's scheduler on a simulated clock).

Shown only when a run in the report is concurrent; a serial run has no clock. The table
holds each run's figures as `hpa replay` prints them (replay_load_summary.sql); the figure
plots TTFT and queue-time quantiles per arrival window (report_load_windows.sql), so a
reader sees when queueing and preemptions set in.
"""

from __future__ import annotations

import html
import json

import plotly.graph_objects as go
import polars as pl
from plotly.subplots import make_subplots

from analyzer.config.routers import router
from analyzer.config.schedule import CONCURRENT_KEYS
from analyzer.report.blocks import (
    count,
    figure_div,
    html_table,
    lead_run,
    meaning,
    overall_rows,
    pct,
)
from analyzer.report.data import ReportData
from analyzer.report.figures import MENU_ROW, run_dropdown, style_figure
from analyzer.store.runs import saturation_words
from analyzer.words import plural

FIGURE_ID = "fig-load"
# (column, legend name, colour, dash, subplot row) of each line; preemptions are bars.
LINES = (
    ("ttft_p50_s", "time to first token, median (p50)", "#1f77b4", "solid", 1),
    ("ttft_p90_s", "time to first token, p90", "#1f77b4", "dot", 1),
    ("queue_p50_s", "queue time, median (p50)", "#9467bd", "solid", 2),
    ("queue_p90_s", "queue time, p90", "#9467bd", "dot", 2),
)
PER_RUN = len(LINES) + 1


def _seconds(x) -> str:
    return "–" if x is None else f"{x:,.2f}"


def _hover(part: pl.DataFrame) -> list:
    return part.select(
        [
            "window_start",
            "window_end",
            "num_requests",
            "num_preempted_requests",
            "recomputed_tokens",
        ]
    ).rows()


def _run_traces(fig: go.Figure, part: pl.DataFrame, run_label: str, first: bool) -> None:
    mid = ((part["window_start"] + part["window_end"]) / 2).to_list()
    custom = _hover(part)
    where = (
        f"<b>{run_label}</b><br>arrivals %{{customdata[0]:,}}–%{{customdata[1]:,}} s; "
        "requests: %{customdata[2]:,}<br>"
    )
    for col, name, colour, dash, row in LINES:
        fig.add_trace(
            go.Scatter(
                name=name,
                x=mid,
                y=part[col].to_list(),
                mode="lines+markers",
                line={"color": colour, "dash": dash},
                legendgroup=name,
                showlegend=first,
                customdata=custom,
                hovertemplate=where + f"{name}: %{{y:,.2f}} s<extra></extra>",
            ),
            row=row,
            col=1,
        )
    fig.add_trace(
        go.Bar(
            name="preemptions",
            x=mid,
            y=part["num_preemptions"].to_list(),
            marker_color="#d62728",
            legendgroup="preemptions",
            showlegend=first,
            customdata=custom,
            hovertemplate=where + "%{y:,} preemptions of %{customdata[3]:,} requests, "
            "%{customdata[4]:,} tokens recomputed<extra></extra>",
        ),
        row=3,
        col=1,
    )


# The simulated clock's origin (sim/vllm/concurrent.py `_flights`: t0 is the earliest
# timestamp of the requests one scheduler replays): each cache's own, where a cache is a
# model revision x replica; a live router's replicas share their model revision's (sim/fleet.py).
ARRIVAL_AXES = {
    "revision": "simulated arrival time (s since its model revision's first request; "
    "each revision has its own clock)",
    "replica": "simulated arrival time (s since its replica's first request; each model "
    "revision x replica has its own clock)",
    "cache": "simulated arrival time (s since its cache's first request; one clock per "
    "model revision, per replica under a static router)",
}


def clock_of(policy: dict) -> str:
    """'revision' or 'replica': whose first request a run's simulated clock starts at."""
    row = router(policy.get("routing", "trace"))
    return "revision" if policy.get("replicas", 1) == 1 or row.live else "replica"


def arrival_axis(policies: list[dict]) -> str:
    """The x axis title of the runs' arrival windows: their clocks, or 'each cache's'."""
    clocks = {clock_of(p) for p in policies}
    return ARRIVAL_AXES[clocks.pop() if len(clocks) == 1 else "cache"]


def load_figure(frame: pl.DataFrame, axis: str = ARRIVAL_AXES["cache"]) -> go.Figure:
    """TTFT and queue time (p50, p90) and preemptions per arrival window, one run at a time
    (a dropdown picks the run): each point covers the requests arriving in its window;
    `axis`: the x axis title (`arrival_axis`: whose first request the clock starts at)."""
    fig = make_subplots(
        rows=3,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.09,
        row_heights=[0.4, 0.4, 0.2],
        subplot_titles=(
            "time to first token: arrival to first output token (s)",
            "queue time: arrival to first scheduled (s)",
            "preemptions of the requests arriving in the window",
        ),
    )
    labels = frame.select("run_id", "run_label").unique().sort("run_id")["run_label"].to_list()
    for k, run_label in enumerate(labels):
        part = frame.filter(pl.col("run_label") == run_label).sort("window_idx")
        _run_traces(fig, part, run_label, k == 0)
    fig.update_yaxes(rangemode="tozero")
    fig.update_yaxes(title="seconds", row=1, col=1)
    fig.update_yaxes(title="seconds", row=2, col=1)
    fig.update_yaxes(title="count", row=3, col=1)
    fig.update_xaxes(title=axis)
    fig.update_xaxes(title=None, row=1, col=1)
    fig.update_xaxes(title=None, row=2, col=1)
    style_figure(fig, "Queueing and time to first token over arrival time (simulated)", 820)
    fig.update_layout(margin={"t": 70, "b": 150}, legend={"y": -0.12, "yanchor": "top"})
    run_dropdown(fig, labels, PER_RUN)
    if fig.layout.updatemenus:  # the legend is below the plots: the menu needs one row
        top = 70 + MENU_ROW + 10
        plot_height = fig.layout.height - top - fig.layout.margin.b
        fig.update_layout(margin={"t": top})
        fig.layout.updatemenus[0].y = 1 + (MENU_ROW + 5) / plot_height
    return fig


def _clock(policy: dict) -> str:
    """The run's simulated clock in words; a key its policy lacks has the schedule's default."""
    value = {key: policy.get(key, spec.default) for key, spec in CONCURRENT_KEYS.items()}
    steps = f"{value['step_base_ms']:g} ms + {value['step_token_us']:g} µs per token"
    if policy.get("gpu") is not None:  # the step model's: from the model and the GPU
        kind = "AIConfigurator's tables" if policy.get("step_model") == "aic" else "roofline"
        steps = f"{kind} on {policy.get('tensor_parallel', 1)} × {policy['gpu']}"
    return f"{steps}; arrivals × {value['time_scale']:g}"


def _table(data: ReportData) -> str:
    policies = dict(
        zip(data.runs["run_id"].to_list(), data.runs["policy_json"].to_list(), strict=True)
    )
    queried = dict(overall_rows(data).select("run_id", "prompt_tokens").iter_rows())
    lost = dict(overall_rows(data).select("run_id", "lost_in_flight_tokens").iter_rows())
    rows = []
    for r in data.load.sort("run_id").iter_rows(named=True):
        q = queried[r["run_id"]] or 1
        rows.append(
            [
                r["run_label"],
                _clock(json.loads(policies[r["run_id"]])),
                count(r["num_timed"]),
                _seconds(r["ttft_p50_s"]),
                _seconds(r["ttft_p90_s"]),
                _seconds(r["ttft_p99_s"]),
                _seconds(r["queue_mean_s"]),
                _seconds(r["queue_p99_s"]),
                f"{count(r['num_preemptions'] or 0)} ({count(r['num_preempted_requests'])})",
                count(r["recomputed_tokens"] or 0),
                f"{count(r['in_flight_peak'] or 0)} ({r['in_flight_mean'] or 0:,.1f})",
                f"{count(lost[r['run_id']])} ({pct(lost[r['run_id']] / q)})",
            ]
        )
    headers = [
        "run",
        "scheduler step (simulated)",
        "requests timed",
        "TTFT p50 (s)",
        "TTFT p90 (s)",
        "TTFT p99 (s)",
        "queue mean (s)",
        "queue p99 (s)",
        "preemptions (requests preempted)",
        "tokens recomputed",
        "requests in flight: peak (mean)",
        "tokens lost in flight (share of queried)",
    ]
    return html_table(headers, rows, numeric=set(range(2, 12)))


def _summary(data: ReportData) -> str:
    """One sentence on the lead concurrent run (the incident's, else the first): where TTFT
    p90 was worst, and preemptions."""
    w = data.load_windows
    first = (
        w.filter(pl.col("run_id") == lead_run(data, w["run_id"].unique().to_list()))
        if w.height
        else w
    )
    timed = first.filter(pl.col("ttft_p90_s").is_not_null())
    if timed.height == 0:
        return ""
    worst = timed.sort(["ttft_p90_s", "window_idx"], descending=[True, False]).row(0, named=True)
    total = int(first["num_preemptions"].sum())
    text = (
        f" In {html.escape(worst['run_label'])}, the slowest 10% of the requests arriving "
        f"at {worst['window_start']:,.0f}–{worst['window_end']:,.0f} s waited at least "
        f"{worst['ttft_p90_s']:,.2f} s for their first token"
    )
    if total:
        busiest = first.sort(["num_preemptions", "window_idx"], descending=[True, False]).row(
            0, named=True
        )
        text += (
            f"; {plural(int(total), 'preemption')} in all, most among arrivals at "
            f"{busiest['window_start']:,.0f}–{busiest['window_end']:,.0f} s"
        )
    return text + "."


def _saturated(data: ReportData) -> str:
    """One sentence per saturated run (store.runs.is_saturated, `hpa plan`'s `saturated`):
    its queue grows with the trace, and the queue times that show it."""
    text = ""
    for r in data.load.sort("run_id").iter_rows(named=True):
        if r["saturated"]:
            text += (
                f" {html.escape(r['run_label'])} is saturated: "
                + saturation_words(r["queue_first_quarter_s"], r["queue_last_quarter_s"])
                + ", so its times say how far behind it fell, not what a server that keeps up "
                "would serve."
            )
    return text


def _axis(data: ReportData) -> str:
    """`arrival_axis` of the runs the load figure draws."""
    shown = set(data.load_windows["run_id"].to_list())
    runs = data.runs.filter(pl.col("run_id").is_in(shown))
    return arrival_axis([json.loads(p) for p in runs["policy_json"]])


def load_section(data: ReportData) -> tuple[str, list[str]]:
    """The Load section, or ("", []) when every run shown is serial."""
    if data.load is None or data.load_windows is None:
        return "", []
    intro = (
        "<p>Runs replayed with <code>schedule: concurrent</code>: requests arrive at their "
        "trace timestamps (scaled by <code>time_scale</code>) and compete for their own "
        "cache's vLLM scheduler and pool (one per model revision x replica); each cache's "
        "clock starts at its first arrival (a live router's replicas share their model "
        "revision's), so two caches' times are not one timeline. These are simulated times "
        "from vLLM's scheduler model, not measurements: each scheduler step lasts what the "
        "table's scheduler step says (<code>step_base_ms</code> plus "
        "<code>step_token_us</code> per token scheduled in it, or the roofline of the model "
        "on the GPU named). Serial runs have no clock and are not listed.</p>"
    )
    menu = " (the menu at the top right picks the run)" if data.load.height > 1 else ""
    text = (
        "Queue time is how long a request waited for its first scheduling step (the batch "
        "was full, the step's token budget was spent, or the pool had no room); time to "
        "first token (TTFT) adds its prefill. A preemption evicts a running request when "
        "the pool runs out: it restarts later and computes its tokens again (tokens "
        "recomputed). Requests in flight have arrived but not finished. Tokens lost in "
        "flight were shared with an earlier request that had not yet scheduled them when "
        "this one was admitted, so no cache could have served them. Each point covers the "
        f"requests arriving in one window{menu}; a rising line means arrivals outpace the "
        "scheduler and the queue builds up." + _summary(data) + _saturated(data)
    )
    body = (
        '<section id="load"><h2>Load: queueing and time to first token</h2>'
        + intro
        + _table(data)
        + figure_div(load_figure(data.load_windows, _axis(data)), FIGURE_ID)
        + meaning(text)
        + "</section>"
    )
    return body, [FIGURE_ID]
