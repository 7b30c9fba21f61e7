"""The report's engine comparison: the same trace under other engines' designs
(docs/definitions.md#other-designs).

Shown when the runs in a report use more than one engine (`hpa replay --policy a,b,c` with
policies of different engines). One stacked bar per run splits the queried tokens into what
was reused, what was replayed (recomputed to rebuild recurrent state, SuffixReplay-style),
what a sparse group had no state for, what dense eviction took, and what no cache could
have reused; a table beside it names each design's checkpoint rule and its distance from
the bounds when a bound run is present.
"""

from __future__ import annotations

import html
import json

import plotly.graph_objects as go
import polars as pl

from analyzer.config.engines import BOUNDS, ENGINES
from analyzer.report import figures
from analyzer.report.blocks import figure_div, html_table, meaning
from analyzer.report.data import ReportData

FIGURE_ID = "fig-engines"
# (label, colour, tokens of one overall row): the parts sum to the queried tokens.
PARTS = (
    ("hit (reused)", "#2ca02c", lambda r: r["hit_tokens"]),
    ("replayed (recomputed state, not a hit)", "#17becf", lambda r: r["replay_tokens"]),
    (
        "sparse-retention miss (no state)",
        "#d62728",
        lambda r: r["sparse_retention_miss_tokens"] - r["replay_tokens"],
    ),
    (
        "full-attention KV not held (evicted from a bounded pool, or not kept by the design)",
        "#ff7f0e",
        lambda r: r["lost_eviction_tokens"],
    ),
    (
        "below the block or match unit (a finer geometry reuses it)",
        "#9467bd",
        lambda r: r["lost_granularity_tokens"],
    ),
    (
        "not shared earlier on the replica, still in flight, or lost to speculative decoding",
        "#b0b0b0",
        lambda r: (
            r["unshared_tokens"]
            + r["lost_routing_tokens"]
            + r.get("lost_in_flight_tokens", 0)
            + r["lost_spec_decode_tokens"]
        ),
    ),
)


def engines_of(data: ReportData) -> list[str]:
    """The engine of every run, in run order."""
    return [json.loads(p).get("engine", "vllm") for p in data.runs["policy_json"].to_list()]


def engine_figure(overall: pl.DataFrame, labels: list[str]) -> go.Figure:
    """One stacked bar per run: the PARTS as shares of its queried tokens."""
    rows = list(overall.iter_rows(named=True))
    traces = []
    for name, colour, tokens_of in PARTS:
        tokens = [int(tokens_of(r)) for r in rows]
        shares = [
            round(t / (r["prompt_tokens"] or 1), 9) for t, r in zip(tokens, rows, strict=True)
        ]
        traces.append(figures.share_bar(name, colour, labels, tokens, shares))
    fig = go.Figure(traces)
    fig.update_layout(barmode="stack")
    fig.update_yaxes(autorange="reversed")
    fig.update_xaxes(title="share of queried prompt tokens (%)")
    return figures.style_figure(
        fig, "Engine designs on the same trace", figures.bar_height(len(rows), 48)
    )


def engine_section(data: ReportData) -> tuple[str, list[str]]:
    """The section's HTML and figure ids; empty when every run uses one engine."""
    engines = engines_of(data)
    if len(set(engines)) < 2:
        return "", []
    overall = data.groups.filter(pl.col("is_overall")).sort("run_id")
    labels = overall["run_label"].to_list()  # they name the engine (or the user's name)
    rows = list(overall.iter_rows(named=True))
    # ratios, not tokens: runs may count different requests (--measure-from)
    ratio = [r["hit_tokens"] / (r["prompt_tokens"] or 1) for r in rows]
    best_bound = max((x for x, e in zip(ratio, engines, strict=True) if e in BOUNDS), default=None)
    cells = []
    for label, engine, r, x in zip(labels, engines, rows, ratio, strict=True):
        q = r["prompt_tokens"] or 1
        of_bound = "" if not best_bound else f"{x / best_bound:.1%}"
        cells.append(
            [
                label,
                ENGINES[engine].design if engine in ENGINES else engine,
                f"{r['hit_tokens'] / q:.1%}",
                f"{r['sparse_retention_miss_tokens'] / q:.1%}",
                f"{int(r['replay_tokens']):,}",
                f"{int(r['prompt_tokens'] - r['hit_tokens']):,}",
                of_bound,
            ]
        )
    head = [
        "run",
        "where state is kept",
        "useful-hit ratio",
        "sparse-loss ratio",
        "replayed tokens",
        "fresh prefill tokens",
        "hits as share of the best bound",
    ]
    best = max(zip(labels, engines, ratio, strict=True), key=lambda t: t[2])
    best_real = [t for t in zip(labels, engines, ratio, strict=True) if t[1] not in BOUNDS]
    top = max(best_real, key=lambda t: t[2]) if best_real else best
    text = (
        "Every design sees the same requests in the same order; only where it keeps "
        "recurrent state (or how it rebuilds it) and what it evicts differ. Green is reused, "
        "red was matched by full attention but no state existed at that boundary, cyan was "
        "recomputed through the recurrent layers to rebuild state (a cost, not a hit); "
        "orange is shared prefix whose full-attention KV the engine did not hold: evicted, or "
        "never cached by its design (TensorRT-LLM commits blocks only up to its last snapshot, "
        "SGLang's extra_buffer drops the untracked tail, a llama.cpp slot holds one sequence); "
        "purple is shared prefix below the run's block or match unit, which a design with "
        "finer blocks reuses; grey no cache of this run could have served. "
        f"Among the engines (bounds aside), {html.escape(top[0])} reuses the most "
        f"({top[2]:.1%} of queried tokens)"
        + (
            f"; the best bound reaches {best_bound:.1%}."
            if best_bound
            else "; add an oracle run (engine oracle) to see the ceiling."
        )
    )
    body = (
        '<section id="engines"><h2>Engine designs compared</h2>'
        + figure_div(engine_figure(overall, labels), FIGURE_ID)
        + meaning(text)
        + html_table(head, cells, numeric={2, 3, 4, 5, 6})
        + "</section>"
    )
    return body, [FIGURE_ID]
