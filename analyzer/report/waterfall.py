"""The loss-waterfall figures of `hpa report`: stacked bars of where the queried prompt
tokens went, per run and per prompt family x model revision (pure functions of the frame).
"""

from __future__ import annotations

from collections.abc import Iterable

import plotly.graph_objects as go
import polars as pl

from analyzer.report.figures import bar_height, run_dropdown, run_order, style_figure
from analyzer.report.labels import figure_label

# The hit then the causes (docs/definitions.md#the-loss-waterfall), in waterfall order: (column,
# readable name, colour).
SEGMENTS = (
    ("hit_tokens", "hit (reused)", "#2ca02c"),
    ("sparse_retention_miss_tokens", "sparse-retention miss", "#d62728"),
    ("lost_spec_decode_tokens", "lost to spec decode", "#8c564b"),
    ("lost_eviction_tokens", "lost to dense eviction", "#ff7f0e"),
    ("lost_granularity_tokens", "lost to match granularity", "#bcbd22"),
    ("lost_routing_tokens", "lost to routing", "#9467bd"),
    ("unshared_tokens", "unshared (no common prefix)", "#b0b0b0"),
)
# The concurrent schedule's cause, between granularity and routing in the bars
# (docs/definitions.md#the-loss-waterfall).
IN_FLIGHT = ("lost_in_flight_tokens", "lost in flight (not yet scheduled)", "#e377c2")


# With a host KV tier the hit splits in two, the GPU's own and what the host tier won back
# (docs/definitions.md#the-host-kv-tier); the causes are then what was recomputed.
HOST_HIT = (
    ("gpu_hit_tokens", "hit on the GPU (reused)", "#2ca02c"),
    ("host_hit_tokens", "won back by the host tier (loaded)", "#98df8a"),
)


def segments(columns: Iterable[str]) -> tuple[tuple[str, str, str], ...]:
    """SEGMENTS, with IN_FLIGHT when the frame has its column (analyzer/report/data.py
    keeps the column only when a run shown is concurrent or lost tokens in flight), and the
    hit split by HOST_HIT when it has host hits (only when a run shown has them)."""
    columns = set(columns)
    out = SEGMENTS
    if "host_hit_tokens" in columns:
        out = (*HOST_HIT, *out[1:])
    if "lost_in_flight_tokens" not in columns:
        return out
    at = [col for col, _, _ in out].index("lost_routing_tokens")
    return (*out[:at], IN_FLIGHT, *out[at:])


HIT_COLUMNS = frozenset({"hit_tokens", *(col for col, _, _ in HOST_HIT)})


def cause_segments(columns: Iterable[str]) -> tuple[tuple[str, str, str], ...]:
    """`segments` less the hit's (the GPU's and the host tier's): the losses alone."""
    return tuple(seg for seg in segments(columns) if seg[0] not in HIT_COLUMNS)


def _waterfall_bars(frame: pl.DataFrame, y: list[str], share: bool, showlegend: bool) -> list:
    total = frame["prompt_tokens"].cast(pl.Float64)
    # the run's whole policy change in the hover (the label may be cut short)
    policy = (
        frame["policy_changes"].to_list()
        if "policy_changes" in frame.columns
        else [""] * frame.height
    )
    traces = []
    for col, name, colour in segments(frame.columns):
        tokens = frame[col]
        shares = (tokens / total).fill_nan(0.0).round(9)
        unit = "% of queried tokens" if share else "tokens"
        traces.append(
            go.Bar(
                name=name,
                y=y,
                x=(shares * 100).round(6).to_list() if share else tokens.to_list(),
                orientation="h",
                marker_color=colour,
                legendgroup=name,
                showlegend=showlegend,
                customdata=list(zip(tokens.to_list(), shares.to_list(), policy, strict=True)),
                hovertemplate=(
                    f"<b>%{{y}}</b><br>{name}: %{{customdata[0]:,}} tokens "
                    f"(%{{customdata[1]:.1%}} of queried)<br>policy: %{{customdata[2]}}"
                    f"<extra>{unit}</extra>"
                ),
            )
        )
    return traces


def waterfall_runs(groups: pl.DataFrame, *, share: bool = False) -> go.Figure:
    """(a)+(d) The loss waterfall of every run, one stacked bar per run (overall rows)."""
    overall = groups.filter(pl.col("is_overall")).sort("run_id")
    fig = go.Figure(_waterfall_bars(overall, overall["run_label"].to_list(), share, True))
    fig.update_layout(barmode="stack")
    fig.update_yaxes(autorange="reversed")
    fig.update_xaxes(title="share of queried prompt tokens (%)" if share else "prompt tokens")
    what = "shares" if share else "tokens"
    return style_figure(
        fig,
        f"Where the queried prompt tokens went, per run ({what})",
        bar_height(overall.height),
    )


def group_label(frame: pl.DataFrame) -> list[str]:
    return [
        f"{figure_label(f)} · {figure_label(r)}"
        for f, r in zip(
            frame["prompt_family"].to_list(), frame["model_revision"].to_list(), strict=True
        )
    ]


# A run's families x revisions drawn as bars, the largest first; beyond, the rest as one bar
# (2,212 derived families on Mooncake made an 88,000 px figure).
MAX_GROUP_BARS = 30


def _capped(part: pl.DataFrame) -> tuple[pl.DataFrame, list[str]]:
    """`part` (largest first) cut to MAX_GROUP_BARS rows, the last the sum of the others (a
    run's bars still sum to its queried tokens), and the rows' labels."""
    if part.height <= MAX_GROUP_BARS:
        return part, group_label(part)
    top, rest = part.head(MAX_GROUP_BARS - 1), part.slice(MAX_GROUP_BARS - 1)
    summed = ["prompt_tokens", *(col for col, _, _ in segments(part.columns))]
    other = rest.head(1).with_columns(pl.lit(rest[c].sum(), rest[c].dtype).alias(c) for c in summed)
    names = [*group_label(top), f"the other {rest.height:,} families × revisions"]
    return pl.concat([top, other]), names


def waterfall_groups(
    groups: pl.DataFrame, *, share: bool = False, lead: int | None = None
) -> go.Figure:
    """(a) The loss waterfall per prompt family x model revision, one run at a time
    (a dropdown picks the run, opening on `lead`, else the first run; rows sorted by
    queried tokens, largest first)."""
    rows = groups.filter(~pl.col("is_overall"))
    labels = run_order(rows, lead)
    traces = []
    height = 200
    for k, run_label in enumerate(labels):
        part = rows.filter(pl.col("run_label") == run_label).sort(
            ["prompt_tokens", "prompt_family", "model_revision"], descending=[True, False, False]
        )
        part, names = _capped(part)
        height = max(height, bar_height(part.height, 40))
        traces.extend(_waterfall_bars(part, names, share, k == 0))
    fig = go.Figure(traces)
    fig.update_layout(barmode="stack")
    fig.update_yaxes(autorange="reversed", title="prompt family · model revision")
    fig.update_xaxes(title="share of queried prompt tokens (%)" if share else "prompt tokens")
    what = "shares" if share else "tokens"
    style_figure(fig, f"Loss waterfall per prompt family × model revision ({what})", height)
    run_dropdown(fig, labels, len(segments(groups.columns)))
    return fig
