"""`--executor ray` on a real local Ray cluster (2 CPUs): match, replay and sweep give
byte-identical tables to `--executor local` on the sample traces (match sharded by the
first 8, 64 and 256 tokens, also on a trace where every prompt starts with the same BOS);
failures name the partition. Skipped only when ray is not importable."""

from __future__ import annotations

import operator
from pathlib import Path

import pytest

from analyzer.access.trace import load_trace
from analyzer.errors import ConfigError
from analyzer.executors import ExecutorSpec, WorkerError, map_partitions
from analyzer.pipeline.match import match_prefixes
from analyzer.pipeline.replay import replay_rows, run_replay
from analyzer.pipeline.sweep import run_sweeps
from analyzer.sim.dispatch import make_policy
from analyzer.store.db import connect
from tests.executors.test_executors import (
    REPLAY_COLUMNS,
    copy_db,
    match_tables,
    stores,  # noqa: F401  (module fixture)
    table,
)

ray = pytest.importorskip("ray")

RAY = ExecutorSpec("ray")


@pytest.fixture(scope="module", autouse=True)
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="error")
    yield
    ray.shutdown()


@pytest.mark.parametrize(
    ("name", "k"),
    [
        ("mixed.jsonl.gz", 8),
        ("mixed.jsonl.gz", 256),
        ("mixed_hash_ids.jsonl.gz", 8),
        ("mixed_hash_ids.jsonl.gz", 256),
        ("namespaced", 8),
        ("bos", 8),
        ("bos", 64),
    ],
)
def test_match_on_ray_is_byte_identical(stores, tmp_path: Path, name, k):  # noqa: F811
    local = copy_db(stores[name], tmp_path / "local.duckdb")
    on_ray = copy_db(stores[name], tmp_path / "ray.duckdb")
    match_prefixes(local, out=tmp_path / "l.parquet")
    spec = ExecutorSpec("ray", shard_tokens=k)
    summary = match_prefixes(on_ray, executor=spec, out=tmp_path / "r.parquet")
    assert "on executor ray" in summary.backend
    assert match_tables(local) == match_tables(on_ray)
    assert (tmp_path / "l.parquet").read_bytes() == (tmp_path / "r.parquet").read_bytes()


@pytest.mark.parametrize(
    ("name", "values"),
    [
        ("mixed.jsonl.gz", {"model": "qwen3-next-80b-a3b", "replicas": 2, "routing": "session"}),
        ("mixed_hash_ids.jsonl.gz", {"model": "qwen3-next-80b-a3b"}),
        ("namespaced", {"block_size": 16, "replicas": 3, "routing": "prefix_aware"}),
        ("bos", {"block_size": 4, "replicas": 2, "routing": "session"}),
    ],
)
def test_replay_on_ray_is_byte_identical(stores, tmp_path: Path, name, values):  # noqa: F811
    policy = make_policy(values)
    local = copy_db(stores[name], tmp_path / "local.duckdb")
    on_ray = copy_db(stores[name], tmp_path / "ray.duckdb")
    run_replay(policy, db_path=local, out=tmp_path / "l.parquet")
    spec = ExecutorSpec("ray", shard_tokens=8)  # K-token groups below the system prompts
    run_replay(policy, db_path=on_ray, executor=spec, out=tmp_path / "r.parquet")
    assert (tmp_path / "l.parquet").read_bytes() == (tmp_path / "r.parquet").read_bytes()
    for sql in (
        f"SELECT {REPLAY_COLUMNS} FROM replay_requests ORDER BY arrival_seq",
        f"SELECT {REPLAY_COLUMNS} FROM replay_summary ORDER BY ALL",
    ):
        assert table(local, sql) == table(on_ray, sql)


def test_sweep_on_ray_is_byte_identical(stores, tmp_path: Path):  # noqa: F811
    local = copy_db(stores["mixed_hash_ids.jsonl.gz"], tmp_path / "local.duckdb")
    on_ray = copy_db(stores["mixed_hash_ids.jsonl.gz"], tmp_path / "ray.duckdb")
    args = (
        "vllm-default",
        ["model=qwen3-next-80b-a3b"],
        ["num_blocks=100,400", "retention_interval=0,null"],
    )
    run_sweeps(*args, db_path=local, executor="local")
    run_sweeps(*args, db_path=on_ray, executor=RAY)
    for sql in (
        f"SELECT {REPLAY_COLUMNS} FROM replay_requests ORDER BY run_id, arrival_seq",
        "SELECT * EXCLUDE (run_id) FROM replay_summary ORDER BY ALL",
        "SELECT * FROM sweep_points ORDER BY ALL",
    ):
        assert table(local, sql) == table(on_ray, sql)


def test_a_failing_ray_partition_is_named(stores, tmp_path: Path):  # noqa: F811
    with pytest.raises(WorkerError, match=r"^part 1 failed: ZeroDivisionError: "):
        map_partitions(RAY, operator.truediv, [1, 0, 2], shared=1, labels=["p0", "part 1", "p2"])
    db = copy_db(stores["mixed_hash_ids.jsonl.gz"], tmp_path / "h.duckdb")
    # Below run_replay (which fits the geometry to the trace): a match unit of part of a
    # 16-token trace block fails in the worker, and keeps its class and partition there.
    bad = make_policy({"block_size": 544, "prefix_match_unit": 136})
    con = connect(db, create=False)
    try:
        trace = load_trace(con)
    finally:
        con.close()
    with pytest.raises(ConfigError, match=r"^replay partition \d+/\d+ \(model revision "):
        replay_rows(trace, bad, executor=RAY)


def test_a_dataset_replays_on_ray_like_the_store(stores, tmp_path: Path):  # noqa: F811
    from tests.executors.test_executors import export_dataset

    policy = make_policy({"block_size": 16, "replicas": 3, "routing": "session"})
    ref = copy_db(stores["namespaced"], tmp_path / "ref.duckdb")
    run_replay(policy, db_path=ref)
    data = export_dataset(stores["namespaced"], tmp_path / "data")
    out = tmp_path / "out.duckdb"
    spec = ExecutorSpec("ray", shard_tokens=8)
    match_prefixes(out, dataset=data, executor=spec)
    run_replay(policy, db_path=out, dataset=data, executor=spec)
    sql = f"SELECT {REPLAY_COLUMNS} FROM replay_requests ORDER BY arrival_seq"
    assert table(ref, sql) == table(out, sql)
