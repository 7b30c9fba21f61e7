"""`cache_scope` (issue 14, item 4): one cache per model revision on each replica, or one
shared by every revision; the replay says how many caches it replayed and their memory."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from analyzer.cli import cli
from analyzer.errors import ConfigError
from analyzer.pipeline.replay import run_replay
from analyzer.sim.dispatch import make_policy
from analyzer.store.ingest import ingest

MIXED = Path(__file__).parents[2] / "sample_traces" / "mixed.jsonl.gz"  # 2 revisions x 2 replicas
QWEN = "qwen3-next-80b-a3b"


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("scope") / "m.duckdb"
    ingest([MIXED], db_path=path)
    return str(path)


def test_a_shared_cache_serves_every_revision(db):
    per_revision = run_replay(make_policy({"model": QWEN, "num_blocks": 400}), db_path=db)
    shared = run_replay(
        make_policy({"model": QWEN, "num_blocks": 400, "cache_scope": "shared"}), db_path=db
    )
    assert (per_revision.num_caches, shared.num_caches) == (4, 2)
    hits = [int(o.summary.column("hit_tokens").to_numpy().sum()) for o in (per_revision, shared)]
    assert hits[0] != hits[1]  # the revisions now meet in one pool (and share its space)


def test_the_default_scope_keeps_the_policy_identity():
    assert "cache_scope" not in make_policy({"model": QWEN}).to_json()
    assert (
        '"cache_scope":"shared"' in make_policy({"model": QWEN, "cache_scope": "shared"}).to_json()
    )
    with pytest.raises(ConfigError, match="'cache_scope': 'global' is not one of revision, shared"):
        make_policy({"model": QWEN, "cache_scope": "global"})


def test_replay_states_the_caches_and_their_memory(db):
    run = CliRunner().invoke
    out = run(cli, ["replay", "--db", db, "--set", f"model={QWEN}", "--set", "num_blocks=400"])
    assert out.exit_code == 0, out.output
    assert "caches: 4, one per model revision x replica: 4 x 4.98 GiB = 19.92 GiB of cache" in (
        out.output
    )
    out = run(cli, ["replay", "--db", db, "--set", f"model={QWEN}", "--set", "cache_scope=shared"])
    assert "caches: 2, one per replica" in out.output  # unbounded: no memory to state


def test_sweep_states_the_caches_and_their_total(db):
    out = CliRunner().invoke(
        cli,
        ["sweep", "--db", db, "--set", f"model={QWEN}", "--vary", "num_blocks=100", "--jobs", "1"],
    )
    assert out.exit_code == 0, out.output
    header, _, row = out.output.splitlines()[:3]
    assert header.split()[-4:] == ["memory_gib", "caches", "total_gib", "one_pass"]
    assert row.split()[-4:] == ["1.245", "4", "4.98", "False"]


def test_plan_prices_every_cache(tmp_path):
    """Two model revisions on one replica are two pools: the cost is both."""
    from analyzer.pipeline.plan import plan
    from tests.conftest import write_jsonl
    from tests.metrics.conftest import groups_records

    path = tmp_path / "g.duckdb"
    ingest([write_jsonl(tmp_path / "g.jsonl", groups_records())], db_path=path)
    best = plan(0.3, model="qwen3.5-4b", db_path=path).candidates[0]
    assert best.num_caches == 2
    assert best.cost == pytest.approx(2 * best.memory_gib)
    shared = plan(0.3, model="qwen3.5-4b", db_path=path, policy={"cache_scope": "shared"})
    assert shared.candidates[0].num_caches == 1


def test_report_states_the_caches_and_their_total(db, tmp_path):
    from analyzer.report.html import render_report

    run_replay(make_policy({"model": QWEN, "num_blocks": 400}), db_path=db)
    out = tmp_path / "r.html"
    render_report(db, out)
    text = out.read_text(encoding="utf-8")
    assert "caches (model revision x replica)" in text and "memory in all (GiB)" in text
    assert "4 caches (one per model revision x replica" in text
    assert "pool 4.98 GiB each, 19.92 GiB in all" in text
