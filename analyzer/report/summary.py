"""The report's first section (`id="summary"`): the trace in one line, the verdict in
sentences with numbers, and the caveats every figure is read with.

The verdict is about the headline run (the first with the most common setting): what it
reused, its largest loss and the prompt family x model revision where most of that loss
sits, which run shown reuses the most, and what the sweeps in the store say a pool needs.
"""

from __future__ import annotations

import html
import math
from datetime import UTC, datetime

import polars as pl

from analyzer.config.engines import BOUNDS
from analyzer.config.levers import lever as levers
from analyzer.report.blocks import count, largest_loss, overall_rows, pct
from analyzer.report.data import ReportData
from analyzer.report.engines import engines_of
from analyzer.report.waterfall import cause_segments, segments
from analyzer.words import plural

# Within this many points of a sweep's best ratio, a point "reaches" it.
NEAR_BEST_POINTS = 1.0


def utc(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M UTC")


def span_text(first_s: float | None, last_s: float | None) -> str:
    """'from 2026-03-01 10:00 UTC to ... (6.2 days)', or relative seconds for a trace whose
    timestamps start near 0 (no wall clock)."""
    if first_s is None:
        return "no timestamps (arrival order only)"
    span = last_s - first_s
    length = (
        f"{span / 86_400:,.1f} days"
        if span >= 86_400
        else f"{span / 3600:,.1f} h"
        if span >= 3600
        else f"{span:,.0f} s"
    )
    if first_s >= 946_684_800:  # after 2000-01-01: wall-clock times
        return f"from {utc(first_s)} to {utc(last_s)} ({length})"
    return f"over {length} of trace time"


def _labels(n: int, word: str, many: str) -> str:
    return f"no {word} labels" if n == 0 else plural(n, word, many)


def trace_sentence(line: dict) -> str:
    return (
        f"The trace: {plural(line['requests'], 'request')}, "
        f"{plural(line['prompt_tokens'], 'prompt token')}, "
        f"{span_text(line['first_s'], line['last_s'])}, "
        f"{_labels(line['model_revisions'], 'model revision', 'model revisions')}, "
        f"{_labels(line['prompt_families'], 'prompt family', 'prompt families')}."
    )


def _where(data: ReportData, run_id: int, column: str) -> tuple[str, int] | None:
    """The family x revision holding most of `column` in run `run_id`, and its tokens."""
    rows = data.groups.filter((pl.col("run_id") == run_id) & ~pl.col("is_overall"))
    if rows.height < 2:
        return None
    top = rows.sort([column, "prompt_family", "model_revision"], descending=[True, False, False])
    r = top.row(0, named=True)
    if not r[column]:
        return None
    return f"{r['prompt_family']} @ {r['model_revision']}", int(r[column])


def _lever_text(head: dict, column: str, q: int, granularity: str | None = None) -> str:
    """'; the lever: ...' for the largest loss, or, where no setting recovers it (unshared
    prefixes), the largest loss one does recover and its lever. `granularity`: the run's own
    lever for its granularity loss (report/granularity.py), with the figure; else the table's."""

    def lever(col: str) -> str | None:
        return granularity if col == "lost_granularity_tokens" and granularity else levers(col)

    setting = lever(column)
    if setting is not None:
        return f"; the lever: {html.escape(setting)}."
    recoverable = [
        (head[col], name, col) for col, name, _ in cause_segments(head) if lever(col) and head[col]
    ]
    if not recoverable:
        return "; no setting recovers it (the traffic shares less)."
    tokens, name, col = max(recoverable)
    return (
        "; no setting recovers it (the traffic shares less). The largest loss a setting can "
        f"recover is {html.escape(name.removeprefix('lost to '))}: {count(tokens)} tokens "
        f"({pct(tokens / q)}); the lever: {html.escape(lever(col))}."
    )


def _incident_sentence(data: ReportData) -> list[str]:
    """The incident first, when the report has one (`--window`, `--baseline`)."""
    c = data.incident
    if c is None:
        return []
    said = c.sentence[:1].upper() + c.sentence[1:]
    return [
        f"<b>Incident</b> ({html.escape(_sides(c.baseline, c.current))}): {html.escape(said)} "
        '<a href="#incident">The incident section</a> has the figures.'
    ]


def _sides(base, cur) -> str:
    """'run 2, window 43200..86400 s, 20,828 requests, against 0..43200 s, 23,450', or
    'run 2 against run 1' for two runs."""
    if base.window is None or cur.window is None:
        return f"run {cur.run_id} against run {base.run_id}"
    return (
        f"run {cur.run_id}, window {cur.window.text} s, {plural(cur.requests, 'request')}, "
        f"against {base.window.text} s, {base.requests:,}"
    )


def verdict_sentences(data: ReportData) -> list[str]:
    overall = overall_rows(data)
    head = overall.filter(pl.col("run_id") == data.headline_run).row(0, named=True)
    q = head["prompt_tokens"] or 1
    cause, tokens = largest_loss(head)
    column = next(col for col, name, _ in segments(head) if name == cause)
    label = head["run_label"]
    out = [
        *_incident_sentence(data),
        f"{html.escape(label[:1].upper() + label[1:])} reused {pct(head['hit_tokens'] / q)} "
        "of the queried "
        f"prompt tokens (useful-hit ratio); "
        f"{pct(head['sparse_retention_miss_tokens'] / q)} were matched by full attention but "
        "lost for lack of a recurrent state at that boundary (sparse-loss ratio).",
    ]
    where = _where(data, head["run_id"], column)
    what = html.escape(cause.removeprefix("lost to "))
    sentence = f"Its largest loss is {what}: {count(tokens)} tokens ({pct(tokens / q)})"
    if where is not None:
        sentence += (
            f", most of it in {html.escape(where[0])} ({count(where[1])} tokens, "
            f"{pct(where[1] / (tokens or 1))} of that loss)"
        )
    out.append(sentence + _lever_text(head, column, q, data.granularity_lever))
    engine = dict(zip(data.runs["run_id"], engines_of(data), strict=True))
    # runs of the headline's trace and measured requests only (--measure-from): another
    # trace's, or another set of requests', hit ratio answers no question here
    runs = data.runs.select("run_id", "trace_fingerprint", "measure_from").rows()
    measured = {run: (trace, warm) for run, trace, warm in runs}
    real = [
        r
        for r in overall.iter_rows(named=True)
        if engine[r["run_id"]] not in BOUNDS and measured[r["run_id"]] == measured[head["run_id"]]
    ]
    if len(overall) > 1 and real:
        best = max(real, key=lambda r: (r["hit_tokens"] / (r["prompt_tokens"] or 1), -r["run_id"]))
        if best["run_id"] != head["run_id"]:
            changes = data.runs.filter(pl.col("run_id") == best["run_id"])["policy_changes"][0]
            named = f"run {best['run_id']} ({engine[best['run_id']]}: {changes})"
            ratio = best["hit_tokens"] / (best["prompt_tokens"] or 1)
            out.append(
                f"Of the runs shown, {html.escape(named)} reuses the most ({pct(ratio)}, "
                f"{(ratio - head['hit_tokens'] / q) * 100:+.1f} points)."
            )
    out.extend(_sweep_sentences(data))
    return out


def _sweep_sentences(data: ReportData) -> list[str]:
    """Per num_blocks sweep of two points or more: the smallest pool within NEAR_BEST_POINTS
    of its best, or, where that is the largest pool swept, that the curve still rises."""
    if data.sweeps is None or data.sweeps.height == 0:
        return []
    out = []
    for (sweep_id,), points in data.sweeps.filter(pl.col("knob") == "num_blocks").group_by(
        ["sweep_id"], maintain_order=True
    ):
        rows = [r for r in points.iter_rows(named=True) if r["useful_hit_ratio"] is not None]
        rows.sort(key=lambda r: _blocks(r["value"]))
        if len(rows) < 2:
            continue
        best = max(r["useful_hit_ratio"] for r in rows)
        near = next(r for r in rows if r["useful_hit_ratio"] >= best - NEAR_BEST_POINTS / 100)
        if near is rows[-1]:
            before = rows[-2]
            gain = (near["useful_hit_ratio"] - before["useful_hit_ratio"]) * 100
            out.append(
                f"Sweep {sweep_id}: the largest pool swept, {_pool(near)}, reaches "
                f"{pct(best)}, {gain:.1f} points above {_pool(before, memory=False)} "
                f"({pct(before['useful_hit_ratio'])}): sweep larger pools to find where more "
                "memory stops paying."
            )
            continue
        out.append(
            f"Sweep {sweep_id}: {_pool(near)} reach "
            f"{pct(near['useful_hit_ratio'])}, within {NEAR_BEST_POINTS:g} point of the "
            f"largest pool swept ({pct(best)}): more memory buys less than that."
        )
    return out


def _blocks(value: str) -> float:
    """A num_blocks point's value as a number (a value that is none sorts last)."""
    try:
        return float(value)
    except ValueError:
        return math.inf


def _pool(point: dict, memory: bool = True) -> str:
    """`8,000 blocks (187.50 GiB a cache)`: a sweep point's pool, with its memory where
    `memory` and known."""
    value = point["value"]
    blocks = f"{int(_blocks(value)):,}" if _blocks(value) < math.inf else str(value)
    text = html.escape(f"{blocks} blocks")
    gib = point["memory_gib"]
    if not memory or gib is None:
        return text
    return f"{text} ({gib:,.2f} GiB a cache)"


def summary_section(data: ReportData) -> str:
    line = data.trace_line
    body = [f"<p>{html.escape(trace_sentence(line))}</p>"] if line else []
    body.append("<ul>" + "".join(f"<li>{s}</li>" for s in verdict_sentences(data)) + "</ul>")
    if data.caveats:
        body.append(
            '<p class="caveats"><b>Read with:</b></p><ul class="caveats">'
            + "".join(f"<li>{html.escape(c)}</li>" for c in data.caveats)
            + "</ul>"
        )
    return '<section id="summary"><h2>Summary</h2>' + "".join(body) + "</section>"
