"""`hpa metrics`: the Prometheus text of a stored replay run (the counters vLLM exports,
from `metrics.prometheus`), printed or written to a file a scraper reads."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from analyzer.metrics.prometheus import render_counters
from analyzer.store.db import DEFAULT_DB, connect, load_sql
from analyzer.store.export import write_atomic
from analyzer.store.host_tier import has_host_tier
from analyzer.store.runs import resolve_run


@dataclass(frozen=True)
class MetricsText:
    run_id: int
    text: str


def write_metrics(text: str, path: str | Path) -> None:
    """Write exposition text to `path` (atomically: a scraper never sees half a file).

    Raises:
        InputFileError: the file cannot be written.
    """
    write_atomic(path, text, option="--out")


def prometheus_metrics(*, db_path: str | Path = DEFAULT_DB, run: int | None = None) -> MetricsText:
    """Prometheus text of replay run `run` (the latest when None).

    Raises:
        StoreError: no database or no replay run. ConfigError: `run` is not a stored run.
    """
    con = connect(db_path, create=False, reader=True)
    try:
        run_id = resolve_run(con, run)
        cur = con.execute(load_sql("metrics_prometheus"), {"run_id": run_id})
        names = [d[0] for d in cur.description]
        rows = [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
        policy = con.execute(load_sql("replay_run_policy"), {"run_id": run_id}).fetchall()
    finally:
        con.close()
    tier = bool(policy) and has_host_tier(policy[0][0])
    return MetricsText(run_id, render_counters(run_id, rows, host_tier=tier))
