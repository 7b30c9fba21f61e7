"""Table junction_requests (`hpa match`): each request's deepest junction, against a plain
loop over the sequences (the report reads the table; it computes nothing of the matcher)."""

from __future__ import annotations

import bisect
import json
import random
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pytest

from analyzer.pipeline.match import match_prefixes
from analyzer.store.ingest import ingest

SAMPLES = Path(__file__).parents[2] / "sample_traces"


def _sequence(tokens, hashes, block_size) -> tuple[np.ndarray | None, int]:
    """(prefix elements, tokens per element): token ids, or block hash ids per block."""
    if tokens is not None:
        return np.asarray(tokens, dtype=np.int64), 1
    if hashes is not None:
        return np.asarray(hashes, dtype=np.int64), int(block_size or 1)
    return None, 1


def reference(con) -> pa.Table:
    """Each request's deepest junction inside its shared prefix: the branch point of the
    prefix tree on its prompt path at or before `prefix_matches.shared_any_tokens` (same
    cache_salt, LoRA and block size), as a table (arrival_seq, junction_id).

    It does not depend on the replay policy, so it is computed once for every run. A
    request with nothing shared, or with no junction on its path, has no row.
    """
    junctions = con.execute(
        "SELECT j.junction_id, j.position_tokens, j.cache_salt, j.lora_name, "
        "f.prompt_token_ids, f.block_hash_ids, f.block_size "
        "FROM junctions AS j JOIN requests AS f ON f.request_id = j.first_request_id "
        "WHERE j.num_requests_through > 1 ORDER BY j.position_tokens, j.junction_id"
    ).fetchall()
    by_position: dict[int, list] = {}
    for jid, pos, salt, lora, toks, hashes, bs in junctions:
        seq, unit = _sequence(toks, hashes, bs)
        if seq is None or pos % unit:
            continue
        by_position.setdefault(pos, []).append((jid, (salt, lora, unit), seq[: pos // unit]))
    positions = sorted(by_position)
    requests = con.execute(
        "SELECT r.arrival_seq, m.shared_any_tokens, r.prompt_tokens, r.cache_salt, "
        "r.lora_name, r.prompt_token_ids, r.block_hash_ids, r.block_size "
        "FROM requests AS r JOIN prefix_matches AS m ON m.arrival_seq = r.arrival_seq "
        "WHERE m.shared_any_tokens > 0 ORDER BY r.arrival_seq"
    ).fetchall()
    seqs, found = [], []
    for seq_no, shared, prompt_tokens, salt, lora, toks, hashes, bs in requests:
        seq, unit = _sequence(toks, hashes, bs)
        if seq is None:
            continue
        limit = min(int(shared), int(prompt_tokens) - 1)
        namespace = (salt, lora, unit)
        for k in range(bisect.bisect_right(positions, limit) - 1, -1, -1):
            pos = positions[k]
            n = pos // unit
            hit = next(
                (
                    jid
                    for jid, ns, prefix in by_position[pos]
                    if ns == namespace and np.array_equal(seq[:n], prefix)
                ),
                None,
            )
            if hit is not None:
                seqs.append(seq_no)
                found.append(hit)
                break
    return pa.table(
        {"arrival_seq": pa.array(seqs, pa.int64()), "junction_id": pa.array(found, pa.string())}
    )


def _random_trace(path: Path, seed: int) -> Path:
    """Token-id requests from a few shared prefixes in two cache_salt namespaces, and
    hash-id requests of 4-token blocks, with prefixes ending around each other's branches."""
    rng = random.Random(seed)
    roots = [[rng.randrange(1, 6) for _ in range(rng.randrange(1, 12))] for _ in range(4)]
    records = []
    for i in range(60):
        base = rng.choice(roots)
        cut = rng.randrange(0, len(base) + 1)
        prompt = base[:cut] + [rng.randrange(1, 6) for _ in range(rng.randrange(1, 6))]
        record = {"request_id": f"t{i}", "prompt_token_ids": prompt}
        if rng.random() < 0.3:
            record["cache_salt"] = "tenant-b"
        if rng.random() < 0.25:
            ids = [rng.randrange(1, 4) for _ in range(rng.randrange(1, 6))]
            record = {"request_id": f"h{i}", "block_hash_ids": ids, "block_size": 4}
        records.append(record)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _matched(tmp_path: Path, trace: Path) -> Path:
    db = tmp_path / "j.duckdb"
    ingest([trace], db_path=db)
    match_prefixes(db, backend="numpy")
    return db


def stored(con) -> pa.Table:
    """The table `hpa match` writes (junction_requests), as `reference` returns it."""
    rows = con.execute(
        "SELECT arrival_seq, junction_id FROM junction_requests ORDER BY arrival_seq"
    ).fetchall()
    return pa.table(
        {
            "arrival_seq": pa.array([r[0] for r in rows], pa.int64()),
            "junction_id": pa.array([r[1] for r in rows], pa.string()),
        }
    )


@pytest.mark.parametrize("seed", range(6))
def test_equals_the_plain_loop_on_random_traces(tmp_path, seed):
    db = _matched(tmp_path, _random_trace(tmp_path / "t.jsonl", seed))
    con = duckdb.connect(str(db), read_only=True)
    try:
        expected = reference(con)
        assert stored(con).equals(expected)  # what hpa match wrote: the same pins
    finally:
        con.close()
    assert expected.num_rows > 0


def test_equals_the_plain_loop_on_the_samples(tmp_path):
    for name in ("mixed.jsonl.gz", "mixed_hash_ids.jsonl.gz"):
        (tmp_path / name).mkdir()
        db = _matched(tmp_path / name, SAMPLES / name)
        con = duckdb.connect(str(db), read_only=True)
        try:
            expected = reference(con)
            assert expected.num_rows > 0 and stored(con).equals(expected)
        finally:
            con.close()
