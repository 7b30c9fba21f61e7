"""What the commands print of stored text (issue 48 item 4: `hpa metrics` on a pipe lost the
ANSI sequences of a label, which click strips from output that is not a terminal, while a
terminal got them raw). Data (Prometheus text, CSV, JSON) holds the stored bytes, escaped only
as its format says, the same on a terminal, a pipe and in --out; text for people (tables,
lines, compare's sentence) shows control characters as \\x1b, the same everywhere
(docs/commands.md#what-is-printed)."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
import tty
from pathlib import Path

import pytest
from click.testing import CliRunner

from analyzer.cli import cli
from analyzer.words import capped, shown
from tests.conftest import write_jsonl

FAMILY = "\x1b[31mred\x1b[0m"  # ESC [ ... m: what click strips
OTHER = 'q"b\\s\nn\x00z'  # what the exposition format escapes, and a NUL it does not
REVISION = "rev\x9b1"  # C1 CSI
HPA = [sys.executable, "-c", "from analyzer.cli import main; main()"]


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    """Eight requests of two families: the first four repeat their family's prompt (hits),
    the last four are new (the hits fall: compare's sentence names the family)."""
    folder = tmp_path_factory.mktemp("printed")
    records = [
        {
            "request_id": f"r{i}",
            "timestamp": float(i),
            "prompt_family": (FAMILY, OTHER)[i % 2],
            "model_revision": REVISION,
            "prompt_token_ids": [1 + i % 2] * 32 if i < 4 else [100 + i] * 32,
        }
        for i in range(8)
    ]
    trace = write_jsonl(folder / "t.jsonl", records)
    db = folder / "s.duckdb"
    for args in (
        ["ingest", trace],
        ["replay", "--policy", "attention-only", "--set", "block_size=16"],
    ):
        result = CliRunner().invoke(cli, [*map(str, args), "--db", str(db)])
        assert result.exit_code == 0, result.output
    return db


def _stdout(db: Path, *args: str) -> str:
    result = CliRunner().invoke(cli, [*args, "--db", str(db)])  # not a terminal, as a pipe
    assert result.exit_code == 0, result.output
    return result.stdout


def test_metrics_labels_are_the_stored_bytes_escaped_as_the_format_says(store, tmp_path):
    text = _stdout(store, "metrics")
    assert (
        'vllm:prefix_cache_queries_total{run="1",prompt_family="\x1b[31mred\x1b[0m",'
        'model_revision="rev\x9b1"} 128\n'
    ) in text
    assert (
        'vllm:prefix_cache_queries_total{run="1",prompt_family="q\\"b\\\\s\\nn\x00z",'
        'model_revision="rev\x9b1"} 128\n'
    ) in text
    out = tmp_path / "m.prom"
    assert _stdout(store, "metrics", "--out", str(out)) == f"run 1: wrote {out}\n"
    assert out.read_bytes() == text.encode()


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["query", "SELECT prompt_family, model_revision FROM requests LIMIT 2", "--format",
             "csv"],
            "\x1b[31mred\x1b[0m,rev\x9b1\n",
        ),
        (
            ["query", "SELECT prompt_family FROM requests LIMIT 2", "--format", "json"],
            '{"prompt_family":"\\u001b[31mred\\u001b[0m"}\n',
        ),
        (
            ["query", "SELECT prompt_family, model_revision FROM requests LIMIT 2"],
            "\\x1b[31mred\\x1b[0m  rev\\x9b1\n",
        ),
        (
            ["compare", "--window", "4..", "--baseline", "0..4"],
            "largest in \\x1b[31mred\\x1b[0m @ rev\\x9b1 (+50.0 points",
        ),
        (
            ["compare", "--window", "4..", "--baseline", "0..4"],
            "q\"b\\s\\x0an\\x00z     rev\\x9b1",
        ),
        (
            ["replay", "--policy", "attention-only", "--set", "block_size=16"],
            "\\x1b[31mred\\x1b[0m  rev\\x9b1                   4            128          16",
        ),
    ],
)  # fmt: skip
def test_data_holds_the_stored_text_and_text_for_people_shows_controls(store, args, line):
    assert line in _stdout(store, *args)


def _on_a_terminal(args: list[str]) -> bytes:
    """What `hpa ARGS` writes to stdout when stdout is a terminal (raw mode: no CR added)."""
    leader, follower = pty.openpty()
    tty.setraw(follower)
    with subprocess.Popen([*HPA, *args], stdout=follower, stderr=subprocess.DEVNULL) as proc:
        os.close(follower)
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            chunks.append(chunk)
        assert proc.wait() == 0
    os.close(leader)
    return b"".join(chunks)


@pytest.mark.parametrize(
    "args",
    [
        ["metrics"],
        ["query", "SELECT prompt_family, model_revision FROM requests", "--format", "csv"],
        ["query", "SELECT prompt_family, model_revision FROM requests"],
        ["compare", "--window", "4..", "--baseline", "0..4"],
    ],
)
def test_a_terminal_gets_the_bytes_a_pipe_gets(store, args):
    """A real terminal (a pseudo-terminal: click's isatty() is true) against a real pipe."""
    args = [*args, "--db", str(store)]
    piped = subprocess.run([*HPA, *args], capture_output=True, check=True).stdout
    assert FAMILY.encode() in piped or b"\\x1b[31mred\\x1b[0m" in piped
    assert _on_a_terminal(args) == piped


@pytest.mark.parametrize(
    ("text", "seen"),
    [
        ("plain · é", "plain · é"),
        ("a\x1b[31mb\x00\n\t\x7f\x9b", "a\\x1b[31mb\\x00\\x0a\\x09\\x7f\\x9b"),
        ("a\\x1b", "a\\x1b"),  # a backslash is kept: the four characters as stored
    ],
)
def test_shown_writes_every_control_character_as_hex(text, seen):
    assert shown(text) == seen


@pytest.mark.parametrize(
    ("text", "seen"),
    [
        ("F" * 200, "F" * 200),
        ("F" * 201, "F" * 200 + "… [201 characters, sha256 52eb493f]"),  # as DuckDB's sha256
        ("\x1b" * 300, "\\x1b" * 200 + "… [300 characters, sha256 c96261e2]"),
    ],
)  # fmt: skip
def test_capped_cuts_a_long_label_and_names_its_length_and_hash(text, seen):
    assert capped(text) == seen


def test_the_sentence_names_a_long_family_capped(store):
    """Two 1,000-character families that differ in their last character stay two."""
    from analyzer.metrics.attribution import _label

    a, b = "f" * 999 + "a", "f" * 999 + "b"
    assert _label(a, REVISION) == f"{capped(a)} @ rev\\x9b1"
    assert capped(a) != capped(b) and len(_label(a, REVISION)) < 260
