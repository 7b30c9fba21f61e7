"""The RAGPulse adapter: components in prompt order with exact chunk sharing, the residual as
request-unique tokens, week segments, session links, rejects and auto-detection."""

from __future__ import annotations

import shutil
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from analyzer.cli import cli
from analyzer.errors import InputFileError
from analyzer.store.ingest import ingest
from analyzer.traces.adapters import ragpulse
from analyzer.traces.readers import detect_format
from tests.conftest import db_rows, write_jsonl

FIXTURES = Path(__file__).parents[2] / "fixtures" / "external" / "ragpulse"
ORDER = ("sys_prompt", "passages_ids", "history", "web_search", "user_input")
TABLES = {
    "sys_prompt": ("1_sys_prompt", "sys_prompt_id"),
    "passages_ids": ("2_passages", "passage_id"),
    "history": ("3_history", "history_id"),
    "web_search": ("5_web_search", "web_search_id"),
    "user_input": ("4_user_input", "user_input_id"),
}


def _lines(path: Path) -> list[dict]:
    return [orjson.loads(x) for x in path.read_bytes().splitlines() if x.strip()]


def _lengths() -> dict[str, dict[int, int]]:
    return {
        key: {r[field]: r["token_length"] for r in _lines(FIXTURES / f"{stem}.jsonl")}
        for key, (stem, field) in TABLES.items()
    }


def _chunks(rec: dict) -> list[tuple[str, int]]:
    return [(key, c) for key in ORDER for c in rec["hash_ids"][key]]


@pytest.fixture
def trace(tmp_path) -> Path:
    directory = shutil.copytree(FIXTURES, tmp_path / "ragpulse")
    return directory / "0_trace.jsonl"


def _stored(db) -> list[tuple]:
    return db_rows(
        db,
        "SELECT line_no, prompt_tokens, prompt_token_ids, output_tokens, timestamp_s, "
        "conversation_id, parent_request_id, extra FROM requests ORDER BY line_no",
    )


def test_every_request_stored_with_its_lengths(trace, db):
    records = _lines(trace)
    src = ingest([trace], db_path=db).sources[0]
    assert src.format == "ragpulse"
    assert (src.num_read, src.num_stored, src.num_rejected) == (60, 60, 0)
    assert src.num_prompt_tokens == sum(r["input_length"] for r in records)
    lengths = _lengths()
    for (_, prompt, tokens, out, _, session, _, extra), rec in zip(
        _stored(db), records, strict=True
    ):
        assert prompt == len(tokens) == rec["input_length"]
        assert (out, session) == (rec["output_length"], rec["session_id"])
        parts = orjson.loads(extra)["component_tokens"]
        for key in ORDER:
            assert parts[key] == sum(lengths[key][c] for c in rec["hash_ids"][key])
        assert 6 <= parts["residual"] <= 12 and sum(parts.values()) == prompt
    assert db_rows(db, "SELECT block_size, provenance FROM sources")[0][0] is None
    assert "RAGPulse" in db_rows(db, "SELECT provenance FROM sources")[0][0]


def _common(a: list, b: list) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def test_shared_prefixes_are_exactly_the_shared_leading_chunks(trace, db):
    records = _lines(trace)
    ingest([trace], db_path=db)
    tokens = [row[2] for row in _stored(db)]
    lengths = _lengths()
    pairs = 0
    for i in range(len(records)):
        for j in range(i):
            a, b = _chunks(records[i]), _chunks(records[j])
            shared = a[: _common(a, b)]
            expected = sum(lengths[key][c] for key, c in shared)
            assert _common(tokens[i], tokens[j]) == expected
            pairs += expected > 0
    assert pairs > 100  # the system prompt and passages are shared widely


def test_residual_tokens_are_unique_to_their_request(trace, db):
    ingest([trace], db_path=db)
    rows = _stored(db)
    seen: dict[int, int] = {}
    for _, _, tokens, *_ in rows:
        for t in set(tokens):
            seen[t] = seen.get(t, 0) + 1
    for _, _, tokens, *rest in rows:
        residual = orjson.loads(rest[-1])["component_tokens"]["residual"]
        assert all(seen[t] == 1 for t in tokens[-residual:])
        assert all(seen[t] > 1 for t in tokens[:3])  # the shared system prompt


def test_second_week_follows_the_first(trace, db):
    records = _lines(trace)
    ingest([trace], db_path=db)
    rows = _stored(db)
    raw = [float(r["timestamp"]) for r in records]
    assert raw[50] == 0.0 and raw[49] > 600_000  # the file restarts its clock at line 51
    got = [r[4] for r in rows]
    assert got[:50] == raw[:50]
    assert got[50:] == [t + 604_800 for t in raw[50:]]
    assert got == sorted(got)
    assert orjson.loads(rows[50][-1])["trace_timestamp"] == "0"


def test_parent_is_the_sessions_previous_request(trace, db):
    records = _lines(trace)
    ingest([trace], db_path=db)
    last: dict[str, str] = {}
    for (line, *_, session, parent, _), rec in zip(_stored(db), records, strict=True):
        assert parent == last.get(rec["session_id"])
        last[session] = f"0_trace:{line}"
    assert sum(1 for r in _stored(db) if r[6]) == 60 - len(last)


def test_bad_records_are_rejected_with_line_and_reason(trace, db):
    good = _lines(trace)[0]
    hashes = good["hash_ids"]
    write_jsonl(
        trace,
        [
            good,
            {**good, "hash_ids": {**hashes, "passages_ids": [7398, 99999]}},
            {**good, "input_length": 10},
            {**good, "timestamp": "noon"},
            {**good, "hash_ids": [1, 2]},
            {k: v for k, v in good.items() if k != "input_length"},
            "{not json",
            {**good, "output_length": -1},
            {**good, "hash_ids": {**hashes, "history": 15200}},
        ],
    )
    src = ingest([trace], db_path=db, fmt="ragpulse").sources[0]
    assert (src.num_read, src.num_stored, src.num_rejected) == (9, 1, 8)
    reasons = {(r.line_no, r.field): r.reason for r in src.rejects}
    assert reasons[(2, "hash_ids.passages_ids[1]")] == "99999 is not in 2_passages.jsonl"
    assert reasons[(3, "input_length")].startswith("10 but the components add up to ")
    assert reasons[(4, "timestamp")] == (
        "expected seconds (a number or numeric string), got 'noon'"
    )
    assert reasons[(5, "hash_ids")] == "expected an object of components, got array"
    assert reasons[(6, "input_length")] == "missing (required in a RAGPulse record)"
    assert reasons[(7, None)].startswith("malformed JSON")
    assert reasons[(8, "output_tokens")] == "-1 is outside [0, 2^31)"
    assert reasons[(9, "hash_ids.history")] == "expected an array, got integer"


def test_missing_or_bad_length_table_is_a_file_error(trace, db):
    (trace.parent / "3_history.jsonl").unlink()
    with pytest.raises(InputFileError, match="3_history.jsonl: no such file"):
        ingest([trace], db_path=db)
    res = CliRunner().invoke(cli, ["ingest", str(trace), "--db", str(db)])
    assert res.exit_code == 2 and "RAGPulse length table" in res.output
    write_jsonl(trace.parent / "3_history.jsonl", [{"history_id": 15200, "token_length": "11"}])
    with pytest.raises(InputFileError, match=r"3_history.jsonl:1: token_length '11' is not"):
        ingest([trace], db_path=db)
    assert db_rows(db, "SELECT count(*) FROM requests") == [(0,)]


def test_auto_detection(trace, tmp_path):
    assert detect_format(trace) == "ragpulse"
    record = _lines(trace)[0]
    assert ragpulse.looks_like(record)
    mooncake = {"timestamp": 0, "input_length": 10, "hash_ids": [3]}
    assert detect_format(write_jsonl(tmp_path / "m.jsonl", [mooncake])) == "mooncake"
    assert not ragpulse.looks_like(mooncake)
    table_row = _lines(FIXTURES / "2_passages.jsonl")[0]
    assert detect_format(write_jsonl(tmp_path / "t.jsonl", [table_row])) == "jsonl"
