"""Stopping a replay once its answer is known: a TTFT p99 target it has already missed.

A plan replays many fleets only to ask "does this one meet TTFT p99 <= T?". Under a shape
that cannot keep up, the answer is known long before the replay ends: once more requests
have had their first token later than T than the 99th percentile can leave out, no later
request can bring the percentile back under T. `stop_when_late` installs a watch for the
replays run inside it (in this process); the concurrent replay reports each first token
to it and it raises `TargetMissed` at that point.

The count, exactly. The p99 of m values (linear interpolation between order statistics,
as `numpy.quantile` and DuckDB's `quantile_cont`) lies between the sorted values at
floor(h) and floor(h) + 1, h = 0.99 (m - 1); it is above T when the values from index
floor(h) on all are, that is when at least m - floor(h) of them are above T. That count
grows with m, so taking m as every measured request (some may never get a first token)
only stops later, never wrongly.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from contextvars import ContextVar


class TargetMissed(Exception):
    """A watched replay's TTFT p99 is above its limit whatever the rest of it does."""


def late_to_miss(num_requests: int, quantile: float = 0.99) -> int:
    """How many of `num_requests` values above T put their `quantile` above T for sure."""
    if num_requests < 1:
        return 1
    return num_requests - math.floor(quantile * (num_requests - 1))


class LateWatch:
    """Counts first tokens later than `limit_s` after their arrival, of the requests in
    `measured` (request ids; None: every one); raises `TargetMissed` once there are
    `late_to_miss(num_measured)`."""

    def __init__(self, limit_s: float, num_measured: int, measured: Collection[str] | None):
        self.limit_s = limit_s
        self.stop_at = late_to_miss(num_measured)
        self.measured = None if measured is None else frozenset(measured)
        self.late = 0

    def first_token(self, request_id: str, ttft_s: float) -> None:
        if ttft_s <= self.limit_s:
            return
        if self.measured is not None and request_id not in self.measured:
            return
        self.late += 1
        if self.late >= self.stop_at:
            raise TargetMissed(
                f"{self.late} first tokens later than {self.limit_s:g} s: the TTFT p99 is above it"
            )


_WATCH: ContextVar[LateWatch | None] = ContextVar("hpa_late_watch", default=None)


@contextmanager
def stop_when_late(watch: LateWatch | None) -> Iterator[None]:
    """Replays started inside report their first tokens to `watch` (None: no watch)."""
    token = _WATCH.set(watch)
    try:
        yield
    finally:
        _WATCH.reset(token)


def current_watch() -> LateWatch | None:
    """The watch of the replay being made (None: it runs to its end)."""
    return _WATCH.get()
