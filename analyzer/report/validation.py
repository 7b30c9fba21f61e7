"""The report's validation section: each stored `hpa validate` of a run shown, its overall
error per compared figure and, per request, the error by cause (what the engine did that
the replay did not). Left out when no validation of a run shown is stored."""

from __future__ import annotations

import polars as pl

from analyzer.report.blocks import count, html_table, meaning, pct
from analyzer.report.data import ReportData

LATEST = 5  # validations shown, the latest first


def validation_section(data: ReportData) -> tuple[str, list[str]]:
    rows, causes = data.validations, data.validation_causes
    if rows is None or rows.height == 0:
        return "", []
    ids = sorted(set(rows["validation_id"].to_list()), reverse=True)[:LATEST]
    parts = []
    for vid in ids:
        mine = rows.filter(pl.col("validation_id") == vid)
        first = mine.row(0, named=True)
        figures = [
            [
                r["source"],
                r["figure"],
                count(r["requests"]),
                count(r["observed_tokens"]),
                count(r["predicted_tokens"]),
                f"{r['error_tokens']:+,}",
                "" if r["relative_error"] is None else f"{r['relative_error']:+.1%}",
                "" if r["exact_share"] is None else pct(r["exact_share"]),
            ]
            for r in mine.iter_rows(named=True)
        ]
        parts.append(
            f"<h3>Validation {vid} of run {first['run_id']}</h3>"
            + html_table(
                [
                    "observed by",
                    "figure",
                    "requests",
                    "observed",
                    "predicted",
                    "error",
                    "relative error",
                    "exact requests",
                ],
                figures,
                numeric={2, 3, 4, 5, 6, 7},
            )  # fmt: skip
        )
        why = causes.filter(pl.col("validation_id") == vid) if causes is not None else None
        if why is not None and why.height:
            parts.append(
                html_table(
                    ["cause", "the engine", "requests", "error tokens", "share of |error|"],
                    [
                        [
                            r["cause"],
                            r["engine_did"],
                            count(r["requests"]),
                            f"{r['error_tokens']:+,}",
                            pct(r["share_of_abs_error"]),
                        ]
                        for r in why.iter_rows(named=True)
                    ],
                    numeric={2, 3, 4},
                )  # fmt: skip
            )
    text = (
        "A replay is a model of an engine; <code>hpa validate</code> put it beside what a live "
        "engine reported. Error = predicted - observed: negative when the engine cached more "
        "than the replay predicts. Per request, the error is split by what the engine did that "
        "the replay did not (its extra cached tokens given back to the replay's losses, the "
        "last applied first); a large sparse-retention share means the engine keeps states "
        "the policy does not."
    )
    body = (
        '<section id="validation"><h2>Checked against a live engine</h2>'
        + "".join(parts)
        + meaning(text)
        + "</section>"
    )
    return body, []
