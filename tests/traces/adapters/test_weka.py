"""The WEKA Claude Code adapter: accounting, id namespacing, tail ids, start offsets,
sub-agents, rejects and auto-detection, on whole conversations of the public corpus."""

from __future__ import annotations

import gzip
import io
import json
import math
import shutil
from datetime import UTC, datetime
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from analyzer.cli import cli
from analyzer.errors import InputFileError
from analyzer.store.ingest import ingest
from analyzer.traces.adapters import hashchain, weka
from analyzer.traces.readers import detect_format
from tests.conftest import db_rows
from tests.traces.adapters.test_hashchain import conversations, plain_chain

FIXTURES = Path(__file__).parents[2] / "fixtures" / "external" / "weka_claude_code"
NAMES = ("trace_0021", "trace_0026", "trace_0291")
BLOCK = 64


def _conversation(name: str) -> dict:
    return orjson.loads(gzip.decompress((FIXTURES / f"{name}.json.gz").read_bytes()))


def _leaves(requests: list, offset: float = 0.0):
    """(time on the conversation clock, request, sub-agent entry or None) in file order."""
    for req in requests:
        if req["type"] == "subagent":
            for inner in req["requests"]:
                yield offset + req["t"] + inner["t"], inner, req
        else:
            yield offset + req["t"], req, None


def _write(path: Path, conversations: list[dict]) -> Path:
    path.write_bytes(b"\n".join(orjson.dumps(c) for c in conversations) + b"\n")
    return path


def _copy_fixtures(tmp_path: Path, names=NAMES) -> list[Path]:
    return [shutil.copy(FIXTURES / f"{n}.json.gz", tmp_path / f"{n}.json.gz") for n in names]


def test_every_request_stored_with_its_fields(tmp_path, db):
    result = ingest(_copy_fixtures(tmp_path), db_path=db)
    for src, name in zip(result.sources, NAMES, strict=True):
        leaves = list(_leaves(_conversation(name)["requests"]))
        assert src.format == "weka"
        assert (src.num_read, src.num_stored, src.num_rejected) == (len(leaves), len(leaves), 0)
        assert src.num_prompt_tokens == sum(r["in"] for _, r, _ in leaves)
    rows = db_rows(
        db,
        "SELECT prompt_tokens, len(block_hash_ids), r.block_size, output_tokens, model_revision, "
        "ttft_ms FROM requests AS r JOIN sources USING (source_id) ORDER BY source_id, line_no",
    )
    expected = [
        (r["in"], math.ceil(r["in"] / BLOCK), BLOCK, r["out"], r["model"], None)
        for name in NAMES
        for _, r, _ in _leaves(_conversation(name)["requests"])
    ]
    assert rows == expected and len(rows) == 14 + 3 + 32
    assert db_rows(
        db, "SELECT DISTINCT block_size, provenance LIKE '%kv-cache-tester%' FROM sources"
    ) == [(64, True)]


def test_files_with_equal_local_ids_share_nothing(tmp_path, db):
    one, two = (_conversation(n) for n in NAMES[:2])
    assert one["requests"][0]["hash_ids"][:3] == two["requests"][0]["hash_ids"][:3] == [1, 2, 3]
    ingest(_copy_fixtures(tmp_path, NAMES[:2]), db_path=db)
    ids = db_rows(
        db,
        "SELECT conversation_id, list(DISTINCT h) FROM "
        "(SELECT conversation_id, unnest(block_hash_ids) AS h FROM requests) GROUP BY 1 ORDER BY 1",
    )
    assert not set(ids[0][1]) & set(ids[1][1])


def test_equal_local_prefixes_keep_equal_global_ids(tmp_path, db):
    conv = _conversation("trace_0021")
    ingest(_copy_fixtures(tmp_path, ["trace_0021"]), db_path=db)
    stored = [r[0] for r in db_rows(db, "SELECT block_hash_ids FROM requests ORDER BY line_no")]
    local = [r["hash_ids"] for r in conv["requests"]]
    for i in range(1, len(local)):
        same = next(
            (k for k, (a, b) in enumerate(zip(local[i - 1], local[i], strict=False)) if a != b),
            min(len(local[i - 1]), len(local[i])),
        )
        got = next(
            (k for k, (a, b) in enumerate(zip(stored[i - 1], stored[i], strict=False)) if a != b),
            min(len(stored[i - 1]), len(stored[i])),
        )
        assert got == same  # the shared prefix of consecutive turns is exactly the trace's


def test_partial_tail_block_is_one_request_unique_id(tmp_path, db):
    ingest(_copy_fixtures(tmp_path), db_path=db)
    rows = db_rows(db, "SELECT request_id, prompt_tokens, block_hash_ids FROM requests")
    counts: dict[int, int] = {}
    for _, _, ids in rows:
        for h in ids:
            counts[h] = counts.get(h, 0) + 1
    partial = [(rid, ids) for rid, n, ids in rows if n % BLOCK]
    assert len(partial) > 40  # nearly every request ends inside a block
    assert all(counts[ids[-1]] == 1 for _, ids in partial)


def test_subagents_are_flattened_with_their_own_clock_and_parent_links(tmp_path, db):
    conv = _conversation("trace_0291")
    ingest(_copy_fixtures(tmp_path, ["trace_0291"]), db_path=db)
    rows = {
        r[0]: r[1:]
        for r in db_rows(
            db,
            "SELECT request_id, timestamp_s, conversation_id, parent_request_id, "
            "extra->>'subagent_type' FROM requests",
        )
    }
    start = rows["trace_0291:0"][0]
    sub = conv["requests"][16]
    assert sub["type"] == "subagent" and sub["requests"][0]["t"] == 0.0
    for j, inner in enumerate(sub["requests"]):
        ts, conversation, parent, kind = rows[f"trace_0291:16.{j}"]
        assert ts == pytest.approx(start + sub["t"] + inner["t"])
        assert conversation == "trace_0291/agent_001" and kind == "Explore"
        assert parent == ("trace_0291:15" if j == 0 else f"trace_0291:16.{j - 1}")
    assert rows["trace_0291:17.0"][2] == "trace_0291:15"
    assert rows["trace_0291:18"][1:] == ("trace_0291", "trace_0291:15", None)
    assert rows["trace_0291:0"][2] is None


def test_conversations_start_at_seeded_offsets(tmp_path, db):
    ingest(_copy_fixtures(tmp_path), db_path=db)
    starts = db_rows(
        db, "SELECT conversation_id, min(timestamp_s) FROM requests GROUP BY 1 ORDER BY 1"
    )
    main = [s for c, s in starts if "/" not in c]
    assert len(set(main)) == 3 and all(0 <= s < weka.START_WINDOW_S for s in main)
    again = tmp_path / "again.duckdb"
    ingest(_copy_fixtures(tmp_path), db_path=again)  # deterministic across ingests
    assert (
        db_rows(
            again, "SELECT conversation_id, min(timestamp_s) FROM requests GROUP BY 1 ORDER BY 1"
        )
        == starts
    )
    t0 = {c: s for c, s in starts}["trace_0026"]
    got = [
        r[0]
        for r in db_rows(
            db,
            "SELECT timestamp_s FROM requests WHERE conversation_id = 'trace_0026' "
            "ORDER BY line_no",
        )
    ]
    assert got == pytest.approx([t0 + r["t"] for r in _conversation("trace_0026")["requests"]])


def _day_long(key: str, **extra) -> dict:
    requests = [
        {"t": t, "type": "n", "model": "m", "in": 130, "out": 1, "hash_ids": [1, 2]}
        for t in (0.0, 43_200.0, 86_400.0)
    ]
    return {"id": key, "block_size": 64, "hash_id_scope": "local", "requests": requests, **extra}


def test_relative_conversations_interleave(tmp_path, db):
    # Each spans the whole start window, so with any starts in it every pair overlaps.
    paths = [_write(tmp_path / f"c{i}.json", [_day_long(f"c{i}")]) for i in range(5)]
    ingest(paths, db_path=db)
    order = [r[0] for r in db_rows(db, "SELECT conversation_id FROM requests ORDER BY arrival_seq")]
    runs = sum(1 for a, b in zip(order, order[1:], strict=False) if a != b) + 1
    assert runs > 5  # not one conversation replayed after another


def test_an_absolute_time_in_the_file_wins(tmp_path, db):
    conv = _day_long("abs", start_time="2026-11-29T00:00:00Z")
    conv["requests"][2]["timestamp"] = 5.0
    ingest([_write(tmp_path / "abs.json", [conv])], db_path=db)
    got = [r[0] for r in db_rows(db, "SELECT timestamp_s FROM requests ORDER BY line_no")]
    start = datetime(2026, 11, 29, tzinfo=UTC).timestamp()
    assert got == [start, start + 43_200, 5.0]


def test_bad_requests_are_rejected_with_path_and_reason(tmp_path, db):
    good = {"t": 1.0, "type": "n", "model": "m", "in": 130, "out": 1, "hash_ids": [1, 2]}
    conv = {
        "id": "bad",
        "block_size": 64,
        "hash_id_scope": "local",
        "requests": [
            good,
            {**good, "in": 200, "hash_ids": [1]},
            {**good, "t": "later"},
            {k: v for k, v in good.items() if k != "hash_ids"},
            7,
            {"t": 3.0, "type": "subagent", "agent_id": "a"},
            {"t": 4.0, "type": "subagent", "requests": [good, {**good, "out": -1}]},
            {**good, "in": 128, "hash_ids": [1, 2], "ttft": 0.25},
        ],
    }
    result = ingest([_write(tmp_path / "bad.json", [conv])], db_path=db, fmt="weka")
    src = result.sources[0]
    assert (src.num_read, src.num_stored, src.num_rejected) == (9, 3, 6)
    reasons = {(r.line_no, r.field): r.reason for r in src.rejects}
    assert reasons == {
        (2, "prompt_tokens"): "200 tokens need 4 blocks of 64, block_hash_ids has 1",
        (3, "requests[2].t"): "expected seconds (a number), got string",
        (4, "requests[3].hash_ids"): "missing (required in a WEKA request)",
        (5, "requests[4]"): "expected a JSON object, got integer",
        (6, "requests[5].requests"): "expected an array in a sub-agent",
        (8, "output_tokens"): "-1 is outside [0, 2^31)",
    }
    excerpts = db_rows(db, "SELECT line_no, raw_excerpt FROM rejects ORDER BY line_no")
    assert excerpts[-1][1].startswith("requests[6].requests[1]: {")
    stored = db_rows(db, "SELECT request_id, len(block_hash_ids), ttft_ms FROM requests ORDER BY 1")
    assert stored == [("bad:0", 3, None), ("bad:6.0", 3, None), ("bad:7", 2, 250.0)]


def test_unreadable_conversation_is_a_file_error(tmp_path, db):
    path = tmp_path / "broken.json"
    path.write_bytes(b'{"id": "x", "hash_id_scope": "local", "requests": [\n')
    with pytest.raises(InputFileError, match="not a WEKA conversation"):
        ingest([path], db_path=db, fmt="weka")
    assert db_rows(db, "SELECT count(*) FROM requests") == [(0,)]
    res = CliRunner().invoke(cli, ["ingest", str(path), "--db", str(db), "--format", "weka"])
    assert res.exit_code == 2 and "not a WEKA conversation" in res.output


def test_auto_detection(tmp_path):
    for name in NAMES:
        assert detect_format(FIXTURES / f"{name}.json.gz") == "weka"
    # A conversation line longer than the bytes read for detection.
    big = _day_long("big")
    big["requests"][0]["hash_ids"] = list(range(300_000))
    assert detect_format(_write(tmp_path / "big.json", [big])) == "weka"
    canonical = {"request_id": "r", "block_hash_ids": [3], "block_size": 64}
    assert detect_format(_write(tmp_path / "c.jsonl", [canonical])) == "jsonl"
    mooncake = {"timestamp": 0, "input_length": 10, "hash_ids": [3]}
    assert detect_format(_write(tmp_path / "m.jsonl", [mooncake])) == "mooncake"
    assert not weka.looks_like(None, b'{"request_id": "r", "requests": []}')


def _read(data: bytes) -> tuple[list, list]:
    batches = list(weka.read_weka(Path("c.json"), io.BytesIO(data), lambda: None))
    rejects = [(r.line_no, r.field, r.reason, r.raw_excerpt) for b in batches for r in b.rejects]
    return [row for b in batches for row in b.rows.to_pylist()], rejects


@given(conversations(), st.data())
def test_reused_prefixes_store_what_the_plain_chain_does(lists, data):
    """Each request's ids reuse those of the prefix it shares with its (sub-)conversation's
    request before: the rows and rejects are those of chaining every id from the seed."""
    requests: list = []
    for local in lists:
        size = len(local) * BLOCK if isinstance(local, list) else 100
        req = {"t": 1.0, "in": max(1, size - data.draw(st.integers(0, 63))), "hash_ids": local}
        agent = data.draw(st.sampled_from([None, "a", "b"]))
        if agent is None:
            requests.append(req)
        elif requests and requests[-1].get("agent_id") == agent:
            requests[-1]["requests"].append(req)
        else:
            requests.append({"t": 2.0, "type": "subagent", "agent_id": agent, "requests": [req]})
    conv = {"id": "h", "hash_id_scope": "local", "requests": requests}
    line = json.dumps(conv).encode() + b"\n"  # ints past 64 bits too
    got = _read(line)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(hashchain, "chained", plain_chain)
        assert got == _read(line)


def test_the_corpus_stores_what_the_plain_chain_does():
    for name in NAMES:  # sub-agents, compactions: prefixes shared with requests not the last
        data = gzip.decompress((FIXTURES / f"{name}.json.gz").read_bytes())
        got = _read(data)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(hashchain, "chained", plain_chain)
            assert got == _read(data) and got[0]
