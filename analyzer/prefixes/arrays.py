"""Ragged-array helpers for the prefix matcher, written against the array API standard.

Every function takes a keyword-only `xp`. Only `merge_sorted` has a backend-specific fast
path (it scatters, which the standard does not allow); its portable branch gives the same
result and is what array-api-strict runs. Ragged data is a flat array plus `starts`/`lens`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

Array = Any

U64_MAX = (1 << 64) - 1


def u64(value: int, *, xp: Any) -> Array:
    """A 0-d uint64 constant (safe on every backend, whatever its scalar-casting rules)."""
    return xp.asarray(value & U64_MAX, dtype=xp.uint64)


def exclusive_cumsum(lens: Array, *, xp: Any) -> Array:
    """[0, l0, l0+l1, ...] of length len(lens) + 1, as int64."""
    return running_sum(xp.astype(lens, xp.int64), xp=xp)


def running_sum(x: Array, *, xp: Any) -> Array:
    """[0, x0, x0+x1, ...] (length n + 1) in x's dtype; unsigned sums wrap mod 2^bits."""
    if xp is np:  # same values; NumPy's include_initial copies, this does not
        out = np.empty(x.shape[0] + 1, dtype=x.dtype)
        out[0] = 0
        np.cumsum(x, out=out[1:])
        return out
    return xp.cumulative_sum(x, include_initial=True)


def weighted_running_sum(x: Array, w: Array, *, xp: Any) -> Array:
    """running_sum(x * w) without a temporary on NumPy (chunks are large)."""
    if xp is np:
        out = np.empty(x.shape[0] + 1, dtype=np.result_type(x, w))
        out[0] = 0
        np.multiply(x, w, out=out[1:])
        np.cumsum(out[1:], out=out[1:])
        return out
    return running_sum(x * w, xp=xp)


def ragged_arange(lens: Array, *, xp: Any) -> tuple[Array, Array]:
    """For segments of lengths `lens`: (segment index, index within segment) per element.

    >>> ragged_arange(np.asarray([2, 0, 3]), xp=np)
    (array([0, 0, 2, 2, 2]), array([0, 1, 0, 1, 2]))
    """
    lens = xp.astype(lens, xp.int64)
    n = lens.shape[0]
    seg = xp.repeat(xp.arange(n, dtype=xp.int64), lens)
    bounds = exclusive_cumsum(lens, xp=xp)
    total = seg.shape[0]
    local = xp.arange(total, dtype=xp.int64) - xp.take(bounds[:-1], seg)
    return seg, local


def segment_sums(values: Array, lens: Array, *, xp: Any) -> Array:
    """Sum of `values` (int64) over consecutive segments of lengths `lens`."""
    cs = xp.cumulative_sum(xp.astype(values, xp.int64), include_initial=True)
    bounds = exclusive_cumsum(lens, xp=xp)
    return xp.take(cs, bounds[1:]) - xp.take(cs, bounds[:-1])


def prefixes_equal(
    flat_a: Array, starts_a: Array, flat_b: Array, starts_b: Array, lengths: Array, *, xp: Any
) -> Array:
    """Per i: flat_a[starts_a[i]:][:lengths[i]] == flat_b[starts_b[i]:][:lengths[i]] (bool)."""
    if xp is np:
        return _prefixes_equal_np(flat_a, starts_a, flat_b, starts_b, lengths)
    return _prefixes_equal(flat_a, starts_a, flat_b, starts_b, lengths, xp=xp)


_LONG = 512


def _prefixes_equal_np(flat_a, starts_a, flat_b, starts_b, lengths) -> np.ndarray:
    """NumPy: long segments compared slice by slice (memory speed, one call per segment
    of >= 512 units, so never a per-token loop), short ones all at once."""
    out = np.ones(lengths.shape[0], dtype=bool)
    long = np.flatnonzero(lengths >= _LONG)
    for i, a, b, n in zip(
        long.tolist(),
        starts_a[long].tolist(),
        starts_b[long].tolist(),
        lengths[long].tolist(),
        strict=True,
    ):
        out[i] = bool((flat_a[a : a + n] == flat_b[b : b + n]).all())
    short = np.flatnonzero((lengths > 0) & (lengths < _LONG))
    if short.size:
        out[short] = _prefixes_equal(
            flat_a, starts_a[short], flat_b, starts_b[short], lengths[short], xp=np
        )
    return out


def _prefixes_equal(flat_a, starts_a, flat_b, starts_b, lengths, *, xp: Any) -> Array:
    seg, local = ragged_arange(lengths, xp=xp)
    a = xp.take(flat_a, xp.take(starts_a, seg) + local)
    b = xp.take(flat_b, xp.take(starts_b, seg) + local)
    return segment_sums(a != b, lengths, xp=xp) == 0


def common_prefix(
    flat_a: Array, starts_a: Array, flat_b: Array, starts_b: Array, max_len: Array, *, xp: Any
) -> Array:
    """Per i: length of the common prefix of flat_a[starts_a[i]:] and flat_b[starts_b[i]:],
    looking at no more than max_len[i] units (exact: compares tokens)."""
    if xp is np:
        out = max_len.copy()
        long = np.flatnonzero(max_len >= _LONG)
        for i, a, b, n in zip(
            long.tolist(),
            starts_a[long].tolist(),
            starts_b[long].tolist(),
            max_len[long].tolist(),
            strict=True,
        ):
            diff = flat_a[a : a + n] != flat_b[b : b + n]
            first = int(diff.argmax())
            out[i] = first if diff[first] else n
        short = np.flatnonzero((max_len > 0) & (max_len < _LONG))
        if short.size:
            out[short] = _common_prefix(
                flat_a, starts_a[short], flat_b, starts_b[short], max_len[short], xp=np
            )
        return out
    return _common_prefix(flat_a, starts_a, flat_b, starts_b, max_len, xp=xp)


def _common_prefix(flat_a, starts_a, flat_b, starts_b, max_len, *, xp: Any) -> Array:
    seg, local = ragged_arange(max_len, xp=xp)
    a = xp.take(flat_a, xp.take(starts_a, seg) + local)
    b = xp.take(flat_b, xp.take(starts_b, seg) + local)
    mismatch = xp.nonzero(a != b)[0]
    bounds = exclusive_cumsum(max_len, xp=xp)
    first = first_at_or_after(mismatch, bounds[:-1], sentinel=int(bounds[-1]), xp=xp)
    return xp.minimum(first, bounds[1:]) - bounds[:-1]


def run_starts(sorted_keys: Array, *, xp: Any) -> Array:
    """Bool per element of a sorted array: does a run of equal keys start here?"""
    if sorted_keys.shape[0] == 0:
        return xp.zeros(0, dtype=xp.bool)
    head = xp.ones(1, dtype=xp.bool)
    return xp.concat([head, sorted_keys[1:] != sorted_keys[:-1]])


def stable_argsort_u64(keys: Array, *, xp: Any) -> Array:
    """The permutation that sorts uint64 `keys`, equal keys kept in input order.

    Fast path: pack the element index into the low bits of the key and sort plain
    values (much faster than an index sort). The result is exactly the stable argsort
    unless two different keys agree in their high bits, which is checked; then the
    plain stable argsort runs instead, so the output never depends on the path taken.
    """
    n = keys.shape[0]
    if n < 2:
        return xp.arange(n, dtype=xp.int64)
    bits = max(1, (n - 1).bit_length())
    low = u64((1 << bits) - 1, xp=xp)
    high = u64(U64_MAX ^ ((1 << bits) - 1), xp=xp)
    packed = xp.sort((keys & high) | xp.astype(xp.arange(n, dtype=xp.int64), xp.uint64))
    perm = xp.astype(packed & low, xp.int64)
    full = xp.take(keys, perm)
    same_high = (packed[1:] & high) == (packed[:-1] & high)
    if bool(xp.any(same_high & (full[1:] != full[:-1]))):
        return xp.argsort(keys, stable=True)
    return perm


def lookup_sorted(table: Array, needles: Array, *, xp: Any) -> tuple[Array, Array]:
    """For each needle: (index in sorted unique `table`, whether it is there).

    The index is clipped into range, so it is always safe to `take` with it.
    """
    m = table.shape[0]
    if m == 0 or needles.shape[0] == 0:
        zeros = xp.zeros(needles.shape[0], dtype=xp.int64)
        return zeros, xp.zeros(needles.shape[0], dtype=xp.bool)
    idx = xp.searchsorted(table, needles)
    idx = xp.where(idx < m, idx, m - 1)
    return idx, xp.take(table, idx) == needles


def first_at_or_after(sorted_positions: Array, queries: Array, sentinel: int, *, xp: Any) -> Array:
    """The smallest element of `sorted_positions` that is >= each query, else `sentinel`."""
    n = sorted_positions.shape[0]
    idx = xp.searchsorted(sorted_positions, queries)
    padded = xp.concat([sorted_positions, xp.asarray([sentinel], dtype=sorted_positions.dtype)])
    return xp.take(padded, xp.where(idx < n, idx, n))


def merge_sorted(
    keys_a: Array, vals_a: Array, keys_b: Array, vals_b: Array, *, xp: Any
) -> tuple[Array, Array]:
    """Merge two sorted key arrays, carrying their values along; a key in both keeps a's
    entry first (so a lookup finds the older one)."""
    if _can_scatter(xp):
        pos_b = xp.searchsorted(keys_a, keys_b, side="right") + xp.arange(keys_b.shape[0])
        total = keys_a.shape[0] + keys_b.shape[0]
        is_b = xp.zeros(total, dtype=xp.bool)
        is_b[pos_b] = True
        keys = xp.empty(total, dtype=keys_a.dtype)
        vals = xp.empty(total, dtype=vals_a.dtype)
        keys[pos_b], vals[pos_b] = keys_b, vals_b
        keys[~is_b], vals[~is_b] = keys_a, vals_a
        return keys, vals
    keys = xp.concat([keys_a, keys_b])
    perm = xp.argsort(keys, stable=True)
    return xp.take(keys, perm), xp.take(xp.concat([vals_a, vals_b]), perm)


def _can_scatter(xp: Any) -> bool:
    return xp is np or getattr(xp, "__name__", "") == "cupy"
