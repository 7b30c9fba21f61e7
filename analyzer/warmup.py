"""Start-up work (loading a compiled kernel: importing numba, then its first call) run in a
thread while the caller reads its input, and waited for before the work is needed or the
process forks: a worker forked while the thread holds the import lock would deadlock."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable


class Warmup:
    """At most one pending thread; true while it has not been waited for."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._threads: list[threading.Thread] = []
        os.register_at_fork(before=self.wait)

    def __bool__(self) -> bool:
        return bool(self._threads)

    def start(self, target: Callable[[], object]) -> None:
        """Run `target` in a thread, unless one started here is still pending."""
        if self._threads:
            return
        self._threads.append(threading.Thread(target=target, name=self.name))
        self._threads[0].start()

    def wait(self) -> None:
        """Return once the pending thread, if any, has finished."""
        while self._threads:
            self._threads.pop().join()
