"""The report's summary (issue 15): the trace in one line, the verdict with numbers and the
caveats first; runs have short names (`--name` stored); sweep points are drawn only in the
capacity section."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from analyzer.cli import cli
from analyzer.errors import ConfigError
from analyzer.pipeline.replay import run_replay
from analyzer.pipeline.sweep import run_sweeps
from analyzer.report.data import load_report_data
from analyzer.report.html import render_report
from analyzer.report.summary import (
    _lever_text,
    _sweep_sentences,
    span_text,
    trace_sentence,
    verdict_sentences,
)
from analyzer.sim.dispatch import make_policy
from tests.conftest import shared_head_db
from tests.report.conftest import MODEL


def text_of(html: str, section: str) -> str:
    start = html.index(f'<section id="{section}">')
    body = html[start : html.index("</section>", start)]
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", body))


def test_the_summary_comes_first_and_names_the_largest_cause(report_html):
    html = report_html.path.read_text(encoding="utf-8")
    assert html.index('<section id="summary">') < html.index('<section id="runs">')
    text = text_of(html, "summary")
    assert (
        "The trace: 2,500 requests, 3,557,670 prompt tokens, over 643 s of trace time, "
        "2 model revisions, 4 prompt families."
    ) in text
    assert "Run 1 · vllm reused 49.7% of the queried prompt tokens" in text
    assert "Its largest loss is match granularity: " in text
    assert re.search(r"most of it in \w+ @ qwen3-next-80b-a3b@2026-1\d", text)
    assert "Of the runs shown, run 2 (vllm: retention_interval=null) reuses the most" in text
    assert "every run shown is a serial replay" in text


@pytest.mark.parametrize(
    ("first", "last", "said"),
    [
        (None, None, "no timestamps (arrival order only)"),
        (0.0, 643.2, "over 643 s of trace time"),
        (1_772_000_000.0, 1_772_500_000.0, "from 2026-02-25 06:13 UTC to 2026-03-03 01:06 UTC"),
    ],
)
def test_the_span_is_wall_clock_when_timestamps_are(first, last, said):
    assert span_text(first, last).startswith(said)


def test_singular_and_plural():
    line = {"requests": 1, "prompt_tokens": 5, "first_s": None, "last_s": None}
    line |= {"model_revisions": 1, "prompt_families": 2}
    assert trace_sentence(line) == (
        "The trace: 1 request, 5 prompt tokens, no timestamps (arrival order only), "
        "1 model revision, 2 prompt families."
    )


def test_names_are_stored_and_sweep_points_drawn_only_in_the_capacity_section(db_copy, tmp_path):
    out = CliRunner().invoke(
        cli, ["replay", "--db", str(db_copy), "--set", f"model={MODEL}", "--name", "after deploy"]
    )
    assert out.exit_code == 0, out.output
    run_sweeps(
        "vllm-default",
        [f"model={MODEL}"],
        ["num_blocks=200,400"],
        db_path=db_copy,
        jobs=1,
        name="pool",
    )
    data = load_report_data(db_copy)
    assert data.runs["run_label"].to_list() == [
        "run 1 · vllm",
        "run 2 · vllm · retention_interval=null",
        "run 3 · after deploy",
    ]
    assert data.sweep_runs == {4: 1, 5: 1}
    assert set(data.sweeps["run_id"].to_list()) == {4, 5}
    page = render_report(db_copy, tmp_path / "r.html").path.read_text(encoding="utf-8")
    assert "The 2 runs of 1 sweep (1) are drawn only in" in text_of(page, "runs")
    named = load_report_data(db_copy, runs=[4])  # asked for by id: shown
    assert named.runs["run_label"].to_list() == ["run 4 · pool · num_blocks=200"]


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("", "--name: empty"),
        ("x" * 81, "--name: 81 characters; at most 80"),
        ("a\x1bb", "--name 'a\\x1bb': no control characters"),
    ],
)
def test_bad_names(db_copy, name, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        run_replay(make_policy({"model": MODEL}), db_path=db_copy, name=name)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--window", "300.."], "Error: --baseline is missing: an incident compares two windows"),
        (["--baseline", "..300"], "Error: --window is missing: an incident compares two windows"),
        (["--bin", "0"], "Error: --bin 0.0: expected seconds > 0"),
        (["--bin", "0.001"], "windows over the trace's"),
        (["--target", "1.5"], "Error: --target 1.5: expected a useful-hit ratio in (0, 1]"),
        (["--window", "9000..", "--baseline", "..300"], "holds no requests of run"),
    ],
)
def test_report_option_errors_are_one_line(report_db, tmp_path, args, message):
    out = tmp_path / "r.html"
    result = CliRunner().invoke(cli, ["report", "--db", str(report_db), "-o", str(out), *args])
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output
    assert not out.exists()


WATERFALL = {
    "prompt_tokens": 1_000, "hit_tokens": 100, "sparse_retention_miss_tokens": 150,
    "lost_spec_decode_tokens": 0, "lost_eviction_tokens": 50, "lost_granularity_tokens": 200,
    "lost_routing_tokens": 0, "unshared_tokens": 500,
}  # fmt: skip


def test_a_loss_no_setting_recovers_is_followed_by_the_largest_one_that_does():
    """(issue 33 item 4: on RAGPulse the summary named "unshared" as the largest loss and
    stopped there)"""
    assert _lever_text(WATERFALL, "unshared_tokens", 1_000) == (
        "; no setting recovers it (the traffic shares less). The largest loss a setting can "
        "recover is match granularity: 200 tokens (20.0%); the lever: the block size "
        "(block_size) or the match unit (prefix_match_unit): vLLM matches a prefix shared "
        "inside earlier prompts in whole blocks, a finer unit only where an earlier prompt "
        "ended."
    )
    assert _lever_text(WATERFALL, "lost_eviction_tokens", 1_000) == (
        "; the lever: the pool size (num_blocks)."
    )


@pytest.mark.parametrize(
    ("values", "sentence"),
    [
        (
            "num_blocks=160,40,80",  # still rising at the largest pool, given out of order
            "Sweep 1: the largest pool swept, 160 blocks (1.99 GiB a cache), reaches 45.4%, "
            "5.5 points above 80 blocks (39.9%): sweep larger pools to find where more "
            "memory stops paying.",
        ),
        (
            "num_blocks=500,1000,2000",
            "Sweep 1: 500 blocks (6.23 GiB a cache) reach 48.9%, within 1 point of the "
            "largest pool swept (49.7%): more memory buys less than that.",
        ),
    ],
)
def test_a_sweeps_sentence_says_where_more_memory_stops_paying_only_where_it_does(
    db_copy, values, sentence
):
    """The Mooncake sweep 2,000, 8,000, 32,000 blocks (2.3%, 18.9%, 31.3%) was summed up as
    '32000 blocks reach 31.3%, within 1 point of the largest pool swept (31.3%): more memory
    buys less than that', of a curve still rising 12 points at its last step."""
    run_sweeps("vllm-default", [f"model={MODEL}"], [values], db_path=db_copy, jobs=1)
    assert _sweep_sentences(load_report_data(db_copy)) == [sentence]


def test_the_run_that_reuses_the_most_is_one_of_the_headline_runs_trace(db_copy, tmp_path):
    """A store that took another file after runs 1 and 2 (Mooncake's synthetic trace after
    its conversations): run 3 replayed more requests, with more hit tokens, and the summary
    named it the run that reuses the most, '+25.0 points' (hit tokens over other queries)."""
    from analyzer.store.ingest import ingest
    from tests.conftest import write_jsonl

    more = [
        {"request_id": f"x{i}", "timestamp": 700.0 + i, "prompt_token_ids": [7] * 20000}
        for i in range(20)
    ]
    ingest([write_jsonl(tmp_path / "more.jsonl", more)], db_path=db_copy)
    run_replay(make_policy({"model": MODEL}), db_path=db_copy)
    text = " ".join(verdict_sentences(load_report_data(db_copy)))
    assert re.search(
        r"Of the runs shown, run 2 \(vllm: retention_interval=null\) reuses the most "
        r"\(52\.1%, \+2\.\d points\)\.",
        text,
    ), text[-300:]


def _chunked(tmp_path, *sweep):
    """Ten requests sharing two 512-token chunks (a RAGPulse system prompt) inside longer
    prompts, replayed with qwen3.5-4b (528-token pages): the shared 1,024 tokens lose 496."""
    db = shared_head_db(tmp_path)
    run_replay(make_policy({"model": "qwen3.5-4b"}), db_path=db)
    return load_report_data(db)


def test_the_granularity_lever_is_the_one_that_moves_it(tmp_path):
    """(pass over RAGPulse, item 2: the summary named the match unit, but
    prefix_match_unit=264,132,16 left the loss at 16.9%: vLLM keeps sub-block entries only
    where a prompt ended; block_size 1,024 recovers it)"""
    data = _chunked(tmp_path)
    assert data.granularity_lever == (
        "the block size (block_size): vLLM matches a prefix shared inside earlier prompts in "
        "whole blocks, so a finer match unit (prefix_match_unit) adds hits only where an "
        "earlier prompt ended; at block_size 1,024 whole blocks of the same shared prefixes "
        "would lose 0 tokens (0.0%) instead of 4,464 (14.8%) (`hpa replay --set "
        "block_size=1024` shows what else it changes)"
    )
    [_, loss] = verdict_sentences(data)[:2]
    assert "The largest loss a setting can recover is match granularity: 4,464 tokens " in loss
    assert loss.endswith(
        "the lever: the block size (block_size): vLLM matches a prefix shared inside earlier "
        "prompts in whole blocks, so a finer match unit (prefix_match_unit) adds hits only "
        "where an earlier prompt ended; at block_size 1,024 whole blocks of the same shared "
        "prefixes would lose 0 tokens (0.0%) instead of 4,464 (14.8%) (`hpa replay --set "
        "block_size=1024` shows what else it changes)."
    )


def test_a_granularity_loss_no_block_size_recovers_names_no_engine(tmp_path):
    """Prefixes of 500 tokens shared on qwen3-next (a Mamba state fills a 544-token page):
    no block size the model allows keeps any of them. The text named SGLang's radix tree as
    the engine that recovers them, which on a hybrid model keeps states at chunk ends and
    lost as much in the demo's own runs; it names no engine now."""
    db = shared_head_db(tmp_path, 500)
    run_replay(make_policy({"model": "qwen3-next-80b-a3b"}), db_path=db)
    assert load_report_data(db).granularity_lever == (
        "none of vLLM's settings: vLLM matches a prefix shared inside earlier prompts in whole "
        "blocks, a finer match unit (prefix_match_unit) adds hits only where an earlier prompt "
        "ended, and no block size from 544 (the smallest the model's page allows) to 2,176 "
        "loses half of it or less"
    )
