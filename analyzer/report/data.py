"""The frames behind `hpa report`, read from the DuckDB store (no plotting here).

Every frame is sorted and carries readable run labels, so the figures built from it
(analyzer/report/figures.py) are pure functions of the frame and the report is
byte-identical for the same database.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from analyzer.config.memory import policy_pool_gib
from analyzer.config.models import load_model
from analyzer.config.routers import COMMON_KEYS, ROUTER_OPTIONS
from analyzer.config.schedule import CONCURRENT_KEYS
from analyzer.errors import ConfigError, StoreError
from analyzer.report.granularity import block_lever
from analyzer.report.host_data import host_tier_rows, with_host_hits
from analyzer.report.labels import baseline, changes_text, run_labels
from analyzer.store.caveats import timestamp_caveats
from analyzer.store.db import (
    column_names,
    connect,
    derived_from,
    load_sql,
    query_arrow,
    require_tables,
    stored_trace_block,
    table_names,
    trace_fingerprint,
)
from analyzer.store.runs import load_row, unknown_run
from analyzer.words import capped, plural

# Window widths (seconds) the time-window figure may use: about 24 windows per trace.
NICE_WIDTHS_S = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 86400)
TARGET_WINDOWS = 24
SWEEP_COLUMNS = (
    *("sweep_id", "knob", "value", "run_id"),
    *("useful_hit_ratio", "sparse_loss_ratio", "memory_gib"),
)


@dataclass(frozen=True)
class ReportData:
    runs: pl.DataFrame  # one row per run: labels, policy, fingerprint, memory
    groups: pl.DataFrame  # report_groups.sql rows, with run_label
    windows: pl.DataFrame  # report_windows.sql rows, with run_label, window_start, ratios
    window_unit: str  # "s" (timestamps) or "requests" (arrival order)
    junctions: pl.DataFrame | None  # report_junctions.sql rows; None without `hpa match`
    sweeps: pl.DataFrame | None  # the sweep_points table when it exists
    # The concurrent runs' load (None when every run shown is serial): one row per run
    # (replay_load_summary.sql) and its arrival windows (report_load_windows.sql).
    load: pl.DataFrame | None = None
    load_windows: pl.DataFrame | None = None
    # Why some runs have no junction rows: `hpa match` matched another trace (None: all do).
    junction_note: str | None = None
    # The stored trace now: (fingerprint, requests); a run may have replayed an earlier one.
    trace_now: tuple[str, int] | None = None
    # Sweep points left out of the run figures (drawn in the capacity section): run -> sweep.
    sweep_runs: dict[int, int] | None = None
    # The summary's run (the first with the most common setting) and its trace in numbers
    # (report_trace_line.sql), and what every figure should be read with.
    headline_run: int | None = None
    trace_line: dict | None = None
    caveats: tuple[str, ...] = ()
    # A useful-hit ratio to draw on the capacity curves (`hpa report --target`), or None.
    target: float | None = None
    # `hpa validate` results of the runs shown (report_validations.sql, its causes), or None.
    validations: pl.DataFrame | None = None
    validation_causes: pl.DataFrame | None = None
    # `hpa compare`'s comparison of two windows (`hpa report --window --baseline`), or None:
    # the summary then leads with its run and sentence, the time chart shades its windows.
    incident: Any | None = None
    # The runs over several replicas (None: none is): per run and replica, the run's own
    # row last (report_routing_replicas.sql), and per replica and arrival window
    # (report_routing_windows.sql, with each run's clock and window width).
    routing: pl.DataFrame | None = None
    routing_windows: pl.DataFrame | None = None
    # The runs with a host KV tier and the points of host_tier_gib sweeps (report/host_tier.py
    # host_rows), or None: none, or a store written before the tier's columns.
    host_tier: pl.DataFrame | None = None
    # The summary's lever for the headline run's granularity loss (report/granularity.py).
    granularity_lever: str | None = None


def load_report_data(
    db_path: str | Path, runs: list[int] | None = None, bin_s: float | None = None
) -> ReportData:
    """All frames for the report of `runs` (default: every run that is no sweep point) in
    the database; time windows of `bin_s` seconds (default: about TARGET_WINDOWS).

    Raises:
        StoreError: no database, no replay runs, or an unknown run id.
    """
    con = connect(db_path, create=False, reader=True)
    try:
        require_tables(con, "requests")
        present = table_names(con)
        if "replay_runs" not in present:
            raise StoreError("no replay runs in the database; run `hpa replay` first")
        sweep_of = (
            dict(con.execute(load_sql("report_sweep_runs")).fetchall())
            if "sweep_points" in present
            else {}
        )
        run_frame, left_out = _runs(con, runs, sweep_of)
        ids = run_frame["run_id"].to_list()
        labels = dict(zip(ids, run_frame["run_label"].to_list(), strict=True))
        groups = _groups(con, run_frame, labels)
        windows, unit = _windows(con, ids, labels, bin_s)
        load, load_windows = _load(con, run_frame, labels)
        routing, routing_windows = _routing(con, ids, labels, bin_s)
        junctions, junction_note = None, None
        if {"junctions", "prefix_matches"} <= present:
            junctions, junction_note = _fresh_junctions(con, run_frame, labels)
        sweeps = None
        if "sweep_points" in present:
            sweeps = _sweeps(con)
        validations, validation_causes = _validations(con, present, ids)
        summary = _summary_inputs(con, run_frame)
        headline = run_frame.filter(pl.col("run_id") == summary[0])["policy_json"][0]
        return ReportData(
            run_frame,
            shown_labels(groups),
            shown_labels(windows),
            unit,
            shown_labels(junctions),
            shown_labels(sweeps),
            shown_labels(load),
            shown_labels(load_windows),
            junction_note,
            trace_fingerprint(con),
            left_out,
            *summary,
            None,
            shown_labels(validations),
            shown_labels(validation_causes),
            routing=shown_labels(routing),
            routing_windows=shown_labels(routing_windows),
            host_tier=host_tier_rows(con, sweeps),
            granularity_lever=block_lever(con, summary[0], headline),
        )
    finally:
        con.close()


def shown_labels(frame: pl.DataFrame | None) -> pl.DataFrame | None:
    """`frame` with every text column as the report shows it (`words.capped`): control
    characters as `\\x1b`, at most LABEL_MAX_CHARS of a label with its length and sha256,
    so neither a raw NUL or ESC nor a megabyte label reaches the page. Labels that differ
    stay different; ones without controls and within the cap are unchanged."""
    if frame is None:
        return None
    texts = [name for name, dtype in frame.schema.items() if dtype == pl.String]
    return frame.with_columns(
        pl.col(name).map_elements(capped, return_dtype=pl.String) for name in texts
    )


def _runs(
    con, runs: list[int] | None, sweep_of: dict[int, int]
) -> tuple[pl.DataFrame, dict[int, int]]:
    """The runs shown (`runs`, else every run that is no sweep point, else every run) and
    the sweep points left out of them (run -> sweep)."""
    rows = con.execute(load_sql("report_runs")).fetchall()
    if not rows:
        raise StoreError("no replay runs in the database; run `hpa replay` first")
    known = [r[0] for r in rows]
    left_out: dict[int, int] = {}
    if runs:
        missing = sorted(set(runs) - set(known))
        if missing:
            raise unknown_run(missing[0], known)
        rows = [r for r in rows if r[0] in set(runs)]
    elif any(r[0] not in sweep_of for r in rows):
        left_out = {r[0]: sweep_of[r[0]] for r in rows if r[0] in sweep_of}
        rows = [r for r in rows if r[0] not in sweep_of]
    policies = [json.loads(r[1]) for r in rows]
    # runs measured over other requests (--measure-from) are told apart as a key would be
    warm = any(r[9] for r in rows)
    named = [
        with_router_defaults(with_schedule_defaults(p)) | ({"measure_from": r[9]} if warm else {})
        for p, r in zip(policies, rows, strict=True)
    ]
    labels = run_labels([r[0] for r in rows], named, [r[8] for r in rows])
    base = baseline(named)
    return pl.DataFrame(
        {
            "run_id": [r[0] for r in rows],
            "run_label": labels,
            "policy_json": [json.dumps(p, sort_keys=True, indent=1) for p in policies],
            "policy_changes": [changes_text(p, base) for p in named],
            "trace_fingerprint": [r[2] for r in rows],
            "num_requests": [r[3] for r in rows],
            "prompt_tokens": [r[4] for r in rows],
            "hit_tokens": [r[5] for r in rows],
            "hpa_version": [r[6] for r in rows],
            "memory_gib": [memory_gib(p) for p in policies],
            "num_caches": [r[7] for r in rows],
            "concurrent": [p.get("schedule") == "concurrent" for p in policies],
            "measure_from": [r[9] for r in rows],
        },
        schema_overrides={"memory_gib": pl.Float64},
    ), left_out


def _validations(con, present: set[str], ids: list[int]):
    """(validation rows, their causes) of the runs `ids`, or (None, None) when none."""
    if "validations" not in present:
        return None, None
    rows = pl.from_arrow(query_arrow(con, load_sql("report_validations"), {"runs": ids}))
    if rows.height == 0:
        return None, None
    causes = None
    if "validation_causes" in present:
        vids = sorted(set(rows["validation_id"].to_list()))
        params = {"ids": vids}
        causes = pl.from_arrow(query_arrow(con, load_sql("report_validation_causes"), params))
    return rows, causes


def _summary_inputs(con, run_frame: pl.DataFrame) -> tuple[int, dict, tuple[str, ...]]:
    """(the headline run, its trace line, the caveats) for the report's summary."""
    plain = run_frame.filter(pl.col("policy_changes") == "baseline")
    headline = int((plain if plain.height else run_frame)["run_id"][0])
    cur = con.execute(load_sql("report_trace_line"), {"run_id": headline})
    line = dict(zip([d[0] for d in cur.description], cur.fetchone(), strict=True))
    caveats = [*_schedule_caveat(run_frame), *timestamp_caveats(con)]
    caveats += _geometry_caveats(con, run_frame)
    return headline, line, tuple(caveats)


def _schedule_caveat(run_frame: pl.DataFrame) -> list[str]:
    concurrent = run_frame.filter(pl.col("concurrent"))["run_id"].to_list()
    if len(concurrent) == run_frame.height:
        return [
            "every run shown replayed vLLM's scheduler on the trace's arrival times "
            "(queueing, prefixes still in flight and preemption count)"
        ]
    serial = (
        "every run shown is"
        if not concurrent
        else "runs other than " + ", ".join(map(str, concurrent)) + " are"
    )
    return [
        f"{serial} a serial replay (each request after the previous one finished: the "
        "no-contention bound; a loaded server reuses less)"
    ]


def _geometry_caveats(con, run_frame: pl.DataFrame) -> list[str]:
    """Runs replayed at another block than their model preset's, because the trace's hash
    blocks cannot express it (`access/geometry.py` fitted it)."""
    trace_block = stored_trace_block(con)
    if trace_block is None:
        return []
    fitted: dict[tuple[int, int], list[int]] = {}  # (block, preset's) -> runs
    for run_id, text in zip(run_frame["run_id"], run_frame["policy_json"], strict=True):
        policy = json.loads(text)
        if not policy.get("model"):
            continue
        preset = load_model(policy["model"]).get("block_size")
        if preset and policy.get("block_size") != preset:
            fitted.setdefault((policy["block_size"], preset), []).append(int(run_id))
    return [
        f"run{'s' if len(ids) > 1 else ''} {', '.join(map(str, ids))} matched whole "
        f"{trace_block:,}-token trace blocks: {block:,}-token blocks, not the preset's "
        f"{preset:,} (an approximated geometry)"
        for (block, preset), ids in fitted.items()
    ]


def with_schedule_defaults(policy: dict) -> dict:
    """`policy` with the schedule keys a serial policy leaves out (schedule: serial, the
    clock keys at their defaults), so that a concurrent run is named only by what differs."""
    defaults = {key: row.default for key, row in CONCURRENT_KEYS.items()}
    return {"schedule": "serial", **defaults, **policy}


def with_router_defaults(policy: dict) -> dict:
    """`policy` with the router knobs it leaves out at their defaults (a live router's run
    stores its router's, a static one none), so a run is named only by the knobs it changed."""
    knobs = {**COMMON_KEYS, **ROUTER_OPTIONS}
    return {**{key: row.default for key, row in knobs.items()}, **policy}


def memory_gib(policy: dict) -> float | None:
    """Cache pool memory of a run in GiB: num_blocks x the model's bytes_per_block
    (None when the pool is unbounded or the policy names no model preset)."""
    if policy.get("num_blocks") is None or not policy.get("model"):
        return None
    try:
        gib = policy_pool_gib(policy["model"], policy["num_blocks"], policy.get("block_size"))
    except ConfigError:
        return None
    return None if gib is None else round(gib, 6)


def _with_labels(frame: pl.DataFrame, labels: dict[int, str]) -> pl.DataFrame:
    return frame.with_columns(
        pl.col("run_id").replace_strict(labels, return_dtype=pl.String).alias("run_label")
    )


def _groups(con, run_frame: pl.DataFrame, labels: dict[int, str]) -> pl.DataFrame:
    """report_groups.sql rows; the lost_in_flight_tokens column only when some run shown
    is concurrent or lost tokens in flight (so a serial-only report is what it always was)."""
    ids = run_frame["run_id"].to_list()
    frame = pl.from_arrow(query_arrow(con, load_sql("report_groups"), {"runs": ids}))
    if not run_frame["concurrent"].any() and not (frame["lost_in_flight_tokens"] > 0).any():
        frame = frame.drop("lost_in_flight_tokens")
    frame = with_host_hits(con, frame, ids)
    changes = dict(zip(ids, run_frame["policy_changes"].to_list(), strict=True))
    return _with_labels(frame, labels).with_columns(
        pl.col("run_id").replace_strict(changes, return_dtype=pl.String).alias("policy_changes")
    )


MAX_WINDOWS = 10_000  # a time chart's points per run at most (--bin)


def window_width(span: float) -> float:
    """A round window width (seconds) giving about TARGET_WINDOWS windows over `span`:
    past the widest nice one, whole days."""
    for width in NICE_WIDTHS_S:
        if span / width <= TARGET_WINDOWS:
            return float(width)
    day = NICE_WIDTHS_S[-1]
    return float(day * math.ceil(span / TARGET_WINDOWS / day))


def _windows(
    con, ids: list[int], labels: dict[int, str], bin_s: float | None = None
) -> tuple[pl.DataFrame, str]:
    """Per-window sums of the measured requests; windows of `bin_s` seconds (default: a round
    width giving about TARGET_WINDOWS), or of arrival order without timestamps. `window_t0_s`
    is the first window's start in the trace's own seconds (wall-clock when they are)."""
    t_min, t_max, n = con.execute(load_sql("report_window_span"), {"runs": ids}).fetchall()[0]
    if t_min is None:  # no timestamps: windows of arrival order
        by_seq, t0, width, unit = True, 0.0, float(max(1, -(-int(n) // TARGET_WINDOWS))), "requests"
    else:
        width = float(bin_s) if bin_s else window_width(t_max - t_min)
        if (t_max - t_min) / width > MAX_WINDOWS:
            raise ConfigError(
                f"--bin {bin_s:g}: {math.ceil((t_max - t_min) / width):,} windows over the "
                f"trace's {t_max - t_min:,.0f} s; at most {MAX_WINDOWS:,} (a wider bin)"
            )
        by_seq, t0, unit = False, float(t_min), "s"
    params = {"runs": ids, "by_seq": by_seq, "t0": t0, "width": width}
    frame = pl.from_arrow(query_arrow(con, load_sql("report_windows"), params))
    queries = pl.col("prompt_tokens").cast(pl.Float64)
    frame = frame.with_columns(  # the window a warm-up ends in starts at its measured part
        pl.max_horizontal(
            pl.col("window_idx") * width,
            pl.when(pl.col("warmup_requests") > 0).then((pl.col("measured_from") - t0).round(6)),
        ).alias("window_start"),
        (pl.col("window_idx") * width + width).alias("window_end"),
        pl.lit(t0).alias("window_t0_s"),
        (pl.col("hit_tokens") / queries).round(9).alias("useful_hit_ratio"),
        (pl.col("sparse_retention_miss_tokens") / queries).round(9).alias("sparse_loss_ratio"),
    )
    return _with_labels(frame, labels), unit


# --- load (concurrent runs) -----------------------------------------------------------


def _load(con, run_frame: pl.DataFrame, labels: dict[int, str]):
    """(per-run load figures, per-arrival-window TTFT and queueing) of the concurrent runs
    shown, or (None, None) when there are none. Each run has its own window width (about
    TARGET_WINDOWS over its arrivals: time_scale differs between runs). Times are simulated
    seconds, rounded to the microsecond so float sums in any thread order give the same bytes."""
    ids = run_frame.filter(pl.col("concurrent"))["run_id"].to_list()
    if not ids:
        return None, None
    rows, frames = [], []
    for run_id in ids:
        rows.append({"run_id": run_id, **load_row(con, run_id)})  # with `saturated`
        t_max = con.execute(load_sql("report_load_span"), {"runs": [run_id]}).fetchall()[0][0]
        width = window_width(float(t_max or 0.0))
        params = {"runs": [run_id], "width": width}
        frame = pl.from_arrow(query_arrow(con, load_sql("report_load_windows"), params))
        frames.append(
            _rounded(frame).with_columns(
                (pl.col("window_idx") * width).alias("window_start"),
                (pl.col("window_idx") * width + width).alias("window_end"),
            )
        )
    summary = _rounded(pl.DataFrame(rows, infer_schema_length=None))
    return _with_labels(summary, labels), _with_labels(pl.concat(frames), labels)


def _rounded(frame: pl.DataFrame) -> pl.DataFrame:
    """Floats rounded to 1e-6; DuckDB's integer sums (DECIMAL) as Int64."""
    floats = [c for c, t in frame.schema.items() if t.is_float()]
    sums = [c for c, t in frame.schema.items() if isinstance(t, pl.Decimal)]
    return frame.with_columns(pl.col(floats).round(6), pl.col(sums).cast(pl.Int64))


# --- routing (runs over several replicas) ---------------------------------------------


def _routing(con, ids: list[int], labels: dict[int, str], bin_s: float | None):
    """(per-replica figures, per replica and arrival window) of the runs shown that routed
    to more than one replica, or (None, None). A concurrent run's windows are its load
    windows (simulated arrival_s); a serial run's are the time windows (the trace's
    timestamps, `bin_s` wide), or of arrival order without timestamps."""
    frame = pl.from_arrow(query_arrow(con, load_sql("report_routing_replicas"), {"runs": ids}))
    frame = _rounded(frame.with_columns(pl.col("replica").is_null().alias("is_overall")))
    counts = frame.filter(~pl.col("is_overall")).group_by("run_id").len()
    multi = sorted(counts.filter(pl.col("len") > 1)["run_id"].to_list())
    if not multi:
        return None, None
    frames = []
    for run_id in multi:
        clock, t0, width = _routing_clock(con, run_id, bin_s)
        params = {"run_id": run_id, "clock": clock, "t0": t0, "width": width}
        part = pl.from_arrow(query_arrow(con, load_sql("report_routing_windows"), params))
        frames.append(
            _rounded(part).with_columns(
                pl.lit(run_id, dtype=pl.Int32).alias("run_id"),
                pl.lit(clock).alias("clock"),
                pl.lit(width).alias("window_width"),
                (pl.col("window_idx") * width).alias("window_start"),
                (pl.col("window_idx") * width + width).alias("window_end"),
            )
        )
    frame = frame.filter(pl.col("run_id").is_in(multi))
    return _with_labels(frame, labels), _with_labels(pl.concat(frames), labels)


def _routing_clock(con, run_id: int, bin_s: float | None) -> tuple[str, float, float]:
    """(clock, first window's start, window width) of a run's routing windows: the Load
    section's for a concurrent run, the time windows' for a serial one."""
    [(t_arrival,)] = con.execute(load_sql("report_load_span"), {"runs": [run_id]}).fetchall()
    if t_arrival is not None:
        return "arrival", 0.0, window_width(float(t_arrival))
    [(t_min, t_max, n)] = con.execute(load_sql("report_window_span"), {"runs": [run_id]}).fetchall()
    if t_min is None:
        return "order", 0.0, float(max(1, -(-int(n) // TARGET_WINDOWS)))
    return "trace", float(t_min), float(bin_s) if bin_s else window_width(t_max - t_min)


# --- junctions -------------------------------------------------------------------------


def _fresh_junctions(
    con, run_frame: pl.DataFrame, labels: dict[int, str]
) -> tuple[pl.DataFrame | None, str | None]:
    """The junction rows of the runs that replayed the trace `hpa match` matched (None:
    no such run), and a note naming the runs left out (None: none is). Joining a match of
    another trace to a run would tell another trace's story."""
    origin = derived_from(con, "junctions")
    fingerprints = dict(zip(run_frame["run_id"], run_frame["trace_fingerprint"], strict=True))
    fresh = [i for i, fp in fingerprints.items() if origin is not None and fp == origin[0]]
    left = [str(i) for i in fingerprints if i not in fresh]
    note = None
    if "junction_requests" not in table_names(con):  # matched before hpa stored the pins
        return None, (
            "the junction tables were written by an earlier hpa, without each request's "
            "junction; run `hpa match` again to see them"
        )
    if origin is None:
        note = (
            "the junction tables do not say which trace they were matched from (written by "
            "an earlier hpa); run `hpa match` again to see them"
        )
    elif left:
        note = (
            f"run{'s' if len(left) > 1 else ''} {', '.join(left)} replayed another trace "
            "than the one `hpa match` matched "
            f"({plural(origin[1], 'request')}); run `hpa match` again to see "
            f"{'its' if len(left) == 1 else 'their'} junctions"
        )
    return (_junctions(con, fresh, labels) if fresh else None), note


def _junctions(con, ids: list[int], labels: dict[int, str]) -> pl.DataFrame:
    """Per run and junction, the outcomes of the requests pinned there, from the table
    `hpa match` wrote (junction_requests: aggregated in DuckDB, memory bounded)."""
    con.execute(load_sql("report_junction_paths_view"))
    frame = pl.from_arrow(query_arrow(con, load_sql("report_junctions"), {"runs": ids}))
    return _with_labels(frame, labels)


def _sweeps(con) -> pl.DataFrame | None:
    """The sweep_points table (written by `hpa sweep`), or None if it lacks a column."""
    if not set(SWEEP_COLUMNS) <= column_names(con, "sweep_points"):
        return None
    frame = pl.from_arrow(query_arrow(con, load_sql("report_sweeps")))
    return frame.with_columns(pl.col("value").cast(pl.String))
