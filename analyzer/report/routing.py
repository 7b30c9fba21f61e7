"""The report's Routing section: how the requests, the hits and the load spread over the
replicas of the runs that routed to more than one.

Shown only when a run in the report has several replicas (a trace's own replica labels
count, as under `routing: trace`). Per run, a table gives each replica's requests, prompt
tokens, hit ratio, tokens lost to routing, TTFT and queue time, and, under a live router,
what the router saw of the replica at its picks (report_routing_replicas.sql); the figure
draws per arrival window, one line per replica, the hit ratio and the load
(report_routing_windows.sql: the Load section's windows for a concurrent run, the time
windows for a serial one).
"""

from __future__ import annotations

import html
import json

import plotly.graph_objects as go
import polars as pl
from plotly.subplots import make_subplots

from analyzer.report.blocks import count, figure_div, html_table, meaning, pct
from analyzer.report.data import ReportData
from analyzer.report.figures import MENU_ROW, style_figure
from analyzer.report.labels import figure_label
from analyzer.report.load import ARRIVAL_AXES
from analyzer.words import plural

FIGURE_ID = "fig-routing"
MAX_SHOWN = 8  # replicas drawn when the page opens; the others are one legend click away
# One colour per replica, the same in both panels: D3's ten, then six darker ones; past
# sixteen the colours repeat with a dotted line.
COLOURS = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf", "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#5254a3",
)  # fmt: skip
# How each static router picks (a live one picks as requests arrive, seeing the replicas).
STATIC = {
    "trace": "static: each record's own replica",
    "round_robin": "static: in arrival order, round robin",
    "session": "static: a conversation's requests to one replica",
}
CLOCKS = {
    "arrival": ARRIVAL_AXES["replica"],  # a static router's replicas: one clock each
    "trace": "arrival time in the trace (s since the first request)",
    "order": "arrival (request #)",
}
HIT_TITLE = "hit ratio: hit tokens / prompt tokens of the requests routed to each replica"
LOAD_TITLES = {
    True: "load the router saw: waiting + running requests on the replica, mean over its picks",
    False: "requests routed to each replica (static routing: no router view of the load)",
}
LOAD_AXES = {True: "requests (mean at picks)", False: "requests"}
MEANING = (
    "A replica's hit ratio is its own hits over the prompt tokens routed to it; tokens lost "
    "to routing were shared with an earlier request's prefix that another replica held, so "
    "this replica's cache could not serve them. A live router (<code>least_loaded</code>, "
    "<code>dynamo</code>, ...) records what it saw of the replica it picked, as each request "
    "arrived: the requests waiting and running there and its KV blocks in use; under a "
    "static routing the lower panel counts the requests routed instead. Each point covers "
    "the requests arriving in one window{menu}{hidden}. A replica whose hit ratio stays "
    "below the others' while its load keeps up with theirs serves prefixes that another "
    "replica holds, or prefixes no one shares: its tokens lost to routing tell which. TTFT "
    "and queue time are simulated (concurrent runs only). The table and the figure count "
    "the measured requests, as the Load section: a run's warm-up requests "
    "(<code>--measure-from</code>) are in neither, and its windows start at its first "
    "measured request."
)


def replica_key(label: str) -> tuple:
    """Replicas in numeric order where their labels are numbers (as the table's SQL)."""
    return (0, int(label), "") if label.isdigit() else (1, 0, label)


def _style(k: int) -> dict:
    return {"color": COLOURS[k % len(COLOURS)], "dash": "solid" if k < len(COLOURS) else "dot"}


def _live(part: pl.DataFrame) -> bool:
    """Whether a live router recorded what it saw at its picks in this run."""
    return bool(part["num_seen"].sum())


def _filled(part: pl.DataFrame, first: int, last: int) -> pl.DataFrame:
    """One replica's windows `first`..`last` (its run's: a warm-up, --measure-from, is in
    none), a window without its requests null (a gap in the hit line; 0 requests routed)."""
    full = pl.DataFrame({"window_idx": pl.int_range(first, last + 1, eager=True)})
    width = float(part["window_width"][0])
    return full.join(part, on="window_idx", how="left").with_columns(
        (pl.col("window_idx") * width).alias("window_start"),
        (pl.col("window_idx") * width + width).alias("window_end"),
        pl.col("num_requests").fill_null(0),
        pl.when(pl.col("prompt_tokens") > 0)
        .then((pl.col("hit_tokens") / pl.col("prompt_tokens")).round(6))
        .alias("hit_ratio"),
    )


def _replica_traces(fig, part: pl.DataFrame, replica: str, k: int, run: tuple) -> None:
    """The hit-ratio and load lines of one replica of one run; `run`: (run id, label,
    live), the legend group being the run's replica (both panels toggle together)."""
    run_id, run_label, live = run
    mid = ((part["window_start"] + part["window_end"]) / 2).round(6).to_list()
    custom = part.select(
        "window_start", "window_end", "num_requests", "hit_tokens", "prompt_tokens", "num_seen"
    ).rows()
    where = (
        f"<b>replica {html.escape(replica)}</b> · {html.escape(run_label)}<br>"
        "arrivals %{customdata[0]:,}–%{customdata[1]:,}: %{customdata[2]:,} requests<br>"
    )
    common = {
        "x": mid,
        "mode": "lines+markers",
        "line": _style(k),
        "marker": {"size": 5},
        "legendgroup": f"run {run_id} replica {replica}",
        "customdata": custom,
        "visible": True if k < MAX_SHOWN else "legendonly",
    }
    fig.add_trace(
        go.Scatter(
            name=f"replica {figure_label(replica)}",
            y=part["hit_ratio"].to_list(),
            hovertemplate=where + "hit ratio %{y:.1%} (%{customdata[3]:,} of "
            "%{customdata[4]:,} prompt tokens)<extra></extra>",
            **common,
        ),
        row=1,
        col=1,
    )
    load = part["seen_load_mean"] if live else part["num_requests"]
    said = (
        "the router saw %{y:,.1f} waiting + running on average at its %{customdata[5]:,} picks"
        if live
        else "%{y:,} requests routed here"
    )
    fig.add_trace(
        go.Scatter(
            name=f"replica {figure_label(replica)}",
            y=load.to_list(),
            showlegend=False,
            hovertemplate=where + said + "<extra></extra>",
            **common,
        ),
        row=2,
        col=1,
    )


def _layout_of(clock: str, live: bool) -> dict:
    """The axis and panel titles that change with the run shown."""
    return {
        "xaxis2.title.text": ARRIVAL_AXES["revision"]
        if clock == "arrival" and live
        else CLOCKS[clock],
        "yaxis2.title.text": LOAD_AXES[live],
        "annotations[1].text": LOAD_TITLES[live],
    }


def _menu(fig: go.Figure, runs: list[tuple[str, int, dict]]) -> None:
    """A run menu above the plots: `runs` (label, traces, layout), laid out run by run; the
    first run's replicas past MAX_SHOWN start in the legend only, as on opening."""
    if len(runs) < 2:
        return
    ends = [sum(n for _, n, _ in runs[: k + 1]) for k in range(len(runs))]
    states = []
    for k, (_, n, _) in enumerate(runs):
        mine = [True if j // 2 < MAX_SHOWN else "legendonly" for j in range(n)]
        states.append([False] * (ends[k] - n) + mine + [False] * (ends[-1] - ends[k]))
    for trace, state in zip(fig.data, states[0], strict=True):
        trace.visible = state
    plot_height = fig.layout.height - fig.layout.margin.t - fig.layout.margin.b
    buttons = [
        {"label": label, "method": "update", "args": [{"visible": state}, layout]}
        for (label, _, layout), state in zip(runs, states, strict=True)
    ]
    fig.update_layout(
        updatemenus=[
            {
                "buttons": buttons,
                "direction": "down",
                "x": 1,
                "xanchor": "right",
                "y": 1 + (MENU_ROW + 8) / max(plot_height, 1),
                "yanchor": "bottom",
                "showactive": True,
            }
        ]
    )


def routing_figure(windows: pl.DataFrame) -> go.Figure:
    """Per arrival window, one line per replica: its hit ratio (top) and its load (bottom:
    what a live router saw at its picks, else the requests routed to it); one run at a
    time (a menu picks the run)."""
    fig = make_subplots(
        rows=2,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.12,
        subplot_titles=(HIT_TITLE, LOAD_TITLES[True]),
    )
    runs = []
    for run_id in sorted(set(windows["run_id"].to_list())):
        part = windows.filter(pl.col("run_id") == run_id)
        label, clock, live = part["run_label"][0], part["clock"][0], _live(part)
        first, last = int(part["window_idx"].min()), int(part["window_idx"].max())
        replicas = sorted(set(part["replica"].to_list()), key=replica_key)
        for k, replica in enumerate(replicas):
            rows = _filled(part.filter(pl.col("replica") == replica), first, last)
            _replica_traces(fig, rows, replica, k, (run_id, label, live))
        runs.append((label, 2 * len(replicas), _layout_of(clock, live)))
    fig.update_yaxes(tickformat=".0%", rangemode="tozero", title="hit ratio", row=1, col=1)
    fig.update_yaxes(rangemode="tozero", row=2, col=1)
    top = 90 + (MENU_ROW if len(runs) > 1 else 0)
    style_figure(fig, "Hit ratio and load per replica over arrival time", 700 + top - 90)
    fig.update_layout(
        margin={"t": top, "b": 60, "r": 10},
        legend={
            "orientation": "v",
            "x": 1.01,
            "xanchor": "left",
            "y": 1,
            "yanchor": "top",
            "title": {"text": "replica"},
            "groupclick": "togglegroup",
        },
    )
    first = runs[0][2]
    fig.update_xaxes(title=first["xaxis2.title.text"], row=2, col=1)
    fig.update_yaxes(title=first["yaxis2.title.text"], row=2, col=1)
    fig.layout.annotations[1].text = first["annotations[1].text"]
    _menu(fig, runs)
    return fig


def _seconds(x) -> str:
    return "–" if x is None else f"{x:,.3f}"


def _seen(mean, peak) -> str:
    return "–" if mean is None else f"{mean:,.1f} ({count(peak)})"


def _row(r: dict, run: dict, timed: bool, live: bool) -> list:
    """One replica's (or, replica None, the run's) cells."""
    prompt = r["prompt_tokens"] or 0
    whole = r["replica"] is None
    requests, hits = count(r["num_requests"]), count(r["hit_tokens"])
    cells = [
        "all replicas" if whole else r["replica"],
        requests if whole else f"{requests} ({pct(r['num_requests'] / run['num_requests'])})",
        count(prompt),
        pct(r["hit_tokens"] / prompt) if prompt else "–",
        hits if whole else f"{hits} ({pct(r['hit_tokens'] / (run['hit_tokens'] or 1))})",
        f"{count(r['lost_routing_tokens'])} ({pct(r['lost_routing_tokens'] / (prompt or 1))})",
    ]
    if timed:
        cells += [_seconds(r[c]) for c in ("ttft_p50_s", "ttft_p99_s", "queue_mean_s")]
    if live:
        cells += [
            _seen(r["seen_waiting_mean"], r["seen_waiting_max"]),
            _seen(r["seen_running_mean"], r["seen_running_max"]),
            "–" if r["seen_kv_blocks_peak"] is None else count(r["seen_kv_blocks_peak"]),
        ]
    return cells


def _caption(run: dict, policy: dict, replicas: int) -> str:
    """The run, its router and its replica count (the policy's; the trace's own replicas
    under `routing: trace`)."""
    routing = policy.get("routing", "trace")
    how = STATIC.get(routing, "live: it picks as requests arrive, seeing each replica")
    if routing == "trace":
        many = f"{plural(replicas, 'replica')} in the trace"
    else:
        wanted = int(policy.get("replicas", 1))
        idle = wanted - replicas
        many = plural(wanted, "replica") + (f", {idle} of them got no request" if idle else "")
    return (
        f"{html.escape(run['run_label'])}: router <code>{html.escape(routing)}</code> "
        f"({how}), {many}"
    )


def _table(rows: pl.DataFrame, policy: dict) -> str:
    """One run's table, a row per replica and the run's own last, its caption above."""
    run = rows.filter(pl.col("is_overall")).row(0, named=True)
    timed = run["ttft_p50_s"] is not None
    live = bool(run["num_seen"])
    headers = [
        "replica",
        "requests (share)",
        "prompt tokens",
        "hit ratio",
        "hit tokens (share)",
        "lost to routing (share of its prompt tokens)",
    ]
    if timed:
        headers += ["TTFT p50 (s)", "TTFT p99 (s)", "queue mean (s)"]
    if live:
        headers += [
            "waiting, seen at picks: mean (max)",
            "running, seen at picks: mean (max)",
            "KV blocks in use, seen at picks: peak",
        ]
    cells = [_row(r, run, timed, live) for r in rows.iter_rows(named=True)]
    table = html_table(headers, cells, numeric=set(range(1, len(headers))))
    caption = (
        '<caption style="text-align:left;padding:4px 0;font-weight:600">'
        f"{_caption(run, policy, rows.height - 1)}</caption>"
    )
    at = table.rindex("<tr>")  # the run's own row, in bold
    table = table[:at] + '<tr style="font-weight:600">' + table[at + 4 :]
    return table.replace("<table>", "<table>" + caption, 1)


def _lead_run(data: ReportData) -> int:
    """The run the sentence is about: the summary's headline run when it has several
    replicas, else the first that has."""
    ids = data.routing["run_id"].unique().sort().to_list()
    return data.headline_run if data.headline_run in ids else ids[0]


def _sentence(data: ReportData) -> str:
    """The busiest replica's share of the requests and of the hits, and the prompt tokens
    lost to routing, in the lead run; with several runs, the least and most so lost."""
    frame = data.routing
    lead = frame.filter(pl.col("run_id") == _lead_run(data))
    run = lead.filter(pl.col("is_overall")).row(0, named=True)
    replicas = lead.filter(~pl.col("is_overall")).with_row_index("order")
    busiest = replicas.sort(
        ["num_requests", "hit_tokens", "order"], descending=[True, True, False]
    ).row(0, named=True)
    hits = busiest["hit_tokens"] / run["hit_tokens"] if run["hit_tokens"] else 0.0
    text = (
        f"In {html.escape(run['run_label'])}, replica {html.escape(busiest['replica'])} took "
        f"{pct(busiest['num_requests'] / run['num_requests'])} of the requests and "
        f"{pct(hits)} of the hit tokens; "
        f"{pct(run['lost_routing_tokens'] / (run['prompt_tokens'] or 1))} of the prompt tokens "
        "were shared with a prefix that another replica held (lost to routing)."
    )
    runs = frame.filter(pl.col("is_overall")).with_columns(
        (pl.col("lost_routing_tokens") / pl.col("prompt_tokens").clip(1)).round(9).alias("lost")
    )
    if runs.height > 1:
        low = runs.sort(["lost", "run_id"]).row(0, named=True)
        high = runs.sort(["lost", "run_id"], descending=[True, False]).row(0, named=True)
        if pct(low["lost"]) == pct(high["lost"]):
            return text + (
                f" Each of the {runs.height} runs over several replicas lost "
                f"{pct(low['lost'])} of its prompt tokens to routing."
            )
        text += (
            f" Of the {runs.height} runs over several replicas, routing lost the least in "
            f"{html.escape(low['run_label'])} ({pct(low['lost'])} of its prompt tokens) and "
            f"the most in {html.escape(high['run_label'])} ({pct(high['lost'])})."
        )
    return text


def routing_section(data: ReportData) -> tuple[str, list[str]]:
    """The Routing section, or ("", []) when every run shown has one replica."""
    if data.routing is None or data.routing_windows is None:
        return "", []
    policies = dict(data.runs.select("run_id", "policy_json").iter_rows())
    tables = "".join(
        _table(data.routing.filter(pl.col("run_id") == run_id), json.loads(policies[run_id]))
        for run_id in data.routing["run_id"].unique().sort().to_list()
    )
    several = data.routing["run_id"].n_unique() > 1
    replicas = data.routing.filter(~pl.col("is_overall")).group_by("run_id").len()["len"].max()
    text = MEANING.format(
        menu=" (the menu at the top right picks the run)" if several else "",
        hidden=f"; the first {MAX_SHOWN} replicas are drawn, the others one legend click away"
        if replicas > MAX_SHOWN
        else "",
    )
    body = (
        '<section id="routing"><h2>Routing: load and hits per replica</h2>'
        f"<p>{_sentence(data)}</p>"
        + tables
        + figure_div(routing_figure(data.routing_windows), FIGURE_ID)
        + meaning(text)
        + "</section>"
    )
    return body, [FIGURE_ID]
