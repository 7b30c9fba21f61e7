"""The waterfall sections of `hpa report`: the loss waterfall per run and per prompt
family x model revision (with the in-flight cause when a concurrent run is shown)."""

from __future__ import annotations

import html

import polars as pl

from analyzer.report import waterfall
from analyzer.report.blocks import (
    count,
    figure_div,
    html_table,
    largest_loss,
    lead_row,
    lead_run,
    meaning,
    overall_rows,
    pct,
)
from analyzer.report.data import ReportData


def _in_flight_text(data: ReportData) -> str:
    """The pink segment's sentence, when the waterfall shows it."""
    if "lost_in_flight_tokens" not in data.groups.columns:
        return ""
    see = ' (see <a href="#load">Load</a>)' if data.load is not None else ""
    return (
        "Pink (lost in flight, concurrent runs only) tokens were shared with an earlier "
        "request that had not yet scheduled them when this one was admitted: they were "
        f"still to be computed, so no cache of any size could have served them{see}. "
    )


def waterfall_runs_section(data: ReportData) -> tuple[str, list[str]]:
    overall = overall_rows(data)
    best = max(overall.iter_rows(named=True), key=lambda r: (r["hit_tokens"], -r["run_id"]))
    first = lead_row(data)
    cause, tokens = largest_loss(first)
    q = first["prompt_tokens"] or 1
    text = (
        "Each bar is one run; its parts sum exactly to the queried prompt tokens (the loss "
        "waterfall: each cause is one reason, in the order the replay meets them). Green is "
        "reused; every other colour is a reason the tokens were computed again. Grey tokens "
        "were never shared with an earlier request, so no cache could have helped; red "
        "(sparse-retention miss) tokens were matched by full attention but the "
        "recurrent/sliding-window group had no state at that boundary, which an ordinary "
        "hit-rate chart reports as &ldquo;no sharing&rdquo;. "
        + _in_flight_text(data)
        + f"In {html.escape(first['run_label'])}, {pct(first['hit_tokens'] / q)} of queried "
        f"tokens were hits and the largest loss was {html.escape(cause)} "
        f"({count(tokens)} tokens, {pct(tokens / q)}). The run with the most hits is "
        f"{html.escape(best['run_label'])} "
        f"({pct(best['hit_tokens'] / (best['prompt_tokens'] or 1))})."
    )
    body = (
        '<section id="waterfall"><h2>Loss waterfall per run</h2>'
        + figure_div(waterfall.waterfall_runs(data.groups), "fig-waterfall-runs-tokens")
        + figure_div(waterfall.waterfall_runs(data.groups, share=True), "fig-waterfall-runs-shares")
        + meaning(text)
        + "</section>"
    )
    return body, ["fig-waterfall-runs-tokens", "fig-waterfall-runs-shares"]


# The shares in the per-family table: (header, column), in the table's order.
GROUP_SHARES = (
    ("hit", "hit_tokens"),
    ("sparse-retention miss", "sparse_retention_miss_tokens"),
    ("unshared", "unshared_tokens"),
    ("routing", "lost_routing_tokens"),
    ("dense eviction", "lost_eviction_tokens"),
    ("spec decode", "lost_spec_decode_tokens"),
)


def _groups_table(rows: pl.DataFrame) -> str:
    """Shares of queried tokens per run, family and revision; "in flight" (before dense
    eviction) only when the frame has the column (a concurrent run is shown)."""
    shares = list(GROUP_SHARES)
    if "lost_in_flight_tokens" in rows.columns:
        shares.insert(4, ("in flight", "lost_in_flight_tokens"))
    table_rows = [
        [
            r["run_label"],
            r["prompt_family"],
            r["model_revision"],
            count(r["num_requests"]),
            count(r["prompt_tokens"]),
        ]
        + [pct(r[col] / (r["prompt_tokens"] or 1)) for _, col in shares]
        for r in rows.iter_rows(named=True)
    ]
    headers = ["run", "prompt family", "model revision", "requests", "queried tokens"]
    return html_table(
        headers + [h for h, _ in shares], table_rows, numeric=set(range(3, 5 + len(shares)))
    )


def groups_section(data: ReportData) -> tuple[str, list[str]]:
    rows = data.groups.filter(~pl.col("is_overall")).sort(
        ["run_id", "prompt_tokens", "prompt_family", "model_revision"],
        descending=[False, True, False, False],
    )
    first_run = lead_run(data, rows["run_id"].unique().to_list())
    worst = (
        rows.filter(pl.col("run_id") == first_run)
        .with_columns((pl.col("sparse_retention_miss_tokens") / pl.col("prompt_tokens")).alias("s"))
        .sort(["s", "prompt_family", "model_revision"], descending=[True, False, False])
        .row(0, named=True)
    )
    table = _groups_table(rows)
    text = (
        "The same waterfall split by prompt family and model revision (largest traffic "
        "first; the menu at the top right picks the run). A family whose bar is mostly red "
        "shares its prefix but loses it at the sparse group: a retention or checkpoint "
        "setting, not the traffic, is the cause. Mostly grey means the prompts simply do "
        f"not repeat. In {html.escape(worst['run_label'])} the highest sparse-loss share is "
        f"{html.escape(worst['prompt_family'])} on {html.escape(worst['model_revision'])} "
        f"({pct(worst['s'])} of its queried tokens)."
    )
    body = (
        '<section id="groups"><h2>Loss waterfall per prompt family × model revision</h2>'
        + figure_div(
            waterfall.waterfall_groups(data.groups, lead=first_run), "fig-waterfall-groups-tokens"
        )
        + figure_div(
            waterfall.waterfall_groups(data.groups, share=True, lead=first_run),
            "fig-waterfall-groups-shares",
        )
        + meaning(text)
        + "<details><summary>Table: shares of queried tokens per run, family and revision "
        "(sorted by run, then queried tokens)</summary>" + table + "</details></section>"
    )
    return body, ["fig-waterfall-groups-tokens", "fig-waterfall-groups-shares"]
