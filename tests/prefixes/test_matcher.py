"""The vectorised matcher against the plain Python trie, on random traces with heavy sharing."""

from __future__ import annotations

from unittest.mock import patch

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analyzer.prefixes import matcher
from analyzer.prefixes.memory import Request
from analyzer.prefixes.prefix_hash import HashParams
from analyzer.prefixes.trie import trie_match

from .helpers import assert_same_as_trie, match_memory, requests_

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(requests_())
def test_matches_trie_in_one_chunk(requests):
    assert_same_as_trie(requests, match_memory(requests))


@SETTINGS
@given(requests_())
def test_matches_trie_in_chunks_of_1_and_7(requests):
    ref = trie_match(requests)
    for size in (1, 7):
        assert_same_as_trie(requests, match_memory(requests, chunk_requests=size), ref)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests_())
def test_collisions_never_change_a_result(requests):
    """Keys masked to 3 or 12 bits collide constantly; verification catches every one,
    also while conversations' entries are pruned after every chunk."""
    ref = trie_match(requests)
    with patch.object(matcher, "PRUNE_FLOOR", 0):
        for mask, size in ((0x7, 3), (0xFFF, 5), (0x7, None), (0xFFF, 1)):
            params = HashParams(key_mask=mask)
            got = match_memory(requests, chunk_requests=size, hash_params=params)
            assert_same_as_trie(requests, got, ref)


def test_weak_hash_takes_the_exact_path():
    requests = [Request(f"r{i}", prompt=tuple(range(i % 3, i % 3 + 6))) for i in range(12)]
    got = match_memory(requests, chunk_requests=4, hash_params=HashParams(key_mask=0x3))
    assert got.exact_fallbacks > 0
    assert_same_as_trie(requests, got)


def test_archive_rereads_give_the_same_answer():
    requests = [Request(f"r{i}", prompt=(1, 2, 3, i % 4, 5), output=(i % 2,)) for i in range(30)]
    got = match_memory(requests, chunk_requests=3, archive_tokens=1)
    assert got.archive_rereads > 0
    assert_same_as_trie(requests, got)


def test_a_source_holding_every_sequence_is_read_directly():
    from analyzer.prefixes.engine import MatchOptions, run_matcher
    from analyzer.prefixes.memory import MemorySource
    from analyzer.prefixes.source import PartitionSource

    requests = [Request(f"r{i}", prompt=(1, 2, 3, i % 4, 5), output=(i % 2,)) for i in range(30)]
    held = MemorySource.from_requests(requests)
    source = PartitionSource(held.meta, held.flat, held.offsets)
    options = MatchOptions(chunk_requests=3, archive_tokens=1)
    got = run_matcher(source, xp=np, options=options)
    assert got.archive_rereads == 0  # nothing re-read: nothing was kept apart
    assert_same_as_trie(requests, got)


@pytest.mark.parametrize("grid", [1, 2, 32])
def test_grid_size_never_changes_a_result(monkeypatch, grid):
    monkeypatch.setattr(matcher, "DEFAULT_GRID", grid)
    requests = [
        Request(f"r{i}", prompt=tuple([7] * (5 + i) + [i % 3]), output=(1, 2)) for i in range(20)
    ]
    for size in (1, 4, None):
        assert_same_as_trie(requests, match_memory(requests, chunk_requests=size))


def test_worked_example():
    requests = [
        Request("a", prompt=(1, 2, 3, 4), output=(5, 6)),
        Request("b", prompt=(1, 2, 3, 4, 5, 6, 7)),  # a's prompt + output, then more
        Request("c", prompt=(1, 2, 9)),
        Request("d", prompt=(1, 2, 3, 4), cache_salt="s"),  # another cache: shares nothing
        Request("e", prompt=(1, 2, 3)),  # a prefix of a
    ]
    got = match_memory(requests)
    assert got.shared_any.tolist() == [0, 6, 2, 0, 3]
    assert got.parent.tolist() == [-1, 0, 0, -1, 0]


def test_hash_id_requests_match_blocks_never_tokens():
    requests = [
        Request("t", prompt=(1, 2, 3)),
        Request("h1", block_hash_ids=(1, 2, 3), block_size=16, num_prompt_tokens=40),
        Request("h2", block_hash_ids=(1, 2, 4), block_size=16),
        Request("h3", block_hash_ids=(1, 2, 3), block_size=32),  # other block size
    ]
    got = match_memory(requests)
    assert got.shared_any.tolist() == [0, 0, 2, 0]  # units (blocks)
    assert trie_match(requests).shared_any == [0, 0, 32, 0]  # tokens


def test_long_shared_prefixes_across_many_chunks():
    rng = np.random.default_rng(3)
    system = tuple(rng.integers(0, 50, 700).tolist())
    requests, history = [], {}
    for i in range(60):
        conv = f"c{i % 7}"
        prompt = history.get(conv, system) + tuple(rng.integers(0, 50, 40).tolist())
        output = tuple(rng.integers(0, 50, 30).tolist())
        requests.append(
            Request(
                f"r{i}", prompt=prompt, output=output, conversation_id=conv, replica=f"p{i % 2}"
            )
        )
        history[conv] = prompt + output
    ref = trie_match(requests)
    for size in (1, 5, 13, None):
        assert_same_as_trie(requests, match_memory(requests, chunk_requests=size), ref)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests_(), st.sampled_from([2, 3]), st.sampled_from([None, 3]), st.booleans())
def test_partners_and_windows_with_small_grids(requests, grid, size, weak):
    """A grid of 2-3 units makes partners, grid jumps and windows happen on short traces."""
    params = HashParams(key_mask=0x1F) if weak else HashParams()
    with patch.object(matcher, "DEFAULT_GRID", grid), patch.object(matcher, "PRUNE_FLOOR", 0):
        got = match_memory(requests, chunk_requests=size, hash_params=params)
    assert_same_as_trie(requests, got)
