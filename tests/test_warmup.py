"""analyzer.warmup: one pending thread at a time, waited for on demand."""

import threading

from analyzer.warmup import Warmup


def test_one_thread_at_a_time_then_waited_for():
    release, calls = threading.Event(), []
    warmup = Warmup("test-warmup")
    assert not warmup
    warmup.start(lambda: (release.wait(5), calls.append(1)))
    warmup.start(lambda: calls.append(2))  # one is pending: not started
    assert warmup
    release.set()
    warmup.wait()
    assert not warmup and calls == [1]
    warmup.start(lambda: calls.append(3))  # none pending any more
    warmup.wait()
    assert calls == [1, 3]
