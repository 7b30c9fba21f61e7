"""The compiled radix tree against the plain Python trie and the vectorised matcher."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analyzer.prefixes import engine
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
    calls = []
    monkeypatch.setattr(engine, "radix_views", lambda *a: calls.append(a) or None)
    requests = [Request(f"r{i}", prompt=(1, 2, i % 3)) for i in range(8)]
    run_matcher(_held(requests), xp=np, options=MatchOptions())  # below the floor
    run_matcher(MemorySource.from_requests(requests), xp=np, options=ALWAYS)  # not held
    assert calls == []
    run_matcher(_held(requests), xp=np, options=ALWAYS)
    assert len(calls) == 1


def test_a_kernel_loaded_early_gives_the_same_answers():
    """load_early's thread (a fresh process: numba not yet loaded) and the caller's first
    match do not race: the match waits for it, then matches as always."""
    code = (
        "import numpy as np\n"
        "from analyzer.prefixes import radix\n"
        "from analyzer.prefixes.memory import MemorySource, Request\n"
        "radix.load_early(np.dtype(np.int32))\n"
        "assert radix._loading\n"
        "reqs = [Request('a', prompt=(1, 2, 3)), Request('b', prompt=(1, 2, 4))]\n"
        "held = MemorySource.from_requests(reqs)\n"
        "views = radix.radix_views(held.meta, held.flat.astype(np.int32), held.offsets[:-1])\n"
        "assert not radix._loading\n"
        "print(views['any'][0].tolist(), views['any'][1].tolist())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[0] == "[0, 2] [-1, 0]"


def test_a_fork_while_the_kernel_loads_early_does_not_deadlock():
    """A worker forked (`--executor processes`) while load_early's thread imports numba
    would inherit its held locks and hang: the fork waits for the thread first."""
    code = (
        "import multiprocessing as mp\n"
        "import numpy as np\n"
        "from analyzer.prefixes import radix\n"
        "from analyzer.prefixes.memory import MemorySource, Request\n"
        "radix.load_early(np.dtype(np.int32))\n"
        "def child(q):\n"
        "    held = MemorySource.from_requests([Request('a', prompt=(1, 2, 3))] * 2)\n"
        "    flat = held.flat.astype(np.int32)\n"
        "    q.put(radix.radix_views(held.meta, flat, held.offsets[:-1])['any'][0].tolist())\n"
        "ctx = mp.get_context('fork')\n"
        "q = ctx.Queue()\n"
        "p = ctx.Process(target=child, args=(q,))\n"
        "p.start()\n"
        "print(q.get(timeout=60))\n"
        "p.join()\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "[0, 3]"
