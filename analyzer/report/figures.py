"""The figures of `hpa report`: pure functions from a sorted frame to a plotly Figure.

Frames come from analyzer/report/data.py. No function here reads files, the clock or a
random source, so the same frame always gives the same figure.
"""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl
from plotly.subplots import make_subplots

from analyzer.report.labels import figure_label

FONT = {"family": "system-ui, -apple-system, Segoe UI, Roboto, sans-serif", "size": 13}
TOP_JUNCTIONS = 15
MARGIN_TOP, MARGIN_BOTTOM = 120, 50
MENU_ROW = 40  # pixels for the run menu above the legend
MIN_PLOT_HEIGHT = 260  # pixels: a figure of two bars still gives its plot most of its height


def bar_height(rows: int, per_row: int = 42) -> int:
    """A horizontal bar figure's height: `per_row` pixels a bar, and at least
    MIN_PLOT_HEIGHT of plot (so a figure of few bars is mostly plot, not margins)."""
    return MARGIN_TOP + MARGIN_BOTTOM + max(MIN_PLOT_HEIGHT, per_row * rows)


def share_bar(
    name: str,
    colour: str,
    y: list[str],
    tokens: list[int],
    shares: list[float],
    of: str = "queried",
) -> go.Bar:
    """One part of a horizontal stacked bar in % of each bar's total (`shares` in 0..1),
    tokens and share in the hover ("of `of` tokens")."""
    return go.Bar(
        name=name,
        y=y,
        x=[round(100 * s, 6) for s in shares],
        orientation="h",
        marker_color=colour,
        customdata=list(zip(tokens, shares, strict=True)),
        hovertemplate=(
            f"<b>%{{y}}</b><br>{name}: %{{customdata[0]:,}} tokens "
            f"(%{{customdata[1]:.1%}} of {of} tokens)<extra></extra>"
        ),
    )


def style_figure(fig: go.Figure, title: str, height: int) -> go.Figure:
    fig.update_layout(
        title={
            "text": title,
            "x": 0,
            "xanchor": "left",
            "xref": "container",
            "yref": "container",
            "y": 1,
            "yanchor": "top",
            "pad": {"t": 12, "l": 12},
        },
        height=height,
        font=FONT,
        template="plotly_white",
        margin={"l": 10, "r": 10, "t": MARGIN_TOP, "b": MARGIN_BOTTOM},
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.02, "x": 0, "xanchor": "left"},
        hoverlabel={"namelength": -1},
    )
    fig.update_yaxes(automargin=True)
    return fig


def run_dropdown(fig: go.Figure, labels: list[str], per_run: int) -> None:
    """Show one run at a time: traces are laid out run by run, `per_run` each."""
    if len(labels) < 2:
        return
    n = len(labels) * per_run
    # One more row at the top, between the title (and plotly's mode bar) and the legend.
    top = MARGIN_TOP + MENU_ROW
    fig.update_layout(height=(fig.layout.height or 450) + MENU_ROW, margin={"t": top})
    plot_height = fig.layout.height - top - fig.layout.margin.b
    for i, trace in enumerate(fig.data):
        trace.visible = i < per_run
    buttons = [
        {
            "label": label,
            "method": "update",
            "args": [{"visible": [i // per_run == k for i in range(n)]}],
        }
        for k, label in enumerate(labels)
    ]
    fig.update_layout(
        updatemenus=[
            {
                "buttons": buttons,
                "direction": "down",
                "x": 1,
                "xanchor": "right",
                "y": 1 + (MARGIN_TOP - 40) / max(plot_height, 1),
                "yanchor": "bottom",
                "showactive": True,
            }
        ]
    )


_COLOURS = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)


def tick_format(values: pl.Series) -> str:
    """A percent tick format with the decimals the data's range needs (ticks of 0.5%
    steps must not all read "1%")."""
    finite = values.drop_nulls()
    spread = float(finite.max() - finite.min()) if finite.len() else 0.0
    if spread == 0.0:
        return ".0%"  # a flat line: plotly picks whole-range ticks
    return ".0%" if spread >= 0.05 else ".1%" if spread >= 0.005 else ".2%"


def palette(k: int) -> str:
    return _COLOURS[k % len(_COLOURS)]


def run_order(frame: pl.DataFrame, lead: int | None = None) -> list[str]:
    """The run labels of `frame` in the order a run menu lists them: `lead` (the run the
    figure opens on: the incident's) first, then by run id."""
    runs = frame.select("run_id", "run_label").unique().sort("run_id")
    ids = runs["run_id"].to_list()
    first = lead if lead in ids else ids[0]
    ordered = runs.sort(pl.col("run_id") != first, "run_id", maintain_order=True)
    return ordered["run_label"].to_list()


def top_junctions(
    frame: pl.DataFrame, top: int = TOP_JUNCTIONS, lead: int | None = None
) -> pl.DataFrame:
    """The `top` junctions by the sparse-retention-miss tokens of the run the figure opens
    on (`lead`, else the first run), so its bars are sorted by the measure in the title;
    ties: the sum over the runs shown, more requests through, then id), as rows
    (junction_id, rank)."""
    ids = frame["run_id"].unique().to_list()
    first = lead if lead in ids else frame["run_id"].min()
    totals = (
        frame.group_by("junction_id")
        .agg(
            pl.col("sparse_retention_miss_tokens")
            .filter(pl.col("run_id") == first)
            .sum()
            .alias("lost"),
            pl.col("sparse_retention_miss_tokens").sum().alias("total"),
            pl.col("num_requests_through").first(),
        )
        .sort(
            ["lost", "total", "num_requests_through", "junction_id"],
            descending=[True, True, True, False],
        )
        .head(top)
    )
    return totals.with_row_index("rank").select("junction_id", "rank")


def junction_label(frame: pl.DataFrame) -> list[str]:
    return [
        f"@{p:,} tok · {figure_label(fam) if fam else 'no family'} · {jid[:8]}"
        for p, fam, jid in zip(
            frame["position_tokens"].to_list(),
            frame["prompt_families"].to_list(),
            frame["junction_id"].to_list(),
            strict=True,
        )
    ]


def junctions(frame: pl.DataFrame, top: int = TOP_JUNCTIONS, lead: int | None = None) -> go.Figure:
    """(c) The shared junctions that lost the most tokens to sparse-retention misses, with
    the hits of the requests pinned there beside them (a dropdown picks the run; it opens
    on `lead`, else the first run)."""
    chosen = top_junctions(frame, top, lead)
    rows = frame.join(chosen, on="junction_id").sort(["run_id", "rank"])
    labels = run_order(rows, lead)
    fig = make_subplots(
        rows=1,
        cols=2,
        shared_yaxes=True,
        horizontal_spacing=0.03,
        subplot_titles=("tokens lost to sparse-retention misses", "tokens reused (hits)"),
    )
    for k, run_label in enumerate(labels):
        part = rows.filter(pl.col("run_label") == run_label)
        y = junction_label(part)
        custom = part.select(
            [
                "num_requests_through",
                "num_requests_pinned",
                "num_sparse_miss_requests",
                "num_hit_requests",
                "first_outcomes",
                "model_revisions",
                "conversations",
                "first_requests",
            ]
        ).rows()
        hover = (
            "<b>%{y}</b><br>%{x:,} tokens<br>requests through: %{customdata[0]:,}; "
            "pinned here: %{customdata[1]:,} (%{customdata[2]:,} sparse misses, "
            "%{customdata[3]:,} hits)<br>first outcomes: %{customdata[4]}"
            "<br>revisions: %{customdata[5]}<br>conversations: %{customdata[6]}"
            "<br>first requests pinned: %{customdata[7]}<extra>%{fullData.name}</extra>"
        )
        for col_no, (col, name, colour) in enumerate(
            (
                ("sparse_retention_miss_tokens", "sparse-retention miss tokens", "#d62728"),
                ("hit_tokens", "hit tokens", "#2ca02c"),
            ),
            start=1,
        ):
            fig.add_trace(
                go.Bar(
                    name=name,
                    y=y,
                    x=part[col].to_list(),
                    orientation="h",
                    marker_color=colour,
                    legendgroup=name,
                    showlegend=k == 0,
                    customdata=custom,
                    hovertemplate=hover,
                ),
                row=1,
                col=col_no,
            )
    fig.update_yaxes(autorange="reversed")
    fig.update_yaxes(title="junction (position · families · id)", row=1, col=1)
    fig.update_xaxes(title="prompt tokens of the requests pinned at the junction")
    style_figure(
        fig,
        f"Top {chosen.height} shared junctions by tokens lost to sparse-retention misses",
        bar_height(chosen.height, 40) + 50,  # + the x axis title under the bars
    )
    fig.update_xaxes(rangemode="tozero")  # an all-zero panel reads 0.., not -1..1
    fig.update_layout(showlegend=False)  # the subplot titles name the two bars
    run_dropdown(fig, labels, 2)
    return fig


def weighting(groups: pl.DataFrame) -> go.Figure:
    """(e) Token-weighted ratios (sum hits / sum queries) beside request-weighted ones
    (mean over requests of each request's own ratio), per run."""
    overall = groups.filter(pl.col("is_overall")).sort("run_id")
    y = overall["run_label"].to_list()
    queries = overall["prompt_tokens"].cast(pl.Float64)
    series = (
        ("useful-hit ratio, token-weighted", overall["hit_tokens"] / queries, "#2ca02c", ""),
        ("useful-hit ratio, request-weighted", overall["mean_request_hit_ratio"], "#98df8a", "/"),
        (
            "sparse-loss ratio, token-weighted",
            overall["sparse_retention_miss_tokens"] / queries,
            "#d62728",
            "",
        ),
        (
            "sparse-loss ratio, request-weighted",
            overall["mean_request_sparse_loss_ratio"],
            "#ff9896",
            "/",
        ),
    )
    fig = go.Figure(
        [
            go.Bar(
                name=name,
                y=y,
                x=values.round(9).to_list(),
                orientation="h",
                marker={"color": colour, "pattern": {"shape": pattern}},
                hovertemplate=f"<b>%{{y}}</b><br>{name}: %{{x:.2%}}<extra></extra>",
            )
            for name, values, colour, pattern in series
        ]
    )
    fig.update_layout(barmode="group")
    fig.update_yaxes(autorange="reversed")
    fig.update_xaxes(title="ratio", tickformat=".0%")
    return style_figure(
        fig,
        "Token-weighted beside request-weighted ratios, per run",
        180 + 90 * overall.height,
    )


def policy_comparison(groups: pl.DataFrame) -> go.Figure:
    """(d) Useful-hit and sparse-loss ratio of every run side by side (one row per run,
    its label read across), with the change in percentage points against the first run
    shown in the hover."""
    overall = groups.filter(pl.col("is_overall")).sort("run_id")
    queries = overall["prompt_tokens"].cast(pl.Float64)
    hit = (overall["hit_tokens"] / queries).round(9)
    sparse = (overall["sparse_retention_miss_tokens"] / queries).round(9)
    labels = overall["run_label"].to_list()
    traces = []
    for name, values, colour in (
        ("useful-hit ratio", hit, "#2ca02c"),
        ("sparse-loss ratio", sparse, "#d62728"),
    ):
        base = values[0] if len(values) else 0.0
        delta = ((values - base) * 100).round(6).to_list()
        traces.append(
            go.Bar(
                name=name,
                y=labels,
                x=values.to_list(),
                orientation="h",
                marker_color=colour,
                text=[f"{v:.1%}" for v in values.to_list()],
                textposition="outside",
                customdata=delta,
                hovertemplate=(
                    f"<b>%{{y}}</b><br>{name}: %{{x:.2%}}<br>"
                    "%{customdata:+.2f} points vs the first run<extra></extra>"
                ),
            )
        )
    fig = go.Figure(traces)
    fig.update_layout(barmode="group")
    fig.update_yaxes(autorange="reversed")
    fig.update_xaxes(title="share of queried prompt tokens", tickformat=".0%", rangemode="tozero")
    return style_figure(
        fig, "Policies side by side: useful hits and sparse losses", bar_height(len(labels), 44)
    )
