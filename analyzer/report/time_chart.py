"""The report's time chart: useful-hit and sparse-loss ratios per window of arrival time,
one line per run (at most MAX_SERIES drawn when the page opens, a picker for the rest),
on a wall-clock UTC axis when the timestamps are, with breaks where windows are empty.
A run's warm-up requests (`hpa replay --measure-from`) are in no window: their span is
shaded and labelled WARM_UP, so the axis still starts at the trace's first request."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import plotly.graph_objects as go
import polars as pl
from plotly.subplots import make_subplots

from analyzer.report.figures import palette, style_figure, tick_format

MAX_SERIES = 8  # lines drawn by default; the legend shows the others on a click
WALL_CLOCK_S = 946_684_800  # timestamps after 2000-01-01 are wall-clock: a UTC axis


def _utc(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _run_groups_menu(run_ids: list[int]) -> list[dict]:
    """A run picker when more than MAX_SERIES runs would be drawn: groups of MAX_SERIES
    runs (two traces each, the two panels), the first drawn when the page opens."""
    if len(run_ids) <= MAX_SERIES:
        return []
    groups = range(0, len(run_ids), MAX_SERIES)
    buttons = [
        {
            "label": f"runs {run_ids[g]}–{run_ids[min(g + MAX_SERIES, len(run_ids)) - 1]}",
            "method": "restyle",
            "args": [
                {
                    "visible": [
                        g <= k < g + MAX_SERIES or "legendonly"
                        for k in range(len(run_ids))
                        for _ in (1, 2)
                    ]
                }
            ],
        }
        for g in groups
    ]
    return [
        {
            "buttons": buttons,
            "direction": "down",
            "x": 0.62,
            "xanchor": "right",
            "y": -0.12,
            "yanchor": "top",
            "showactive": True,
        }
    ]


# Shaded spans of arrival time (`hpa report --baseline`, `--window`): name -> colour
MARK_COLOURS = {"baseline": "#8c8c8c", "incident": "#d62728"}
WARM_UP = "warm-up (not measured)"  # the span of a run's warm-up requests
WARM_UP_COLOUR = "#b8860b"


def windows(
    frame: pl.DataFrame, unit: str = "s", marks: tuple[tuple[str, float, float], ...] = ()
) -> go.Figure:
    """(b) Useful-hit and sparse-loss ratios per time window, one line per run. Each point
    is sum(hits) / sum(queries) over the requests arriving in that window alone. `marks`:
    (name, start, end) spans in the trace's seconds, shaded on both panels."""
    fig = make_subplots(
        rows=2,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.08,
        subplot_titles=(
            "useful-hit ratio = hit tokens / queried tokens, per window",
            "sparse-loss ratio = sparse-retention-miss tokens / queried tokens, per window",
        ),
    )
    axis = _Axis.of(frame, unit)
    runs = frame.select("run_id", "run_label").unique().sort("run_id")
    for k, run_label in enumerate(runs["run_label"].to_list()):
        part = _with_gaps(frame.filter(pl.col("run_label") == run_label).sort("window_idx"))
        _add_run(fig, part, k, run_label, axis)
    for name, end in warm_ups(frame, axis.t0):
        _shade(fig, name, axis.x(axis.t0), axis.x(end), WARM_UP_COLOUR)
    for name, start_s, end_s in marks if unit == "s" else ():
        _shade(fig, name, *(axis.x(t) for t in _clipped(start_s, end_s, frame, axis.t0)))
    for row, col in ((1, "useful_hit_ratio"), (2, "sparse_loss_ratio")):
        values = frame[col].drop_nulls()
        flat = values.len() == 0 or values.min() == values.max() or values.min() == 0
        # the range follows the data (a 93% -> 86% drop is seen), from 0 when it touches 0
        fig.update_yaxes(
            tickformat=tick_format(frame[col]),
            rangemode="tozero" if flat or row == 2 else "normal",
            row=row,
            col=1,
        )
    fig.update_xaxes(title=axis.title, row=2, col=1)
    style_figure(fig, "Useful hits and sparse losses over time (per-window deltas)", 720)
    _menus(fig, runs["run_id"].to_list())
    return fig


@dataclass(frozen=True)
class _Axis:
    """The x axis: wall-clock UTC, or seconds (days past two) since the first request, or
    arrival order; `t0` the first window's start (s)."""

    unit: str
    t0: float
    wall: bool
    scale: float
    title: str

    @classmethod
    def of(cls, frame: pl.DataFrame, unit: str) -> _Axis:
        has_t0 = "window_t0_s" in frame.columns and frame.height
        t0 = float(frame["window_t0_s"][0]) if has_t0 else 0.0
        wall = unit == "s" and t0 >= WALL_CLOCK_S
        span = float(frame["window_end"].max()) if frame.height else 0.0
        # relative seconds past two days read as days (6 M s is 69 days)
        scale, scale_unit = (86_400.0, "days") if unit == "s" and span > 172_800 else (1.0, "s")
        title = (
            "arrival (request #)"
            if unit == "requests"
            else "arrival time (UTC)"
            if wall
            else f"time since first request ({scale_unit})"
        )
        return cls(unit, t0, wall, scale, title)

    def x(self, t: float):
        """Where absolute time `t` (s) falls on the axis."""
        return _utc(t) if self.wall else round((t - self.t0) / self.scale, 6)

    def mids(self, part: pl.DataFrame) -> list:
        """The middle of each window of `part`, on the axis."""
        mid = ((part["window_start"] + part["window_end"]) / 2).to_list()
        if self.wall:
            return [_utc(self.t0 + m) for m in mid]
        if self.unit == "s" and self.scale != 1.0:
            return [round(m / self.scale, 6) for m in mid]
        return mid


def _add_run(fig: go.Figure, part: pl.DataFrame, k: int, run_label: str, axis: _Axis) -> None:
    """One run's two lines (both panels, one legend entry)."""
    columns = ["window_start", "window_end", "num_requests", "prompt_tokens", "hit_tokens"]
    custom = part.select([*columns, "sparse_retention_miss_tokens"]).rows()
    mid = axis.mids(part)
    for row, col, num in (
        (1, "useful_hit_ratio", "customdata[4]"),
        (2, "sparse_loss_ratio", "customdata[5]"),
    ):
        fig.add_trace(
            go.Scatter(
                name=run_label,
                x=mid,
                y=part[col].to_list(),
                mode="lines+markers",
                line={"color": palette(k)},
                legendgroup=run_label,
                showlegend=row == 1,
                # a legend entry shows the runs past the first MAX_SERIES
                visible=True if k < MAX_SERIES else "legendonly",
                connectgaps=False,
                customdata=custom,
                hovertemplate=(
                    f"<b>{run_label}</b><br>window %{{customdata[0]:,}}–%{{customdata[1]:,}} "
                    f"{axis.unit}; requests: %{{customdata[2]:,}}<br>"
                    f"%{{{num}:,}} / %{{customdata[3]:,}} tokens = %{{y:.1%}}<extra></extra>"
                ),
            ),
            row=row,
            col=1,
        )


def warm_ups(frame: pl.DataFrame, t0: float) -> list[tuple[str, float]]:
    """(label, where the measured requests start) of each warm-up span of the runs in
    `frame` (report_windows.sql's warmup_requests, measured_from; on the windows' clock),
    one per distinct start: WARM_UP alone when every run shown shares it, else prefixed
    with the runs whose it is. Runs measured from their first request have none."""
    runs = frame.filter(pl.col("warmup_requests") > 0).select("run_id", "measured_from")
    starts: dict[float, list[int]] = {}
    for run_id, start in runs.unique().sort("run_id").iter_rows():
        if start > t0:
            starts.setdefault(float(start), []).append(run_id)
    every = frame["run_id"].n_unique()
    return [
        (WARM_UP if len(ids) == every else f"{_runs_named(ids)}: {WARM_UP}", start)
        for start, ids in sorted(starts.items())
    ]


def _runs_named(ids: list[int]) -> str:
    """'run 3' or 'runs 2, 3'."""
    return f"run{'s' if len(ids) > 1 else ''} {', '.join(map(str, ids))}"


def _shade(fig: go.Figure, name: str, x0, x1, colour: str | None = None) -> None:
    """A named span of arrival time, shaded on both panels and labelled on the top one."""
    colour = colour or MARK_COLOURS.get(name, "#8c8c8c")
    fig.add_vrect(
        x0=x0, x1=x1, fillcolor=colour, opacity=0.13, line_width=0, layer="below",
        row="all", col=1,
    )  # fmt: skip
    fig.add_annotation(
        x=x0, y=1.0, yref="y domain", text=name, showarrow=False, xanchor="left",
        yanchor="top", font={"size": 11, "color": colour}, row=1, col=1,
    )  # fmt: skip


def _menus(fig: go.Figure, run_ids: list[int]) -> None:
    """The run picker (past MAX_SERIES runs) and the hit axis's zero-based view, one click
    away, under the plot beside the legend."""
    fig.update_layout(
        updatemenus=[
            *_run_groups_menu(run_ids),
            {
                "type": "buttons",
                "direction": "left",
                "x": 1,
                "xanchor": "right",
                "y": -0.12,  # beside the legend, under the plot
                "yanchor": "top",
                "showactive": True,
                "buttons": [
                    {
                        "label": "hit axis: data range",
                        "method": "relayout",
                        "args": [{"yaxis.autorange": True, "yaxis.rangemode": "normal"}],
                    },
                    {
                        "label": "from 0",
                        "method": "relayout",
                        "args": [{"yaxis.autorange": True, "yaxis.rangemode": "tozero"}],
                    },
                ],
            },
        ],
        margin={"t": 70, "b": 150},
        legend={"y": -0.12, "yanchor": "top"},
    )


def _clipped(start_s: float, end_s: float, frame: pl.DataFrame, t0: float) -> tuple[float, float]:
    """A span's ends within the chart's time (an open end stops at the last window)."""
    last = t0 + float(frame["window_end"].max()) if frame.height else start_s
    return max(start_s, t0), min(end_s, last)


def _with_gaps(part: pl.DataFrame) -> pl.DataFrame:
    """`part` with a null row for every window without requests between its first and
    last, so that a line breaks there instead of joining windows days apart."""
    if part.height < 2:
        return part
    lo, hi = int(part["window_idx"].min()), int(part["window_idx"].max())
    if hi - lo + 1 == part.height:
        return part
    full = pl.DataFrame({"window_idx": pl.int_range(lo, hi + 1, eager=True)})
    # the widest window is a whole one (the first may start where a warm-up ended)
    width = float((part["window_end"] - part["window_start"]).max())
    joined = full.join(part, on="window_idx", how="left")
    return joined.with_columns(
        pl.col("window_start").fill_null(pl.col("window_idx") * width),
        pl.col("window_end").fill_null(pl.col("window_idx") * width + width),
        pl.col("num_requests").fill_null(0),
    )
