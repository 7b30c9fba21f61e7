"""The report's incident section (`hpa report --window S..E --baseline S..E [--run R]`):
`hpa compare`'s attribution of the two windows, right after the summary.

It takes the comparison `analyzer.pipeline.compare.compare` returns (its `baseline` and
`current` sides, `traffic`, `groups`, `causes` tables and `sentence`); the report never
computes it itself (the pipeline does), so the section shows the command's figures.
"""

from __future__ import annotations

import html
from typing import Any

import plotly.graph_objects as go

from analyzer.report.blocks import figure_div, html_table, meaning
from analyzer.report.figures import bar_height, share_bar, style_figure
from analyzer.report.waterfall import segments
from analyzer.words import capped, shown

FIGURE_ID = "fig-incident"
CHANGE_FIGURE_ID = "fig-incident-change"
RATE_COLOUR, MIX_COLOUR = "#1f77b4", "#ff7f0e"
ALL = "(all)"
TOP_GROUPS = 12


# With a host KV tier the hit splits as the main waterfall splits it: compare's host_hit figure
# and the GPU's own part (hit - host hit, made here: every figure of a row is linear in it).
HOST_FIGURES = {"host_hit_tokens": "host_hit", "gpu_hit_tokens": "gpu_hit"}
SUMMED = (
    "baseline_tokens", "baseline_share", "current_tokens", "current_share", "change_points",
    "contribution_points", "rate_effect_points", "mix_effect_points",
)  # fmt: skip


def parts(comparison: Any) -> list[tuple[str, str, str]]:
    """The waterfall's parts in compare's figure names: (figure, label, colour), as the
    report's waterfall draws them (in flight included: concurrent windows may have it; the
    hit split in the GPU's and the host tier's where a side has host hits)."""
    figure_of = {col: fig for fig, col in comparison.figure_columns.items()} | HOST_FIGURES
    columns = ["lost_in_flight_tokens"]
    if _host_hits(_overall(comparison)):
        columns.append("host_hit_tokens")
    return [(figure_of[col], label, colour) for col, label, colour in segments(columns)]


def _host_hits(overall: dict[str, dict]) -> bool:
    row = overall.get("host_hit")
    return row is not None and bool(row["baseline_tokens"] or row["current_tokens"])


def _overall(comparison: Any) -> dict[str, dict]:
    """The figures of compare's top group: the (all) roll-up, or the one group there is;
    with host hits also the GPU's own hit (gpu_hit: hit less host_hit, figure by figure)."""
    top = comparison.groups.to_pylist()[-1]
    key = (top["prompt_family"], top["model_revision"])
    overall = {
        r["figure"]: r
        for r in comparison.causes.to_pylist()
        if (r["prompt_family"], r["model_revision"]) == key
    }
    if _host_hits(overall):
        hit, host = overall["hit"], overall["host_hit"]
        gpu = {k: (hit[k] or 0) - (host[k] or 0) for k in SUMMED}
        overall["gpu_hit"] = {**hit, **gpu, "figure": "gpu_hit"}
    return overall


def _short(side: Any, name: str) -> str:
    """A bar's label: 'baseline 320..644 s', or 'baseline: run 3' for two runs."""
    if side.window is None:
        return f"{name}: run {side.run_id}"
    return f"{name} {side.window.text} s"


def incident_figure(comparison: Any) -> go.Figure:
    """The two windows' waterfalls, one stacked bar each, in shares (their levels)."""
    overall = _overall(comparison)
    names = [_short(comparison.baseline, "baseline"), _short(comparison.current, "window")]
    traces = []
    for figure, label, colour in parts(comparison):
        row = overall.get(figure)
        if row is None or not (row["baseline_tokens"] or row["current_tokens"]):
            continue  # a cause neither window has is no legend entry
        shares = [row["baseline_share"] or 0.0, row["current_share"] or 0.0]
        tokens = [row["baseline_tokens"], row["current_tokens"]]
        traces.append(share_bar(label, colour, names, tokens, shares, of="its queried"))
    fig = go.Figure(traces)
    fig.update_layout(barmode="stack")
    fig.update_yaxes(autorange="reversed")
    fig.update_xaxes(title="share of each window's queried prompt tokens (%)", range=[0, 100])
    return style_figure(fig, "Each window's waterfall", bar_height(2, 90))


def change_figure(comparison: Any) -> go.Figure:
    """What moved, beside the two levels: each cause's change in points of queried tokens
    (largest first), split into its rate effect and its mix effect, the total marked."""
    overall = _overall(comparison)
    moved = lambda r: r is not None and (r["baseline_tokens"] or r["current_tokens"])  # noqa: E731
    rows = [
        (label, overall[figure])
        for figure, label, _ in parts(comparison)
        if moved(overall.get(figure))
    ]
    rows.sort(key=lambda r: -abs(r[1]["change_points"] or 0.0))
    y = [label for label, _ in rows]
    traces = [
        go.Bar(
            name=name, y=y, x=[r[key] or 0.0 for _, r in rows], orientation="h",
            marker_color=colour,
            hovertemplate=f"<b>%{{y}}</b><br>{name}: %{{x:+.2f}} points<extra></extra>",
        )
        for name, key, colour in (
            ("rate effect (the groups' own shares)", "rate_effect_points", RATE_COLOUR),
            ("mix effect (traffic between groups)", "mix_effect_points", MIX_COLOUR),
        )
    ]  # fmt: skip
    traces.append(
        go.Scatter(
            name="change", y=y, x=[r["change_points"] or 0.0 for _, r in rows], mode="markers",
            marker={"symbol": "diamond", "size": 11, "color": "#222"},
            hovertemplate="<b>%{y}</b><br>change: %{x:+.2f} points<extra></extra>",
        )
    )  # fmt: skip
    fig = go.Figure(traces)
    fig.update_layout(barmode="relative")
    fig.update_yaxes(autorange="reversed")
    fig.update_xaxes(title="change, window - baseline (points of queried tokens)",
                     zeroline=True, zerolinewidth=2, zerolinecolor="#888")  # fmt: skip
    return style_figure(fig, "What moved, per cause", bar_height(len(rows), 34))


def _traffic_rows(comparison: Any) -> list[list[str]]:
    """compare's traffic cells, the measures in words."""
    rows = []
    for measure, *cells in comparison.traffic_cells():
        name = measure.replace("_per_s", " per second").replace("span_s", "span (s)")
        rows.append([name.replace("_", " "), *cells])
    return rows


def _group_rows(comparison: Any) -> list[list[str]]:
    """Families x revisions with the largest moves first (the total last, where the
    comparison has one: more than one group)."""
    rows = comparison.groups.to_pylist()
    finest = [g for g in rows if g["prompt_family"] != ALL and g["model_revision"] != ALL]
    finest.sort(key=lambda g: (-abs(g["change_points"] or 0.0), g["prompt_family"]))
    out = []
    total = [g for g in rows[-1:] if g["prompt_family"] == ALL]  # none with one group
    for g in [*finest[:TOP_GROUPS], *total]:
        ratio = [
            "" if v is None else f"{v:.1%}"
            for v in (g["baseline_useful_hit_ratio"], g["current_useful_hit_ratio"])
        ]
        change = g["change_points"]
        out.append(
            [
                capped(g["prompt_family"]).replace("(none)", "no family"),
                capped(g["model_revision"]).replace("(none)", "no revision"),
                f"{g['baseline_requests']:,}",
                f"{g['current_requests']:,}",
                *ratio,
                "" if change is None else f"{change:+.1f}",
            ]
        )
    return out


def _cause_rows(comparison: Any) -> list[list[str]]:
    """The overall causes that moved, largest first: shares, change, rate and mix."""
    shown = {figure for figure, _, _ in parts(comparison)}  # not the sparse miss's two splits
    moved = [
        r
        for r in _overall(comparison).values()
        if r["figure"] in shown and (r["baseline_tokens"] or r["current_tokens"])
    ]
    moved.sort(key=lambda r: (-abs(r["change_points"] or 0.0), r["figure"]))
    return [
        [
            r["figure"].replace("_", " "),
            f"{r['baseline_share']:.1%}",
            f"{r['current_share']:.1%}",
            f"{r['change_points']:+.2f}",
            f"{r['rate_effect_points']:+.2f}",
            f"{r['mix_effect_points']:+.2f}",
        ]
        for r in moved
    ]


def incident_section(comparison: Any | None) -> tuple[str, list[str]]:
    """The section's HTML and figure ids; empty without a comparison."""
    if comparison is None:
        return "", []
    notes = "".join(f"<li>{html.escape(shown(n))}</li>" for n in comparison.notes) + "".join(
        f"<li><b>warning:</b> {html.escape(shown(w))}</li>" for w in comparison.warnings
    )
    body = (
        '<section id="incident"><h2>Incident: the window against the baseline</h2>'
        f"<p>{html.escape(comparison.baseline.describe())}; "
        f"{html.escape(comparison.current.describe())}.</p>"
        f'<p class="verdict"><b>{html.escape(comparison.sentence)}</b></p>'
        + (f'<ul class="caveats">{notes}</ul>' if notes else "")
        + figure_div(incident_figure(comparison), FIGURE_ID)
        + figure_div(change_figure(comparison), CHANGE_FIGURE_ID)
        + "<h3>Traffic of each window</h3>"
        + html_table(["measure", "baseline", "window", "change"], _traffic_rows(comparison),
                     numeric={1, 2, 3})
        + "<h3>Useful-hit ratio per prompt family × model revision</h3>"
        + html_table(
            ["prompt family", "model revision", "baseline requests", "window requests",
             "baseline", "window", "change (points)"],
            _group_rows(comparison),
            numeric={2, 3, 4, 5, 6},
        )
        + "<h3>Causes that moved (points of queried tokens)</h3>"
        + html_table(
            ["cause", "baseline share", "window share", "change", "rate effect", "mix effect"],
            _cause_rows(comparison),
            numeric={1, 2, 3, 4, 5},
        )
        + meaning(
            "Each window's figures are shares of its own queried tokens (windows hold "
            "different traffic). A cause's change splits into its rate effect (the groups' "
            "own shares moved) and its mix effect (the traffic moved between groups whose "
            "shares differ); the two add up to the change. The same figures, with every group, "
            "come from <code>hpa compare</code> with the same windows."
        )
        + "</section>"
    )  # fmt: skip
    return body, [FIGURE_ID, CHANGE_FIGURE_ID]
