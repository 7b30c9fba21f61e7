"""The matcher's tables: `prefix_matches` and `junctions` (and derived prompt families)
written in one transaction from the relations a match computed, and their export."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from analyzer.store.db import load_sql, stores, trace_fingerprint, transaction
from analyzer.store.export import export_table


def write_relations(
    con,
    relations: dict[str, pa.Table],
    derive_families: bool,
    min_family_tokens: int,
    fingerprint: str | None = None,
    clear_derived: bool = False,
    out: str | Path | None = None,
) -> tuple[int, int, tuple[str, int] | None] | None:
    """Write the relations `match_rows`, `match_junction_nodes` and `match_junction_paths`
    (Arrow tables, see `analyzer.prefixes.result`) in one transaction, with what they were
    derived from (`fingerprint`, None: the stored trace's). `clear_derived`: first remove
    the families an earlier derivation wrote. `out`: also export prefix_matches there, as
    part of the transaction (a file that cannot be written stores nothing, as `hpa replay
    --out`). Returns (requests labelled, distinct labels,
    (the largest family, its requests) or None) when deriving families."""
    for name, table in relations.items():
        con.register(name, table)
    try:
        # one transaction (a failed commit, e.g. on a full disk, has ended it already)
        with transaction(con):
            if clear_derived:
                con.execute(load_sql("derived_schema"))
                con.execute(load_sql("match_clear_derived"))
            con.execute(load_sql("match_write_prefix_matches"))
            tables = ["prefix_matches", "junctions"]
            if derive_families:
                con.execute(load_sql("match_derive_families"), {"min_tokens": min_family_tokens})
                tables.append("requests.prompt_family")
            con.execute(load_sql("match_write_junctions"))
            con.execute(load_sql("match_write_junction_requests"))
            tables.append("junction_requests")
            _record(con, tables, fingerprint, relations["match_rows"].num_rows)
            stores(con, "the prefix matches")
            if out is not None:
                export_prefix_matches(con, out)
    finally:
        for name in relations:
            con.unregister(name)
    if not derive_families:
        return None
    labelled, labels = con.execute(load_sql("match_count_derived")).fetchall()[0]
    top = con.execute(load_sql("match_top_derived")).fetchall()
    return int(labelled), int(labels), (top[0][0], int(top[0][1])) if top else None


def _record(con, tables: list[str], fingerprint: str | None, num_requests: int) -> None:
    """Say which trace `tables` were derived from (`derived_tables`)."""
    con.execute(load_sql("derived_schema"))
    fingerprint = fingerprint or trace_fingerprint(con)[0]
    for table in tables:
        con.execute(
            load_sql("derived_record"),
            {
                "table_name": table,
                "command": "hpa match",
                "trace_fingerprint": fingerprint,
                "num_requests": num_requests,
            },
        )


def export_prefix_matches(con, out: str | Path) -> int:
    """Write table prefix_matches to `out` (.parquet, .jsonl or .csv), in arrival order."""
    return export_table(con, load_sql("match_export_prefix_matches"), out)
