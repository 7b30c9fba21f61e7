"""Labels the report must show without trusting them (issue 48 item 5): a NUL or an ESC in a
family, a revision, a conversation id, a request id or a replica was written into the page
raw, and 1 MiB labels gave a 42.7 MB page Chromium could not draw in 400 s. Every label shown
is `words.capped` (control characters as \\x1b, 200 characters, the stored length and sha256)
and figures show 32 characters and the hash (docs/report.md#labels)."""

from __future__ import annotations

import re

import duckdb
import pytest
from click.testing import CliRunner
from plotly.offline import get_plotlyjs

from analyzer.cli import cli
from tests.conftest import write_jsonl
from tests.report.test_browser import CHROMIUM, _chromium

MIB = 1 << 20
RED = "fam\x00nul\x1b[31mred\x1b[0m"
TITLE = "m\x00\x1b]0;title\x07v"


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    """(store, report) of 8 requests whose labels are 1 MiB or hold NUL, ESC, BEL and a C1
    CSI: `hpa match`, a replay over the trace's two replicas, `hpa validate`, and the
    report with an incident (two windows)."""
    folder = tmp_path_factory.mktemp("hostile")
    shared = list(range(1, 1201))
    records = [
        {
            "request_id": ("R" * MIB if i == 0 else "") + f"r{i}\x1b[1m\x00",
            "timestamp": float(i),
            "prompt_family": ("F" * MIB + "1", "F" * MIB + "2", RED)[i % 3],
            "model_revision": (TITLE, "M" * MIB)[i % 2],
            "conversation_id": "C" * MIB + str(i % 2),
            "replica": ("a\x9bz", "B" * MIB)[i % 2],
            "prompt_token_ids": shared + [5000 + i] * 400,
            "cached_tokens": 1088,
        }
        for i in range(8)
    ]
    trace = write_jsonl(folder / "t.jsonl", records)
    db, out = folder / "s.duckdb", folder / "report.html"
    for args in (
        ["ingest", trace],
        ["match"],
        ["replay", "--set", "model=qwen3-next-80b-a3b"],
        ["validate"],
        ["report", "-o", out, "--window", "4..", "--baseline", "0..4"],
    ):
        result = CliRunner().invoke(cli, [*map(str, args), "--db", str(db)])
        assert result.exit_code == 0, result.output
    return db, out


def _page_without_plotly(page: bytes) -> bytes:
    return re.sub(rb'<script type="text/javascript">.*?</script>', b"", page, count=1, flags=re.S)


def test_megabyte_labels_give_a_page_of_a_few_megabytes(hostile):
    _, out = hostile
    assert out.stat().st_size < len(get_plotlyjs()) + 1_000_000


def test_no_control_character_reaches_the_page_raw_or_as_json(hostile):
    page = _page_without_plotly(hostile[1].read_bytes())
    raw = sorted({c for c in page if (c < 32 and c not in b"\t\n\r") or c == 127})
    assert raw == []
    assert re.findall(rb"\xc2[\x80-\x9f]", page) == []  # C1, UTF-8 encoded
    assert re.findall(rb"\\u00[01][0-9a-f]|\\u007f|\\u00[89][0-9a-f]", page) == []
    for shown in (
        b"fam\\x00nul\\x1b[31mred\\x1b[0m",
        b"m\\x00\\x1b]0;title\\x07v",
        b"r1\\x1b[1m\\x00",
        b"a\\x9bz",
    ):
        assert shown in page, shown


def _stored(db, sql: str) -> list[tuple[int, str]]:
    """(length, first 8 hex digits of sha256) of each stored label, by DuckDB itself."""
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(f"SELECT DISTINCT length(x), left(sha256(x), 8) FROM ({sql})").fetchall()


@pytest.mark.parametrize(
    ("letter", "sql"),
    [
        ("F", "SELECT prompt_family AS x FROM requests WHERE length(prompt_family) > 100"),
        ("M", "SELECT model_revision AS x FROM requests WHERE length(model_revision) > 100"),
        ("B", "SELECT replica AS x FROM requests WHERE length(replica) > 100"),
    ],
)
def test_a_long_label_shows_200_characters_its_length_and_hash(hostile, letter, sql):
    db, out = hostile
    page = out.read_text(encoding="utf-8")
    assert letter * 201 not in page
    for length, digest in _stored(db, sql):
        assert length > MIB - 1
        if letter != "B":  # a replica is named in the tables; figures name it short
            assert f"{letter * 200}… [{length:,} characters, sha256 {digest}]" in page
        assert f"{letter * 32}… #{digest}" in page  # a figure's axis or legend


@pytest.mark.skipif(not CHROMIUM.exists(), reason="no /usr/bin/chromium")
def test_chromium_draws_the_page(hostile, tmp_path):
    run = _chromium(tmp_path, "--dump-dom", hostile[1].resolve().as_uri())
    assert run.returncode == 0, run.stderr[-2000:]
    collector = re.search(r'<div id="hpa-errors" data-count="(\d+)">([^<]*)</div>', run.stdout)
    assert collector and collector.group(1) == "0", run.stdout[-2000:]
