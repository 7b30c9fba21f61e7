"""A command stopped by SIGTERM or Ctrl-C (issue 48 item 1): one line that says what the
store holds of it, and exit 128 + the signal's number, wherever the signal comes.

The worst moment is the commit: DuckDB has stored the run, and a signal that stopped the
command then would have it say "nothing of this command was stored" (a script that retries
on failure stored the run twice). Here the signal is sent from inside the commit itself
(`analyzer.interrupts.holding`, wrapped), and at seeded moments over a whole command.
Linux only, as tests/test_faults.py.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

from analyzer import interrupts

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="signals")

SAMPLES = Path(__file__).parent.parent / "sample_traces"
MODEL = ("--set", "model=qwen3-next-80b-a3b")

# `hpa` with a signal sent to itself from inside the first commit (`holding`), or a second
# after the store opens (a query's statement is running then).
_IN_COMMIT = """
import contextlib, os, signal, sys
import analyzer.interrupts as interrupts
real, sent = interrupts.holding, []
@contextlib.contextmanager
def holding():
    with real():
        if not sent:
            sent.append(os.kill(os.getpid(), signal.{signal}))
        yield
interrupts.holding = holding
from analyzer.cli import main
sys.argv[0] = "hpa"
main()
"""
_IN_QUERY = """
import os, signal, sys, threading
import duckdb
real = duckdb.connect
def connect(*args, **kwargs):  # the store opens: its statement runs a second later
    threading.Timer(1.0, os.kill, (os.getpid(), signal.{signal})).start()
    return real(*args, **kwargs)
duckdb.connect = connect
from analyzer.cli import main
main()
"""


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    db = tmp_path_factory.mktemp("signals") / "small.duckdb"
    run = subprocess.run(
        [sys.executable, "-m", "analyzer", "ingest", str(SAMPLES / "groups_1500.jsonl"),
         "--db", str(db)], capture_output=True, text=True)  # fmt: skip
    assert run.returncode == 0, run.stderr
    return db


def copy(store: Path, tmp_path: Path) -> Path:
    db = tmp_path / "store.duckdb"
    shutil.copyfile(store, db)
    return db


def count(db: Path, table: str) -> int:
    con = duckdb.connect(str(db), read_only=True)
    try:
        if table not in {name for (name,) in con.execute("SHOW TABLES").fetchall()}:
            return 0
        return con.execute(f"SELECT count(*) FROM {table}").fetchall()[0][0]
    finally:
        con.close()


def hpa_stopped_in_commit(args: list[str], signame: str = "SIGTERM"):
    code = _IN_COMMIT.format(signal=signame)
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True)


def one_line(run: subprocess.CompletedProcess) -> str:
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, run.stderr
    return lines[0]


# command, what the store then holds (table, rows it gained), the line's tail
IN_COMMIT = [
    (["replay", *MODEL, "--policy", "vllm-default,sglang-default"], ("replay_runs", 2),
     "after storing replay runs 1 and 2 (whole); nothing else of this command was stored"),
    (["sweep", *MODEL, "--vary", "num_blocks=200,400,800"], ("sweep_points", 3),
     "after storing replay runs 1-3, sweep 1 (whole); nothing else of this command was stored"),
    (["match"], ("prefix_matches", 32),
     "after storing the prefix matches (whole); nothing else of this command was stored"),
]  # fmt: skip


@pytest.mark.parametrize("args, gained, tail", IN_COMMIT, ids=[c[0][0] for c in IN_COMMIT])
def test_a_signal_in_the_commit_waits_for_it_and_says_what_is_stored(
    store, tmp_path, args, gained, tail
):
    db = copy(store, tmp_path)
    run = hpa_stopped_in_commit([*args, "--db", str(db)])
    assert one_line(run) == f"Error: terminated (SIGTERM) {tail}"
    assert run.returncode == 143
    table, rows = gained
    assert count(db, table) == rows


# `hpa` with a signal sent to itself as a commit that stored something is noted.
_AS_NOTED = """
import os, signal, sys
import analyzer.interrupts as interrupts
real = interrupts.note_landed
def note_landed(what):
    if what:
        os.kill(os.getpid(), signal.{signal})
    real(what)
interrupts.note_landed = note_landed
from analyzer.cli import main
main()
"""


def test_ctrl_c_as_the_close_of_a_first_ingest_commits_keeps_the_store(tmp_path):
    """The ingest's close committed: neither its files nor the new store are taken back
    (an ingest that is stopped before its close forgets its files, and a first one its
    store)."""
    db = tmp_path / "new.duckdb"
    code = _AS_NOTED.format(signal="SIGINT")
    args = ["ingest", str(SAMPLES / "groups_1500.jsonl"), "--db", str(db)]
    run = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True)
    assert one_line(run) == (
        "Error: interrupted (Ctrl-C) after storing the ingest of groups_1500.jsonl (whole); "
        "nothing else of this command was stored"
    )
    assert run.returncode == 130
    assert count(db, "requests") == 32


def test_a_signal_during_a_query_statement_is_one_line(store):
    code = _IN_QUERY.format(signal="SIGTERM")
    sql = "SELECT count(*) FROM range(1000000000000) t(i) WHERE i % 7 = 3"
    run = subprocess.run([sys.executable, "-c", code, "query", sql, "--db", str(store)],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert one_line(run) == "Error: terminated (SIGTERM); nothing of this command was stored"
    assert run.returncode == 143


# `hpa` with a signal sent to itself once a file is written beside its name, before it is
# renamed over it (as the rename's `holding` block begins), or as a file renamed into place
# is noted (after it).
_AT_RENAME = """
import os, signal, sys
import analyzer.interrupts as interrupts
real = interrupts.holding
def holding():
    os.kill(os.getpid(), signal.{signal})
    return real()
interrupts.holding = holding
from analyzer.cli import main
main()
"""
_AS_WRITTEN = """
import os, signal, sys
import analyzer.interrupts as interrupts
real = interrupts.note_written
def note_written(path):
    os.kill(os.getpid(), signal.{signal})
    real(path)
interrupts.note_written = note_written
from analyzer.cli import main
main()
"""

# Commands that write files, not the store (`cli.base.FILE_COMMANDS`)
_FILE_COMMANDS = [
    ["synth", "{out}/t.jsonl", "--num-requests", "5"],
    ["report", "--db", "{db}", "--out", "{out}/r.html"],
    ["metrics", "--db", "{db}", "--out", "{out}/m.prom"],
    ["probe", *MODEL, "--out", "{out}/probe"],
]


def test_the_file_commands_are_commands():
    from analyzer.cli import cli
    from analyzer.cli.base import FILE_COMMANDS

    assert FILE_COMMANDS <= set(cli.commands)


@pytest.fixture(scope="module")
def replayed(store, tmp_path_factory) -> Path:
    db = copy(store, tmp_path_factory.mktemp("replayed"))
    run = subprocess.run([sys.executable, "-m", "analyzer", "replay", *MODEL, "--db", str(db)],
                         capture_output=True, text=True)  # fmt: skip
    assert run.returncode == 0, run.stderr
    return db


@pytest.mark.parametrize("args", _FILE_COMMANDS, ids=[a[0] for a in _FILE_COMMANDS])
def test_ctrl_c_before_a_file_is_written_says_nothing_was_written(replayed, tmp_path, args):
    """Each write is whole or absent (a file beside it, renamed over it): nothing of the
    command is on disk. The line said 'nothing of this command was stored' (it stores
    nothing)."""
    out = tmp_path / "out"
    out.mkdir()
    argv = [a.format(out=out, db=replayed) for a in args]
    code = _AT_RENAME.format(signal="SIGINT")
    run = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True)
    assert one_line(run) == "Error: interrupted (Ctrl-C); nothing of this command was written"
    assert run.returncode == 130
    left = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert left == []  # no file, no temporary file


def test_ctrl_c_after_a_file_is_written_names_it(tmp_path):
    """probe writes three files, each whole: a signal after the first names it."""
    out = tmp_path / "probe"
    code = _AS_WRITTEN.format(signal="SIGINT")
    run = subprocess.run([sys.executable, "-c", code, "probe", *MODEL, "--out", str(out)],
                         capture_output=True, text=True)  # fmt: skip
    assert one_line(run) == (
        f"Error: interrupted (Ctrl-C) after writing {out / 'probe.jsonl'} (whole); nothing "
        "else of this command was written"
    )
    assert run.returncode == 130
    assert [p.name for p in out.iterdir()] == ["probe.jsonl"]


def test_a_store_commands_file_written_before_its_commit_is_named(store, tmp_path):
    """match --out writes its file inside the transaction: a signal as it is noted rolls the
    match back, and the line says the file is there and nothing was stored."""
    db = copy(store, tmp_path)
    out = tmp_path / "m.csv"
    code = _AS_WRITTEN.format(signal="SIGTERM")
    run = subprocess.run([sys.executable, "-c", code, "match", "--db", str(db), "--out",
                          str(out)], capture_output=True, text=True)  # fmt: skip
    assert one_line(run) == (
        f"Error: terminated (SIGTERM) after writing {out} (whole); nothing else of this "
        "command was stored or written"
    )
    assert run.returncode == 143
    assert out.is_file() and count(db, "prefix_matches") == 0


SEEDS = (0, 1, 2, 3)


def test_a_signal_at_any_moment_says_what_the_store_holds(store, tmp_path):
    """Seeded moments over a whole replay of two policies: the line is the truth about the
    store (both runs or none), and the exit code 143, or 0 when the signal came after the
    command had ended."""
    args = ["replay", *MODEL, "--policy", "vllm-default,sglang-default"]
    db = copy(store, tmp_path)
    started = time.perf_counter()
    hpa = [sys.executable, "-m", "analyzer", *args, "--db", str(db)]
    assert subprocess.run(hpa, capture_output=True).returncode == 0
    seconds = time.perf_counter() - started
    for seed in SEEDS:
        db = copy(store, tmp_path)
        proc = subprocess.Popen([*hpa[:-1], str(db)], stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)  # fmt: skip
        time.sleep(random.Random(seed).uniform(0.3, seconds * 1.1))
        proc.send_signal(signal.SIGTERM)
        err = proc.communicate()[1].strip().splitlines()
        runs = count(db, "replay_runs")
        if proc.returncode == 0:
            assert (err, runs) == ([], 2), f"seed {seed}"
            continue
        if proc.returncode == -signal.SIGTERM:  # Python was still starting: no handler yet
            assert (err, runs) == ([], 0), f"seed {seed}"
            continue
        assert proc.returncode == 143, f"seed {seed}: {err}"
        assert len(err) == 1, f"seed {seed}: {err}"
        said = {
            "Error: terminated (SIGTERM); nothing of this command was stored": 0,
            "Error: terminated (SIGTERM) after storing replay runs 1 and 2 (whole); "
            "nothing else of this command was stored": 2,
        }
        assert said.get(err[0]) == runs, f"seed {seed}: {err[0]!r}, {runs} runs stored"


# -- the state machine itself, in this process --------------------------------------


@pytest.fixture
def armed(monkeypatch):
    """This process as the CLI's `main` leaves it, without its handlers (the tests call
    the handler themselves)."""
    monkeypatch.setattr(interrupts._STATE, "driver_pid", os.getpid())
    interrupts.reset()
    yield
    interrupts.reset()


def test_a_signal_while_holding_stops_when_the_block_ends(armed):
    with pytest.raises(interrupts.Stopped) as stop:
        with interrupts.holding():
            interrupts.on_signal(signal.SIGTERM, None)  # as the handler would
            interrupts.note_landed(["replay run 4"])
    assert stop.value.stored == ("replay run 4",) and stop.value.signum == signal.SIGTERM
    assert interrupts.landed() == ("replay run 4",)
    with pytest.raises(interrupts.Stopped) as stop:
        interrupts.on_signal(signal.SIGINT, None)
    assert stop.value.stored == ()
    interrupts.finish()
    interrupts.on_signal(signal.SIGTERM, None)  # ended: nothing happens


LISTINGS = [
    ([], "terminated (SIGTERM); nothing of this command was stored"),
    (["replay run 7"], "terminated (SIGTERM) after storing replay run 7 (whole); "),
    (["replay run 7", "replay run 8"], "terminated (SIGTERM) after storing replay runs 7 and 8"),
    (["replay run 2", "replay run 3", "replay run 4", "sweep 1", "replay run 9"],
     "terminated (SIGTERM) after storing replay runs 2-4, sweep 1, replay run 9 (whole)"),
    (["the prefix matches", "validation 3"],
     "terminated (SIGTERM) after storing the prefix matches, validation 3 (whole)"),
]  # fmt: skip


@pytest.mark.parametrize("landed, start", LISTINGS)
def test_the_line_names_what_was_stored(armed, landed, start):
    interrupts.note_landed(landed)
    assert interrupts.message(signal.SIGTERM).startswith(start)


WRITTEN = [
    ([], [], False, "terminated (SIGTERM); nothing of this command was stored"),
    ([], [], True, "terminated (SIGTERM); nothing of this command was written"),
    ([], ["o/t.jsonl"], True,
     "terminated (SIGTERM) after writing o/t.jsonl (whole); nothing else of this command was "
     "written"),
    ([], ["o/a.csv", "o/b.csv"], True,
     "terminated (SIGTERM) after writing o/a.csv, o/b.csv (whole); nothing else of this "
     "command was written"),
    (["replay run 3"], ["r.jsonl"], False,
     "terminated (SIGTERM) after storing replay run 3 and writing r.jsonl (whole); nothing "
     "else of this command was stored or written"),
]  # fmt: skip


@pytest.mark.parametrize("landed, written, files_only, line", WRITTEN)
def test_the_line_names_what_was_written(armed, landed, written, files_only, line):
    interrupts.note_landed(landed)
    for path in written:
        interrupts.note_written(path)
    assert interrupts.message(signal.SIGTERM, files_only=files_only) == line


def test_a_library_caller_collects_no_notes():
    """Unarmed (no `main`): what commits store is not kept (it would grow without end)."""
    interrupts.reset()
    interrupts.note_landed(["replay run 1"])
    interrupts.note_written("t.jsonl")
    assert interrupts.landed() == () and interrupts.written() == ()


def test_a_signal_during_an_import_is_sent_again_once_imported(monkeypatch):
    """Under load a SIGTERM landed in DuckDB's import, whose module initialisation runs
    Python code (its enums) and aborts on an exception: the process died of SIGABRT with a
    nanobind traceback and no line. The handler raises nowhere inside the import machinery;
    it sends the signal again a moment later."""
    from analyzer import interrupts

    sent = []

    class _Timer:
        def __init__(self, delay_s, call, args):
            sent.append((delay_s, call, args))

        def start(self):
            pass

    monkeypatch.setattr(interrupts.threading, "Timer", _Timer)
    monkeypatch.setattr(interrupts._STATE, "driver_pid", os.getpid())
    monkeypatch.setattr(interrupts._STATE, "finished", False)
    monkeypatch.setattr(interrupts._STATE, "holding", 0)
    monkeypatch.setattr(interrupts._STATE, "signum", None)
    importing = {"on_signal": interrupts.on_signal, "SIGTERM": signal.SIGTERM, "sys": sys}
    exec(  # a frame of Python's import machinery, as an extension's init is called from
        compile("on_signal(SIGTERM, sys._getframe())", "<frozen importlib._bootstrap>", "exec"),
        importing,
    )
    assert sent == [(interrupts.RESEND_S, os.kill, (os.getpid(), signal.SIGTERM))]
    with pytest.raises(interrupts.Stopped):  # anywhere else it stops the command at once
        interrupts.on_signal(signal.SIGTERM, sys._getframe())
