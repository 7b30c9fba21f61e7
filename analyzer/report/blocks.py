"""Small HTML pieces shared by the report's sections (escaped cells, numbers, figures)."""

from __future__ import annotations

import html

import plotly.graph_objects as go
import polars as pl

from analyzer.report import waterfall
from analyzer.report.data import ReportData

PLOTLY_CONFIG = {"displaylogo": False, "responsive": True}


def figure_div(fig: go.Figure, div_id: str) -> str:
    return fig.to_html(full_html=False, include_plotlyjs=False, div_id=div_id, config=PLOTLY_CONFIG)


def pct(x: float) -> str:
    return f"{x:.1%}"


def count(x) -> str:
    return f"{int(x):,}"


def html_table(headers: list[str], rows: list[list], numeric: set[int] | None = None) -> str:
    numeric = numeric or set()
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join(
        "<tr>"
        + "".join(
            f'<td class="num">{html.escape(str(c))}</td>'
            if i in numeric
            else f"<td>{html.escape(str(c))}</td>"
            for i, c in enumerate(r)
        )
        + "</tr>"
        for r in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def meaning(text: str) -> str:
    return f'<p class="meaning"><b>What this means.</b> {text}</p>'


def notice(text: str) -> str:
    """A warning paragraph; `text` is plain (escaped here), `code` in backquotes shown so."""
    parts = html.escape(text).split("`")
    body = "".join(f"<code>{p}</code>" if k % 2 else p for k, p in enumerate(parts))
    return f'<p class="notice"><b>Warning:</b> {body[0].upper()}{body[1:]}.</p>'


def overall_rows(data: ReportData) -> pl.DataFrame:
    return data.groups.filter(pl.col("is_overall")).sort("run_id")


def lead_run(data: ReportData, ids: list[int] | None = None) -> int:
    """The run a section's text speaks of: the incident's run when the report has one (and
    the section shows it), else the first of `ids` (default: the runs shown)."""
    ids = sorted(data.runs["run_id"].to_list() if ids is None else ids)
    c = data.incident
    return c.current.run_id if c is not None and c.current.run_id in ids else ids[0]


def lead_row(data: ReportData) -> dict:
    """The lead run's overall row (`overall_rows`)."""
    overall = overall_rows(data)
    return overall.filter(pl.col("run_id") == lead_run(data)).row(0, named=True)


def largest_loss(row: dict) -> tuple[str, int]:
    causes = [(name, row[col]) for col, name, _ in waterfall.cause_segments(row)]
    return max(causes, key=lambda c: (c[1], c[0]))
