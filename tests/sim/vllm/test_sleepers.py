"""sleepers.steps_to_events against the plain definition: the least (e - r) mod B."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analyzer.sim.vllm.sleepers import steps_to_events


def plain(events: frozenset[int], block_size: int) -> list[int]:
    return [
        min((e - r) % block_size for e in events) if events else block_size
        for r in range(block_size)
    ]


@pytest.mark.parametrize(
    ("events", "block_size", "steps"),
    [
        (frozenset(), 4, [4, 4, 4, 4]),
        (frozenset({3}), 4, [3, 2, 1, 0]),
        (frozenset({0}), 4, [0, 3, 2, 1]),
        (frozenset({1, 3}), 4, [1, 0, 1, 0]),
        (frozenset(range(5)), 5, [0, 0, 0, 0, 0]),
        (frozenset({0}), 1, [0]),
    ],
)
def test_steps_to_events(events, block_size, steps):
    assert steps_to_events(events, block_size) == steps


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 600).flatmap(
        lambda b: st.tuples(st.frozensets(st.integers(0, b - 1)), st.just(b))
    )
)
def test_steps_to_events_is_the_least_distance_mod_the_block(case):
    events, block_size = case
    assert steps_to_events(events, block_size) == plain(events, block_size)
