"""CuPy against NumPy, bit for bit (needs CuPy and a CUDA device: `pytest -m gpu`)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from analyzer.pipeline.match import compute
from analyzer.prefixes.engine import MatchOptions
from analyzer.prefixes.memory import MemorySource
from analyzer.prefixes.prefix_hash import HashParams

from .helpers import assert_same_arrays, assert_same_as_trie, requests_

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def cupy_xp():
    pytest.importorskip("cupy")
    from analyzer.errors import BackendUnavailable
    from analyzer.prefixes.backend import get_xp

    try:
        return get_xp("cupy")
    except BackendUnavailable as exc:
        pytest.skip(str(exc))


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(requests_(max_requests=20))
def test_cupy_equals_numpy(cupy_xp, requests):
    for params in (HashParams(), HashParams(key_mask=0xFF)):
        options = MatchOptions(chunk_requests=5, hash_params=params)
        a = compute(MemorySource.from_requests(requests), xp=np, options=options)
        b = compute(MemorySource.from_requests(requests), xp=cupy_xp, options=options)
        assert_same_arrays(a.arrays, b.arrays)
        assert np.array_equal(a.path_junctions, b.path_junctions)
        assert_same_as_trie(requests, b.arrays)


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(requests_(max_requests=20))
def test_the_fused_kernels_on_the_device_split_or_not(cupy_xp, requests):
    """The sort matcher's CUDA module: one sort or four key ranges, wide and narrow keys."""
    for params in (HashParams(), HashParams(key_mask=0x7)):
        for passes in (1, 4):
            options = MatchOptions(hash_params=params, sort_passes=passes)
            got = compute(MemorySource.from_requests(requests), xp=cupy_xp, options=options)
            assert got.arrays.path == "the sort matcher (cupy)"
            assert_same_as_trie(requests, got.arrays)
