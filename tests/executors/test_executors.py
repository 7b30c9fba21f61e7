"""Executors (analyzer.executors): local and processes give the tables of one whole pass,
partitions keep their order, failures name the partition, and Parquet datasets read like
the store. The Ray executor is tested on a real local cluster in test_ray.py."""

from __future__ import annotations

import ast
import shutil
import sys
from pathlib import Path

import duckdb
import numpy as np
import pytest
from click.testing import CliRunner

from analyzer.cli import cli
from analyzer.errors import BackendUnavailable, ConfigError, StoreError
from analyzer.executors import ExecutorSpec, WorkerError, map_partitions
from analyzer.pipeline import replay as replay_module
from analyzer.pipeline.match import match_prefixes
from analyzer.pipeline.replay import run_replay
from analyzer.prefixes.sharding import partition_requests
from analyzer.sim.dispatch import make_policy
from analyzer.store.ingest import ingest
from analyzer.traces.synth import generate
from analyzer.traces.synth import write_jsonl as write_synth
from tests.conftest import db_rows, write_jsonl

SAMPLES = Path(__file__).parents[2] / "sample_traces"
PROCESSES = ExecutorSpec("processes", workers=2)
REPLAY_COLUMNS = "* EXCLUDE (run_id)"


def namespaced_records(n: int = 240, seed: int = 5) -> list[dict]:
    """Token and hash-id requests with few distinct first units, cache_salt, LoRA,
    conversations, replicas and outputs: every namespace rule of the matcher."""
    rng = np.random.default_rng(seed)
    stems = [list(rng.integers(1, 9, size=int(rng.integers(1, 40)))) for _ in range(12)]
    records = []
    for i in range(n):
        stem = stems[int(rng.integers(0, len(stems)))]
        tail = list(rng.integers(1, 6, size=int(rng.integers(1, 30))))
        rec: dict = {"request_id": f"r{i:04d}", "timestamp": float(i)}
        if i % 7 == 3:
            rec["block_hash_ids"] = [int(x) for x in (stem + tail)[:8]]
            rec["block_size"] = 16
        else:
            rec["prompt_token_ids"] = [int(x) for x in stem + tail]
            if i % 3 == 0:
                rec["output_token_ids"] = [int(x) for x in rng.integers(1, 6, size=3)]
        if i % 5 == 1:
            rec["cache_salt"] = "s1"
        if i % 11 == 2:
            rec["lora_name"] = "lora-a"
        if i % 4 != 0:
            rec["replica"] = f"rep{i % 3}"
        if i % 2 == 0:
            rec["conversation_id"] = f"c{i % 9}"
        rec["model_revision"] = "m1" if i % 6 else "m2"
        records.append(rec)
    return records


def bos_records(n: int = 200, seed: int = 3) -> list[dict]:
    """Every prompt starts with the same BOS token (id 1) and most with one of four system
    prompts (20 to 100 tokens): one first-unit group, several K-token groups for K < 20.
    Some prompts are shorter than K; some requests are hash ids starting with one block."""
    rng = np.random.default_rng(seed)
    systems = [[1, *rng.integers(2, 50, size=length).tolist()] for length in (20, 40, 60, 100)]
    records = []
    for i in range(n):
        rec: dict = {"request_id": f"b{i:04d}", "timestamp": float(i)}
        system = systems[int(rng.integers(0, len(systems)))]
        if i % 9 == 4:
            rec["block_hash_ids"] = [1, *(int(x) for x in rng.integers(2, 4, size=4))]
            rec["block_size"] = 4
        elif i % 10 == 7:
            rec["prompt_token_ids"] = [1, *(int(x) for x in rng.integers(2, 4, size=3))]
        else:
            cut = len(system) if i % 3 else int(rng.integers(1, len(system)))
            tail = rng.integers(2, 6, size=int(rng.integers(0, 12))).tolist()
            rec["prompt_token_ids"] = system[:cut] + tail
            if i % 4 == 0:
                rec["output_token_ids"] = rng.integers(2, 6, size=3).tolist()
        if i % 5 == 2:
            rec["conversation_id"] = f"c{i % 7}"
        rec["replica"] = f"rep{i % 2}"
        records.append(rec)
    return records


@pytest.fixture(scope="module")
def stores(tmp_path_factory) -> dict[str, Path]:
    """Ingested databases (ingest runs once; tests copy them)."""
    root = tmp_path_factory.mktemp("stores")
    made = {}
    for name in ("mixed.jsonl.gz", "mixed_hash_ids.jsonl.gz"):
        made[name] = root / f"{name}.duckdb"
        ingest([SAMPLES / name], db_path=made[name])
    trace = write_jsonl(root / "namespaced.jsonl", namespaced_records())
    made["namespaced"] = root / "namespaced.duckdb"
    ingest([trace], db_path=made["namespaced"])
    bos = write_jsonl(root / "bos.jsonl", bos_records())
    made["bos"] = root / "bos.duckdb"
    ingest([bos], db_path=made["bos"])
    synth = root / "synth.jsonl"
    write_synth(generate("mixed", seed=2, num_requests=200), synth)
    made["synth"] = root / "synth.duckdb"
    ingest([synth], db_path=made["synth"])
    return made


def copy_db(src: Path, dst: Path) -> Path:
    shutil.copyfile(src, dst)
    return dst


def table(db: Path, sql: str) -> list[tuple]:
    return db_rows(db, sql)


def match_tables(db: Path) -> tuple[list, list, list]:
    return (
        table(db, "SELECT * FROM prefix_matches ORDER BY arrival_seq"),
        table(db, "SELECT * FROM junctions ORDER BY ALL"),
        table(
            db,
            "SELECT request_id, prompt_family, prompt_family_source FROM requests "
            "ORDER BY arrival_seq",
        ),
    )


def _square(shared, item):
    return shared * item * item


def _fail_on_three(shared, item):
    if item == 3:
        raise ValueError("three is not allowed")
    if item == 4:
        raise ConfigError("four is a bad input")
    return item


@pytest.mark.parametrize("spec", [ExecutorSpec(), PROCESSES])
def test_map_partitions_keeps_input_order_and_reports_progress(spec):
    seen = []
    got = map_partitions(
        spec, _square, list(range(9)), shared=2, progress=lambda d, t: seen.append((d, t))
    )
    assert got == [2 * i * i for i in range(9)]
    assert seen[-1] == (9, 9) and [d for d, _ in seen] == sorted(d for d, _ in seen)


_PREPARED: list[int] = []


def _seen_prepared(shared, item):
    return len(_PREPARED)  # a forked worker sees what the driver did before the fork


@pytest.mark.parametrize(("spec", "times"), [(ExecutorSpec(), 0), (PROCESSES, 1)])
def test_prepare_runs_once_in_the_driver_before_any_worker(spec, times):
    _PREPARED.clear()
    got = map_partitions(spec, _seen_prepared, [1, 2, 3], prepare=lambda: _PREPARED.append(1))
    assert _PREPARED == [1] * times and got == [times] * 3


def test_the_drivers_load_the_kernels_before_their_workers_start():
    from analyzer.access import workers
    from analyzer.kernels import load_all

    assert workers.map_partitions.keywords == {"prepare": load_all}
    pipeline = Path(workers.__file__).parent
    direct = [
        str(p.relative_to(pipeline))
        for p in pipeline.rglob("*.py")
        for node in ast.walk(ast.parse(p.read_text()))
        if p.name != "workers.py" and isinstance(node, ast.ImportFrom)
        and node.module == "analyzer.executors"
        and "map_partitions" in {a.name for a in node.names}
    ]  # fmt: skip
    assert not direct, f"call analyzer.access.workers.map_partitions: {direct}"


@pytest.mark.parametrize("spec", [ExecutorSpec(), PROCESSES])
def test_progress_can_count_the_weight_of_each_finished_item(spec):
    seen = []
    map_partitions(
        spec, _square, [1, 2, 3], shared=1, progress=lambda d, t: seen.append((d, t)),
        weights=[10, 20, 30],
    )  # fmt: skip
    assert seen[-1] == (60, 60) and {t for _, t in seen} == {60}
    assert {d for d, _ in seen} <= {10, 20, 30, 40, 50, 60}


def test_a_failing_partition_is_named_and_keeps_bad_input_errors_bad_input():
    labels = [f"part-{i}" for i in range(5)]
    with pytest.raises(WorkerError, match=r"^part-3 failed: ValueError: three is not allowed$"):
        map_partitions(PROCESSES, _fail_on_three, [0, 1, 2, 3], labels=labels[:4])
    with pytest.raises(ConfigError, match=r"^part-4: four is a bad input$") as info:
        map_partitions(PROCESSES, _fail_on_three, [4, 0], labels=[labels[4], labels[0]])
    assert info.value.exit_code == 2
    with pytest.raises(ConfigError, match=r"^part-4: four is a bad input$"):
        map_partitions(ExecutorSpec(), _fail_on_three, [4], labels=[labels[4]])


def test_unknown_executor_lists_the_known_ones():
    with pytest.raises(ConfigError, match=r"unknown executor; known: local, processes, ray"):
        ExecutorSpec("dask")
    result = CliRunner().invoke(cli, ["match", "--executor", "dask"])
    assert result.exit_code == 2 and "local" in result.output and "ray" in result.output


def test_ray_missing_is_a_one_line_backend_error(monkeypatch, stores, tmp_path):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now raises ImportError
    with pytest.raises(BackendUnavailable, match=r"ray is not installed; pip install"):
        map_partitions(ExecutorSpec("ray"), _square, [1], shared=1)
    db = copy_db(stores["namespaced"], tmp_path / "n.duckdb")
    result = CliRunner().invoke(cli, ["match", "--db", str(db), "--executor", "ray"])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        "Error: --executor ray: ray is not installed; pip install 'hybrid-prefix-analyzer[ray]'"
    ]


def test_partitions_hold_whole_groups():
    rng = np.random.default_rng(1)
    group = rng.integers(-1, 40, size=500)  # -1: answered by the driver, in no partition
    weight = rng.integers(1, 100, size=500)
    parts = partition_requests(group, weight, 6)
    assert len(parts) == 6
    together = np.sort(np.concatenate(parts))
    assert np.array_equal(together, np.flatnonzero(group >= 0))
    owner = {}
    for k, ids in enumerate(parts):
        assert np.all(np.diff(ids) > 0)
        for i in ids:
            assert owner.setdefault(group[i], k) == k  # a group never splits
    again = partition_requests(group, weight, 6)
    assert all(np.array_equal(a, b) for a, b in zip(parts, again, strict=True))
    assert partition_requests(np.full(4, -1), np.ones(4, np.int64), 3) == []


# The samples' prompts start with varied tokens and share system prompts longer than 64
# tokens: K = 256 cuts inside them (junctions and answers from the driver's shallow pass);
# the namespaced and BOS traces share prefixes of a few tokens: K = 1, 8, 64 cut there.
SAMPLE_CASES = [
    ("mixed.jsonl.gz", 8),
    ("mixed.jsonl.gz", 256),
    ("mixed_hash_ids.jsonl.gz", 8),
    ("mixed_hash_ids.jsonl.gz", 256),
    ("namespaced", 1),
    ("namespaced", 8),
    ("namespaced", 64),
    ("bos", 8),
    ("bos", 64),
    ("bos", 256),
]


@pytest.mark.parametrize(("name", "k"), SAMPLE_CASES)
def test_sharded_match_equals_one_pass(stores, tmp_path, name, k):
    local = copy_db(stores[name], tmp_path / "local.duckdb")
    sharded = copy_db(stores[name], tmp_path / "sharded.duckdb")
    match_prefixes(local, derive_families=True, out=tmp_path / "l.parquet")
    spec = ExecutorSpec("processes", workers=2, shard_tokens=k)
    summary = match_prefixes(
        sharded, executor=spec, derive_families=True, out=tmp_path / "s.parquet"
    )
    assert "partitions on executor processes" in summary.backend
    assert match_tables(local) == match_tables(sharded)
    assert (tmp_path / "l.parquet").read_bytes() == (tmp_path / "s.parquet").read_bytes()


def largest_partition_share(db: Path, k: int, num_parts: int = 4) -> float:
    """The largest match partition's share of the trace's units, with key length K."""
    from analyzer.access.sharded import plan_shards
    from analyzer.access.sources import DuckDBSource
    from analyzer.prefixes.engine import MatchOptions
    from analyzer.store.sequences import read_prefixes

    con = duckdb.connect(str(db), read_only=True)
    try:
        meta = DuckDBSource(con).meta
        prefixes = read_prefixes(con, k)
    finally:
        con.close()
    spec = ExecutorSpec("processes", workers=num_parts // 2, shard_tokens=k)
    _, items, _ = plan_shards(meta, prefixes, spec, MatchOptions(), junctions=False)
    return max(int(t.meta.insert_len.sum()) for t in items[1:]) / int(meta.insert_len.sum())


def test_a_common_bos_token_no_longer_makes_one_partition(stores):
    """K = 1 is the old first-unit key: every token prompt in one partition. K = 8 splits
    the four system prompts into groups spread over the partitions."""
    assert largest_partition_share(stores["bos"], 1) > 0.9
    assert largest_partition_share(stores["bos"], 8) < 0.5


@pytest.mark.parametrize("k", [8, 64])
def test_sharded_replay_equals_local(stores, tmp_path, k):
    policy = make_policy({"block_size": 16, "replicas": 3, "routing": "prefix_aware"})
    for name in ("namespaced", "bos"):
        local = copy_db(stores[name], tmp_path / f"{name}-local.duckdb")
        sharded = copy_db(stores[name], tmp_path / f"{name}-sharded.duckdb")
        run_replay(policy, db_path=local)
        spec = ExecutorSpec("processes", workers=2, shard_tokens=k)
        run_replay(policy, db_path=sharded, executor=spec)
        for sql in (
            f"SELECT {REPLAY_COLUMNS} FROM replay_requests ORDER BY arrival_seq",
            f"SELECT {REPLAY_COLUMNS} FROM replay_summary ORDER BY ALL",
        ):
            assert table(local, sql) == table(sharded, sql)


@pytest.mark.parametrize("source", ["store", "dataset"])
def test_concurrent_replay_is_the_same_on_every_executor(stores, tmp_path, source):
    """Each (model revision, replica) partition runs its own scheduler and clock."""
    values = {"block_size": 544, "num_blocks": 120, "schedule": "concurrent", "time_scale": 0.2}
    policy = make_policy(values)
    src = stores["mixed.jsonl.gz"]
    local = copy_db(src, tmp_path / "local.duckdb")
    run_replay(policy, db_path=local)
    other = copy_db(src, tmp_path / "other.duckdb")
    data = export_dataset(src, tmp_path / "data") if source == "dataset" else None
    run_replay(policy, db_path=other, executor=PROCESSES, dataset=data)
    cols = (
        "request_id, replica, hit_tokens, lost_in_flight_tokens, lost_eviction_tokens, "
        "num_preemptions, hit_total_tokens, recomputed_tokens, arrival_s, first_token_s, "
        "finished_s, queue_s, ttft_s"
    )
    sql = f"SELECT {cols} FROM replay_requests ORDER BY arrival_seq"
    got = table(local, sql)
    assert got == table(other, sql)
    assert sum(row[5] for row in got) > 0  # the pool is small enough to preempt


def _refuse(requests, policy, num_groups):
    raise ConfigError("this partition cannot be replayed")


def test_a_failed_partition_stores_nothing_and_a_rerun_stores_once(stores, tmp_path, monkeypatch):
    db = copy_db(stores["mixed_hash_ids.jsonl.gz"], tmp_path / "h.duckdb")
    monkeypatch.setattr(replay_module, "replay", _refuse)  # forked workers inherit it
    with pytest.raises(
        ConfigError, match=r"^replay partition \d+/\d+ \(model revision .*cannot be replayed"
    ):
        run_replay(make_policy({"block_size": 544}), db_path=db, executor=PROCESSES)
    monkeypatch.undo()
    assert table(db, "SELECT count(*) FROM duckdb_tables() WHERE table_name LIKE 'replay_%'") == [
        (0,)
    ]
    match_prefixes(db, executor=PROCESSES)
    match_prefixes(db, executor=PROCESSES)
    assert table(db, "SELECT count(*) FROM prefix_matches") == [(300,)]


def export_dataset(db: Path, folder: Path, parts: int = 3) -> Path:
    """The requests table as a folder of Parquet files (`parts` files, rows interleaved)."""
    folder.mkdir()
    con = duckdb.connect(str(db), read_only=True)
    try:
        for k in range(parts):
            con.execute(
                f"COPY (SELECT * FROM requests WHERE arrival_seq % {parts} = {k}) "
                f"TO '{folder / f'part-{k}.parquet'}' (FORMAT parquet)"
            )
    finally:
        con.close()
    return folder


@pytest.mark.parametrize(
    ("spec", "routing"),
    [
        (ExecutorSpec(), "prefix_aware"),
        (PROCESSES, "round_robin"),
        (ExecutorSpec("processes", workers=2, shard_tokens=4), "session"),
    ],
)
def test_match_and_replay_read_a_parquet_dataset(stores, tmp_path, spec, routing):
    src = stores["namespaced"]
    ref = copy_db(src, tmp_path / "ref.duckdb")
    match_prefixes(ref)
    policy = make_policy({"block_size": 16, "replicas": 2, "routing": routing})
    run_replay(policy, db_path=ref)
    data = export_dataset(src, tmp_path / "data")
    out = tmp_path / "out.duckdb"  # a new database: the dataset is the only input
    match_prefixes(out, dataset=data, executor=spec)
    run_replay(policy, db_path=out, dataset=data, executor=spec)
    assert match_tables(ref)[:2] == match_tables(out)[:2]
    assert table(out, "SELECT count(*) FROM requests") == [(0,)]
    sql = f"SELECT {REPLAY_COLUMNS} FROM replay_requests ORDER BY arrival_seq"
    assert table(ref, sql) == table(out, sql)
    assert table(out, "SELECT trace_fingerprint FROM replay_runs")[0][0].startswith("dataset:")


def test_the_replay_driver_holds_no_token_ids_of_a_dataset(stores, tmp_path):
    from analyzer.access.trace import DatasetTrace, read_dataset_trace
    from analyzer.store.dataset import open_dataset, register_requests

    data = export_dataset(stores["namespaced"], tmp_path / "data")
    con = duckdb.connect()
    register_requests(con, open_dataset(data))
    trace = read_dataset_trace(con, str(data))
    con.close()
    assert isinstance(trace, DatasetTrace) and trace.n == 240
    assert not {"prompt_token_ids", "output_token_ids", "block_hash_ids"} & set(trace.columns)
    assert trace.columns["arrival_seq"] == list(range(240))


def test_dataset_errors_are_one_line(tmp_path, stores):
    runner = CliRunner()
    missing = runner.invoke(cli, ["match", "--dataset", str(tmp_path / "nope")])
    assert missing.exit_code == 2 and "no such dataset" in missing.output
    folder = tmp_path / "d"
    folder.mkdir()
    con = duckdb.connect()
    con.execute(f"COPY (SELECT 1 AS request_id) TO '{folder / 'a.parquet'}' (FORMAT parquet)")
    con.close()
    lacking = runner.invoke(
        cli, ["match", "--dataset", str(folder), "--db", str(tmp_path / "o.db")]
    )
    assert lacking.exit_code == 2
    assert (
        lacking.output.strip()
        == f"Error: {folder}: column 'arrival_seq' is missing (see `hpa match --help`)"
    )
    data = export_dataset(stores["namespaced"], tmp_path / "data", parts=1)
    derive = runner.invoke(
        cli, ["match", "--dataset", str(data), "--db", str(tmp_path / "o.db"), "--derive-families"]
    )
    assert derive.exit_code == 2 and "--derive-families" in derive.output


def test_sweep_and_plan_shard_by_configuration(stores, tmp_path):
    from analyzer.pipeline.plan import plan
    from analyzer.pipeline.sweep import run_sweeps

    local = copy_db(stores["namespaced"], tmp_path / "local.duckdb")
    sharded = copy_db(stores["namespaced"], tmp_path / "sharded.duckdb")
    args = ("vllm-default", ["block_size=16"], ["num_blocks=40,80", "retention_interval=0,null"])
    run_sweeps(*args, db_path=local, executor="local")
    run_sweeps(*args, db_path=sharded, executor=PROCESSES)
    for sql in (
        f"SELECT {REPLAY_COLUMNS} FROM replay_requests ORDER BY run_id, arrival_seq",
        "SELECT * FROM sweep_points ORDER BY ALL",
    ):
        assert table(local, sql) == table(sharded, sql)
    db = stores["synth"]
    a = plan(0.3, db_path=db, model="qwen3-next-80b-a3b")
    b = plan(0.3, db_path=db, model="qwen3-next-80b-a3b", executor=PROCESSES)
    assert a.reachable and len(a.candidates) >= 2
    assert (a.message, a.replays, a.candidates) == (b.message, b.replays, b.candidates)


def test_rerun_of_a_failed_store_read_is_clear(tmp_path):
    with pytest.raises(StoreError, match="no such database"):
        match_prefixes(tmp_path / "missing.duckdb", executor=PROCESSES)


def test_cli_options_reach_the_library(stores, tmp_path):
    runner = CliRunner()
    data = export_dataset(stores["namespaced"], tmp_path / "data", parts=2)
    out = tmp_path / "out.duckdb"
    common = ["--dataset", str(data), "--db", str(out), "--executor", "processes"]
    match = runner.invoke(cli, ["match", *common, "--workers", "2", "--shard-tokens", "8"])
    assert match.exit_code == 0, match.output
    assert "partitions on executor processes" in match.output
    replay = runner.invoke(
        cli, ["replay", *common, "--set", "block_size=16", "--shard-tokens", "8"]
    )
    assert replay.exit_code == 0 and "run 1:" in replay.output
    zero = runner.invoke(cli, ["match", *common, "--shard-tokens", "0"])
    assert zero.exit_code == 2 and "--shard-tokens" in zero.output
    stray = runner.invoke(
        cli, ["replay", "--db", str(out), "--executor", "local", "--ray-address", "auto"]
    )
    assert stray.exit_code == 2 and "--ray-address needs --executor ray" in stray.output


def test_inserted_sequences_interleave_token_and_hash_rows():
    import pyarrow as pa

    from analyzer.store.sequences import inserted_sequences

    rows = pa.table(
        {
            "tokens": pa.array([[1, 2], None, [3], None], pa.list_(pa.int32())),
            "block_hash_ids": pa.array([None, [10, 11, 12], None, [13]], pa.list_(pa.int64())),
        }
    )
    flat, offsets = inserted_sequences(rows)
    assert flat.tolist() == [1, 2, 10, 11, 12, 3, 13]
    assert offsets.tolist() == [0, 2, 5, 6, 7]


@pytest.mark.parametrize(
    ("compiled_min_units", "said", "why"),
    [
        (0, "the C radix trees, ", ""),
        (10**12, "numpy, ", " (a partition under 1,000,000,000,000 units skips the C radix trees)"),
    ],
)
def test_a_sharded_match_names_the_matcher_its_partitions_ran(
    stores, tmp_path, compiled_min_units, said, why
):
    """(before: 'numpy, N partitions' whatever the workers ran: the compiled radix trees
    over every partition of a large trace)"""
    from analyzer.prefixes.engine import MatchOptions

    db = copy_db(stores["synth"], tmp_path / "m.duckdb")
    options = MatchOptions(compiled_min_units=compiled_min_units)
    spec = ExecutorSpec("processes", workers=2, shard_tokens=8)
    summary = match_prefixes(db, executor=spec, options=options)
    assert summary.backend.startswith(said)
    assert summary.backend.endswith(f" partitions on executor processes{why}")


@pytest.mark.parametrize(
    ("path", "said"),
    [
        ("the C radix trees", "the C radix trees, 5 partitions on executor processes"),
        (
            "numpy in 4 and the C radix trees in 1",
            "numpy in 4 and the C radix trees in 1 of 5 partitions on executor processes (a "
            "partition under 1,048,576 units skips the C radix trees)",
        ),
    ],
)
def test_the_sharded_match_line_reads_as_one_phrase(path, said):
    """(it read 'on numpy in 4 and the C radix trees in 1, 5 partitions on executor
    processes': 4 of what, and why numpy where the C loop is built)"""
    from analyzer.pipeline.match import _sharded_said
    from analyzer.prefixes.radix import available as radix_available

    if not radix_available():
        pytest.skip("the C radix trees are not built here")
    assert _sharded_said(path, 5, "processes", 1 << 20) == said


@pytest.mark.parametrize(
    ("paths", "said"),
    [
        (["numpy"], "numpy"),
        (["the C radix trees"] * 3, "the C radix trees"),
        (["the C radix trees", "numpy", "numpy"], "the C radix trees in 1 and numpy in 2"),
        (
            ["numpy", "the C radix trees", "x", "numpy"],
            "numpy in 2, the C radix trees in 1 and x in 1",
        ),
    ],
)
def test_matchers_said(paths, said):
    import pyarrow as pa

    from analyzer.prefixes.merge import matchers_said

    parts = [{"matched_by": pa.table({"path": [path]})} for path in paths]
    assert matchers_said(parts) == said
