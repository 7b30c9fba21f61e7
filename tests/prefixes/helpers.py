"""Builders for prefix-matcher tests: random traces with heavy sharing, and stores."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
from hypothesis import strategies as st

from analyzer.prefixes.engine import MatchArrays, MatchOptions, run_matcher
from analyzer.prefixes.memory import MemorySource, Request
from analyzer.prefixes.trie import TrieResult, to_tokens, trie_match
from analyzer.store.db import connect

TOKENS = st.integers(0, 3)  # a tiny vocabulary forces shared prefixes and collisions of tails


@st.composite
def requests_(draw, max_requests: int = 24, hash_ids: bool = True) -> list[Request]:
    """Traces where requests repeat, extend, cut and branch off earlier ones."""
    n = draw(st.integers(1, max_requests))
    pools: dict[bool, list[tuple[int, ...]]] = {False: [], True: []}
    out = []
    for i in range(n):
        is_hash = hash_ids and draw(st.integers(0, 4)) == 0
        seq = _sequence(draw, pools[is_hash])
        output = None
        if not is_hash and draw(st.booleans()):
            output = tuple(draw(st.lists(TOKENS, min_size=0, max_size=4)))
        common = dict(
            request_id=f"r{i}",
            cache_salt=draw(st.sampled_from([None, None, None, "s1"])),
            lora_name=draw(st.sampled_from([None, None, None, "l1"])),
            replica=draw(st.sampled_from([None, "a", "b"])),
            conversation_id=draw(st.sampled_from([None, "c1", "c2", "c3"])),
            prompt_family=draw(st.sampled_from([None, "chat", "rag"])),
            model_revision=draw(st.sampled_from([None, "v1", "v2"])),
        )
        if is_hash:
            size = draw(st.sampled_from([4, 16]))
            partial = draw(st.integers(0, size - 1))
            req = Request(
                block_hash_ids=seq,
                block_size=size,
                num_prompt_tokens=len(seq) * size - partial,
                **common,
            )
        else:
            req = Request(prompt=seq, output=output, **common)
        pools[is_hash].append(req.inserted)
        out.append(req)
    return out


def _sequence(draw, pool: list[tuple[int, ...]]) -> tuple[int, ...]:
    mode = draw(st.sampled_from(["fresh", "repeat", "prefix", "extend", "extend"]))
    if not pool or mode == "fresh":
        return tuple(draw(st.lists(TOKENS, min_size=1, max_size=8)))
    base = draw(st.sampled_from(pool))
    if mode == "repeat":
        return base
    cut = draw(st.integers(1, len(base)))
    if mode == "prefix":
        return base[:cut]
    return base[:cut] + tuple(draw(st.lists(TOKENS, min_size=0, max_size=5)))


def match_memory(requests: list[Request], xp=np, **options) -> MatchArrays:
    return run_matcher(MemorySource.from_requests(requests), xp=xp, options=MatchOptions(**options))


def assert_same_as_trie(
    requests: list[Request], got: MatchArrays, ref: TrieResult | None = None
) -> None:
    """The matcher's answers (units) equal the trie's (tokens) for every request."""
    ref = ref or trie_match(requests)
    tokens = [to_tokens(int(u), r) for u, r in zip(got.shared_any, requests, strict=True)]
    assert tokens == ref.shared_any
    assert got.parent.tolist() == ref.parent
    assert [
        to_tokens(int(u), r) for u, r in zip(got.shared_replica, requests, strict=True)
    ] == ref.shared_replica
    conv = [
        None if u < 0 else to_tokens(int(u), r)
        for u, r in zip(got.shared_conversation, requests, strict=True)
    ]
    assert conv == ref.shared_conversation


MATCH_FIELDS = (
    "shared_any",
    "parent",
    "shared_replica",
    "shared_conversation",
    "insert_shared",
    "insert_parent",
)


def assert_same_arrays(a: MatchArrays, b: MatchArrays) -> None:
    """Two backends' answers are equal, field by field, bit for bit."""
    for field in MATCH_FIELDS:
        assert np.array_equal(getattr(a, field), getattr(b, field)), field


def store(path: Path, requests: list[Request]) -> Path:
    """A DuckDB store whose `requests` table holds `requests` in this arrival order."""
    con = connect(path)
    try:
        con.register("rows", requests_table(requests))
        con.execute("INSERT INTO requests BY NAME SELECT * FROM rows")
        con.unregister("rows")
        # The file the rows came from, as ingest records it last: rows without it are what
        # a killed ingest leaves, and the next connect removes them.
        con.execute(
            "INSERT INTO sources (source_id, path, sha256, format, num_read, num_stored, "
            "num_rejected, num_prompt_tokens, ingested_at) VALUES "
            "(1, 'helpers', 'helpers', 'jsonl', ?, ?, 0, 0, current_timestamp)",
            [len(requests), len(requests)],
        )
    finally:
        con.close()
    return path


def requests_table(requests: list[Request]) -> pa.Table:
    def ids(values, kind):
        return pa.array([list(v) if v is not None else None for v in values], pa.list_(kind))

    n = len(requests)
    text = (
        "request_id",
        "cache_salt",
        "lora_name",
        "replica",
        "conversation_id",
        "prompt_family",
        "model_revision",
    )
    columns = {k: pa.array([getattr(r, k) for r in requests], pa.string()) for k in text}
    columns.update(
        source_id=pa.array([1] * n, pa.int32()),
        line_no=pa.array(range(1, n + 1), pa.int64()),
        arrival_seq=pa.array(range(n), pa.int64()),
        prompt_tokens=pa.array([r.prompt_tokens for r in requests], pa.int32()),
        # as ingest stores them: the count beside the ids (readers take lengths from it)
        output_tokens=pa.array(
            [None if r.output is None else len(r.output) for r in requests], pa.int32()
        ),
        prompt_token_ids=ids([r.prompt for r in requests], pa.int32()),
        output_token_ids=ids([r.output for r in requests], pa.int32()),
        block_hash_ids=ids([r.block_hash_ids for r in requests], pa.int64()),
        block_size=pa.array([r.block_size for r in requests], pa.int32()),
        prompt_family_source=pa.array(
            ["trace" if r.prompt_family else None for r in requests], pa.string()
        ),
    )
    return pa.table(columns)
