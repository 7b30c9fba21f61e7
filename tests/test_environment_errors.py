"""Errors of the machine, not of the input (issue 13, item 9): a full disk, a read-only
folder or store. One line, exit 1, and the store as it was. The real cases need a small
tmpfs (root, where the machine allows mounts); the simulated ones run everywhere."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from analyzer.cli import cli
from analyzer.cli.faults import environment_error
from analyzer.store import runs
from analyzer.store.ingest import ingest

SAMPLES = Path(__file__).parent.parent / "sample_traces"
HPA = [sys.executable, "-c", "from analyzer.cli import main; main()"]


def _behind(shown: BaseException, cause: BaseException) -> BaseException:
    """`shown`, raised while `cause` was handled (as a reset after a failed statement)."""
    shown.__context__ = cause
    return shown


@pytest.mark.parametrize(
    ("exc", "message"),
    [
        (
            OSError(errno.ENOSPC, "No space left on device", "/d/x.html"),
            "No space left on device: /d/x.html; nothing was stored",
        ),
        (
            OSError(errno.EROFS, "Read-only file system"),
            "Read-only file system; nothing was stored",
        ),
        (
            MemoryError(),
            "out of memory while running the command (MemoryError); nothing was stored",
        ),
        (
            duckdb.OutOfMemoryException("Out of Memory Error: Allocation failure"),
            "out of memory while running the command (Out of Memory Error: Allocation failure); "
            "nothing was stored",
        ),
        (
            OSError(errno.ENOMEM, "Cannot allocate memory"),
            "out of memory while running the command ([Errno 12] Cannot allocate memory); "
            "nothing was stored",
        ),
        (
            RuntimeError("can't start new thread"),
            "out of memory while running the command (can't start new thread); nothing was stored",
        ),
        (
            _behind(
                duckdb.TransactionException("Current transaction is aborted (please ROLLBACK)"),
                duckdb.OutOfMemoryException("Out of Memory Error: Failed to allocate block"),
            ),
            "out of memory while running the command (Out of Memory Error: Failed to allocate "
            "block); nothing was stored",
        ),
        (
            _behind(
                duckdb.TransactionException("Current transaction is aborted (please ROLLBACK)"),
                duckdb.Error(
                    "Corrupt database file: computed checksum 1 does not match stored "
                    "checksum 2 in block at location 8663040"
                ),
            ),
            "the store is damaged (Corrupt database file: computed checksum 1 does "
            "not match stored checksum 2 in block at location 8663040); nothing was stored; "
            "restore it from a copy, or ingest the traces into a new store",
        ),
        (
            OSError(
                "Data Corruption Error: Corrupt database file: computed checksum 3 does not "
                "match stored checksum 4 in block at location 4096"
            ),
            "the store is damaged (Data Corruption Error: Corrupt database file: "
            "computed checksum 3 does not match stored checksum 4 in block at location 4096); "
            "nothing was stored; restore it from a copy, or ingest the traces into a new store",
        ),
        (
            duckdb.IOException('IO Error: Could not write file "d.wal": No space left on device'),
            'the database could not be written (IO Error: Could not write file "d.wal": No space '
            "left on device); nothing was stored",
        ),
        (
            duckdb.TransactionException(
                'TransactionContext Error: Failed to commit: Cannot open file "d.wal": '
                "Operation not permitted"
            ),
            "the database could not be written (TransactionContext Error: Failed to commit: "
            'Cannot open file "d.wal": Operation not permitted); nothing was stored',
        ),
        (OSError(errno.ENOENT, "No such file or directory"), None),  # a bug, not the machine
        (duckdb.BinderException("Binder Error: column x"), None),
        (ValueError("bug"), None),
    ],
)
def test_errors_of_the_machine_are_one_line(exc, message, monkeypatch):
    monkeypatch.setattr("analyzer.store.faults._STORES", [])  # no store opened: "the store"
    assert environment_error(exc) == message


@pytest.mark.parametrize(
    ("args", "kept"),
    [
        (["ingest", "--db", "{long}.duckdb", str(SAMPLES / "diagnostic_1088.jsonl")], "stored"),
        (["ingest", "--db", "{tmp}/db.duckdb", "{long}.jsonl"], "stored"),
        (["query", "SELECT 1", "--db", "{long}.duckdb"], "stored"),
        (["report", "--db", "{long}.duckdb", "--out", "{tmp}/r.html"], "written"),  # files only
    ],
)
def test_a_name_past_the_systems_limit_is_one_line(tmp_path, args, kept):
    long = str(tmp_path / ("a" * 260))
    given = [a.format(long=long, tmp=tmp_path) for a in args]
    result = CliRunner().invoke(cli, given)
    named = next(a for a in given if "a" * 260 in a)
    assert result.output == f"Error: File name too long: {named}; nothing was {kept}\n"
    assert result.exit_code == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("stored", "written", "files_only", "said"),
    [
        ((), (), True, "nothing was written"),
        (
            (),
            ("p/a.jsonl",),
            True,
            "written before it: p/a.jsonl (whole); nothing else was written",
        ),
        (
            ("replay run 3",),
            (),
            False,
            "stored before it: replay run 3 (whole); nothing else was stored",
        ),
        (
            ("replay run 3",),
            ("m.csv",),
            False,
            "stored before it: replay run 3; written before it: m.csv (whole); "
            "nothing else was stored or written",
        ),
    ],
)
def test_a_machines_error_says_what_was_stored_and_written(
    monkeypatch, stored, written, files_only, said
):
    from analyzer import interrupts

    monkeypatch.setattr(interrupts, "landed", lambda: stored)
    monkeypatch.setattr(interrupts, "written", lambda: written)
    exc = OSError(errno.ENOSPC, "No space left on device", "p/b.jsonl")
    message = environment_error(exc, files_only=files_only)
    assert message == f"No space left on device: p/b.jsonl; {said}"


def test_out_of_memory_is_one_line_naming_the_stage(tmp_path):
    """A real allocation the machine refuses (numpy's MemoryError for 4 EiB) in a replay, in
    a process of its own: one line naming the stage and what was stored, exit 1 (it traced
    back before; a DuckDB or ENOMEM error said "the database could not be written")."""
    db = tmp_path / "t.duckdb"
    ingest([SAMPLES / "diagnostic_1088.jsonl"], db_path=db)
    code = (
        "import numpy, analyzer.pipeline.replay as r; "
        "r.replay_rows = lambda *a, **k: numpy.empty(2**62, numpy.uint8); "
        "from analyzer.cli import main; main()"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, "replay", "--set", "block_size=16", "--db", str(db)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (
        "Error: out of memory while replaying (Unable to allocate 4.00 EiB for an array with "
        "shape (4611686018427387904,) and data type uint8); nothing was stored\n"
    )
    con = duckdb.connect(str(db), read_only=True)
    try:
        assert "replay_runs" not in {t for (t,) in con.execute("SHOW TABLES").fetchall()} or (
            con.execute("SELECT count(*) FROM replay_runs").fetchall() == [(0,)]
        )
    finally:
        con.close()


def test_out_of_memory_in_an_ingest_is_the_machines_not_the_files(tmp_path):
    """The system refusing memory while an ingest stores its records: the machine's error
    (it said "FILE: cannot be read ([Errno 12] ...)", exit 2, as if the file were bad)."""
    db = tmp_path / "t.duckdb"
    code = (
        "import errno, analyzer.store.ingest as i\n"
        "def refused(*args):\n"
        "    raise OSError(errno.ENOMEM, 'Cannot allocate memory')\n"
        "i._store_batch = refused\n"
        "from analyzer.cli import main\n"
        "main()\n"
    )
    trace = str(SAMPLES / "diagnostic_1088.jsonl")
    done = subprocess.run([sys.executable, "-c", code, "ingest", trace, "--db", str(db)],
                          capture_output=True, text=True)  # fmt: skip
    assert (done.returncode, done.stderr) == (1, (
        "Error: out of memory while storing the input's records ([Errno 12] Cannot allocate "
        "memory); nothing was stored\n"
    ))  # fmt: skip
    assert not db.exists()  # a failed first ingest leaves no store


def _rows(db: Path) -> list:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute("SELECT count(*) FROM replay_requests").fetchall()
    finally:
        con.close()


def test_a_write_error_while_storing_a_run_is_one_line_and_stores_nothing(tmp_path, monkeypatch):
    db = tmp_path / "s.duckdb"
    ingest([SAMPLES / "groups_1500.jsonl"], db_path=db)
    runner = CliRunner()
    assert runner.invoke(cli, ["replay", "--db", str(db), "--set", "block_size=64"]).exit_code == 0
    original = runs._store

    def full_disk(*args, **kwargs):  # fails after the run's rows are inserted
        original(*args, **kwargs)
        raise duckdb.IOException('IO Error: Could not write file "s.duckdb.wal": No space left')

    monkeypatch.setattr(runs, "_store", full_disk)
    result = runner.invoke(cli, ["replay", "--db", str(db), "--set", "block_size=64"])
    assert result.exit_code == 1
    assert (
        result.output.strip()
        .splitlines()[-1]
        .startswith("Error: the database could not be written (IO Error: Could not write file")
    )
    assert _rows(db) == [(32,)]  # run 1 only


@contextlib.contextmanager
def _tmpfs(path: Path, size: str, read_only: bool = False):
    """A tmpfs of `size` at `path` (skips the test where mounting is not allowed)."""
    path.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True
    )
    if made.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.decode().strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def _hpa(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*HPA, *args], capture_output=True, text=True)


def test_a_full_disk_during_ingest_and_replay(tmp_path):
    with _tmpfs(tmp_path / "small", "40m") as small:
        db = small / "d.duckdb"
        assert _hpa("ingest", str(SAMPLES / "mixed.jsonl.gz"), "--db", str(db)).returncode == 0
        free = shutil.disk_usage(small).free
        (small / "filler").write_bytes(b"\0" * (free - 256 * 1024))
        replay = _hpa("replay", "--db", str(db), "--set", "model=qwen3-next-80b-a3b")
        second = _hpa("replay", "--db", str(db), "--set", "model=qwen3-next-80b-a3b")
        failed = [r for r in (replay, second) if r.returncode]
        assert failed, "the disk never filled"
        for r in failed:
            assert r.returncode == 1 and "Traceback" not in r.stderr
            assert r.stderr.strip().endswith("No space left on device); nothing was stored")
        (small / "filler").unlink()
        again = _hpa("replay", "--db", str(db), "--set", "model=qwen3-next-80b-a3b")
        assert again.returncode == 0, again.stderr  # the store took no harm
        con = duckdb.connect(str(db), read_only=True)
        try:
            runs_rows = con.execute(
                "SELECT r.run_id, r.num_requests, count(q.run_id) FROM replay_runs r "
                "LEFT JOIN replay_requests q USING (run_id) GROUP BY ALL ORDER BY 1"
            ).fetchall()
            orphans = con.execute(
                "SELECT count(*) FROM replay_requests "
                "WHERE run_id NOT IN (SELECT run_id FROM replay_runs)"
            ).fetchall()
        finally:
            con.close()
        assert orphans == [(0,)]
        assert all(n == m for _, n, m in runs_rows)  # every run with all its rows
        fresh = small / "new.duckdb"
        (small / "filler").write_bytes(b"\0" * (shutil.disk_usage(small).free - 64 * 1024))
        made = _hpa("ingest", str(SAMPLES / "mixed.jsonl.gz"), "--db", str(fresh))
        assert made.returncode == 1 and "Traceback" not in made.stderr, made.stderr
        assert not fresh.exists()  # a failed first ingest leaves no database


def test_a_read_only_folder_and_store(tmp_path):
    db = tmp_path / "s.duckdb"
    ingest([SAMPLES / "groups_1500.jsonl"], db_path=db)
    assert _hpa("replay", "--db", str(db), "--set", "block_size=64").returncode == 0
    with _tmpfs(tmp_path / "ro", "20m") as ro:
        shutil.copyfile(db, ro / "s.duckdb")
        subprocess.run(["mount", "-o", "remount,ro", str(ro)], check=True)
        report = _hpa("report", "--db", str(ro / "s.duckdb"), "-o", str(tmp_path / "r.html"))
        assert report.returncode == 0, report.stderr  # a reader opens a read-only store
        out = _hpa("report", "--db", str(db), "-o", str(ro / "r.html"))
        assert (out.returncode, out.stderr.strip()) == (
            2,
            f"Error: --out {ro / 'r.html'}: cannot write (Read-only file system)",
        )
        replay = _hpa("replay", "--db", str(ro / "s.duckdb"), "--set", "block_size=64")
        assert replay.returncode == 1 and "Read-only file system" in replay.stderr
        assert "Traceback" not in replay.stderr


def _one_line(run: subprocess.CompletedProcess, ending: str) -> None:
    assert run.returncode == 1 and "Traceback" not in run.stderr, run.stderr
    (line,) = run.stderr.strip().splitlines()
    assert line.endswith(ending), line


def test_a_full_disk_during_match_and_for_a_new_store(tmp_path):
    """(issue 33 item 10: match printed two tracebacks, a rollback after a failed commit; a
    new store on a full disk left a 0-byte file that every later command refused)"""
    with _tmpfs(tmp_path / "small", "40m") as small:
        db = small / "d.duckdb"
        assert _hpa("ingest", str(SAMPLES / "mixed.jsonl.gz"), "--db", str(db)).returncode == 0
        (small / "filler").write_bytes(b"\0" * shutil.disk_usage(small).free)
        _one_line(_hpa("match", "--db", str(db)), "No space left on device); nothing was stored")
        fresh = small / "new.duckdb"
        made = _hpa("ingest", str(SAMPLES / "groups_1500.jsonl"), "--db", str(fresh))
        _one_line(made, "No space left on device); nothing was stored")
        assert not fresh.exists() and not (small / "new.duckdb.wal").exists()
        (small / "filler").unlink()
        assert _hpa("match", "--db", str(db)).returncode == 0  # the store took no harm
    empty = tmp_path / "empty.duckdb"  # what an earlier hpa left on a full disk
    empty.write_bytes(b"")
    refused = _hpa("replay", "--db", str(empty), "--set", "block_size=64")
    assert refused.returncode == 1
    assert refused.stderr == (
        f"Error: {empty}: no such database (an empty file); run `hpa ingest FILE --db {empty}` "
        "first\n"
    )
    assert _hpa("ingest", str(SAMPLES / "groups_1500.jsonl"), "--db", str(empty)).returncode == 0


@contextlib.contextmanager
def _immutable(path: Path, *files: Path):
    """`path` holding copies of `files`, a folder no file can be created in, even by root
    (skips where chattr cannot)."""
    path.mkdir()
    for file in files:
        shutil.copyfile(file, path / file.name)
    made = subprocess.run(["chattr", "+i", str(path)], capture_output=True) if shutil.which(
        "chattr"
    ) else None  # fmt: skip
    if made is None or made.returncode:
        pytest.skip("chattr +i is not allowed here")
    try:
        yield path
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=False)


def test_a_folder_where_the_write_ahead_log_cannot_be_made(tmp_path):
    """(issue 33 item 11: `chattr +i DIR`, EPERM: tracebacks from replay and ingest)"""
    db = tmp_path / "s.duckdb"
    ingest([SAMPLES / "groups_1500.jsonl"], db_path=db)
    with _immutable(tmp_path / "stuck", db) as stuck:
        store = str(stuck / "s.duckdb")
        ending = "Operation not permitted); nothing was stored"
        _one_line(_hpa("replay", "--db", store, "--set", "block_size=64"), ending)
        _one_line(_hpa("match", "--db", store), ending)
        fresh = stuck / "n.duckdb"
        _one_line(_hpa("ingest", str(SAMPLES / "mixed.jsonl.gz"), "--db", str(fresh)), ending)
        assert _hpa("query", "SELECT count(*) FROM requests", "--db", store).returncode == 0
