"""The sections of `hpa report`, each (HTML, figure ids) from the report's frames."""

from __future__ import annotations

import html
import json

import polars as pl

from analyzer.report import capacity, engines, figures, time_chart
from analyzer.report.blocks import (
    count,
    figure_div,
    html_table,
    lead_row,
    lead_run,
    meaning,
    notice,
    overall_rows,
    pct,
)
from analyzer.report.data import ReportData, with_schedule_defaults
from analyzer.report.labels import policy_value
from analyzer.words import plural

SWEEP_FIGURE_ID = "fig-sweeps"  # and engines.FIGURE_ID when the runs use several engines


def runs_section(data: ReportData) -> str:
    overall = overall_rows(data)
    memory = {
        r["run_id"]: (r["memory_gib"], r["num_caches"]) for r in data.runs.iter_rows(named=True)
    }
    rows = []
    for r in overall.iter_rows(named=True):
        q = r["prompt_tokens"] or 1
        mem, caches = memory.get(r["run_id"], (None, 1))
        rows.append(
            [
                r["run_label"],
                count(r["num_requests"]),
                count(r["prompt_tokens"]),
                count(r["hit_tokens"]),
                pct(r["hit_tokens"] / q),
                count(r["sparse_retention_miss_tokens"]),
                pct(r["sparse_retention_miss_tokens"] / q),
                count(caches),
                "unbounded" if mem is None else f"{mem:,.2f}",
                "unbounded" if mem is None else f"{mem * caches:,.2f}",
            ]
        )
    table = html_table(
        [
            "run",
            "requests",
            "queried tokens",
            "hit tokens",
            "useful-hit ratio",
            "sparse-retention miss tokens",
            "sparse-loss ratio",
            "caches (model revision x replica)",
            "memory per cache (GiB)",
            "memory in all (GiB)",
        ],
        rows,
        numeric={1, 2, 3, 4, 5, 6, 7, 8, 9},
    )
    return (
        '<section id="runs"><h2>Runs in this report</h2>'
        "<p>Each run replays the same stored trace under one cache policy. A run is named by "
        "its <code>--name</code>, else by its engine and the policy keys where it differs "
        "from the most common value across the runs shown; hover a bar for every change, and "
        'the full policy of each run is in <a href="#config">Configuration</a>. Rows in run '
        f"order.{_sweeps_left_out(data)}</p>"
        f"{table}</section>"
    )


def _sweeps_left_out(data: ReportData) -> str:
    """The sentence on the sweep points drawn only in the capacity section."""
    left = data.sweep_runs or {}
    if not left:
        return ""
    sweeps = sorted(set(left.values()))
    n, k = len(left), len(sweeps)
    return (
        f" The {n:,} run{'s' if n != 1 else ''} of {k} sweep{'s' if k != 1 else ''} "
        f"({', '.join(map(str, sweeps))}) {'are' if n != 1 else 'is'} drawn only in "
        '<a href="#sweeps">Capacity curves</a> (<code>hpa report --run ID</code> shows one '
        "with the others)."
    )


def policy_section(data: ReportData) -> tuple[str, list[str]]:
    policies = [json.loads(p) for p in data.runs["policy_json"].to_list()]
    if any("schedule" in p for p in policies):  # a serial run's schedule keys: its defaults
        policies = [with_schedule_defaults(p) for p in policies]
    warm = data.runs["measure_from"].to_list()
    if any(warm):  # not a policy key, but what the runs' figures count (as in their labels)
        policies = [{**p, "measure_from": w} for p, w in zip(policies, warm, strict=True)]
    keys = sorted({k for p in policies for k in p})
    head = ["policy key"] + [f"run {i}" for i in data.runs["run_id"].to_list()]
    cells = []
    for key in keys:
        values = [policy_value(p.get(key)) for p in policies]
        differs = len(set(values)) > 1
        cls = ' class="differs"' if differs else ""
        cells.append(
            f"<tr{cls}><th>{html.escape(key)}</th>"
            + "".join(f"<td>{html.escape(v)}</td>" for v in values)
            + "</tr>"
        )
    table = (
        "<table><thead><tr>"
        + "".join(f"<th>{html.escape(h)}</th>" for h in head)
        + "</tr></thead><tbody>"
        + "".join(cells)
        + "</tbody></table>"
    )
    overall = overall_rows(data)
    first = overall.row(0, named=True)
    q0 = first["prompt_tokens"] or 1
    lines = []
    measured = dict(zip(data.runs["run_id"], warm, strict=True))
    for r in list(overall.iter_rows(named=True))[1:]:
        q = r["prompt_tokens"] or 1
        delta = (r["hit_tokens"] / q - first["hit_tokens"] / q0) * 100
        other = measured[r["run_id"]] != measured[first["run_id"]]
        lines.append(
            f"{html.escape(r['run_label'])}: {delta:+.2f} points"
            + (" (over other requests: its --measure-from differs)" if other else "")
        )
    changes = "; ".join(lines) if lines else "only one run is shown"
    text = (
        "The same trace under each policy, side by side: a higher green bar means more "
        "reused prompt tokens (less prefill), a lower red bar fewer tokens lost because a "
        "sparse group kept no state at the shared boundary. Hover for the change against "
        f"the first run. Useful-hit ratio against the first run: {changes}. In the table, "
        "highlighted rows are the policy keys that differ between runs."
    )
    body = (
        '<section id="policies"><h2>Policy comparison</h2>'
        + figure_div(figures.policy_comparison(data.groups), "fig-policy-compare")
        + meaning(text)
        + table
        + "</section>"
    )
    return body, ["fig-policy-compare"]


def engines_section(data: ReportData) -> tuple[str, list[str]]:
    return engines.engine_section(data)


def _marks(data: ReportData) -> tuple[tuple[str, float, float], ...]:
    """The incident's two windows, to shade on the time chart (none without them)."""
    c = data.incident
    if c is None or c.baseline.window is None or c.current.window is None:
        return ()
    sides = (("baseline", c.baseline.window), ("incident", c.current.window))
    return tuple((name, w.start_s, w.end_s) for name, w in sides)


def _warm_up_text(data: ReportData) -> str:
    """What the chart leaves out of the runs replayed with a warm-up (--measure-from): the
    lead run's when it has one, else the first such run's ("" when none has)."""
    w = data.windows
    warm = w.filter(pl.col("warmup_requests") > 0).select("run_id", "run_label", "warmup_requests")
    warm = warm.unique().sort("run_id")
    if warm.height == 0:
        return ""
    ids = warm["run_id"].to_list()
    row = warm.row(ids.index(lead_run(data, ids)), named=True)
    others = f"; {plural(warm.height - 1, 'other run')} had one too" if warm.height > 1 else ""
    return (
        f" In {html.escape(row['run_label'])} the first "
        f"{plural(row['warmup_requests'], 'request')} replayed as warm-up "
        f"(<code>--measure-from</code>{others}): as in every other figure of this report they "
        f"are not counted. No point holds them, their span is shaded &quot;"
        f"{time_chart.WARM_UP}&quot;, and the window it ends in starts at the first measured "
        "request."
    )


def windows_section(data: ReportData) -> tuple[str, list[str]]:
    w = data.windows
    unit = " s" if data.window_unit == "s" else " requests"
    # the widest window is a whole one (a run's first may start where its warm-up ended)
    width = float((w["window_end"] - w["window_start"]).max()) if w.height else 0.0
    first = (
        w.filter(pl.col("run_id") == lead_run(data, w["run_id"].unique().to_list()))
        if w.height
        else w
    )
    lo = first.sort(["useful_hit_ratio", "window_idx"]).row(0, named=True) if w.height else None
    hi = (
        first.sort(["useful_hit_ratio", "window_idx"], descending=[True, False]).row(0, named=True)
        if w.height
        else None
    )
    extra = ""
    if lo is not None:
        extra = (
            f" In {html.escape(lo['run_label'])} the useful-hit ratio ranges from "
            f"{pct(lo['useful_hit_ratio'])} (window starting at {lo['window_start']:,.0f}{unit}) "
            f"to {pct(hi['useful_hit_ratio'])} (at {hi['window_start']:,.0f}{unit})."
        )
    text = (
        f"Each point covers one {width:,.0f}{unit} window and only the requests that "
        "arrived in it: hit tokens of those requests divided by their queried tokens (a "
        "delta, like vLLM's counters over the same window, never a running total divided "
        "by an older one). A dip in the top panel with a rise in the bottom one is a period "
        "when shared prefixes were lost to missing sparse state." + extra + _warm_up_text(data)
    )
    body = (
        '<section id="windows"><h2>Useful hits and sparse losses over time</h2>'
        + figure_div(time_chart.windows(w, data.window_unit, _marks(data)), "fig-windows")
        + meaning(text)
        + "</section>"
    )
    return body, ["fig-windows"]


def weighting_section(data: ReportData) -> tuple[str, list[str]]:
    first = lead_row(data)
    tw = first["hit_tokens"] / (first["prompt_tokens"] or 1)
    rw = first["mean_request_hit_ratio"]
    which = (
        "long prompts hit more often than short ones"
        if tw > rw
        else ("short prompts hit more often than long ones")
    )
    text = (
        "Token-weighted ratios (sum of hits / sum of queried tokens) say how much prefill "
        "the cache saved; request-weighted ones (the mean of each request's own ratio) say "
        "how a typical request fared. In "
        f"{html.escape(first['run_label'])} they are {pct(tw)} and {pct(rw)}: {which}."
    )
    body = (
        '<section id="weighting"><h2>Request-weighted beside token-weighted</h2>'
        + figure_div(figures.weighting(data.groups), "fig-weighting")
        + meaning(text)
        + "</section>"
    )
    return body, ["fig-weighting"]


def junctions_section(data: ReportData) -> tuple[str, list[str]]:
    j = data.junctions
    stale = "" if data.junction_note is None else notice(data.junction_note)
    if j is None or j.height == 0:
        missing = stale or (
            "<p>No junction data: run <code>hpa match</code> on this database to see where "
            "shared prefixes branch and what each branch point lost.</p>"
        )
        return f'<section id="junctions"><h2>Shared junctions</h2>{missing}</section>', []
    lead = lead_run(data, j["run_id"].unique().to_list())
    chosen = figures.top_junctions(j, lead=lead)
    rows = j.join(chosen, on="junction_id").sort(["run_id", "rank"])
    top = (
        rows.filter(pl.col("run_id") == lead)
        .sort(["sparse_retention_miss_tokens", "rank"], descending=[True, False])
        .row(0, named=True)
    )
    table_rows = [
        [
            r["run_label"],
            r["junction_id"],
            count(r["position_tokens"]),
            r["prompt_families"],
            count(r["num_requests_through"]),
            count(r["num_requests_pinned"]),
            count(r["num_sparse_miss_requests"]),
            count(r["sparse_retention_miss_tokens"]),
            count(r["hit_tokens"]),
            r["first_outcomes"],
            _conversations(r),
            r["first_requests"] + (" …" if r["num_requests_pinned"] > 5 else ""),
        ]
        for r in rows.iter_rows(named=True)
    ]
    table = html_table(
        [
            "run",
            "junction id",
            "position (tokens)",
            "prompt families",
            "requests through",
            "requests pinned here",
            "sparse-miss requests",
            "sparse-miss tokens",
            "hit tokens",
            "first outcomes (arrival order)",
            "conversations",
            "first requests pinned here (arrival order)",
        ],
        table_rows,
        numeric={2, 4, 5, 6, 7, 8},
    )
    text = (
        "A junction is a branch point of the prefix tree: requests share the tokens before it "
        "and diverge after it. Each request is pinned to the deepest junction inside its "
        "shared prefix; the bars add up the tokens those requests lost to sparse-retention "
        "misses (red) and reused (green). The vLLM signature of a recurrent group with no "
        "state at a new junction is &ldquo;miss, sparse miss, hit&rdquo;: the first request "
        "computes the prefix, the second finds attention blocks but no Mamba state there "
        "(and leaves one), the third hits. The largest loss in "
        f"{html.escape(top['run_label'])} is at {count(top['position_tokens'])} tokens "
        f"({html.escape(top['prompt_families'] or 'no family')}): "
        f"{count(top['sparse_retention_miss_tokens'])} tokens over "
        f"{count(top['num_sparse_miss_requests'])} "
        f"request{'' if top['num_sparse_miss_requests'] == 1 else 's'}. Retention (a "
        "checkpoint every N tokens, or at every boundary) is what removes these losses. "
        "Whose traffic a junction is: hover a bar, or open the table below, for its "
        "conversations and the first requests pinned there (the trace's ids)."
    )
    body = (
        '<section id="junctions"><h2>Top shared junctions and what they lost</h2>'
        + stale
        + figure_div(figures.junctions(j, lead=lead), "fig-junctions")
        + meaning(text)
        + "<details><summary>Table: the same junctions per run (sorted by run, then "
        "sparse-miss tokens)</summary>" + table + "</details></section>"
    )
    return body, ["fig-junctions"]


def _conversations(r: dict) -> str:
    """A junction's conversations: the first three ids, and how many in all."""
    n = r["num_conversations"]
    if not n:
        return "none named"
    more = f" … ({n:,} in all)" if n > 3 else ""
    return f"{r['conversations']}{more}"


def sweep_section(data: ReportData) -> tuple[str, list[str]]:
    """Capacity curves, rendered only when the database has a `sweep_points` table
    (sweep_id, knob, value, run_id, useful_hit_ratio, sparse_loss_ratio, memory_gib),
    written by `hpa sweep`; otherwise the section is left out."""
    if data.sweeps is None or data.sweeps.height == 0:
        return "", []
    text = (
        "Each line sweeps one knob over the same trace, all else fixed; a point is one "
        "replay run. Read off the smallest pool that reaches your useful-hit target (a star "
        "marks it when the report was given <code>--target</code>); a flat stretch means "
        "more memory buys nothing. Memory is one cache's (see the runs' caches)."
    )
    others = data.sweeps.filter(pl.col("knob") != "num_blocks")
    table = ""
    if others.height and others.height < data.sweeps.height:  # the figure is the pools'
        table = "<h3>Other knobs swept</h3>" + html_table(
            ["sweep", "knob", "value", "run", "useful-hit ratio", "sparse-loss ratio"],
            [
                [r["sweep_id"], r["knob"], r["value"], r["run_id"],
                 pct(r["useful_hit_ratio"] or 0.0), pct(r["sparse_loss_ratio"] or 0.0)]
                for r in others.iter_rows(named=True)
            ],
            numeric={0, 3, 4, 5},
        )  # fmt: skip
    body = (
        '<section id="sweeps"><h2>Capacity curves (sweeps)</h2>'
        + figure_div(capacity.sweeps(data.sweeps, data.target), SWEEP_FIGURE_ID)
        + meaning(text)
        + table
        + "</section>"
    )
    return body, [SWEEP_FIGURE_ID]


def _replayed_before(data: ReportData) -> list[str]:
    """The runs (ids) that replayed the store before its trace changed; runs of a Parquet
    dataset (fingerprint "dataset:...") are not the store's."""
    if data.trace_now is None:
        return []
    now = data.trace_now[0]
    return [
        str(r["run_id"])
        for r in data.runs.iter_rows(named=True)
        if r["trace_fingerprint"] != now and not r["trace_fingerprint"].startswith("dataset:")
    ]


def config_section(data: ReportData) -> str:
    parts = []
    for r in data.runs.iter_rows(named=True):
        mem, caches = r["memory_gib"], r["num_caches"]
        pool = (
            "unbounded" if mem is None else f"{mem:,.2f} GiB each, {mem * caches:,.2f} GiB in all"
        )
        parts.append(
            f'<div class="run-config"><h3>{html.escape(r["run_label"])}</h3>'
            f"<p>trace fingerprint <code>{html.escape(r['trace_fingerprint'])}</code>; "
            f"{plural(r['num_requests'], 'request')}, {count(r['prompt_tokens'])} queried tokens; "
            f"{plural(caches, 'cache')} (one per model revision x "
            f"replica, or per replica under cache_scope shared), pool {pool}; "
            f"hpa {html.escape(r['hpa_version'])}</p>"
            f"<pre>{html.escape(r['policy_json'])}</pre></div>"
        )
    fps = set(data.runs["trace_fingerprint"].to_list())
    note = (
        "All runs replayed the same trace (one fingerprint)."
        if len(fps) == 1
        else "<b>Warning:</b> the runs replayed different traces (fingerprints differ); "
        "compare them with care."
    )
    changed = _replayed_before(data)
    if changed:
        runs = f"run{'s' if len(changed) > 1 else ''} {', '.join(changed)}"
        note += (
            f" <b>Warning:</b> the stored trace has changed since {runs} (it now holds "
            f"{plural(data.trace_now[1], 'request')}): replay again to see it as it is."
        )
    return (
        '<section id="config"><h2>Exact configuration of each run</h2>'
        f"<p>{note} Reproduce a run with <code>hpa replay --policy FILE</code> where FILE "
        "holds the JSON below.</p>" + "".join(parts) + "</section>"
    )
