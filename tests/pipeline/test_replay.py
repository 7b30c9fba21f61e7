"""`hpa replay` end to end on the bundled samples of docs/definitions.md#worked-examples: exact
figures, tables, exports."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from analyzer.cli import cli
from analyzer.pipeline.replay import run_replay
from analyzer.sim.dispatch import make_policy
from analyzer.store.ingest import ingest
from tests.conftest import db_rows as rows

SAMPLES = Path(__file__).parents[2] / "sample_traces"


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


@pytest.fixture
def diag_db(tmp_path):
    db = tmp_path / "d.duckdb"
    ingest([SAMPLES / "diagnostic_1088.jsonl"], db_path=db)
    return db


def test_diagnostic_miss_miss_hit_and_waterfall(diag_db):
    outcome = run_replay(make_policy({"block_size": 544}), db_path=diag_db)
    assert outcome.run_id == 1 and outcome.num_requests == 3
    got = rows(
        diag_db,
        "SELECT hit_tokens, sparse_retention_miss_tokens, junction_tokens, "
        "shared_any_tokens, matchable_tokens, attention_match_tokens, "
        "unshared_tokens, sparse_retention_miss_never_kept_tokens "
        "FROM replay_requests ORDER BY arrival_seq",
    )
    assert got == [
        (0, 0, 0, 0, 0, 0, 2176, 0),
        (0, 1088, 1088, 1088, 1088, 1088, 1088, 1088),
        (1088, 0, 0, 1088, 1088, 1088, 1088, 0),
    ]
    summary = outcome.summary.to_pylist()
    assert len(summary) == 1
    s = summary[0]
    assert (s["prompt_tokens"], s["hit_tokens"], s["sparse_retention_miss_tokens"]) == (
        6528,
        1088,
        1088,
    )
    assert s["useful_hit_ratio"] == pytest.approx(1088 / 6528)


@pytest.mark.parametrize(
    ("sample", "overrides", "hit", "miss"),
    [
        (
            "groups_1600.jsonl",
            {"retention_interval": None, "max_num_batched_tokens": 2048},
            38016,
            0,
        ),
        ("groups_1600.jsonl", {}, 25344, 12672),
        ("groups_1500.jsonl", {}, 16896, 8448),
    ],
)
def test_group_geometries(tmp_path, sample, overrides, hit, miss):
    db = tmp_path / "g.duckdb"
    ingest([SAMPLES / sample], db_path=db)
    run_replay(make_policy({"block_size": 528, **overrides}), db_path=db)
    assert rows(
        db,
        "SELECT sum(prompt_tokens), sum(hit_tokens), "
        "sum(sparse_retention_miss_tokens) FROM replay_requests",
    ) == [(70400, hit, miss)]


def test_waterfall_sums_on_the_mixed_sample_under_pressure(tmp_path):
    db = tmp_path / "m.duckdb"
    ingest([SAMPLES / "mixed.jsonl.gz"], db_path=db)
    run_replay(
        make_policy(
            {
                "model": "qwen3-next-80b-a3b",
                "num_blocks": 400,
                "spec_decode": "eagle_drop",
                "routing": "round_robin",
                "replicas": 2,
                "max_num_batched_tokens": 2048,
            }
        ),
        db_path=db,
    )
    assert rows(
        db,
        """
        SELECT count(*) FROM replay_requests WHERE
            unshared_tokens + lost_routing_tokens + lost_granularity_tokens
            + lost_eviction_tokens + sparse_retention_miss_tokens + lost_spec_decode_tokens
            + hit_tokens != prompt_tokens
            OR least(unshared_tokens, lost_routing_tokens, lost_granularity_tokens,
                     lost_eviction_tokens, sparse_retention_miss_tokens,
                     lost_spec_decode_tokens) < 0""",
    ) == [(0,)]
    assert rows(
        db,
        "SELECT sum(lost_eviction_tokens) > 0, sum(lost_routing_tokens) > 0, "
        "sum(lost_spec_decode_tokens) > 0 FROM replay_requests",
    ) == [(True, True, True)]


def test_cli_replay_exports_identically_twice(diag_db, tmp_path):
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    result = run("replay", "--db", diag_db, "--set", "block_size=544", "--out", first)
    assert result.exit_code == 0, result.output
    assert "run 1: 3 requests replayed" in result.stdout
    assert run("replay", "--db", diag_db, "--set", "block_size=544", "--out", second).exit_code == 0
    assert first.read_bytes() == second.read_bytes()
    assert first.read_text().count("\n") == 3
    for suffix in (".csv", ".parquet"):
        assert (
            run(
                "replay",
                "--db",
                diag_db,
                "--set",
                "block_size=544",
                "--out",
                tmp_path / f"r{suffix}",
            ).exit_code
            == 0
        )
    assert rows(diag_db, "SELECT count(*) FROM replay_runs") == [(4,)]


def test_unschedulable_requests_are_reported(diag_db):
    result = run("replay", "--db", diag_db, "--set", "block_size=544", "--set", "num_blocks=3")
    assert result.exit_code == 0, result.output
    assert "warning: 3 requests could not be scheduled at all (num_blocks 3" in result.stderr
    assert rows(diag_db, "SELECT count(*) FROM replay_requests WHERE error IS NOT NULL") == [(3,)]


def test_cli_replay_errors(diag_db, tmp_path):
    result = run(
        "replay", "--db", diag_db, "--set", "block_size=500", "--set", "retention_interval=100"
    )
    assert result.exit_code == 2
    assert result.stderr == (
        "Error: policy key 'retention_interval': 100 must be a multiple "
        "of block_size 500 on a model with a sparse group\n"
    )
    result = run("replay", "--db", diag_db, "--set", "colour=red")
    assert result.exit_code == 2 and "unknown policy key 'colour'" in result.stderr
    result = run("replay", "--db", diag_db, "--set", "block_size=544", "--out", tmp_path / "x.txt")
    assert result.exit_code == 2 and "--out" in result.stderr and "'.txt'" in result.stderr
    result = run("replay", "--db", tmp_path / "none.duckdb", "--set", "block_size=544")
    assert result.exit_code == 1 and "no such database" in result.stderr
    result = run("replay", "--db", diag_db)
    assert result.exit_code == 2
    assert result.stderr == (
        "Error: policy key 'block_size': required, or give 'model' (a preset: "
        "nemotron-nano-9b-v2, qwen3-next-80b-a3b, qwen3.5-4b, qwen3.6-27b; or a config.json), "
        "e.g. --set model=nemotron-nano-9b-v2\n"
    )


def test_concurrent_replay_needs_timestamps(tmp_path):
    """A trace without timestamps: one line naming the first such request, nothing stored."""
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        '{"request_id": "a", "prompt_token_ids": [1, 2, 3, 4]}\n'
        '{"request_id": "b", "prompt_token_ids": [1, 2, 3, 5]}\n'
    )
    db = tmp_path / "t.duckdb"
    ingest([trace], db_path=db)
    result = run("replay", "--db", db, "--policy", "vllm-concurrent", "--set", "block_size=2")
    assert result.exit_code == 2
    assert result.output.endswith(
        "request 'a' has no timestamp; schedule 'concurrent' needs every request's arrival "
        "time (use schedule 'serial')\n"
    )
    assert len(result.output.splitlines()) == 1
    tables = "SELECT count(*) FROM duckdb_tables() WHERE table_name = 'replay_runs'"
    assert rows(db, tables) == [(0,)]


def test_concurrent_run_stores_times_and_prints_its_load(tmp_path):
    db = tmp_path / "b.duckdb"
    ingest([SAMPLES / "mixed.jsonl.gz"], db_path=db)
    result = run(
        "replay",
        "--db",
        db,
        "--policy",
        "vllm-concurrent",
        "--set",
        "block_size=544",
        "--set",
        "num_blocks=200",
        "--set",
        "time_scale=0.2",
    )
    assert result.exit_code == 0, result.output
    load = next(line for line in result.output.splitlines() if line.startswith("load: "))
    assert "preemptions of" in load and "pool blocks in use at an admission: peak" in load
    got = rows(
        db,
        "SELECT count(*) FILTER (WHERE ttft_s >= queue_s AND queue_s >= 0), "
        "count(*) FILTER (WHERE abs(queue_s - (first_scheduled_s - arrival_s)) < 1e-9), "
        "sum(num_preemptions) > 0, bool_and(hit_total_tokens >= hit_tokens), "
        "bool_and(finished_s >= first_token_s) FROM replay_requests",
    )
    assert got == [(2500, 2500, True, True, True)]


def test_progress_counts_requests_inside_one_cache(tmp_path):
    """(issue 14, item 8: a one-cache replay's bar jumped from 0 to 100%)"""
    db = tmp_path / "m.duckdb"
    ingest([Path(__file__).parents[2] / "sample_traces" / "mixed.jsonl.gz"], db_path=db)
    seen = []
    policy = make_policy({"block_size": 544, "cache_scope": "shared", "replicas": 1})
    run_replay(policy, db_path=db, progress=lambda d, t: seen.append((d, t)))
    assert seen[-1] == (2_500, 2_500)  # one cache: 2,500 requests in one partition
    assert len(seen) == 2_500 // 64 + 1
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)


def test_a_serial_replay_says_what_its_figures_are(diag_db):
    out = CliRunner().invoke(cli, ["replay", "--db", str(diag_db), "--set", "block_size=544"])
    assert out.exit_code == 0, out.output
    assert (
        "schedule: serial (each request after the previous one finished: no queueing, no "
        "prefix still in flight, the no-contention bound; --set schedule=concurrent replays "
        "vLLM's scheduler under load)"
    ) in out.output
    out = CliRunner().invoke(
        cli, ["replay", "--db", str(diag_db), "--policy", "sglang-default", "--set", "block_size=1"]
    )
    assert out.exit_code == 0, out.output
    assert "the no-contention bound)" in out.output  # no schedule option for other engines


def test_several_policies_are_stored_all_or_none(diag_db, monkeypatch):
    """`hpa replay --policy a,b`: a failure in b leaves no run of a either (one write)."""
    import analyzer.pipeline.replay as replay_module

    real, calls = replay_module.replay_rows, []

    def second_fails(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise OSError("disk went away")
        return real(*args, **kwargs)

    both = ("--policy", "vllm-default,attention-only", "--set", "model=qwen3-next-80b-a3b")
    monkeypatch.setattr(replay_module, "replay_rows", second_fails)
    assert run("replay", "--db", diag_db, *both).exit_code != 0
    runs = "SELECT count(*) FROM duckdb_tables() WHERE table_name = 'replay_runs'"
    assert rows(diag_db, runs) == [(0,)] or rows(diag_db, "SELECT count(*) FROM replay_runs") == [
        (0,)
    ]
    monkeypatch.setattr(replay_module, "replay_rows", real)
    ok = run("replay", "--db", diag_db, *both)
    assert ok.exit_code == 0, ok.output
    assert rows(diag_db, "SELECT count(*) FROM replay_runs") == [(2,)]
