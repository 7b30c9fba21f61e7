"""A line longer than HPA_MAX_LINE_MIB is one reject, read past in chunks (issue 48, item 3).

A 2 MB .gz holding one 2 GiB line ran 280 s to 3.6 GB with no answer. Every reader of
line-oriented input (JSON Lines and its adapters, CSV, server logs; compressed or not) now
takes lines through `jsonlines.whole_lines`, which gives an over-long line as a LongLine
without holding it: its reject names the file, the line and its length, and the rest of the
file is read. The tests lower the limit to 1 MiB through the setting rather than write
giant files.
"""

from __future__ import annotations

import gzip
import io
import os
import shutil
import subprocess
import sys
import tracemalloc
from pathlib import Path

import orjson
import pytest

from analyzer.errors import ConfigError, InputFileError
from analyzer.store.ingest import ingest
from analyzer.traces import readers
from analyzer.traces.jsonlines import LongLine, max_line_bytes, whole_lines
from tests.conftest import db_rows

MIB = 1 << 20
FIXTURES = Path(__file__).parents[1] / "fixtures" / "external"
HPA = [sys.executable, "-c", "from analyzer.cli import main; main()"]


def _reason(num_bytes: int) -> str:
    return (
        f"a line of {num_bytes:,} bytes, longer than the limit of 1 MiB (HPA_MAX_LINE_MIB): "
        "skipped unread"
    )


def _jsonl(n: int) -> list[bytes]:
    return [orjson.dumps({"request_id": f"r{i}", "prompt_token_ids": [1, 2, i]}) for i in range(n)]


def _long_ids(key: bytes = b'"prompt_token_ids"') -> bytes:
    """A well-formed record 3 MiB long: stored whole before the limit."""
    return b'{"request_id": "long", ' + key + b": [" + b"7, " * MIB + b"7]}"


def _mooncake(n: int) -> list[bytes]:
    return [
        orjson.dumps({"timestamp": i, "input_length": 20, "output_length": 1, "hash_ids": [i]})
        for i in range(n)
    ]


def _log(name: str) -> list[bytes]:
    return (FIXTURES / name).read_bytes().rstrip(b"\n").split(b"\n")


LONG_LOG_LINE = b"INFO 11-29 14:03:12 logger.py:37] debug dump: " + b"x" * (3 * MIB)
# (name, file name, --format, the file's lines, the over-long line, where it goes (0-based))
CASES = [
    ("jsonl", "t.jsonl", "auto", _jsonl(5), _long_ids(), 2),
    ("jsonl first line", "t.jsonl", "auto", _jsonl(5), _long_ids(), 0),
    ("jsonl last line", "t.jsonl", "auto", _jsonl(5), _long_ids(), 5),
    ("jsonl.gz", "t.jsonl.gz", "auto", _jsonl(5), _long_ids(), 3),
    (
        "csv",
        "t.csv",
        "auto",
        [b"request_id,prompt_token_ids", b"a,1 2", b"b,3 4", b"c,5"],
        b"long," + b"7 " * (3 * MIB // 2),
        2,
    ),
    ("mooncake", "t.jsonl", "mooncake", _mooncake(4), _long_ids(b'"hash_ids"'), 1),
    ("vllm_log", "vllm.log", "vllm_log", _log("vllm_log/vllm_server.log"), LONG_LOG_LINE, 7),
    (
        "sglang_log",
        "sglang.log",
        "sglang_log",
        _log("sglang_log/sglang_server.log"),
        LONG_LOG_LINE,
        3,
    ),
]


def _write(path: Path, lines: list[bytes]) -> Path:
    data = b"\n".join(lines) + b"\n"
    path.write_bytes(gzip.compress(data, mtime=0) if path.suffix == ".gz" else data)
    return path


@pytest.mark.parametrize(
    ("name", "file_name", "fmt", "lines", "long", "at"), CASES, ids=[c[0] for c in CASES]
)
def test_a_line_past_the_limit_is_one_reject_and_the_rest_is_read(
    tmp_path, monkeypatch, name, file_name, fmt, lines, long, at
):
    monkeypatch.setenv("HPA_MAX_LINE_MIB", "1")
    (tmp_path / "with").mkdir()
    (tmp_path / "without").mkdir()
    without = _write(tmp_path / "without" / file_name, lines)
    path = _write(tmp_path / "with" / file_name, [*lines[:at], long, *lines[at:]])
    expected = ingest([without], db_path=tmp_path / "without.duckdb", fmt=fmt).sources[0]

    got = ingest([path], db_path=tmp_path / "with.duckdb", fmt=fmt).sources[0]

    assert got.num_stored == expected.num_stored > 0
    assert got.num_rejected == expected.num_rejected + 1
    assert got.num_read == got.num_stored + got.num_rejected
    assert (at + 1, None, _reason(len(long))) in {
        (r.line_no, r.field, r.reason) for r in got.rejects
    }
    excerpt = db_rows(
        tmp_path / "with.duckdb", f"SELECT raw_excerpt FROM rejects WHERE line_no = {at + 1}"
    )
    assert excerpt == [(long[:200].decode(),)]


def test_the_token_scanner_never_gets_a_line_past_the_limit(tmp_path, monkeypatch):
    """The fast path scans bodies of 1 MiB and more in C: whole_lines' bodies, none of which
    holds the over-long line (token_scan_loop.c reads only what it is given)."""
    monkeypatch.setenv("HPA_MAX_LINE_MIB", "1")
    lines = [
        orjson.dumps({"request_id": f"r{i}", "prompt_token_ids": list(range(i, i + 900))})
        for i in range(600)
    ]
    path = _write(tmp_path / "t.jsonl", [*lines[:300], _long_ids(), *lines[300:]])
    longest: list[int] = []
    scan = readers.strip_token_arrays

    def watched(body: bytes, num_lines: int):
        longest.append(max(len(line) for line in body.split(b"\n")))
        return scan(body, num_lines)

    monkeypatch.setattr(readers, "strip_token_arrays", watched)
    result = ingest([path], db_path=tmp_path / "t.duckdb").sources[0]
    assert (result.num_stored, result.num_rejected) == (600, 1)
    assert longest and max(longest) <= MIB


class _Endless(io.RawIOBase):
    """A stream of `size` bytes of 'x' then a newline and a short line, made as it is read
    (a fresh object each read, as a decompressor gives)."""

    def __init__(self, size: int) -> None:
        self.left = size

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        if self.left <= 0:
            return b"\nok\n" if self.left == 0 and not setattr(self, "left", -1) else b""
        n = min(n, self.left)
        self.left -= n
        return b"x" * n


def test_a_line_past_the_limit_is_never_held():
    """64 MiB of one line under a 4 MiB limit, read 1 MiB at a time: Python's allocations
    stay under the limit and two chunks (before, the line was gathered whole, 64 MiB)."""
    tracemalloc.start()
    try:
        pieces = list(whole_lines(_Endless(64 * MIB), lambda: None, MIB, 4 * MIB))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert pieces == [LongLine(1, 64 * MIB, 4 * MIB, b"x" * 800), (b"ok\n", 2)]
    assert peak < 6 * MIB


def test_a_side_table_line_past_the_limit_is_a_file_error(tmp_path, monkeypatch):
    monkeypatch.setenv("HPA_MAX_LINE_MIB", "1")
    for f in (FIXTURES / "ragpulse").glob("*.jsonl"):
        shutil.copy(f, tmp_path / f.name)
    table = tmp_path / "2_passages.jsonl"
    num_lines = table.read_bytes().count(b"\n")
    with table.open("ab") as f:
        f.write(b'{"passage_id": 1, "token_length": 3, "pad": "' + b"p" * (2 * MIB) + b'"}\n')
    with pytest.raises(InputFileError) as caught:
        ingest([tmp_path / "0_trace.jsonl"], db_path=tmp_path / "t.duckdb", fmt="ragpulse")
    assert str(caught.value) == (
        f"{table}:{num_lines + 1}: not a length-table row ({_reason(2 * MIB + 47)})"
    )


def test_the_limit_is_256_mib_unless_set(monkeypatch):
    monkeypatch.delenv("HPA_MAX_LINE_MIB", raising=False)
    assert max_line_bytes() == 256 * MIB
    monkeypatch.setenv("HPA_MAX_LINE_MIB", "1024")
    assert max_line_bytes() == 1024 * MIB


@pytest.mark.parametrize("value", ["0", "1.5", "-3", "lots"])
def test_a_bad_setting_is_an_error_before_anything_is_read(tmp_path, monkeypatch, value):
    monkeypatch.setenv("HPA_MAX_LINE_MIB", value)
    path = _write(tmp_path / "t.jsonl", _jsonl(2))
    with pytest.raises(ConfigError) as caught:
        ingest([path], db_path=tmp_path / "t.duckdb")
    assert str(caught.value) == (
        f"HPA_MAX_LINE_MIB={value!r}: expected the longest input line in MiB, "
        "a whole number from 1 (default 256)"
    )
    assert not (tmp_path / "t.duckdb").exists()


def _hpa(tmp_path: Path, env_value: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HPA_MAX_LINE_MIB": env_value}
    return subprocess.run([*HPA, *args], capture_output=True, text=True, env=env, cwd=tmp_path)


def test_the_setting_through_the_environment_of_hpa_ingest(tmp_path):
    """The command as a user runs it: a .gz with a 3 MiB line under HPA_MAX_LINE_MIB=1 (a
    fault test: the environment sets the limit), then a setting that is no number."""
    _write(tmp_path / "t.jsonl.gz", [*_jsonl(2), _long_ids(), *_jsonl(3)[2:]])
    run = _hpa(tmp_path, "1", "ingest", "t.jsonl.gz", "--db", "t.duckdb")
    assert (run.returncode, run.stdout, run.stderr) == (
        1,
        "t.jsonl.gz: read 4 = stored 3 + rejected 1 (9 prompt tokens)\n",
        f"  rejected t.jsonl.gz:3: {_reason(len(_long_ids()))}\n",
    )
    run = _hpa(tmp_path, "one", "ingest", "t.jsonl.gz", "--db", "u.duckdb")
    assert (run.returncode, run.stdout) == (2, "")
    assert run.stderr == (
        "Error: HPA_MAX_LINE_MIB='one': expected the longest input line in MiB, "
        "a whole number from 1 (default 256)\n"
    )
