"""The report's capacity curves: `hpa sweep`'s points (table sweep_points) as useful-hit
ratio against one cache's memory (num_blocks sweeps), or against a knob's values."""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl

from analyzer.report.figures import palette, style_figure, tick_format


def sweeps(frame: pl.DataFrame, target: float | None = None) -> go.Figure:
    """Capacity curves from `hpa sweep` (table sweep_points), one line per sweep. The
    num_blocks sweeps are drawn against cache memory in GiB (num_blocks when a sweep's
    memory is unknown): a numeric axis, logarithmic when it spans more than 20x, with
    `target` (a useful-hit ratio) as a line and each sweep's smallest point reaching it
    marked. Without a num_blocks sweep, the other knobs against their values."""
    capacity = frame.filter(pl.col("knob") == "num_blocks")
    if capacity.height == 0:
        return _knob_curves(frame)
    gib = capacity["memory_gib"].null_count() == 0
    x_of = (
        (lambda part: part["memory_gib"].to_list())
        if gib
        else (lambda part: [float(v) for v in part["value"].to_list()])
    )
    traces = []
    for k, (sweep_id,) in enumerate(capacity.select("sweep_id").unique().sort("sweep_id").rows()):
        part = capacity.filter(pl.col("sweep_id") == sweep_id)
        part = part.with_columns(pl.col("value").cast(pl.Int64).alias("blocks")).sort("blocks")
        x, y = x_of(part), part["useful_hit_ratio"].round(9).to_list()
        traces.append(
            go.Scatter(
                name=f"sweep {sweep_id}",
                x=x,
                y=y,
                mode="lines+markers",
                line={"color": palette(k)},
                customdata=part.select(["run_id", "blocks", "sparse_loss_ratio"]).rows(),
                hovertemplate=(
                    "<b>%{customdata[1]:,} blocks</b>"
                    + (" = %{x:.3f} GiB a cache" if gib else "")
                    + "<br>useful-hit ratio %{y:.2%}<br>sparse-loss ratio %{customdata[2]:.2%}"
                    "<br>run %{customdata[0]}<extra>%{fullData.name}</extra>"
                ),
            )
        )
        reached = [i for i, v in enumerate(y) if target is not None and v >= target]
        if reached:
            i = reached[0]
            traces.append(
                go.Scatter(
                    name=f"sweep {sweep_id}: smallest reaching {target:.0%}",
                    x=[x[i]],
                    y=[y[i]],
                    mode="markers",
                    marker={"symbol": "star", "size": 16, "color": palette(k)},
                    legendgroup=f"sweep {sweep_id}",
                    showlegend=False,
                    hovertemplate=f"smallest pool of sweep {sweep_id} reaching the target"
                    "<extra></extra>",
                )
            )
    fig = go.Figure(traces)
    xs = [v for t in traces for v in t.x if v]
    wide = bool(xs) and max(xs) / min(xs) > 20
    fig.update_xaxes(
        title="cache memory per cache (GiB)" if gib else "num_blocks per cache",
        type="log" if wide else "linear",
    )
    fig.update_yaxes(title="useful-hit ratio", tickformat=tick_format(capacity["useful_hit_ratio"]))
    if target is not None:
        fig.add_hline(
            y=target,
            line={"dash": "dash", "color": "#555"},
            annotation_text=f"target {target:.0%}",
            annotation_position="bottom right",
        )
    return style_figure(fig, "Capacity curves: useful hits against cache memory (sweeps)", 480)


def _knob_curves(frame: pl.DataFrame) -> go.Figure:
    """Sweeps of knobs other than num_blocks: the ratio at each of the knob's values."""
    traces = []
    keys = frame.select("sweep_id", "knob").unique().sort(["sweep_id", "knob"]).rows()
    for k, (sweep_id, knob) in enumerate(keys):
        part = frame.filter((pl.col("sweep_id") == sweep_id) & (pl.col("knob") == knob))
        traces.append(
            go.Scatter(
                name=f"sweep {sweep_id}: {knob}",
                x=part["value"].to_list(),
                y=part["useful_hit_ratio"].round(9).to_list(),
                mode="lines+markers",
                line={"color": palette(k)},
                customdata=part.select(["run_id", "sparse_loss_ratio"]).rows(),
                hovertemplate=(
                    f"<b>{knob} = %{{x}}</b><br>useful-hit ratio %{{y:.2%}}<br>"
                    "sparse-loss ratio %{customdata[1]:.2%}<br>run %{customdata[0]}"
                    "<extra></extra>"
                ),
            )
        )
    fig = go.Figure(traces)
    fig.update_xaxes(title="knob value", type="category")
    fig.update_yaxes(title="useful-hit ratio", tickformat=".0%", rangemode="tozero")
    return style_figure(fig, "Capacity curves: useful hits per knob value (sweeps)", 480)
