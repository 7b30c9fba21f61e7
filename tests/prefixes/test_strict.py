"""The `xp` code under array-api-strict: nothing NumPy-specific leaks in, and the answers
are bit for bit NumPy's. The backend-specific wrappers are compared with their portable
branches separately, so they are all that differs between backends."""

from __future__ import annotations

from unittest.mock import patch

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analyzer.pipeline.match import compute
from analyzer.prefixes import arrays, matcher
from analyzer.prefixes.backend import to_numpy
from analyzer.prefixes.engine import MatchOptions
from analyzer.prefixes.memory import MemorySource
from analyzer.prefixes.prefix_hash import HashParams, prefix_keys

from .helpers import assert_same_arrays, assert_same_as_trie, requests_

xps = pytest.importorskip("array_api_strict")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    requests_(max_requests=14),
    st.sampled_from([None, 1, 4]),
    st.booleans(),
    st.sampled_from([2, 32]),
)
def test_strict_equals_numpy_bit_for_bit(requests, chunk, weak, grid):
    options = MatchOptions(
        chunk_requests=chunk, hash_params=HashParams(key_mask=0x3F) if weak else HashParams()
    )
    got = {}
    with patch.object(matcher, "DEFAULT_GRID", grid), patch.object(matcher, "PRUNE_FLOOR", 0):
        for name, xp in (("numpy", np), ("strict", xps)):
            got[name] = compute(MemorySource.from_requests(requests), xp=xp, options=options)
    a, b = got["numpy"], got["strict"]
    assert_same_arrays(a.arrays, b.arrays)
    assert np.array_equal(a.path_requests, b.path_requests)
    assert np.array_equal(a.path_junctions, b.path_junctions)
    assert np.array_equal(a.junctions.owner, b.junctions.owner)
    assert_same_as_trie(requests, b.arrays)


def test_prefix_keys_identical():
    rng = np.random.default_rng(0)
    lens = rng.integers(0, 9, 20)
    flat = rng.integers(0, 5, int(lens.sum())).astype(np.uint64)
    starts = np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(np.int64)
    ns = rng.integers(0, 3, 20).astype(np.int64)
    ref = prefix_keys(flat, starts, lens, ns, params=HashParams(), xp=np)
    strict = prefix_keys(
        *(xps.asarray(a) for a in (flat, starts, lens, ns)), params=HashParams(), xp=xps
    )
    assert np.array_equal(ref, to_numpy(strict))


# -- the backend-specific wrappers against their portable branches, on NumPy --------------
@given(st.lists(st.integers(0, 40), max_size=60), st.lists(st.integers(0, 40), max_size=60))
def test_merge_sorted_scatter_equals_portable(a, b):
    ka, kb = (np.asarray(sorted(x), dtype=np.uint64) for x in (a, b))
    va, vb = np.arange(ka.size), np.arange(kb.size) + 1000
    fast = arrays.merge_sorted(ka, va, kb, vb, xp=np)
    portable = arrays.merge_sorted(
        xps.asarray(ka), xps.asarray(va), xps.asarray(kb), xps.asarray(vb), xp=xps
    )
    for x, y in zip(fast, portable, strict=True):
        assert np.array_equal(x, to_numpy(y))


@given(st.data())
def test_prefix_comparisons_equal_portable(data):
    flat = np.asarray(
        data.draw(st.lists(st.integers(0, 2), min_size=1, max_size=2000)), dtype=np.uint64
    )
    n = data.draw(st.integers(1, 12))
    sa = np.asarray(data.draw(st.lists(st.integers(0, flat.size - 1), min_size=n, max_size=n)))
    sb = np.asarray(data.draw(st.lists(st.integers(0, flat.size - 1), min_size=n, max_size=n)))
    room = np.minimum(flat.size - sa, flat.size - sb)
    length = np.asarray([data.draw(st.integers(0, int(r))) for r in room], dtype=np.int64)
    args = (flat, sa.astype(np.int64), flat, sb.astype(np.int64), length)
    strict_args = tuple(xps.asarray(x) for x in args)
    assert np.array_equal(
        arrays.prefixes_equal(*args, xp=np), to_numpy(arrays.prefixes_equal(*strict_args, xp=xps))
    )
    assert np.array_equal(
        arrays.common_prefix(*args, xp=np), to_numpy(arrays.common_prefix(*strict_args, xp=xps))
    )


@given(st.lists(st.integers(0, 2**64 - 1), max_size=50))
def test_running_sum_wraps_like_portable(values):
    x = np.asarray(values, dtype=np.uint64)
    assert np.array_equal(
        arrays.running_sum(x, xp=np), to_numpy(arrays.running_sum(xps.asarray(x), xp=xps))
    )


@given(st.lists(st.integers(0, 2**64 - 1), max_size=300), st.integers(0, 60))
def test_packed_argsort_is_the_stable_argsort(values, low_bits):
    keys = np.asarray(values, dtype=np.uint64) >> np.uint64(low_bits)  # many near-equal keys
    assert np.array_equal(arrays.stable_argsort_u64(keys, xp=np), np.argsort(keys, kind="stable"))
