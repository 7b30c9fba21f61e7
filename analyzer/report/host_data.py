"""The frame of the report's Host KV tier section (report/host_tier.py): the runs with a
host KV tier and the points of `hpa sweep --vary host_tier_gib=...`, with their ratios."""

from __future__ import annotations

import json

import polars as pl

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
