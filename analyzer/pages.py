"""Large scratch arrays on plain pages.

numpy asks the kernel for transparent huge pages (madvise) for every array of 4 MiB or more.
Where the kernel then finds no free huge page and compacts memory to make one before the
first touch returns (`/sys/kernel/mm/transparent_hugepage/defrag` = madvise, a common
default), a replay's first pass over a fresh array stalled: 10,000 requests' block ids took
0.13-0.16 s instead of 0.05 s, in two runs of three; ingest's token scanner, 1.2-1.5 s
instead of 0.9-1.0 s on 70 M tokens. An anonymous mapping of our own, which
no one advises, is mapped a 4 KiB page at a time and never waits on compaction. It is
private (copied on write in a forked worker), like numpy's own memory.
"""

from __future__ import annotations

import mmap

import numpy as np


def plain_empty(shape: int | tuple[int, ...], dtype) -> np.ndarray:
    """An uninitialised array (in fact zeroed) of `shape` on plain pages; freed with it."""
    dtype = np.dtype(dtype)
    count = int(np.prod(shape))
    nbytes = max(count * dtype.itemsize, 1)
    # private: Python's default is a shared mapping, which a forked worker would write into
    # together with its parent
    private = mmap.MAP_PRIVATE | getattr(mmap, "MAP_ANONYMOUS", getattr(mmap, "MAP_ANON", 0))
    return np.frombuffer(mmap.mmap(-1, nbytes, flags=private), dtype, count).reshape(shape)
