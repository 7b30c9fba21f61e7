"""`hpa replay` with the bound engines, --measure-from and several policies at once."""

from __future__ import annotations

import json
import math
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from analyzer.cli import cli
from analyzer.errors import ConfigError
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


def test_attention_only_reuses_at_least_what_vllm_does(mixed_db):
    model = {"model": "qwen3-next-80b-a3b"}
    runs = {
        engine: run_replay(make_policy({**model, "engine": engine}), db_path=mixed_db).run_id
        for engine in ("vllm", "oracle", "attention_only")
    }
    got = rows(
        mixed_db,
        f"""
        SELECT v.hit_tokens, o.hit_tokens, a.hit_tokens, a.sparse_retention_miss_tokens,
               o.sparse_retention_miss_tokens, a.prompt_tokens, v.attention_match_tokens
        FROM replay_requests v
        JOIN replay_requests o ON o.run_id = {runs["oracle"]} AND o.arrival_seq = v.arrival_seq
        JOIN replay_requests a
            ON a.run_id = {runs["attention_only"]} AND a.arrival_seq = v.arrival_seq
        WHERE v.run_id = {runs["vllm"]}
        """,
    )
    assert got
    assert all(v <= m <= o <= a < max(p, 1) for v, o, a, _, _, p, m in got)
    assert all(am == 0 and om == 0 for *_, am, om, _, _ in got)
    assert sum(r[2] for r in got) > sum(r[0] for r in got)  # the mixed sample loses hits


def test_bound_waterfall_sums(mixed_db):
    run_id = run_replay(
        make_policy({"model": "qwen3-next-80b-a3b", "engine": "attention_only"}), db_path=mixed_db
    ).run_id
    assert rows(
        mixed_db,
        f"""
        SELECT count(*) FROM replay_requests WHERE run_id = {run_id} AND
            unshared_tokens + lost_routing_tokens + lost_granularity_tokens
            + lost_eviction_tokens + sparse_retention_miss_tokens + lost_spec_decode_tokens
            + hit_tokens <> prompt_tokens
        """,
    ) == [(0,)]


def test_measure_from_summary_is_sql_over_the_last_part(mixed_db):
    policy = make_policy({"model": "qwen3-next-80b-a3b"})
    outcome = run_replay(policy, db_path=mixed_db, measure_from=0.4)
    run_id = outcome.run_id
    n = outcome.num_requests
    skip = math.floor(0.4 * n)
    assert rows(
        mixed_db,
        f"SELECT count(*) FILTER (WHERE measured), count(*) FROM replay_requests "
        f"WHERE run_id = {run_id}",
    ) == [(n - skip, n)]
    # The measured rows are exactly the last n - skip in arrival order.
    assert rows(
        mixed_db,
        f"""
        SELECT count(*) FROM (
            SELECT measured, row_number() OVER (ORDER BY arrival_seq) - 1 AS idx
            FROM replay_requests WHERE run_id = {run_id}
        ) WHERE measured <> (idx >= {skip})
        """,
    ) == [(0,)]
    expected = rows(
        mixed_db,
        f"""
        SELECT coalesce(prompt_family, '(none)') AS f, coalesce(model_revision, '(none)') AS m,
               count(*), sum(prompt_tokens), sum(hit_tokens), sum(sparse_retention_miss_tokens)
        FROM (
            SELECT *, row_number() OVER (ORDER BY arrival_seq) - 1 AS idx
            FROM replay_requests WHERE run_id = {run_id}
        ) WHERE idx >= {skip} GROUP BY ALL ORDER BY f, m
        """,
    )
    summary = rows(
        mixed_db,
        f"""
        SELECT prompt_family, model_revision, num_requests, prompt_tokens, hit_tokens,
               sparse_retention_miss_tokens
        FROM replay_summary WHERE run_id = {run_id} ORDER BY 1, 2
        """,
    )
    assert summary == expected
    assert sum(outcome.summary.column("num_requests").to_pylist()) == n - skip
    stored = rows(
        mixed_db,
        f"SELECT measure_from, prompt_tokens, hit_tokens FROM replay_runs WHERE run_id = {run_id}",
    )
    assert stored == [(0.4, sum(r[3] for r in expected), sum(r[4] for r in expected))]


def test_measure_from_zero_is_the_default_and_old_databases_gain_the_columns(diag_db):
    run_replay(make_policy({"block_size": 544}), db_path=diag_db)
    con = duckdb.connect(str(diag_db))
    try:  # a database written before --measure-from existed
        con.execute("ALTER TABLE replay_requests DROP COLUMN measured")
        con.execute("DROP TABLE replay_runs")
        con.execute(
            "CREATE TABLE replay_runs (run_id INTEGER PRIMARY KEY, policy JSON NOT NULL, "
            "trace_fingerprint VARCHAR NOT NULL, num_requests BIGINT NOT NULL, "
            "prompt_tokens BIGINT NOT NULL, hit_tokens BIGINT NOT NULL, "
            "replay_seconds DOUBLE NOT NULL, created_at TIMESTAMP NOT NULL, "
            "hpa_version VARCHAR NOT NULL)"
        )
        con.execute(
            "INSERT INTO replay_runs VALUES (1, '{}', 'x', 3, 6528, 1088, 0, "
            "current_timestamp, '0.1.0')"
        )
    finally:
        con.close()
    outcome = run_replay(make_policy({"block_size": 544}), db_path=diag_db)
    assert outcome.run_id == 2
    assert rows(diag_db, "SELECT run_id, measure_from FROM replay_runs ORDER BY 1") == [
        (1, 0.0),
        (2, 0.0),
    ]
    assert rows(
        diag_db,
        "SELECT run_id, count(*) FILTER (WHERE measured) FROM replay_requests GROUP BY 1 "
        "ORDER BY 1",
    ) == [(1, 3), (2, 3)]


@pytest.mark.parametrize("fraction", [-0.1, 1, 1.5, float("nan"), True])
def test_measure_from_validated(diag_db, fraction):
    with pytest.raises(ConfigError, match="--measure-from"):
        run_replay(make_policy({"block_size": 544}), db_path=diag_db, measure_from=fraction)


def test_cli_several_policies_side_by_side(diag_db, tmp_path):
    dense = tmp_path / "dense.json"
    dense.write_text(json.dumps({"engine": "attention_only"}))
    result = run(
        "replay", "--db", diag_db, "--policy", f"vllm-default,{dense}", "--set", "block_size=544"
    )
    assert result.exit_code == 0, result.output
    table = result.output.split("side by side (measured requests):")[1].strip().splitlines()
    assert table[0].split() == [
        "policy",
        "run_id",
        "prompt_tokens",
        "hit_tokens",
        "sparse_retention_miss_tokens",
        "replay_tokens",
        "useful_hit_ratio",
        "sparse_loss_ratio",
    ]
    assert table[2].split() == [
        "vllm-default",
        "1",
        "6,528",
        "1,088",
        "1,088",
        "0",
        "0.167",
        "0.167",
    ]
    assert table[3].split() == [str(dense), "2", "6,528", "2,176", "0", "0", "0.333", "0.000"]
    assert rows(diag_db, "SELECT count(*) FROM replay_runs") == [(2,)]


def test_cli_bound_engine_and_measure_from(diag_db):
    result = run(
        "replay", "--db", diag_db, "--set", "block_size=544", "--set", "engine=oracle",
        "--measure-from", "0.5",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "side by side" not in result.output
    assert rows(diag_db, "SELECT hit_tokens FROM replay_summary") == [(2176,)]
    assert rows(diag_db, "SELECT measure_from FROM replay_runs") == [(0.5,)]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--measure-from", "1"], "Error: --measure-from: expected a fraction 0 <= f < 1, got 1.0"),
        (["--measure-from", "-0.5"], "Error: --measure-from: expected a fraction"),
        (
            ["--set", "engine=lmcache"],
            "Error: policy key 'engine': 'lmcache' is not one of vllm, sglang, marconi, ",
        ),
        (["--set", "engine=oracle", "--set", "num_blocks=100"], "unbounded cache"),
        (["--policy", "vllm-default,,x"], "an empty name"),
        (["--policy", "vllm-default,nope"], "policy 'nope': no such file or preset"),
    ],
)
def test_cli_errors(diag_db, args, message):
    result = run("replay", "--db", diag_db, "--set", "block_size=544", *args)
    assert result.exit_code != 0
    assert message in result.output
    assert len(result.output.strip().splitlines()) == 1
    # Everything is validated before the first replay: nothing was stored.
    assert rows(
        diag_db, "SELECT count(*) FROM duckdb_tables() WHERE table_name = 'replay_runs'"
    ) == [(0,)]
