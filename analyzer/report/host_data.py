"""The frame of the report's Host KV tier section (report/host_tier.py): the runs with a
host KV tier and the points of `hpa sweep --vary host_tier_gib=...`, with their ratios."""

from __future__ import annotations

import json

import polars as pl

from analyzer.store.db import column_names, load_sql, query_arrow
from analyzer.store.host_tier import has_host_tier

SWEEP_KNOB = "host_tier_gib"


def host_rows(frame: pl.DataFrame, sweeps: pl.DataFrame | None) -> pl.DataFrame:
    """report_host_tier.sql's rows of runs with a tier or in a host_tier_gib sweep, with
    the ratios, the tier's size and, for sweep points, the sweep and its value."""
    points = _host_points(sweeps)
    tiered = [has_host_tier(p) for p in frame["policy"].to_list()]
    keep = pl.Series(tiered) | frame["run_id"].is_in(points["run_id"].to_list())
    kept = frame.filter(keep)
    policies = [json.loads(p) for p in kept["policy"].to_list()]
    return kept.with_columns(
        pl.Series("host_tier_gib", [p.get("host_tier_gib") or 0.0 for p in policies], pl.Float64),
        pl.Series("host_tier_chunks", [p.get("host_tier_chunks") for p in policies], pl.Int64),
        pl.Series("host_tier_policy", [p.get("host_tier_policy", "lru") for p in policies]),
        (pl.col("hit_tokens") / pl.col("prompt_tokens")).alias("useful_hit_ratio"),
        (pl.col("host_hit_tokens") / pl.col("prompt_tokens")).alias("host_hit_ratio"),
        ((pl.col("hit_tokens") - pl.col("host_hit_tokens")) / pl.col("prompt_tokens")).alias(
            "gpu_hit_ratio"
        ),
    ).join(points, on="run_id", how="left")


def _host_points(sweeps: pl.DataFrame | None) -> pl.DataFrame:
    empty = pl.DataFrame(
        schema={"run_id": pl.Int64, "sweep_id": pl.Int64, "memory_gib": pl.Float64}
    )
    if sweeps is None or sweeps.height == 0:
        return empty
    part = sweeps.filter(pl.col("knob") == SWEEP_KNOB)
    if part.height == 0:
        return empty
    return part.select(
        pl.col("run_id").cast(pl.Int64),
        pl.col("sweep_id").cast(pl.Int64),
        pl.col("memory_gib").cast(pl.Float64),
    )


def host_tier_rows(con, sweeps: pl.DataFrame | None) -> pl.DataFrame | None:
    """Runs with a host KV tier and host_tier_gib sweep points (None: none, or a store
    whose replay_requests predate the tier's columns)."""
    if "host_hit_tokens" not in column_names(con, "replay_requests"):
        return None
    frame = pl.from_arrow(query_arrow(con, load_sql("report_host_tier")))
    rows = host_rows(frame, sweeps)
    return rows if rows.height else None


def with_host_hits(con, frame: pl.DataFrame, ids: list[int]) -> pl.DataFrame:
    """The groups with host_hit_tokens and gpu_hit_tokens (hit - host hit) where a run shown
    has host hits, for the waterfall's "won back by the host tier" step; as they were
    elsewhere (and in a store written before the host tier's columns)."""
    if "host_hit_tokens" not in column_names(con, "replay_requests"):
        return frame
    host = pl.from_arrow(query_arrow(con, load_sql("report_groups_host"), {"runs": ids}))
    if not (host["host_hit_tokens"] > 0).any():
        return frame
    keys = ["run_id", "is_overall", "prompt_family", "model_revision"]
    joined = frame.join(host, on=keys, how="left", maintain_order="left")
    return joined.with_columns(
        (pl.col("hit_tokens") - pl.col("host_hit_tokens")).alias("gpu_hit_tokens")
    )
