"""Parsing batches side by side: a reader's pieces mapped in worker threads, in order.

The JSON Lines reader's work is in code that releases the GIL (the token scanner, Arrow's
JSON reader, NumPy over whole batches), so worker threads (`default_workers`: one a core, up
to four) parse batches at once. On 2 cores that matters where nothing else is busy: while
the first write unit is parsed (the store has nothing to insert yet) and while DuckDB waits
between inserts.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


def default_workers() -> int:
    """Parsing threads: one a core, at most 4 (more only wait on the GIL's share)."""
    return max(1, min(4, os.cpu_count() or 1))


def ordered_map(
    fn: Callable[[T], R], items: Iterable[T], *, workers: int, name: str = "hpa-parse"
) -> Iterator[R]:
    """`fn(item)` for each of `items`, in their order, computed by `workers` threads with
    at most `workers` + 1 items taken and not yet given back (memory stays flat). `items`
    is iterated in the caller's thread; what `fn` raises is raised where its result would
    have come. Closing the iterator waits for the items in hand and drops their results."""
    if workers <= 1:
        yield from map(fn, items)
        return
    pending: deque[Future] = deque()
    pool = ThreadPoolExecutor(workers, thread_name_prefix=name)
    try:
        for item in items:
            pending.append(pool.submit(fn, item))
            if len(pending) > workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
