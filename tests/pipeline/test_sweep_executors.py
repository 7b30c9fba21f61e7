"""`hpa sweep --dataset` and `hpa plan --dataset`: each configuration's worker reads the
trace from the Parquet dataset, the driver never loads it whole, and the stored tables
(plan: the answer) are the store-based run's."""

from __future__ import annotations

import os
import shutil
from contextlib import contextmanager
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

import analyzer.access.trace
from analyzer.cli import cli
from analyzer.errors import ConfigError
from analyzer.executors import ExecutorSpec
from analyzer.pipeline.plan import plan
from analyzer.pipeline.sweep import run_sweeps
from analyzer.store.ingest import ingest
from analyzer.traces.synth import generate
from analyzer.traces.synth import write_jsonl as write_synth
from tests.conftest import db_rows, write_jsonl
from tests.executors.test_executors import export_dataset, namespaced_records

PROCESSES = ExecutorSpec("processes", workers=2)
# Every stored table of a sweep, but the columns that say when and how fast (and where the
# trace came from: `dataset:` + file names and sizes, checked separately).
SWEEP_TABLES = (
    "SELECT * EXCLUDE (created_at) FROM sweeps ORDER BY sweep_id",
    "SELECT * FROM sweep_points ORDER BY sweep_id, run_id",
    "SELECT * EXCLUDE (created_at, replay_seconds, trace_fingerprint) FROM replay_runs "
    "ORDER BY run_id",
    "SELECT * FROM replay_requests ORDER BY run_id, arrival_seq",
    "SELECT * FROM replay_summary ORDER BY ALL",
)
FULL_ATTENTION = ['groups=["full_attention"]', "block_size=16"]
QWEN = "model=qwen3-next-80b-a3b"  # a 544-token block: no whole number of 512-token blocks
MOONCAKE = Path(__file__).parents[1] / "fixtures" / "external" / "mooncake"  # two slices


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    """(ingested database, the same requests as a 3-file Parquet dataset) per trace:
    namespaced (token ids and 16-token hash blocks), synth (token ids), mooncake (512-token
    hash blocks only)."""
    root = tmp_path_factory.mktemp("sweep-datasets")
    namespaced = write_jsonl(root / "namespaced.jsonl", namespaced_records())
    synth = root / "synth.jsonl"
    write_synth(generate("mixed", seed=2, num_requests=200), synth)
    made = {}
    for name, path in (("namespaced", namespaced), ("synth", synth), ("mooncake", MOONCAKE)):
        db = root / f"{name}.duckdb"
        ingest([path], db_path=db)
        made[name] = (db, export_dataset(db, root / f"{name}-data"))
    return made


@contextmanager
def driver_never_loads():
    """Fails when this (the driver's) process loads a whole trace, token ids and all: the
    one loader of `access.trace.LoadedTrace` (store or dataset) may then run in forked
    workers only."""
    load, driver = analyzer.access.trace.read_trace, os.getpid()

    def guarded(con):
        assert os.getpid() != driver, "the driver loaded the whole trace"
        return load(con)

    analyzer.access.trace.read_trace = guarded
    try:
        yield
    finally:
        analyzer.access.trace.read_trace = load


def sweep_tables(db: Path) -> list[list[tuple]]:
    return [db_rows(db, sql) for sql in SWEEP_TABLES]


def points(outcomes) -> list:
    return [[(p.value, p.run_id, p.hit_tokens, p.one_pass) for p in s.points] for s in outcomes]


@pytest.mark.parametrize(
    ("overrides", "varies"),
    [
        (["block_size=16"], ["num_blocks=40,80", "retention_interval=0,null"]),
        # One-pass sweeps (auto: the capacities from the worker's curve) beside replays.
        (FULL_ATTENTION, ["retention_interval=0", "num_blocks=auto", "num_blocks=30,60"]),
    ],
)
def test_sweep_over_a_dataset_stores_the_store_runs_tables(traces, tmp_path, overrides, varies):
    db, data = traces["namespaced"]
    ref = shutil.copyfile(db, tmp_path / "ref.duckdb")
    out = tmp_path / "out.duckdb"  # a new database: the dataset is the only input
    expected = run_sweeps("vllm-default", overrides, varies, db_path=ref, executor="local")
    with driver_never_loads():
        got = run_sweeps(
            "vllm-default", overrides, varies, db_path=out, executor=PROCESSES, dataset=data
        )
    assert points(got) == points(expected)
    assert sweep_tables(out) == sweep_tables(ref)
    here = tmp_path / "here.duckdb"  # `local`: this process reads the dataset whole, once
    run_sweeps("vllm-default", overrides, varies, db_path=here, executor="local", dataset=data)
    assert sweep_tables(here) == sweep_tables(ref)
    assert any(p.one_pass for s in got for p in s.points) == ("num_blocks=auto" in varies)
    (fingerprint,) = db_rows(out, "SELECT DISTINCT trace_fingerprint FROM replay_runs")
    assert fingerprint[0].startswith("dataset:part-0.parquet:")
    assert db_rows(out, "SELECT count(*) FROM requests") == [(0,)]


def test_the_guard_sees_a_driver_that_loads_the_trace(traces, tmp_path):
    """The store path's driver loads the trace: the guard above is not vacuous."""
    db, _ = traces["namespaced"]
    ref = shutil.copyfile(db, tmp_path / "ref.duckdb")
    with driver_never_loads(), pytest.raises(AssertionError, match="driver loaded"):
        run_sweeps("vllm-default", ["block_size=16"], ["num_blocks=40"], db_path=ref)


def test_auto_sweep_cli_over_a_dataset(traces, tmp_path):
    """`hpa sweep --dataset` with a lone task (one stack-distance pass) on processes."""
    db, data = traces["namespaced"]
    ref = shutil.copyfile(db, tmp_path / "ref.duckdb")
    out = tmp_path / "out.duckdb"
    args = ["sweep", "--vary", "num_blocks=auto"]
    for item in FULL_ATTENTION:
        args += ["--set", item]
    runner = CliRunner()
    local = runner.invoke(cli, [*args, "--db", str(ref), "--executor", "local"])
    assert local.exit_code == 0, local.output
    with driver_never_loads():
        remote = runner.invoke(
            cli, [*args, "--db", str(out), "--dataset", str(data), "--executor", "processes"]
        )
    assert remote.exit_code == 0, remote.output
    assert "from one stack-distance pass" in remote.output
    assert sweep_tables(out) == sweep_tables(ref)
    assert len(db_rows(out, "SELECT * FROM sweep_points")) >= 5


def test_plan_over_a_dataset_gives_the_store_runs_answer(traces):
    """Same ceilings, candidates (in order), message and replay count: the pruning of the
    local search applied to the workers' results in the same order."""
    db, data = traces["synth"]
    # (0.2: pools near the floor, so that settings are skipped for their floor's cost)
    expected = plan(0.2, db_path=db, model="qwen3-next-80b-a3b")
    with driver_never_loads():
        got = plan(0.2, dataset=data, model="qwen3-next-80b-a3b", executor=PROCESSES)
    assert expected.reachable and len(expected.candidates) >= 2
    assert "settings skipped" in expected.message  # the pruning was exercised
    assert got == expected


@pytest.mark.parametrize("executor", ["local", "processes"])
def test_plan_over_a_dataset_creates_no_store(traces, tmp_path, executor):
    db, data = traces["synth"]
    absent = tmp_path / "absent.duckdb"
    got = plan(0.3, dataset=data, db_path=absent, executor=executor)
    assert got == plan(0.3, db_path=db)
    assert not absent.exists()


@pytest.mark.parametrize(
    ("trace", "overrides", "varies", "changed"),
    [
        # Mooncake's 512-token blocks: qwen3-next replays 1,024-token ones, where 1024 is a
        # whole retention interval (not of the preset's 544)
        ("mooncake", [QWEN], ["num_blocks=200,400", "retention_interval=0,1024"], "544 -> 1,024"),
        # the auto sweep's capacities from the fitted base policy's curve, in its worker
        ("mooncake", FULL_ATTENTION, ["num_blocks=auto", "num_blocks=30,60"], "16 -> 512"),
        # a unit finer than the trace's 16-token blocks: matched in whole ones
        ("namespaced", ["block_size=32"], ["prefix_match_unit=8"], "prefix_match_unit 8 -> 16"),
        ("synth", [QWEN], ["num_blocks=40,80"], None),  # token ids: the preset's own block
    ],
)
def test_a_dataset_sweep_fits_its_policies_to_the_trace_as_the_store_sweep_does(
    traces, tmp_path, trace, overrides, varies, changed
):
    """Same notes, stored policies and figures, every point (an auto sweep's too) fitted to
    the trace's blocks by the driver before any worker runs."""
    db, data = traces[trace]
    ref = shutil.copyfile(db, tmp_path / "ref.duckdb")
    out = tmp_path / "out.duckdb"
    expected = run_sweeps("vllm-default", overrides, varies, db_path=ref, executor="local")
    with driver_never_loads():
        got = run_sweeps(
            "vllm-default", overrides, varies, db_path=out, executor=PROCESSES, dataset=data
        )
    assert [s.notes for s in got] == [s.notes for s in expected]
    assert points(got) == points(expected)
    assert sweep_tables(out) == sweep_tables(ref)
    notes = [note for s in got for note in s.notes]
    if changed is None:
        assert notes == []
    else:
        assert len(notes) == len(got) and all(changed in note for note in notes)
        assert all(note.startswith("the trace's blocks are ") for note in notes)
    assert sum(p.hit_tokens for s in got for p in s.points) > 0


def test_a_failing_sweep_point_is_named_and_stores_nothing(tmp_path):
    """A point that fails in its worker, for what only the trace says (a request with no
    arrival time cannot replay concurrently): named as the store path names it, and none
    of the sweeps stored, though the other points replayed."""
    records = namespaced_records()
    del records[5]["timestamp"]
    db = tmp_path / "t.duckdb"
    ingest([write_jsonl(tmp_path / "t.jsonl", records)], db_path=db)
    data = export_dataset(db, tmp_path / "data")
    args = ("vllm-default", ["block_size=32"], ["num_blocks=40,80", "schedule=serial,concurrent"])
    with pytest.raises(ConfigError) as store:
        run_sweeps(*args, db_path=db, executor=PROCESSES)
    out = tmp_path / "out.duckdb"
    with pytest.raises(ConfigError) as info:
        run_sweeps(*args, db_path=out, executor=PROCESSES, dataset=data)
    assert str(info.value) == str(store.value)
    assert str(info.value).startswith("sweep point schedule=concurrent: replay partition ")
    assert str(info.value).endswith(
        "request 'r0005' has no timestamp; schedule 'concurrent' needs every request's "
        "arrival time (use schedule 'serial')"
    )
    assert db_rows(out, "SELECT count(*) FROM duckdb_tables() WHERE table_name = 'sweeps'") == [
        (0,)
    ]


def test_a_retention_interval_is_whole_blocks_before_any_worker_runs(traces, tmp_path):
    """(a dataset's points replay their own block: the interval is checked against it, as
    `make_policy` did before it left that to the block the replay runs in)"""
    _, data = traces["synth"]
    out = tmp_path / "out.duckdb"
    with pytest.raises(ConfigError) as info:
        run_sweeps(
            "vllm-default",
            ["block_size=32"],
            ["retention_interval=0,48"],
            db_path=out,
            executor=PROCESSES,
            dataset=data,
        )
    assert str(info.value) == (
        "policy key 'retention_interval': 48 must be a multiple of block_size 32 on a model "
        "with a sparse group"
    )
    assert db_rows(out, "SELECT count(*) FROM duckdb_tables() WHERE table_name = 'sweeps'") == [
        (0,)
    ]


@pytest.mark.parametrize("command", ["sweep", "plan"])
def test_a_bad_dataset_is_a_one_line_error(tmp_path, command):
    args = {
        "sweep": ["sweep", "--set", "block_size=16", "--vary", "num_blocks=40,80"],
        "plan": ["plan", "--target-useful-hit-ratio", "0.3", "--executor", "processes"],
    }[command]
    runner = CliRunner()
    missing = tmp_path / "nope"
    result = runner.invoke(cli, [*args, "--dataset", str(missing), "--db", str(tmp_path / "o")])
    assert result.exit_code == 2
    assert result.output == f"Error: {missing}: no such dataset (a folder of Parquet files)\n"
    folder = tmp_path / "d"
    folder.mkdir()
    con = duckdb.connect()
    con.execute(f"COPY (SELECT 1 AS request_id) TO '{folder / 'a.parquet'}' (FORMAT parquet)")
    con.close()
    result = runner.invoke(cli, [*args, "--dataset", str(folder), "--db", str(tmp_path / "o")])
    assert result.exit_code == 2
    assert result.output == (
        f"Error: {folder}: column 'arrival_seq' is missing (see `hpa match --help`)\n"
    )
