"""A store another process holds (DuckDB: one writer process a file) is one line naming the
holder, its hpa command where it runs one, and what to do (issue 33 item 13: it read
"cannot open as a DuckDB database (IO Error: Could not set lock ...)")."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from analyzer.cli import cli
from analyzer.store.db import connect
from analyzer.store.locks import hpa_command

HOLD = "import duckdb, sys, time; c = duckdb.connect(sys.argv[1]); print('held', flush=True); "
HOLD += "time.sleep(60)"


@pytest.mark.parametrize(
    "argv, command",
    [
        (["/v/bin/python3", "/v/bin/hpa", "replay", "--db", "x"], "hpa replay --db x"),
        (["/usr/local/bin/hpa", "match"], "hpa match"),
        (["python", "-m", "analyzer", "sweep", "--jobs", "2"], "hpa sweep --jobs 2"),
        (["python", "-m", "analyzer.cli", "ingest", "t.jsonl"], "hpa ingest t.jsonl"),
        (["python", "-c", "import duckdb"], None),
        (["duckdb", "x.duckdb"], None),
    ],
)
def test_an_hpa_command_is_named_from_its_command_line(argv, command):
    assert hpa_command(argv) == command


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("args", [["query", "SELECT 1"], ["replay", "--set", "block_size=64"]])
def test_a_store_another_process_holds_names_it(tmp_path, args):
    db = tmp_path / "held.duckdb"
    connect(db).close()
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(db)], stdout=subprocess.PIPE,
                              text=True)  # fmt: skip
    try:
        assert holder.stdout.readline() == "held\n"
        exe = os.readlink(f"/proc/{holder.pid}/exe")  # the program, as DuckDB names it
        result = CliRunner().invoke(cli, [*args, "--db", str(db)])
    finally:
        holder.kill()
        holder.wait()
    assert result.exit_code == 1
    assert result.output == (
        f"Error: {db}: locked by another process (pid {holder.pid}: {exe}); run this again "
        "when it has ended\n"
    )
