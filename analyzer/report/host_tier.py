"""The report's Host KV tier section (docs/definitions.md#the-host-kv-tier): for the runs
that replayed one, how much of the prompt the GPU hit, how much the host tier gave back and
what the loads cost in waiting; and for an `hpa sweep --vary host_tier_gib=...`, the useful
hit ratio (GPU + host) and, under the concurrent schedule, TTFT p99 against host GiB at the
sweep's fixed GPU pool. Left out where no run has a tier and no such sweep exists.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import plotly.graph_objects as go
import polars as pl
from plotly.subplots import make_subplots

from analyzer.config.host_tier import NEVER_STORED
from analyzer.report.blocks import count, figure_div, html_table, meaning, pct
from analyzer.report.figures import palette, style_figure
from analyzer.store.host_tier import has_host_tier

FIGURE_ID = "fig-host-tier"


def _size(r: dict) -> str:
    if r["host_tier_chunks"] is not None:
        return f"{r['host_tier_chunks']:,} slots"
    return f"{r['host_tier_gib']:g} GiB" if r["host_tier_gib"] else "none"


def _seconds(x) -> str:
    return "–" if x is None else f"{x * 1000:,.2f} ms"


def host_table(rows: pl.DataFrame, labels: dict[int, str]) -> str:
    """One row per run with a tier: its size and policy, the hit split, the waits."""
    return html_table(
        [
            "run", "host tier", "eviction", "GPU hit", "host hit", "useful hit",
            "host hit tokens", "host evicted", "never stored",
            *(f"never stored: {k.words}" for k in NEVER_STORED), "requests that waited",
            "mean wait", "p99 wait", "TTFT p99",
        ],
        [
            [
                labels.get(r["run_id"], f"run {r['run_id']}"), _size(r), r["host_tier_policy"],
                pct(r["gpu_hit_ratio"]), pct(r["host_hit_ratio"]), pct(r["useful_hit_ratio"]),
                count(r["host_hit_tokens"]), count(r["host_evicted_tokens"]),
                count(r["host_never_stored_tokens"]),
                *(count(r[k.column]) for k in NEVER_STORED), count(r["host_waited_requests"]),
                _seconds(r["host_wait_mean_s"]), _seconds(r["host_wait_p99_s"]),
                _seconds(r["ttft_p99_s"]),
            ]
            for r in rows.iter_rows(named=True)
        ],
        numeric=set(range(3, 13 + len(NEVER_STORED))),
    )  # fmt: skip


# Host sizes spanning at least this ratio (largest over smallest above 0) go on a log axis.
LOG_SPAN = 16


@dataclass(frozen=True)
class GibAxis:
    """Where the host sizes go on the x axis: linear, or (doubling sweeps, whose small sizes
    a linear axis crowds into its first tenth) a log axis with no tier drawn at half the
    smallest size, its tick labelled 0."""

    log: bool = False
    zero_at: float = 0.0
    ticks: tuple[float, ...] = ()

    def at(self, gib: float) -> float:
        return gib if not self.log or gib > 0 else self.zero_at

    def mark(self, fig: go.Figure, gib: float, text: str, line: dict, panels: int) -> None:
        """A dashed line at `gib` on every panel, labelled on the first. On a log axis
        plotly places a shape by its value but an annotation by the value's log10."""
        for row in range(1, panels + 1):
            label = {"annotation_text": text, "annotation_position": "top right"}
            own = row == 1 and not self.log
            fig.add_vline(x=gib, line=line, row=row, col=1, **(label if own else {}))
        if self.log:
            fig.add_annotation(
                x=math.log10(gib), y=1, xref="x", yref="y domain", text=text,
                showarrow=False, xanchor="left", yanchor="top",
            )  # fmt: skip

    def axis(self) -> dict:
        if not self.log:
            return {}
        text = ["0" if v == self.zero_at else f"{v:,g}" for v in self.ticks]
        return {"type": "log", "tickvals": list(self.ticks), "ticktext": text}


def gib_axis(sizes: list[float]) -> GibAxis:
    positive = sorted({g for g in sizes if g and g > 0})
    if not positive or positive[-1] / positive[0] < LOG_SPAN:
        return GibAxis()
    zero_at = positive[0] / 2
    ticks = ([zero_at] if any(not g for g in sizes) else []) + positive
    return GibAxis(True, zero_at, tuple(ticks))


def host_sweep_figure(points: pl.DataFrame) -> go.Figure:
    """Useful hit ratio (and the GPU's part of it) against host GiB, one colour per
    host_tier_gib sweep; TTFT p99 in a second panel where the sweep ran concurrently."""
    timed = points["ttft_p99_s"].null_count() < points.height
    fig = make_subplots(
        rows=2 if timed else 1, cols=1, shared_xaxes=True, vertical_spacing=0.08,
        row_heights=[0.6, 0.4] if timed else [1.0],
    )  # fmt: skip
    place = gib_axis(points["host_tier_gib"].to_list())
    for k, (sweep_id,) in enumerate(points.select("sweep_id").unique().sort("sweep_id").rows()):
        part = points.filter(pl.col("sweep_id") == sweep_id).sort("host_tier_gib")
        gib, colour = part["host_tier_gib"].to_list(), palette(k)
        x = [place.at(g) for g in gib]
        data = [(*r, g) for r, g in zip(
            part.select(["run_id", "host_hit_ratio", "host_waited_requests"]).rows(), gib,
            strict=True,
        )]  # fmt: skip
        fig.add_trace(
            go.Scatter(
                name=f"sweep {sweep_id}: useful hit ratio (GPU + host)",
                x=x, y=part["useful_hit_ratio"].round(9).to_list(), mode="lines+markers",
                line={"color": colour}, customdata=data,
                hovertemplate="<b>%{customdata[3]:,} GiB host</b><br>useful hit %{y:.2%}"
                "<br>of which host %{customdata[1]:.2%}<br>%{customdata[2]:,} requests waited"
                "<br>run %{customdata[0]}<extra></extra>",
            ),
            row=1, col=1,
        )  # fmt: skip
        fig.add_trace(
            go.Scatter(
                name=f"sweep {sweep_id}: GPU hit ratio alone",
                x=x, y=part["gpu_hit_ratio"].round(9).to_list(), mode="lines+markers",
                line={"color": colour, "dash": "dot"}, marker={"symbol": "circle-open"},
                customdata=gib,
                hovertemplate="<b>%{customdata:,} GiB host</b><br>GPU hit %{y:.2%}<extra></extra>",
            ),
            row=1, col=1,
        )  # fmt: skip
        if timed and part["ttft_p99_s"].null_count() < part.height:  # a serial sweep: none
            fig.add_trace(
                go.Scatter(
                    name=f"sweep {sweep_id}: TTFT p99",
                    x=x, y=part["ttft_p99_s"].to_list(), mode="lines+markers",
                    line={"color": colour, "dash": "dash"}, marker={"symbol": "square"},
                    customdata=gib,
                    hovertemplate="<b>%{customdata:,} GiB host</b><br>TTFT p99 %{y:.3f} s"
                    "<extra></extra>",
                ),
                row=2, col=1,
            )  # fmt: skip
    pools = sorted({g for g in points["memory_gib"].to_list() if g})
    line = {"dash": "dash", "color": "#888"}
    for gib in pools:  # serially, a tier no larger than the GPU pool adds nothing
        place.mark(fig, gib, f"GPU pool {gib:g} GiB", line, 2 if timed else 1)
    fig.update_xaxes(title="host KV tier (GiB)", row=2 if timed else 1, col=1)
    fig.update_xaxes(**place.axis())
    fig.update_yaxes(title="share of prompt tokens", tickformat=".0%", rangemode="tozero", row=1)
    if timed:
        fig.update_yaxes(title="TTFT p99 (s)", rangemode="tozero", row=2, col=1)
    title = "Host KV tier: useful hits" + (" and TTFT p99" if timed else "")
    return style_figure(
        fig, title + " against host GiB (sweeps, GPU pool fixed)", 560 if timed else 440
    )


def host_section(data) -> tuple[str, list[str]]:
    """The section's HTML and figure ids, or ("", []) where no run has a tier."""
    rows = data.host_tier
    if rows is None or rows.height == 0:
        return "", []
    labels = dict(zip(data.runs["run_id"].to_list(), data.runs["run_label"].to_list(), strict=True))
    tiered = [has_host_tier(p) for p in rows["policy"].to_list()]
    shown = rows.filter(pl.Series(tiered) & pl.col("run_id").is_in(list(labels)))
    points = rows.filter(pl.col("sweep_id").is_not_null())
    parts = ['<section id="host"><h2>Host KV tier</h2>']
    ids: list[str] = []
    if points.height:
        parts.append(figure_div(host_sweep_figure(points), FIGURE_ID))
        ids.append(FIGURE_ID)
    text = (
        "A host (CPU) KV tier keeps copies of the prompt blocks the GPU computed; a request "
        "whose prefix the GPU evicted loads it back instead of recomputing it, and waits for "
        "the load. The useful hit ratio counts both tiers; the GPU hit alone is drawn dotted. "
        "One request at a time, a tier no larger than the GPU pool adds nothing (vLLM's docs "
        "say so too): the copies it keeps are the ones the GPU still has; under load it can, "
        "as the running requests hold pool blocks that keep nothing for later. Beyond its "
        "hit, <i>host evicted</i> is what the tier would have added had it kept every copy, "
        "<i>never stored</i> what it would "
        "have added had every computed chunk been stored (decode tokens, sparse boundaries the "
        "GPU did not keep, offers dropped for want of a slot)."
    )
    parts.append(meaning(text))
    if shown.height:
        parts.append(host_table(shown, labels))
    parts.append("</section>")
    return "".join(parts), ids
