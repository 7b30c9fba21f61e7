"""`cache_scope` (issue 14, item 4): one cache per model revision on each replica, or one
shared by every revision; the replay says how many caches it replayed and their memory."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from analyzer.cli import cli
from analyzer.errors import ConfigError
from analyzer.pipeline.replay import run_replay
from analyzer.sim.policy import make_policy
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
