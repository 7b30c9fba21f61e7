"""The TraceLab adapter: stored values, the block-id rule, rejects, detection, a replay check."""

from __future__ import annotations

import shutil
from datetime import datetime
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from analyzer.cli import cli
from analyzer.pipeline.match import match_prefixes
from analyzer.pipeline.replay import run_replay
from analyzer.sim.dispatch import make_policy
from analyzer.store.ingest import ingest
from analyzer.traces.readers import detect_format
from tests.conftest import db_rows, write_jsonl

FIXTURE = (
    Path(__file__).parents[2] / "fixtures" / "external" / "tracelab" / "round_trace.sanitized.jsonl"
)
B = 16


def _rounds() -> list[dict]:
    return [orjson.loads(line) for line in FIXTURE.read_bytes().splitlines()]


def _reused_blocks(rounds: list[dict]) -> list[int]:
    """Blocks each round shares with its session's previous round, by the documented rule."""
    previous: dict[str, int] = {}
    out = []
    for r in rounds:
        total, before = r["input_tokens_total"], previous.get(r["session_id"])
        out.append(0 if before is None else min(r["prefix_tokens"] // B, before // B, total // B))
        previous[r["session_id"]] = total
    return out


def test_stored_values_match_the_source_rounds(tmp_path, db):
    path = shutil.copy(FIXTURE, tmp_path / FIXTURE.name)
    source = ingest([path], db_path=db).sources[0]
    rounds = _rounds()
    assert source.format == "tracelab"
    assert (source.num_read, source.num_stored, source.num_rejected) == (19, 19, 0)
    assert source.num_prompt_tokens == sum(r["input_tokens_total"] for r in rounds)
    rows = db_rows(
        db,
        "SELECT request_id, line_no, conversation_id, parent_request_id, model_revision, "
        "timestamp_s, prompt_tokens, cached_tokens, output_tokens, block_size, "
        "len(block_hash_ids), prompt_token_ids, extra FROM requests ORDER BY line_no",
    )
    parents: dict[str, str] = {}
    for i, (row, r) in enumerate(zip(rows, rounds, strict=True), start=1):
        first = datetime.fromisoformat(r["timing_events"][0]["timestamp"]).timestamp()
        expected = (
            r["trace_key"],
            i,
            r["session_id"],
            parents.get(r["session_id"]),
            r["model"],
            first,
            r["input_tokens_total"],
            r["prefix_tokens"],
            r["output_tokens"],
            B,
            -(-r["input_tokens_total"] // B),
            None,
        )
        assert row[:12] == expected
        extra = orjson.loads(row[12])
        assert extra["round_index"] == r["round_index"]
        assert extra["newly_append_tokens"] == r["newly_append_tokens"]
        assert extra["provider"] == r["provider"]
        assert not {"timing_events", "tools", "session_id", "model"} & extra.keys()
        parents[r["session_id"]] = r["trace_key"]
    assert db_rows(db, "SELECT format, block_size, provenance FROM sources")[0][:2] == (
        "tracelab",
        B,
    )
    assert "CC BY 4.0" in db_rows(db, "SELECT provenance FROM sources")[0][0]


def test_block_ids_follow_the_documented_rule(tmp_path, db):
    ingest([shutil.copy(FIXTURE, tmp_path / FIXTURE.name)], db_path=db)
    rounds = _rounds()
    ids = [r[0] for r in db_rows(db, "SELECT block_hash_ids FROM requests ORDER BY line_no")]
    reused = _reused_blocks(rounds)
    by_session: dict[str, list[int]] = {}
    for i, r in enumerate(rounds):
        assert len(set(ids[i])) == len(ids[i])  # fresh ids never repeat
        earlier = by_session.get(r["session_id"])
        if earlier is not None:
            prev = ids[earlier[-1]]
            assert ids[i][: reused[i]] == prev[: reused[i]]
            assert not set(ids[i][reused[i] :]) & {x for j in earlier for x in ids[j]}
        by_session.setdefault(r["session_id"], []).append(i)
    claude, codex = (set().union(*(ids[i] for i in idx)) for idx in by_session.values())
    assert not claude & codex  # nothing is shared across sessions
    assert reused[1] * B == 29376 and reused[13] * B == 3456  # 29,380 and 3,456 cached
    match_prefixes(db, backend="numpy")
    shared = db_rows(db, "SELECT shared_any_tokens FROM prefix_matches ORDER BY request_id")
    keys = sorted(range(len(rounds)), key=lambda i: rounds[i]["trace_key"])
    assert [s[0] for s in shared] == [reused[i] * B for i in keys]


def test_unbounded_replay_hits_exactly_the_reused_blocks(tmp_path, db):
    """Full attention, unbounded, 16-token blocks: vLLM's rules cap a hit at prompt - 1."""
    ingest([shutil.copy(FIXTURE, tmp_path / FIXTURE.name)], db_path=db)
    outcome = run_replay(make_policy({"groups": ["full_attention"], "block_size": B}), db_path=db)
    hits = db_rows(
        db,
        "SELECT q.line_no, p.hit_tokens FROM replay_requests p JOIN requests q "
        f"USING (request_id) WHERE p.run_id = {outcome.run_id} ORDER BY q.line_no",
    )
    rounds = _rounds()
    expected = [
        min(n, (r["input_tokens_total"] - 1) // B) * B
        for n, r in zip(_reused_blocks(rounds), rounds, strict=True)
    ]
    assert [h for _, h in hits] == expected
    assert sum(expected) > 0


def _round(**overrides) -> dict:
    base = {
        "session_id": "s1",
        "round_index": 0,
        "model": "m",
        "input_tokens_total": 100,
        "prefix_tokens": 40,
        "newly_append_tokens": 60,
        "output_tokens": 5,
        "timing_events": [{"event_type": "user_message", "timestamp": "2026-06-01T05:40:20Z"}],
    }
    return {**base, **overrides}


def test_bad_rounds_are_rejected_with_line_field_and_reason(tmp_path, db):
    path = write_jsonl(
        tmp_path / "rounds.jsonl",
        [
            _round(),
            _round(round_index=1, prefix_tokens=500, newly_append_tokens=0),
            _round(round_index=2, newly_append_tokens=61),
            "{not json",
            _round(round_index=3, session_id=None),
            _round(round_index=4, timing_events=[{"timestamp": "yesterday"}]),
            _round(round_index=5, output_tokens=-1),
            _round(round_index=6, input_tokens_total=100.0),
            "[1, 2]",
            _round(
                round_index=7, input_tokens_total=200, prefix_tokens=96, newly_append_tokens=104
            ),
        ],
    )
    src = ingest([path], db_path=db, fmt="tracelab").sources[0]
    assert (src.num_read, src.num_stored, src.num_rejected) == (10, 2, 8)
    reasons = {(r.line_no, r.field): r.reason for r in src.rejects}
    assert reasons == {
        (2, "prefix_tokens"): "500 is more than input_tokens_total (100)",
        (3, "newly_append_tokens"): "61 but input_tokens_total - prefix_tokens = 60",
        (4, None): reasons[(4, None)],
        (5, "session_id"): "missing (required in a TraceLab round)",
        (6, "timing_events[0].timestamp"): "'yesterday' is not an ISO 8601 date-time",
        (7, "output_tokens"): "-1 is outside [0, 2^31)",
        (8, "input_tokens_total"): "expected an integer, got number",
        (9, None): "expected a JSON object, got array",
    }
    assert reasons[(4, None)].startswith("malformed JSON")
    # A rejected round does not advance its session: line 10 chains to line 1.
    rows = db_rows(
        db,
        "SELECT request_id, parent_request_id, cached_tokens, timestamp_s, block_hash_ids "
        "FROM requests ORDER BY line_no",
    )
    (first, _, _, t0, ids0), (second, parent, cached, _, ids1) = rows
    assert (first, second, parent, cached) == ("s1:0", "s1:7", "s1:0", 96)
    assert t0 == datetime.fromisoformat("2026-06-01T05:40:20+00:00").timestamp()
    assert ids1[:6] == ids0[:6] and len(ids1) == 13 and ids1[6] not in ids0


def test_detection_and_the_cli(tmp_path, db):
    path = shutil.copy(FIXTURE, tmp_path / "rounds.jsonl")
    assert detect_format(path) == "tracelab"
    assert detect_format(write_jsonl(tmp_path / "r.jsonl.gz", [_round()])) == "tracelab"
    mooncake = {"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [3]}
    assert detect_format(write_jsonl(tmp_path / "m.jsonl", [mooncake])) == "mooncake"
    canonical = {"request_id": "r", "prompt_token_ids": [1], **_round()}
    assert detect_format(write_jsonl(tmp_path / "c.jsonl", [canonical])) == "jsonl"
    res = CliRunner().invoke(cli, ["ingest", "--db", str(db), str(path)])
    assert res.exit_code == 0, res.output
    assert "read 19 = stored 19 + rejected 0 (514,012 prompt tokens)" in res.output
    plain = shutil.copy(FIXTURE, tmp_path / "rounds.txt")  # no suffix to go by
    res = CliRunner().invoke(
        cli, ["ingest", "--db", str(tmp_path / "f.duckdb"), str(plain), "--format", "tracelab"]
    )
    assert res.exit_code == 0, res.output
    assert "read 19 = stored 19 + rejected 0" in res.output
    bad = write_jsonl(tmp_path / "bad.jsonl", [_round(), _round(round_index=1, prefix_tokens=101)])
    res = CliRunner().invoke(cli, ["ingest", "--db", str(db), str(bad)])
    assert res.exit_code == 1
    assert (
        f"rejected {bad}:2: prefix_tokens: 101 is more than input_tokens_total (100)\n"
        in res.output
    )


@pytest.mark.parametrize("cut", [3, 18])
def test_a_session_split_across_batches_keeps_its_chain(tmp_path, db, monkeypatch, cut):
    """The chain state lives across batches: tiny id batches give the same ids."""
    from analyzer.traces.adapters import tracelab

    ingest([shutil.copy(FIXTURE, tmp_path / "a.jsonl")], db_path=db)
    whole = db_rows(db, "SELECT block_hash_ids FROM requests ORDER BY line_no")
    monkeypatch.setattr(tracelab, "_MAX_IDS_PER_BATCH", cut * 1000)
    other = tmp_path / "other.duckdb"
    ingest([shutil.copy(FIXTURE, tmp_path / "b.jsonl")], db_path=other)
    assert db_rows(other, "SELECT block_hash_ids FROM requests ORDER BY line_no") == whole
