"""L1/L2 are matched once per trace object and layout: the replays of a sweep or a plan
over one trace share them."""

from __future__ import annotations

import gc

import numpy as np
import pytest

from analyzer.access import shared_prefixes as module
from analyzer.access.shared_prefixes import shared_prefixes
from tests.pipeline.test_replay_shared import _trace


class Counted:
    """A trace whose `shared_units` calls are counted."""

    def __init__(self, trace) -> None:
        self.trace, self.calls = trace, 0

    def __getattr__(self, name):
        return getattr(self.trace, name)

    def shared_units(self, *args):
        self.calls += 1
        return self.trace.shared_units(*args)


def _requests():
    return [
        {"prompt": [1, 2, 3, 4]},
        {"prompt": [1, 2, 3, 9], "replica": "b"},
        {"prompt": [1, 2, 5], "salt": "s"},
    ]


def test_one_match_per_trace_and_layout():
    trace = Counted(_trace(_requests()))
    ns = [("m", None), ("m", None), ("m", "s")]
    one = [("m", "a"), ("m", "b"), ("m", "a")]
    first = shared_prefixes(trace, ns, one)
    again = shared_prefixes(trace, ns, one)
    assert trace.calls == 1 and again is first
    assert first[0].tolist() == [0, 3, 0]  # L1: the first prefix; the salted one isolated
    assert first[1].tolist() == [0, 0, 0]  # L2: request 1 is on another replica
    same_replica = [("m", "a")] * 3
    second = shared_prefixes(trace, ns, same_replica)  # another layout: matched again
    assert trace.calls == 2 and second[1].tolist() == [0, 3, 0]
    with pytest.raises(ValueError, match="read-only"):
        first[0][0] = 7  # shared by every replay that asks: never changed in place


def test_the_memo_goes_with_its_trace():
    trace = Counted(_trace(_requests()))
    shared_prefixes(trace, [("m", None)] * 3, [("m", "a")] * 3)
    key = id(trace)
    assert key in module._MEMO
    del trace
    gc.collect()
    assert key not in module._MEMO


def test_equal_traces_are_not_confused():
    """Two trace objects with other tokens but the same layout each get their own L1/L2."""
    a = _trace([{"prompt": [1, 2]}, {"prompt": [1, 2]}])
    b = _trace([{"prompt": [1, 2]}, {"prompt": [3, 4]}])
    layout = ([("m", None)] * 2, [("m", "a")] * 2)
    assert shared_prefixes(a, *layout)[0].tolist() == [0, 2]
    assert shared_prefixes(b, *layout)[0].tolist() == [0, 0]
    assert np.all(shared_prefixes(a, *layout)[0] == [0, 2])
