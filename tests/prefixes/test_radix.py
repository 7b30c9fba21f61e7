"""The compiled radix tree against the plain Python trie and the vectorised matcher."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analyzer.prefixes import engine, radix
from analyzer.prefixes.engine import MatchOptions, match_stream, run_matcher
from analyzer.prefixes.memory import MemorySource, Request
from analyzer.prefixes.source import PartitionSource

from .helpers import assert_same_arrays, assert_same_as_trie, match_memory, requests_

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ALWAYS = MatchOptions(compiled_min_units=0)


def _held(requests: list[Request]) -> PartitionSource:
    held = MemorySource.from_requests(requests)
    return PartitionSource(held.meta, held.flat, held.offsets)


def _gapped(requests: list[Request], gaps: list[int]) -> PartitionSource:
    """The same sequences, each after a run of junk units (a gap of gaps[i] values)."""
    held = MemorySource.from_requests(requests)
    pieces, starts, at = [], [], 0
    for i, gap in enumerate(gaps):
        seq = held.flat[held.offsets[i] : held.offsets[i + 1]]
        pieces += [np.full(gap, 99, dtype=np.int64), seq]
        starts.append(at + gap)
        at += gap + len(seq)
    flat = np.concatenate(pieces) if pieces else np.zeros(0, np.int64)
    return PartitionSource.gapped(held.meta, flat, np.asarray(starts, dtype=np.int64))


@SETTINGS
@given(requests_())
def test_matches_the_trie_and_the_vectorised_matcher(requests):
    got = run_matcher(_held(requests), xp=np, options=ALWAYS)
    assert got.exact_fallbacks == 0 and got.archive_rereads == 0
    assert_same_as_trie(requests, got)
    assert_same_arrays(got, match_memory(requests))


@SETTINGS
@given(requests_(hash_ids=False), st.data())
def test_sequences_anywhere_in_the_array_give_the_same_answers(requests, data):
    gaps = data.draw(st.lists(st.integers(0, 3), min_size=len(requests), max_size=len(requests)))
    got = run_matcher(_gapped(requests, gaps), xp=np, options=ALWAYS)
    assert_same_arrays(got, match_memory(requests))
    # the vectorised matcher reads a gapped source too
    assert_same_arrays(run_matcher(_gapped(requests, gaps), xp=np, options=MatchOptions()), got)


def _streamed(requests: list[Request], cuts: list[int], gap: int):
    """The inserted sequences as chunks of requests split at `cuts`, each chunk its own
    array (after `gap` junk units), as a stream hands them over and then drops them."""
    held = MemorySource.from_requests(requests)
    bounds = sorted({0, len(requests), *(c % (len(requests) + 1) for c in cuts)})
    for first, stop in zip(bounds[:-1], bounds[1:], strict=False):
        a, b = held.offsets[first], held.offsets[stop]
        flat = np.concatenate([np.full(gap, 99, np.int64), held.flat[a:b]])
        yield first, stop, flat, held.offsets[first:stop] - a + gap
        flat[:] = -7  # gone: the trees must not read a chunk they were given before


@SETTINGS
@given(requests_(), st.lists(st.integers(0, 40), max_size=6), st.integers(0, 2))
def test_streamed_chunks_give_the_held_answers(requests, cuts, gap):
    """Fed chunk by chunk, each dropped after it is matched, the trees keep their own copy
    of the units they need: the answers are the held ones, whatever the chunks."""
    meta = MemorySource.from_requests(requests).meta
    got = match_stream(meta, _streamed(requests, cuts, gap), np.dtype(np.int64))
    assert_same_arrays(got, run_matcher(_held(requests), xp=np, options=ALWAYS))
    assert_same_as_trie(requests, got)


@SETTINGS
@given(requests_(), st.lists(st.integers(0, 40), max_size=6), st.integers(0, 2), st.data())
def test_a_streamed_match_rebuilds_any_sequence_from_its_arena(requests, cuts, gap, data):
    """The chunks are gone (overwritten): the trees' arena and the chain of holders give
    back every request's inserted sequence, in any subset."""
    held = MemorySource.from_requests(requests)
    got = match_stream(held.meta, _streamed(requests, cuts, gap), np.dtype(np.int64))
    if not requests:
        return
    ids = np.flatnonzero(data.draw(st.lists(st.booleans(), min_size=len(requests),
                                            max_size=len(requests))))  # fmt: skip
    rebuilt = got.sequences.held(ids)
    for i in ids:
        expect = held.flat[held.offsets[i] : held.offsets[i + 1]]
        assert rebuilt.fetch(np.array([i]))[0].tolist() == expect.tolist()


def test_long_shared_prefixes_split_where_requests_branch():
    base = tuple(range(1000))
    requests = [
        Request("a", prompt=base),
        Request("b", prompt=base[:500] + (7,) * 10, output=(1, 2)),
        Request("c", prompt=base[:500] + (7,) * 5 + (8,)),
        Request("d", prompt=base[:499]),
        Request("e", prompt=base + (3,)),
        Request("f", prompt=base[:500] + (7,) * 10 + (1, 5)),
    ]
    got = run_matcher(_held(requests), xp=np, options=ALWAYS)
    assert got.shared_any.tolist() == [0, 500, 505, 499, 1000, 511]
    assert got.parent.tolist() == [-1, 0, 1, 0, 0, 1]
    assert_same_as_trie(requests, got)


def test_small_or_chunked_sources_take_the_vectorised_matcher(monkeypatch):
    calls, radix_views = [], engine.radix_views
    monkeypatch.setattr(engine, "radix_views", lambda *a: calls.append(a) or radix_views(*a))
    requests = [Request(f"r{i}", prompt=(1, 2, i % 3)) for i in range(8)]
    run_matcher(_held(requests), xp=np, options=MatchOptions())  # below the floor
    run_matcher(MemorySource.from_requests(requests), xp=np, options=ALWAYS)  # not held
    assert calls == []
    run_matcher(_held(requests), xp=np, options=ALWAYS)
    assert len(calls) == 1


def test_the_c_loop_is_built_and_refuses_arrays_it_cannot_read():
    """This install built `radix_loop`; an array of another type or layout is an error naming
    it, never a read or write out of bounds."""
    assert radix.available()
    held = MemorySource.from_requests([Request("a", prompt=(1, 2, 3)), Request("b", prompt=(1,))])
    match = radix.RadixMatch(held.meta, np.dtype(np.int64))
    starts = held.offsets[:-1]
    for flat in (held.flat.astype(np.float64), held.flat.astype(np.int16), held.flat[::-1]):
        with pytest.raises(TypeError, match="^feed: flat: "):
            match.feed(flat, starts, 0, 2)
    with pytest.raises(ValueError, match="inconsistent shapes"):
        match.feed(held.flat, starts, 0, 3)  # past the last request
    match.feed(held.flat, starts, 0, 2)
    assert match.views()["any"][0].tolist() == [0, 1]


def test_without_the_c_loop_the_vectorised_matcher_answers(monkeypatch):
    """A package built without a C compiler: the same answers, by the vectorised matcher,
    held or streamed."""
    requests = [Request(f"r{i}", prompt=(1, 2, i % 3, 4)) for i in range(8)]
    built = run_matcher(_held(requests), xp=np, options=ALWAYS)
    monkeypatch.setattr(radix, "radix_loop", None)
    assert not radix.available()
    for source in (_held(requests), MemorySource.from_requests(requests)):
        assert_same_arrays(run_matcher(source, xp=np, options=ALWAYS), built)
