"""Numbers and labels in words, one way everywhere (issue 33 item 5: "1 requests",
"ttft_ms = 3830.9 + -0.01680 x", "(none) @ rev" in the sentence beside "no family" in the
report, a grid knob called "retention_intervalxnum_blocks")."""

from __future__ import annotations

import pytest

from analyzer.metrics.attribution import _label
from analyzer.metrics.compare import Comparison, Side
from analyzer.metrics.ttft import TtftFit
from analyzer.pipeline.sweep_points import sweep_points
from analyzer.words import plural, signed_term


@pytest.mark.parametrize(
    ("n", "word", "many", "said"),
    [(1, "request", None, "1 request"), (0, "request", None, "0 requests"),
     (12_345, "query", "queries", "12,345 queries")],
)  # fmt: skip
def test_plural(n, word, many, said):
    assert plural(n, word, many) == said


def test_a_window_of_one_request_says_request():
    assert Side("baseline", 3, None, 1).describe() == "baseline: run 3 (1 request)"


def test_a_falling_fit_reads_as_a_subtraction():
    assert signed_term(-0.0168, ".5f") == "- 0.01680"
    fits = {"rev": TtftFit(3830.9, -0.0168, 0.4, 1_000)}
    comparison = Comparison(*[None] * 5, fit_run=2, fits=fits, ttft_source="trace ttft_ms",
                            ttft_note="", sentence="")  # fmt: skip
    line = comparison.fit_lines()[0]
    assert line.startswith("TTFT fit rev (run 2): ttft_ms = 3830.9 - 0.01680 x fresh_prefill")


@pytest.mark.parametrize(
    ("family", "revision", "said"),
    [("(none)", "r1", "no family @ r1"), ("chat", "(none)", "chat @ no revision"),
     ("(none)", "(all)", "no family (all model revisions)"), ("rag", "r2", "rag @ r2")],
)  # fmt: skip
def test_the_sentence_names_a_group_as_the_report_does(family, revision, said):
    assert _label(family, revision) == said


def test_a_grid_is_named_by_its_knobs_with_a_separator():
    [(knob, points)] = sweep_points({}, [("retention_interval", [0]), ("num_blocks", [8])], True)
    assert knob == "retention_interval x num_blocks"
    assert points == [("retention_interval=0,num_blocks=8", {"retention_interval": 0,
                                                               "num_blocks": 8})]  # fmt: skip
