"""Routing requests to replicas before the replay."""

from __future__ import annotations

import numpy as np

from analyzer.sim.routing import route


def test_trace_round_robin_session():
    reps = ["a", None, "b", "a"]
    convs = ["c1", None, "c1", "c2"]
    assert route("trace", 2, trace_replicas=reps, conversation_ids=convs) == ["a", "0", "b", "a"]
    assert route("round_robin", 3, trace_replicas=reps, conversation_ids=convs) == [
        "0",
        "1",
        "2",
        "0",
    ]
    assert route("session", 2, trace_replicas=reps, conversation_ids=convs) == ["0", "1", "0", "0"]


def test_prefix_aware_follows_the_longest_shared_prefix():
    sys_a = np.arange(64)
    sys_b = np.arange(1000, 1064)
    seqs = [
        np.concatenate([sys_a, [1]]),
        np.concatenate([sys_b, [2]]),
        np.concatenate([sys_b, [3]]),
        np.concatenate([sys_a, [4]]),
        np.array([7, 8]),
    ]
    got = route(
        "prefix_aware",
        2,
        trace_replicas=[None] * 5,
        conversation_ids=[None] * 5,
        sequences=seqs,
        namespaces=[None] * 5,
        unit_tokens=16,
    )
    # a -> 0; b shares nothing -> least loaded 1; b again -> 1; a again -> 0; new: tie -> 0
    assert got == ["0", "1", "1", "0", "0"]


def test_prefix_aware_respects_namespaces():
    seq = np.arange(32)
    got = route(
        "prefix_aware",
        2,
        trace_replicas=[None] * 2,
        conversation_ids=[None] * 2,
        sequences=[seq, seq],
        namespaces=["salt1", "salt2"],
        unit_tokens=16,
    )
    assert got == ["0", "1"]  # different salt: no shared prefix, least loaded wins
