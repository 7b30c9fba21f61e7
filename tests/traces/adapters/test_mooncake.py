"""The Mooncake adapter: stored values, rejects, auto-detection, and a replay cross-check."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from analyzer.cli import cli
from analyzer.pipeline.replay import run_replay
from analyzer.sim.dispatch import make_policy
from analyzer.store.ingest import ingest
from analyzer.traces.readers import detect_format
from tests.conftest import db_rows, write_jsonl

FIXTURES = Path(__file__).parents[2] / "fixtures" / "external" / "mooncake"
CONVERSATION = FIXTURES / "conversation_trace_head40.jsonl"
SYNTHETIC = FIXTURES / "synthetic_trace_head50.jsonl"
BLOCK = 512


def _scope(path: Path) -> str:
    """The file's id scope: the name before the first dot + 8 hex digits of its sha256."""
    return f"{path.name.split('.')[0]}.{hashlib.sha256(path.read_bytes()).hexdigest()[:8]}"


def _records(path: Path) -> list[dict]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


@pytest.mark.parametrize("fixture", [CONVERSATION, SYNTHETIC])
def test_stored_values_match_the_source_records(tmp_path, db, fixture):
    path = shutil.copy(fixture, tmp_path / fixture.name)
    result = ingest([path], db_path=db, fmt="auto")
    source = result.sources[0]
    records = _records(fixture)
    assert source.format == "mooncake"
    assert (source.num_read, source.num_stored, source.num_rejected) == (
        len(records),
        len(records),
        0,
    )
    assert source.num_prompt_tokens == sum(r["input_length"] for r in records)
    rows = db_rows(
        db,
        "SELECT request_id, line_no, timestamp_s, prompt_tokens, block_size, "
        "output_tokens, prompt_token_ids, extra FROM requests ORDER BY line_no",
    )
    scope = _scope(path)
    expected = [
        (
            f"{scope}:{i}",
            i,
            r["timestamp"] / 1000,
            r["input_length"],
            BLOCK,
            r["output_length"],
            None,
            None,
        )
        for i, r in enumerate(records, start=1)
    ]
    assert rows == expected
    # The trace's ids, relabelled for the file: equal exactly where the trace's are.
    stored = [ids for (ids,) in db_rows(db, "SELECT block_hash_ids FROM requests ORDER BY line_no")]
    relabel = {}
    for ids, r in zip(stored, records, strict=True):
        assert len(ids) == len(r["hash_ids"])
        for mine, theirs in zip(ids, r["hash_ids"], strict=True):
            assert relabel.setdefault(theirs, mine) == mine
    assert len(set(relabel.values())) == len(relabel)
    assert db_rows(db, "SELECT format, num_read, num_stored, num_rejected FROM sources") == [
        ("mooncake", len(records), len(records), 0)
    ]


def test_bad_records_are_rejected_with_line_and_reason(tmp_path, db):
    good = {"timestamp": 1500, "input_length": 600, "output_length": 7, "hash_ids": [1, 2]}
    path = write_jsonl(
        tmp_path / "mc.jsonl",
        [
            good,
            {"timestamp": 0, "input_length": 6758, "output_length": 5, "hash_ids": [1]},
            "{not json",
            {"timestamp": "soon", "input_length": 10, "output_length": 1, "hash_ids": [3]},
            {"timestamp": 0, "input_length": 10, "output_length": 1},
            {"timestamp": 0, "input_length": 10, "output_length": -1, "hash_ids": [3]},
            "",
            {**good, "session": "s1"},
        ],
    )
    result = ingest([path], db_path=db, fmt="mooncake")
    src = result.sources[0]
    assert (src.num_read, src.num_stored, src.num_rejected) == (7, 2, 5)
    assert src.num_read == src.num_stored + src.num_rejected
    reasons = {(r.line_no, r.field): r.reason for r in src.rejects}
    assert (
        reasons[(2, "prompt_tokens")] == "6758 tokens need 14 blocks of 512, block_hash_ids has 1"
    )
    assert reasons[(3, None)].startswith("malformed JSON")
    assert reasons[(4, "timestamp")] == "expected milliseconds (a number), got string"
    assert reasons[(5, "hash_ids")] == "missing (required in a Mooncake record)"
    assert reasons[(6, "output_tokens")] == "-1 is outside [0, 2^31)"
    rows = db_rows(db, "SELECT request_id, timestamp_s, prompt_tokens, extra FROM requests")
    scope = _scope(path)
    assert sorted(rows) == [
        (f"{scope}:1", 1.5, 600, None),
        (f"{scope}:8", 1.5, 600, '{"session":"s1"}'),
    ]
    stored = db_rows(db, "SELECT line_no, field FROM rejects ORDER BY line_no")
    assert stored == [
        (2, "prompt_tokens"),
        (3, None),
        (4, "timestamp"),
        (5, "hash_ids"),
        (6, "output_tokens"),
    ]


def test_timestamps_no_float_holds_name_the_field(tmp_path, db):
    """NaN and 1e400 milliseconds (which orjson refuses) were 'malformed JSON', no field."""
    path = tmp_path / "mc.jsonl"
    good = '"input_length": 600, "output_length": 7, "hash_ids": [1, 2]}'
    path.write_text(
        "".join(f'{{"timestamp": {ms}, {good}\n' for ms in ("1500", "NaN", "1e400", "Infinity"))
    )
    result = ingest([path], db_path=db, fmt="mooncake")
    src = result.sources[0]
    assert (src.num_read, src.num_stored, src.num_rejected) == (4, 1, 3)
    assert [(r.line_no, r.field, r.reason) for r in src.rejects] == [
        (2, "timestamp", "NaN is not a finite number"),
        (3, "timestamp", "1e400 is outside the range of a float (-1.8e308 to 1.8e308)"),
        (4, "timestamp", "Infinity is not a finite number"),
    ]


def test_auto_detection(tmp_path):
    mc = {"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [3]}
    assert detect_format(write_jsonl(tmp_path / "a.jsonl", ["", mc])) == "mooncake"
    assert detect_format(write_jsonl(tmp_path / "a.jsonl.gz", [mc])) == "mooncake"
    assert detect_format(write_jsonl(tmp_path / "noext", [mc])) == "mooncake"
    bailian = {**mc, "chat_id": 1, "parent_chat_id": -1, "turn": 1, "type": "text"}
    assert detect_format(write_jsonl(tmp_path / "b.jsonl", [bailian])) == "bailian"
    canonical = {"request_id": "r", "block_hash_ids": [3], "block_size": 16, **mc}
    assert detect_format(write_jsonl(tmp_path / "c.jsonl", [canonical])) == "jsonl"
    assert detect_format(write_jsonl(tmp_path / "d.jsonl", ["{not json"])) == "jsonl"


def test_cli_auto_and_forced_format(tmp_path, db):
    path = shutil.copy(CONVERSATION, tmp_path / "conv.jsonl")
    res = CliRunner().invoke(cli, ["ingest", str(path), "--db", str(db)])
    assert res.exit_code == 0, res.output
    assert "read 40 = stored 40 + rejected 0" in res.output
    other = shutil.copy(SYNTHETIC, tmp_path / "syn.txt")
    res = CliRunner().invoke(cli, ["ingest", str(other), "--db", str(db), "--format", "mooncake"])
    assert res.exit_code == 0, res.output
    assert db_rows(db, "SELECT format FROM sources ORDER BY source_id") == [
        ("mooncake",),
        ("mooncake",),
    ]
    # Forced as canonical JSONL, a Mooncake record has no request_id.
    third = write_jsonl(tmp_path / "x.jsonl", [{"input_length": 1, "hash_ids": [9]}])
    res = CliRunner().invoke(cli, ["ingest", str(third), "--db", str(db), "--format", "jsonl"])
    assert res.exit_code == 1
    assert "request_id: missing (required)" in res.output


def _independent_hit_ratio(records: list[dict]) -> float:
    """Unbounded full-attention prefix cache, last half of requests, vLLM's rules:
    a hit is capped at prompt_tokens - 1 and counts only whole blocks; only whole
    blocks of a prompt are cached."""
    order = sorted(range(len(records)), key=lambda i: (records[i]["timestamp"], i))
    cached: set[tuple[int, ...]] = set()
    hit = total = 0
    for seq, i in enumerate(order):
        ids, tokens = records[i]["hash_ids"], records[i]["input_length"]
        matched = 0
        while matched < (tokens - 1) // BLOCK and tuple(ids[: matched + 1]) in cached:
            matched += 1
        if seq >= len(records) / 2:
            hit += matched * BLOCK
            total += tokens
        cached.update(tuple(ids[:k]) for k in range(1, tokens // BLOCK + 1))
    return hit / total


@pytest.mark.parametrize("fixture", [CONVERSATION, SYNTHETIC])
def test_unbounded_hit_ratio_matches_an_independent_count(tmp_path, db, fixture):
    records = _records(fixture)
    ingest([shutil.copy(fixture, tmp_path / fixture.name)], db_path=db)
    outcome = run_replay(make_policy({"groups": ["full_attention"], "block_size": 512}), db_path=db)
    n = len(records)
    hit, total = db_rows(
        db,
        "SELECT sum(hit_tokens), sum(prompt_tokens) FROM replay_requests "
        f"WHERE run_id = {outcome.run_id} AND arrival_seq >= {n / 2}",
    )[0]
    expected = _independent_hit_ratio(records)
    assert expected > 0
    assert hit / total == pytest.approx(expected, abs=1e-12)


def test_files_never_share_ids_even_with_one_name(tmp_path, db):
    # Issue 13, item 6: ids came from the file stem, so day2's file was rejected whole as
    # duplicates of day1's, and both traces number their blocks from 0.
    day1, day2 = tmp_path / "day1", tmp_path / "day2"
    day1.mkdir()
    day2.mkdir()
    first = shutil.copy(CONVERSATION, day1 / "conversation_trace.jsonl")
    second = shutil.copy(SYNTHETIC, day2 / "conversation_trace.jsonl")
    sources = ingest([first, second], db_path=db).sources
    assert [(s.num_read, s.num_stored) for s in sources] == [(40, 40), (50, 50)]
    ids = db_rows(
        db,
        "SELECT source_id, list_distinct(flatten(list(block_hash_ids))) FROM requests "
        "GROUP BY source_id ORDER BY source_id",
    )
    assert not set(ids[0][1]) & set(ids[1][1])
    raw = [{h for r in _records(f) for h in r["hash_ids"]} for f in (CONVERSATION, SYNTHETIC)]
    assert raw[0] & raw[1]  # the trace's own ids would have shared blocks
    names = db_rows(db, "SELECT DISTINCT split_part(request_id, ':', 1) FROM requests")
    assert sorted(names) == sorted([(_scope(first),), (_scope(second),)])
