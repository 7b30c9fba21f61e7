"""`hpa validate`: a stored replay run beside what a live engine observed, read from the store
and stored back (`metrics.validate`: the sources and the figures compared)."""

from __future__ import annotations

import math
from pathlib import Path

import orjson
import pyarrow as pa

from analyzer.errors import ConfigError, StoreError
from analyzer.metrics import validate_causes as causes
from analyzer.metrics.validate import (
    Validation,
    counter_deltas,
    describe_window,
    metrics_files,
    metrics_note,
    validation_rows,
    window_bounds,
)
from analyzer.store.db import (
    DEFAULT_DB,
    column_names,
    connect,
    load_sql,
    query_arrow,
    stores,
    transaction,
)
from analyzer.store.export import check_export_path, export_table
from analyzer.store.runs import resolve_run


def validate(
    *,
    db_path: str | Path = DEFAULT_DB,
    run: int | None = None,
    metrics: str | Path | None = None,
    metrics_before: str | Path | None = None,
    metrics_after: str | Path | None = None,
    model_name: str | None = None,
    since: str | None = None,
    until: str | None = None,
    out: str | Path | None = None,
) -> Validation:
    """Compare replay run `run` (latest when None) with observed figures; store the result.

    Raises:
        ConfigError: bad option combination, window, unknown run, or no request in the window.
        InputFileError: a metrics file missing, malformed (`file:line`), without vLLM's
            counters, or with a counter that decreased. StoreError: no database, no replay
            run, or no observed data at all.
    """
    before, after = metrics_files(metrics, metrics_before, metrics_after)
    start, end = window_bounds(since, until)
    if out is not None:
        check_export_path(out)
    deltas = counter_deltas(after, before, model_name) if after is not None else ()
    con = connect(db_path, create=False)
    try:
        run_id = resolve_run(con, run)
        groups = _groups(con, run_id, start, end)
        if not groups:
            raise ConfigError(f"no requests in {describe_window(run_id, since, until)}")
        window = describe_window(run_id, since, until, sum(g["requests"] for g in groups))
        observed = sum(g["observed_requests"] for g in groups)
        if not observed and not deltas:
            raise StoreError(
                f"no observed data: none of the requests in {window} has cached_tokens "
                "and no --metrics file was given; ingest records with cached_tokens or pass "
                "--metrics (or --metrics-before and --metrics-after)"
            )
        rows = validation_rows(groups, deltas)
        meta = [start, end, _str(before), _str(after), model_name]
        extra = _decompose(con, run_id, start, end) if observed else {}
        with transaction(con):
            validation_id = _store(con, run_id, meta, rows, extra.get("causes"))
            stores(con, f"validation {validation_id}")
        if out is not None:
            params = {"validation_id": int(validation_id)}
            export_table(con, load_sql("validate_export"), out, params)
    finally:
        con.close()
    note = metrics_note(before, after, model_name, deltas) if deltas else None
    total = sum(g["requests"] for g in groups)
    return Validation(validation_id, run_id, window, total, observed, deltas, note, rows, **extra)


def _decompose(con, run_id: int, start: float, end: float) -> dict:
    """The per-request error by cause, the worst requests and the warning when another
    engine reported the observations."""
    windowed = math.isfinite(start) or math.isfinite(end)
    params = {"run_id": run_id, "windowed": windowed, "start": start, "end": end}
    compared = query_arrow(con, load_sql("validate_compared"), params)
    parts = causes.split(compared)
    table = causes.cause_table(parts)
    policy = orjson.loads(
        con.execute(load_sql("replay_run_policy"), {"run_id": run_id}).fetchone()[0]
    )
    warning = causes.engine_warning(causes.observers(compared), policy.get("engine", "vllm"))
    return {"causes": table, "worst": causes.worst(compared, parts), "warning": warning}


def _str(path) -> str | None:
    return None if path is None else str(path)


def _groups(con, run_id: int, start: float, end: float) -> list[dict]:
    observed = "cached_tokens" in column_names(con, "requests")
    con.execute(load_sql("validate_observed_view" + ("" if observed else "_missing")))
    windowed = math.isfinite(start) or math.isfinite(end)
    params = {"run_id": run_id, "windowed": windowed, "start": start, "end": end}
    cur = con.execute(load_sql("validate_requests"), params)
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


def _store(con, run_id: int, meta: list, rows: pa.Table, cause_rows: pa.Table | None) -> int:
    """Append the rows (and the error by cause) as one validation; returns its id."""
    con.execute(load_sql("validate_schema"))
    validation_id = con.execute(load_sql("validate_next_id")).fetchall()[0][0]
    start, end, before, after, model_name = meta
    con.register("validation_rows", rows)
    params = {
        "validation_id": validation_id,
        "run_id": run_id,
        "window_start_s": start if math.isfinite(start) else None,
        "window_end_s": end if math.isfinite(end) else None,
        "metrics_before": before,
        "metrics_after": after,
        "model_name": model_name,
    }
    con.execute(load_sql("validate_insert"), params)
    con.unregister("validation_rows")
    if cause_rows is not None:
        con.register("validation_cause_rows", cause_rows)
        con.execute(load_sql("validate_insert_causes"), {"validation_id": validation_id})
        con.unregister("validation_cause_rows")
    return validation_id
