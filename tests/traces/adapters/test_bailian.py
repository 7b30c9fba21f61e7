"""The Qwen-Bailian adapter, on hand-written records in the documented schema (the real
trace is Git LFS only): stored values, lineage, chained namespaced ids, rejects, detection."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import orjson
import pytest

from analyzer.store.ingest import ingest
from analyzer.traces.adapters import bailian
from analyzer.traces.readers import detect_format
from tests.conftest import db_rows, write_jsonl

FIXTURE = (
    Path(__file__).parents[2]
    / "fixtures"
    / "external"
    / "bailian"
    / "qwen_handwritten_blksz_16.jsonl"
)


def _scope(path: Path) -> str:
    """The file's id scope: the name before the first dot + 8 hex digits of its sha256."""
    return f"{path.name.split('.')[0]}.{hashlib.sha256(path.read_bytes()).hexdigest()[:8]}"


SCOPE = _scope(FIXTURE)


def _records() -> list[dict]:
    return [orjson.loads(x) for x in FIXTURE.read_bytes().splitlines() if x.strip()]


@pytest.fixture
def trace(tmp_path) -> Path:
    return shutil.copy(FIXTURE, tmp_path / FIXTURE.name)


def _ids(db) -> dict[int, list[int]]:
    rows = db_rows(db, "SELECT request_id, block_hash_ids FROM requests")
    return {int(rid.split(":")[1]): ids for rid, ids in rows}


def test_stored_values_and_the_one_reject(trace, db):
    src = ingest([trace], db_path=db).sources[0]
    assert src.format == "bailian"
    assert (src.num_read, src.num_stored, src.num_rejected) == (10, 9, 1)
    (reject,) = src.rejects
    assert (reject.line_no, reject.field, reject.reason) == (
        9,
        "prompt_tokens",
        "100 tokens need 7 blocks of 16, block_hash_ids has 2",
    )
    rows = db_rows(
        db,
        "SELECT request_id, timestamp_s, prompt_tokens, len(block_hash_ids), block_size, "
        "output_tokens, prompt_family, prompt_family_source, extra FROM requests ORDER BY line_no",
    )
    expected = [
        (
            f"{SCOPE}:{r['chat_id']}",
            r["timestamp"],
            r["input_length"],
            len(r["hash_ids"]),
            16,
            r["output_length"],
            r["type"],
            "trace",
            orjson.dumps({"turn": r["turn"]}).decode(),
        )
        for r in _records()
        if r["chat_id"] != 70
    ]
    assert rows == expected
    assert db_rows(db, "SELECT block_size, provenance LIKE '%qwen-bailian%' FROM sources") == [
        (16, True)
    ]


def test_parents_and_conversation_roots(trace, db):
    ingest([trace], db_path=db)
    got = {
        rid.split(":")[1]: (parent, conversation)
        for rid, parent, conversation in db_rows(
            db, "SELECT request_id, parent_request_id, conversation_id FROM requests"
        )
    }
    root = {"11": "11", "12": "12", "27": "11", "31": "11", "40": "40", "41": "12"}
    root |= {"55": "55", "61": "11", "80": "80"}
    parent = {"27": "11", "31": "27", "41": "12", "61": "27"}
    for chat, (stored_parent, conversation) in got.items():
        assert conversation == f"{SCOPE}:{root[chat]}"
        assert stored_parent == (f"{SCOPE}:{parent[chat]}" if chat in parent else None)


def test_ids_match_only_after_an_equal_prefix(trace, db):
    ingest([trace], db_path=db)
    ids = _ids(db)
    assert ids[11][:3] == ids[27][:3] and ids[11][3] != ids[27][3]  # padded last block
    assert ids[11][:2] == ids[12][:2] and ids[12][:3] == ids[41][:3]
    assert ids[27][:6] == ids[61][:6] == ids[31][:5] + [ids[27][5]]
    # Local id 2 again at position 1, but after a different first block: no match.
    assert ids[55][1] != ids[11][1] and ids[55][2] != ids[11][2]
    stored = [r["hash_ids"] for r in _records() if r["chat_id"] in ids]
    prefixes = {tuple(h[: k + 1]) for h in stored for k in range(len(h))}
    assert len({i for chain in ids.values() for i in chain}) == len(prefixes) == 18


def test_two_files_with_equal_local_ids_share_nothing(trace, tmp_path, db):
    other = shutil.copy(trace, tmp_path / "qwen_traceB_blksz_16.jsonl")
    write_jsonl(other, [r for r in _records() if r["chat_id"] in (11, 12)])
    ingest([trace, other], db_path=db)
    by_source = db_rows(
        db,
        "SELECT source_id, list(DISTINCT h) FROM "
        "(SELECT source_id, unnest(block_hash_ids) AS h FROM requests) GROUP BY 1 ORDER BY 1",
    )
    assert len(by_source) == 2 and not set(by_source[0][1]) & set(by_source[1][1])


def test_bad_records_are_rejected_with_line_and_reason(trace, db):
    good = _records()[0]
    write_jsonl(
        trace,
        [
            good,
            {k: v for k, v in good.items() if k != "chat_id"},
            {**good, "chat_id": "12"},
            {**good, "chat_id": 13, "parent_chat_id": 13},
            {**good, "chat_id": 14, "parent_chat_id": -5},
            {**good, "chat_id": 15, "timestamp": "1.5"},
            {**good, "chat_id": 16, "hash_ids": "1 2 3 4"},
            {**good, "chat_id": 17, "type": 3},
            {**good},
            "[1, 2]",
        ],
    )
    src = ingest([trace], db_path=db, fmt="bailian").sources[0]
    assert (src.num_read, src.num_stored, src.num_rejected) == (10, 1, 9)
    reasons = {(r.line_no, r.field): r.reason for r in src.rejects}
    assert reasons == {
        (2, "chat_id"): "missing (required in a Qwen-Bailian record)",
        (3, "chat_id"): "expected an integer, got string",
        (4, "parent_chat_id"): "13 is the request's own chat_id",
        (5, "parent_chat_id"): "-5 is neither a chat_id nor -1 (root)",
        (6, "timestamp"): "expected seconds (a number), got string",
        (7, "block_hash_ids"): "expected an array of integers, got string",
        (8, "prompt_family"): "expected a string, got integer",
        (9, "request_id"): f"duplicate '{_scope(trace)}:11', first seen at line 1",
        (10, None): "expected a JSON object, got array",
    }


def test_auto_detection(trace, tmp_path):
    assert detect_format(trace) == "bailian"
    first = _records()[0]
    assert bailian.looks_like(first)
    mooncake = {k: first[k] for k in ("timestamp", "input_length", "output_length", "hash_ids")}
    assert detect_format(write_jsonl(tmp_path / "m.jsonl", [mooncake])) == "mooncake"
    assert not bailian.looks_like(mooncake)
    canonical = {**first, "request_id": "r", "block_hash_ids": [1], "block_size": 16}
    assert detect_format(write_jsonl(tmp_path / "c.jsonl", [canonical])) == "jsonl"
