"""Fault injection (issue 13): `kill -9` at seeded random moments during an ingest of several
files, a replay, a sweep on worker processes and a plan, each in its own process. Then:

- the store, once the next command opened it, is exactly as before the command or exactly
  as an uninterrupted run leaves it (every run with all its rows, no orphans, no run id
  reused); from "as before", running the command again gives the uninterrupted store;
- no worker outlives its driver;
- `hpa query` (a read-only view, as a user inspects a store after a crash) sees what the next
  command sees, and its invariants hold: every file read = stored + rejected, every request
  with its arrival order, no run id or sweep point twice, every run with all its rows.

Volatile columns (ingest time, run times) are left out of the comparison. Linux only: the
worker check reads /proc.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from analyzer.store.db import column_names, connect, table_names

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

SAMPLES = Path(__file__).parent.parent / "sample_traces"
HPA = [sys.executable, "-c", "from analyzer.cli import main; main()"]
VOLATILE = {"ingested_at", "created_at", "replay_seconds", "seconds"}
MODEL = ("--set", "model=qwen3-next-80b-a3b")
COMMANDS = {
    "ingest": ("ingest", str(SAMPLES / "groups_1500.jsonl"), str(SAMPLES / "mixed.jsonl.gz")),
    "replay": ("replay", *MODEL, "--policy", "vllm-default,sglang-default"),
    "concurrent replay": ("replay", *MODEL, "--set", "schedule=concurrent"),
    "sweep": (
        "sweep",
        *MODEL,
        "--vary",
        f"num_blocks={','.join(map(str, range(100, 1300, 100)))}",
        "--jobs",
        "2",
    ),  # fmt: skip
    "plan": ("plan", "--target-useful-hit-ratio", "0.3", "--model", "qwen3-next-80b-a3b"),
}
SEEDS = (0, 1, 2)


def digest(db: Path) -> dict[str, list]:
    """Every table's rows, sorted, without volatile columns (opening runs the recovery)."""
    con = connect(db, create=False)
    try:
        out = {}
        for table in sorted(table_names(con)):
            keep = sorted(column_names(con, table) - VOLATILE)
            cols = ", ".join(f'"{c}"' for c in keep)
            out[table] = sorted(map(repr, con.execute(f"SELECT {cols} FROM {table}").fetchall()))
        return out
    finally:
        con.close()


# Table -> what must be 0 wherever it is present, each through `hpa query`.
INVARIANTS = {
    "requests": (
        "SELECT count(*) FROM requests WHERE arrival_seq IS NULL",
        "SELECT count(*) - count(DISTINCT arrival_seq) FROM requests",
        "SELECT count(*) FROM requests WHERE source_id NOT IN (SELECT source_id FROM sources)",
        "SELECT count(*) FROM sources WHERE num_read <> num_stored + num_rejected",
        "SELECT coalesce(sum(num_stored), 0) - (SELECT count(*) FROM requests) FROM sources",
    ),
    "replay_runs": (
        "SELECT count(*) - count(DISTINCT run_id) FROM replay_runs",
        "SELECT count(*) FROM replay_runs r WHERE num_requests <> "
        "(SELECT count(*) FROM replay_requests q WHERE q.run_id = r.run_id)",
        "SELECT count(*) FROM replay_requests WHERE run_id NOT IN (SELECT run_id FROM replay_runs)",
    ),
    "sweep_points": (
        "SELECT count(*) - count(DISTINCT (sweep_id, value)) FROM sweep_points",
        "SELECT count(*) FROM sweep_points WHERE run_id NOT IN (SELECT run_id FROM replay_runs)",
    ),
}


def query(db: Path, sql: str) -> dict:
    done = subprocess.run([*HPA, "query", sql, "--db", str(db), "--format", "json"],
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[0])


def as_queried(db: Path) -> tuple[dict[str, int], list[str]]:
    """Through `hpa query` (read-only): each table's rows, and the invariants broken."""
    tables = sorted(
        row["name"]
        for row in map(json.loads, subprocess.run(
            [*HPA, "query", "SHOW TABLES", "--db", str(db), "--format", "json"],
            capture_output=True, text=True, check=True,
        ).stdout.splitlines())
    )  # fmt: skip
    if not tables:
        return {}, []
    checks = [sql for table in tables for sql in INVARIANTS.get(table, ())]
    # one `hpa query` for every count and check (a process each took ~0.6 s, 9 per kill)
    counts = [f'(SELECT count(*) FROM "{t}") AS "{t}"' for t in tables]
    each = [f'({sql}) AS "check {i}"' for i, sql in enumerate(checks)]
    row = query(db, f"SELECT {', '.join(counts + each)}")
    found = {t: row[t] for t in tables}
    broken = [sql for i, sql in enumerate(checks) if row[f"check {i}"] != 0]
    return found, broken


def children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(stat[1]) == pid:
                found.append(int(entry))
    return found


def running(pid: int) -> bool:
    """Whether process `pid` still runs (a zombie has ended: its new parent may never reap
    it in a container)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def hpa(db: Path, command: str) -> subprocess.Popen:
    args = [*HPA, *COMMANDS[command], "--db", str(db)]
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def starts(tmp_path_factory) -> dict[str, Path]:
    """The store each command starts from: none for ingest, the mixed sample for the rest
    (a smaller one for plan, which replays a hundred times)."""
    base = tmp_path_factory.mktemp("faults")
    mixed, small = base / "mixed.duckdb", base / "small.duckdb"
    for db, files in ((mixed, ["mixed.jsonl.gz"]), (small, ["groups_1500.jsonl"])):
        subprocess.run(
            [*HPA, "ingest", *(str(SAMPLES / f) for f in files), "--db", str(db)],
            check=True,
            capture_output=True,
        )
    return {"ingest": None, "replay": mixed, "concurrent replay": mixed, "sweep": mixed,
            "plan": small}  # fmt: skip


def fresh(starts: dict, command: str, where: Path) -> Path:
    db = where / f"{command}.duckdb"
    if starts[command] is not None:
        shutil.copyfile(starts[command], db)
    return db


def finished(starts: dict, command: str, where: Path) -> tuple[dict, float]:
    """The store an uninterrupted run leaves, and how long the run took (s)."""
    db = fresh(starts, command, where)
    started = time.perf_counter()
    assert hpa(db, command).wait() in (0, 1)
    return digest(db), time.perf_counter() - started


def as_started(starts: dict, command: str, where: Path) -> dict:
    """The store before the command (an empty one for ingest: a new store's schema)."""
    db = fresh(starts, command, where)
    if not db.exists():
        connect(db).close()
    return digest(db)


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_killed_command_leaves_the_store_before_or_after_it(starts, command, tmp_path):
    for name in ("whole", "before"):
        (tmp_path / name).mkdir()
    complete, seconds = finished(starts, command, tmp_path / "whole")
    before = as_started(starts, command, tmp_path / "before")
    assert (complete == before) == (command == "plan")  # plan writes nothing
    for seed in SEEDS:
        where = tmp_path / f"seed{seed}"
        where.mkdir()
        db = fresh(starts, command, where)
        proc = hpa(db, command)
        time.sleep(random.Random(f"{command}:{seed}").uniform(0.2, seconds))
        workers = children(proc.pid)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        time.sleep(1.0)  # the kernel's SIGKILL to orphaned workers is asynchronous
        assert [w for w in workers if running(w)] == [], "orphaned workers"
        viewed, broken = as_queried(db) if db.exists() else ({}, [])
        assert broken == [], f"{command}, seed {seed}: through hpa query: {broken}"
        state = digest(db) if db.exists() else before
        if viewed:  # what a read-only view saw is what the next command finds
            assert viewed == {table: len(rows) for table, rows in state.items()}
        assert state in (before, complete), (
            f"{command}, seed {seed}: the store is neither as before nor as after the command"
        )
        if state == before:
            assert hpa(db, command).wait() in (0, 1)
            assert digest(db) == complete, f"{command}, seed {seed}: a rerun differs"


# A sweep whose points all fail in their workers (the replay refuses), run as `hpa` runs.
_REFUSING = (
    "import analyzer.pipeline.replay as replay\n"
    "from analyzer.errors import ConfigError\n"
    "def refuse(requests, policy, num_groups):\n"
    "    raise ConfigError(f'refused num_blocks={policy.num_blocks}')\n"
    "replay.replay = refuse  # forked workers inherit it\n"
    "from analyzer.cli import main\n"
    "main()\n"
)


def test_a_failed_sweep_on_worker_processes_is_one_line(starts, tmp_path):
    """The workers stopped after a failed point are silent: they inherited the driver's
    SIGTERM handler, and each printed 'terminated (SIGTERM)' beside the real error. The
    error is the first point's, whichever failed first."""
    db = fresh(starts, "plan", tmp_path)  # a small store
    args = [sys.executable, "-c", _REFUSING, "sweep", "--db", str(db), "--jobs", "2"]
    args += ["--set", "block_size=64", "--vary", "num_blocks=100,200,400,800"]
    for _ in range(3):
        run = subprocess.run(args, capture_output=True, text=True)
        assert run.returncode == 2
        (line,) = run.stderr.strip().splitlines()
        assert line.startswith("Error: sweep point num_blocks=100: ")
        assert line.endswith("refused num_blocks=100")
