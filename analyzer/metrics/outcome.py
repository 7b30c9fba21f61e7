"""Where a run's prompt tokens went, in one line: the hits and each loss cause of the
waterfall (docs/definitions.md#the-loss-waterfall) as shares of the queried tokens, in
`hpa compare`'s words (metrics.attribution.FIGURES). `hpa replay` prints it under its table,
so the gap between the hit ratio and what was shared is named where the run is made.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from analyzer.metrics.attribution import CAUSES, FIGURES

_WORDS = {fig: (col, words) for fig, col, words in FIGURES}
# hits first, then the causes in waterfall order; a host tier's hits are part of the hits
_SHOWN = ("hit", *CAUSES)
COLUMNS = ("prompt_tokens", *(_WORDS[fig][0] for fig in _SHOWN))


def percent(part: int, whole: int) -> str:
    """A share as people read it: one decimal from 1% (0.995% rounds to 1.0%), two
    significant digits below (0.17%, 0.0042%), '<0.0001%' below that, and 0% only for
    none."""
    if part == 0:
        return "0%"
    pct = 100.0 * part / whole
    if pct >= 0.995:
        return f"{pct:.1f}%"
    return f"{pct:.2g}%" if pct >= 0.0001 else "<0.0001%"


def outcome_line(rows: Iterable[Mapping[str, int | None]], measured_only: bool = False) -> str:
    """'prompt tokens: 14.8% hits, 68.6% unshared prefixes, 16.4% match-granularity losses,
    0.17% sparse-retention misses' over summary rows (any grouping: the sums are what
    counts). The hits are always named; a cause is named where it holds a token. Shares are
    of the rows' prompt tokens, which the hits and the causes add up to."""
    totals = dict.fromkeys(COLUMNS, 0)
    for row in rows:
        for col in COLUMNS:
            totals[col] += row.get(col) or 0
    prompt = totals["prompt_tokens"]
    head = "prompt tokens (measured requests)" if measured_only else "prompt tokens"
    if prompt == 0:
        return f"{head}: none"
    parts = []
    for fig in _SHOWN:
        col, words = _WORDS[fig]
        if fig == "hit" or totals[col]:
            parts.append(f"{percent(totals[col], prompt)} {words}")
    return f"{head}: " + ", ".join(parts)
