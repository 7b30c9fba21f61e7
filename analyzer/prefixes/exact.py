"""The slow exact path: longest common prefix of one sequence with a set of earlier ones.

Used only when a verification fails (a hash collision fooled the fast path), so it
trades speed for certainty: it reads every earlier sequence of the namespace in batches
and compares tokens directly, vectorised per batch. Host NumPy.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np

from analyzer.prefixes.arrays import first_at_or_after, ragged_arange

Fetch = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]


class ExactPath:
    """Exact (length, earliest id) answers against earlier requests of one namespace view.

    Args:
        ns: namespace id per request (arrival order); -1 never matches.
        insert_len: inserted-sequence length per request, to size the read batches.
        fetch: returns (uint64 flat, offsets) of sorted request ids.
    """

    def __init__(
        self, ns: np.ndarray, insert_len: np.ndarray, fetch: Fetch, batch_tokens: int = 1 << 22
    ) -> None:
        self.ns, self.insert_len, self.fetch = ns, insert_len, fetch
        self.batch_tokens = batch_tokens
        self.calls = 0

    def longest(self, seq: np.ndarray, ns: int, before: int) -> tuple[int, int]:
        """Longest prefix of `seq` shared with a request id < `before` in namespace `ns`,
        and the earliest such request (-1 when nothing is shared)."""
        self.calls += 1
        ids = np.flatnonzero(self.ns[:before] == ns)
        best, arg = 0, -1
        for batch in self._batches(ids):
            flat, offsets = self.fetch(batch)
            lcp = common_prefix_lengths(flat, offsets, np.asarray(seq, dtype=np.uint64))
            top = int(lcp.max()) if lcp.size else 0
            if top > best:  # strictly longer: ties keep the earlier batch's (earlier) id
                best, arg = top, int(batch[int(np.argmax(lcp))])
        return best, (arg if best > 0 else -1)

    def _batches(self, ids: np.ndarray) -> Iterator[np.ndarray]:
        if ids.size == 0:
            return
        ends = np.cumsum(self.insert_len[ids])
        cut = np.searchsorted(
            ends, np.arange(1, int(ends[-1]) // self.batch_tokens + 1) * self.batch_tokens
        )
        yield from (b for b in np.split(ids, np.unique(cut)) if b.size)


def common_prefix_lengths(flat: np.ndarray, offsets: np.ndarray, seq: np.ndarray) -> np.ndarray:
    """Per sequence in (flat, offsets): length of its common prefix with `seq`."""
    lens = np.minimum(np.diff(offsets), seq.size)
    seg, local = ragged_arange(lens, xp=np)
    mismatch = np.flatnonzero(flat[offsets[:-1][seg] + local] != seq[local])
    bounds = np.concatenate([[0], np.cumsum(lens)])
    first = first_at_or_after(mismatch, bounds[:-1], sentinel=int(bounds[-1]), xp=np)
    return np.minimum(first, bounds[1:]) - bounds[:-1]
