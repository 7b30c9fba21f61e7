"""The matcher's memory of earlier chunks: prefix key -> the request that created it
(only grid nodes and chain heads are stored, see `walk`).

Stored as a few sorted runs (a log-structured merge): each chunk adds one run of new
keys, and a run is merged into the one before it once it is at least half that size, so
there are O(log n) runs and every key is copied O(log n) times in all. Keys are unique
across runs except after a hash collision; a lookup then returns the smallest first id.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from analyzer.prefixes.arrays import Array, lookup_sorted, merge_sorted


class PrefixDict:
    """uint64 key -> int64 first request id, for every prefix seen in earlier chunks."""

    def __init__(self, *, xp: Any) -> None:
        self.xp = xp
        self.runs: list[tuple[Array, Array]] = []

    @property
    def size(self) -> int:
        return sum(int(keys.shape[0]) for keys, _ in self.runs)

    def lookup(self, needles: Array) -> tuple[Array, Array]:
        """(found, first id or -1) for each needle key.

        Needles are searched in sorted order: neighbouring searches then share their
        paths through the (large, cache-missing) runs, several times faster."""
        xp = self.xp
        order = xp.argsort(needles)
        needles = xp.take(needles, order)
        found = xp.zeros(needles.shape[0], dtype=xp.bool)
        first = xp.full(needles.shape[0], -1, dtype=xp.int64)
        for keys, vals in self.runs:
            idx, hit = lookup_sorted(keys, needles, xp=xp)
            val = xp.take(vals, idx)
            first = xp.where(hit & (~found | (val < first)), val, first)
            found = found | hit
        back = xp.argsort(order)
        return xp.take(found, back), xp.take(first, back)

    def add(self, keys: Array, vals: Array) -> None:
        """Add sorted unique `keys` with their first ids."""
        if keys.shape[0] == 0:
            return
        self.runs.append((keys, vals))
        while len(self.runs) >= 2 and self.runs[-2][0].shape[0] <= 2 * self.runs[-1][0].shape[0]:
            k2, v2 = self.runs.pop()
            k1, v1 = self.runs.pop()
            self.runs.append(merge_sorted(k1, v1, k2, v2, xp=self.xp))

    def prune(self, keep: Callable[[Array, Array], Array]) -> None:
        """Drop every entry failing `keep(keys, first_ids) -> bool array`."""
        runs = []
        for keys, vals in self.runs:
            mask = keep(keys, vals)
            keys, vals = keys[mask], vals[mask]
            if keys.shape[0]:
                runs.append((keys, vals))
        self.runs = runs
