"""Junctions derived from the chain tree equal the branch points of the plain trie."""

from __future__ import annotations

import duckdb
import numpy as np
from hypothesis import HealthCheck, given, settings

from analyzer.pipeline.match import compute, match_prefixes
from analyzer.prefixes.engine import MatchOptions
from analyzer.prefixes.memory import MemorySource, Request
from analyzer.prefixes.trie import trie_match

from .helpers import requests_, store


def _ours(requests: list[Request]) -> list[dict]:
    """Junctions with their path statistics, as comparable dicts."""
    source = MemorySource.from_requests(requests)
    result = compute(source, xp=np, options=MatchOptions(chunk_requests=3))
    j = result.junctions
    out = []
    for k in range(j.owner.size):
        on = result.path_requests[result.path_junctions == k]
        reqs = [requests[i] for i in on]
        out.append(
            {
                "ns": requests[int(j.owner[k])].namespace,
                "depth": int(j.depth[k]),
                "first": int(j.owner[k]),
                "last": int(on.max()),
                "through": int(on.size),
                "branches": int(j.num_branches[k]),
                "diverging": int(j.num_diverging[k]),
                "families": sorted({r.prompt_family for r in reqs} - {None}),
                "revisions": sorted({r.model_revision for r in reqs} - {None}),
            }
        )
    return sorted(out, key=lambda d: (repr(d["ns"]), d["first"], d["depth"]))


def _trie(requests: list[Request]) -> list[dict]:
    ref = trie_match(requests, track=True)
    out = [{"ns": ns, **j} for ns, trie in ref.tries.items() for j in trie.junctions()]
    return sorted(out, key=lambda d: (repr(d["ns"]), d["first"], d["depth"]))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests_())
def test_junctions_equal_the_tries_branch_points(requests):
    assert _ours(requests) == _trie(requests)


def test_hand_checked_tree(tmp_path):
    #   a: 1 2 3 4 | 5 6      tree:  1-2-+-3-+-4-5-6-7   (b continues a's output)
    #   b: 1 2 3 4 5 6 7                |   +-8          (d)
    #   c: 1 2 9 | 1                    +-9-1            (c)
    #   d: 1 2 3 8
    requests = [
        Request("a", prompt=(1, 2, 3, 4), output=(5, 6), prompt_family="chat", model_revision="v1"),
        Request("b", prompt=(1, 2, 3, 4, 5, 6, 7), model_revision="v1"),
        Request("c", prompt=(1, 2, 9), output=(1,), model_revision="v2"),
        Request("d", prompt=(1, 2, 3, 8), prompt_family="rag", model_revision="v2"),
    ]
    db = store(tmp_path / "t.duckdb", requests)
    match_prefixes(db, backend="numpy")
    con = duckdb.connect(str(db))
    rows = con.execute(
        "SELECT position_tokens, num_requests_through, num_branches, num_requests_diverging, "
        "first_request_id, last_request_id, prompt_families, model_revisions "
        "FROM junctions ORDER BY position_tokens"
    ).fetchall()
    assert rows == [
        (2, 4, 2, 1, "a", "d", ["chat", "rag"], ["v1", "v2"]),
        (3, 3, 2, 1, "a", "d", ["chat", "rag"], ["v1", "v2"]),
    ]
    ids = [r[0] for r in con.execute("SELECT junction_id FROM junctions").fetchall()]
    assert len(set(ids)) == 2 and all(len(i) == 16 for i in ids)


def test_junction_ids_are_stable_across_databases(tmp_path):
    requests = [Request("a", prompt=(5, 6, 7, 8)), Request("b", prompt=(5, 6, 7, 9))]
    other = [Request("x", prompt=(1,)), *requests]  # same prompts, other arrival order
    ids = []
    for name, reqs in (("one", requests), ("two", other)):
        db = store(tmp_path / f"{name}.duckdb", reqs)
        match_prefixes(db, backend="numpy")
        ids.append(duckdb.connect(str(db)).execute("SELECT junction_id FROM junctions").fetchall())
    assert ids[0] == ids[1] and len(ids[0]) == 1


def test_hash_id_junction_positions_are_in_tokens(tmp_path):
    requests = [
        Request("a", block_hash_ids=(1, 2, 3), block_size=16),
        Request("b", block_hash_ids=(1, 2, 4), block_size=16),
    ]
    db = store(tmp_path / "h.duckdb", requests)
    match_prefixes(db, backend="numpy")
    row = (
        duckdb.connect(str(db))
        .execute("SELECT position_tokens, block_size FROM junctions")
        .fetchall()
    )
    assert row == [(32, 16)]
