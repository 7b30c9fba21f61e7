"""metrics/outcome.py: the replay's 'prompt tokens:' line, exact text, and the line `hpa
replay` prints against the stored waterfall of the same run."""

from __future__ import annotations

import re

import duckdb
import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from analyzer.cli import cli
from analyzer.metrics.outcome import COLUMNS, outcome_line, percent


def _row(**tokens: int) -> dict:
    row = dict.fromkeys(COLUMNS, 0)
    row.update(tokens)
    return row


@pytest.mark.parametrize(
    ("part", "whole", "text"),
    [
        (0, 100, "0%"),
        (1, 100, "1.0%"),
        (148, 1_000, "14.8%"),
        (1_000, 1_000, "100.0%"),
        (17, 10_000, "0.17%"),
        (42, 1_000_000, "0.0042%"),
        (1, 3, "33.3%"),
        (999, 100_000, "1.0%"),  # rounds up to the one-decimal form, not "1%"
        (994, 100_000, "0.99%"),
        (1, 10**6, "0.0001%"),
        (1, 10**9, "<0.0001%"),  # never "1e-07%"
    ],
)
def test_percent(part, whole, text):
    assert percent(part, whole) == text


@pytest.mark.parametrize(
    ("rows", "measured_only", "line"),
    [
        (
            [
                _row(
                    prompt_tokens=1_000,
                    hit_tokens=148,
                    unshared_tokens=686,
                    lost_granularity_tokens=164,
                    sparse_retention_miss_tokens=2,
                )
            ],
            False,
            "prompt tokens: 14.8% hits, 68.6% unshared prefixes, 16.4% match-granularity "
            "losses, 0.2% sparse-retention misses",
        ),
        (  # the sums over rows count, whatever the grouping; every cause in waterfall order
            [
                _row(prompt_tokens=400, hit_tokens=100, lost_spec_decode_tokens=300),
                _row(
                    prompt_tokens=600,
                    unshared_tokens=100,
                    lost_routing_tokens=100,
                    lost_in_flight_tokens=100,
                    lost_granularity_tokens=100,
                    lost_eviction_tokens=100,
                    sparse_retention_miss_tokens=100,
                ),
            ],
            True,
            "prompt tokens (measured requests): 10.0% hits, 10.0% unshared prefixes, 10.0% "
            "routing losses, 10.0% prefixes still in flight, 10.0% match-granularity losses, "
            "10.0% dense evictions, 10.0% sparse-retention misses, 30.0% speculative-decoding "
            "losses",
        ),
        (  # no hit at all is still said
            [_row(prompt_tokens=50, unshared_tokens=50)],
            False,
            "prompt tokens: 0% hits, 100.0% unshared prefixes",
        ),
        ([], True, "prompt tokens (measured requests): none"),
        (
            [{"prompt_tokens": 10, "hit_tokens": None, "unshared_tokens": 10}],
            False,
            "prompt tokens: 0% hits, 100.0% unshared prefixes",
        ),
    ],
)
def test_outcome_line(rows, measured_only, line):
    assert outcome_line(rows, measured_only) == line


@given(st.lists(st.integers(0, 10**9), min_size=len(COLUMNS) - 1, max_size=len(COLUMNS) - 1))
def test_named_figures_are_the_nonzero_ones(parts):
    """Hits always, a cause exactly where it holds a token, and each share is its part of
    the prompt tokens the parts add up to."""
    row = dict(zip(COLUMNS[1:], parts, strict=True), prompt_tokens=sum(parts))
    line = outcome_line([row])
    if not sum(parts):
        assert line == "prompt tokens: none"
        return
    named = line.split(": ", 1)[1].split(", ")
    assert len(named) == 1 + sum(1 for p in parts[1:] if p)
    assert named[0] == f"{percent(parts[0], sum(parts))} hits"


def _shares(line: str) -> dict[str, float]:
    return {words: float(pct) for pct, words in re.findall(r"([\d.]+)% ([a-z -]+)", line)}


def test_replay_prints_the_stored_waterfall(mixed_db):
    """What the line says is what replay_requests holds for the run's measured requests."""
    out = CliRunner().invoke(
        cli,
        [
            "replay",
            "--db",
            str(mixed_db),
            "--set",
            "model=qwen3-next-80b-a3b",
            "--measure-from",
            "0.25",
        ],
    )
    assert out.exit_code == 0, out.output
    (line,) = [x for x in out.output.splitlines() if x.startswith("prompt tokens")]
    assert line.startswith("prompt tokens (measured requests): ")
    con = duckdb.connect(str(mixed_db), read_only=True)
    try:
        prompt, hit, unshared, granularity, sparse = con.execute(
            "SELECT sum(prompt_tokens), sum(hit_tokens), sum(unshared_tokens), "
            "sum(lost_granularity_tokens), sum(sparse_retention_miss_tokens) "
            "FROM replay_requests WHERE run_id = (SELECT max(run_id) FROM replay_runs) "
            "AND measured"
        ).fetchone()
    finally:
        con.close()
    shares = _shares(line)
    assert shares["hits"] == float(percent(hit, prompt)[:-1])
    assert shares["unshared prefixes"] == float(percent(unshared, prompt)[:-1])
    assert shares["match-granularity losses"] == float(percent(granularity, prompt)[:-1])
    assert shares["sparse-retention misses"] == float(percent(sparse, prompt)[:-1])
    assert 99.5 < sum(shares.values()) < 100.5
