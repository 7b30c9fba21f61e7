"""The worked examples of docs/definitions.md#worked-examples, verified with vLLM 0.33.0's own
scheduler (oracle/)."""

from __future__ import annotations

import pytest

from analyzer.sim.dispatch import make_policy
from analyzer.sim.vllm import replay
from tests.sim.conftest import shared_prefix_requests

THREE = [
    # shared tokens, retention, budget -> (hit, sparse-retention miss) per request
    (543, 0, None, [(0, 0), (0, 0), (0, 0)]),
    (545, 0, None, [(0, 0), (0, 544), (544, 0)]),
    (1087, 0, None, [(0, 0), (0, 544), (544, 0)]),
    (1088, 0, None, [(0, 0), (0, 1088), (1088, 0)]),
    (1088, None, None, [(0, 0), (0, 1088), (1088, 0)]),
    (1089, 0, None, [(0, 0), (0, 1088), (1088, 0)]),
    (1632, 0, None, [(0, 0), (1632, 0), (1632, 0)]),
    (1633, 0, None, [(0, 0), (1632, 0), (1632, 0)]),
    (2175, None, None, [(0, 0), (1632, 0), (1632, 0)]),
    # Chunked prefill: every chunk end holds a state; retention decides which are kept.
    (1088, None, 544, [(0, 0), (1088, 0), (1088, 0)]),
    (1088, 0, 544, [(0, 0), (0, 1088), (1088, 0)]),
    (1088, 1088, 544, [(0, 0), (1088, 0), (1088, 0)]),
    (545, 1088, 544, [(0, 0), (0, 544), (544, 0)]),
    (1087, 1088, 544, [(0, 0), (0, 544), (544, 0)]),
]


@pytest.mark.parametrize(("shared", "retention", "budget", "expected"), THREE)
def test_three_requests_of_2176(shared, retention, budget, expected):
    policy = make_policy(
        {"block_size": 544, "retention_interval": retention, "max_num_batched_tokens": budget}
    )
    results = list(replay(shared_prefix_requests(1, 3, 2176, shared), policy))
    assert [(r.hit_tokens, r.sparse_retention_miss_tokens) for r in results] == expected
    for r in results:
        assert r.junction_tokens == (
            r.hit_tokens + r.sparse_retention_miss_tokens if r.sparse_retention_miss_tokens else 0
        )


def test_documented_chunks():
    """The mechanism (oracle README): r0 stops at 1632, r1 at its junction 1088 (one chunk a
    prompt, as the oracle ran it)."""
    policy = make_policy({"block_size": 544, "max_num_batched_tokens": None})
    results = list(replay(shared_prefix_requests(1, 3, 2176, 1088), policy))
    assert [r.chunks for r in results] == [(1632, 544), (1088, 544, 544), (544, 544)]


THIRTY_TWO = [
    # shared, retention, budget -> total hit, total sparse-retention miss (70,400 queried)
    (1600, None, 2048, 38016, 0),
    (1600, 0, 2048, 25344, 12672),
    (1600, None, 8192, 25344, 12672),
    (1600, 0, None, 25344, 12672),
    (1500, None, 2048, 16896, 8448),
    (1500, 0, None, 16896, 8448),
]


@pytest.mark.parametrize(("shared", "retention", "budget", "hits", "lost"), THIRTY_TWO)
def test_thirty_two_requests_of_2200(shared, retention, budget, hits, lost):
    policy = make_policy(
        {"block_size": 528, "retention_interval": retention, "max_num_batched_tokens": budget}
    )
    results = list(replay(shared_prefix_requests(8, 4, 2200, shared), policy))
    assert sum(r.prompt_tokens for r in results) == 70400
    assert sum(r.hit_tokens for r in results) == hits
    assert sum(r.sparse_retention_miss_tokens for r in results) == lost


def test_budget_544_retention_null_per_request():
    policy = make_policy(
        {"block_size": 544, "retention_interval": None, "max_num_batched_tokens": 544}
    )
    results = list(replay(shared_prefix_requests(1, 3, 2176, 1088), policy))
    assert [r.chunks for r in results][0] == (544, 544, 544, 544)
    assert [(r.hit_tokens, r.sparse_retention_miss_tokens) for r in results] == [
        (0, 0),
        (1088, 0),
        (1088, 0),
    ]
