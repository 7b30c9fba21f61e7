"""The loss waterfall: levels, causes that sum to prompt_tokens, and the monotonicity check."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from analyzer.metrics.waterfall import CAUSES, WaterfallError, build_levels, matchable


def test_matchable_caps_and_floors():
    shared = np.array([0, 543, 544, 2176, 1500])
    prompt = np.array([2176, 2176, 2176, 2176, 1500])
    assert matchable(shared, prompt, 544).tolist() == [0, 0, 544, 1632, 1088]


def test_diagnostic_second_request():
    # 2,176 prompt, 1,088 shared everywhere, FA matched 1,088, Mamba vetoed all of it.
    levels = build_levels(
        prompt_tokens=[2176],
        shared_any_tokens=[1088],
        shared_replica_tokens=[1088],
        align_tokens=544,
        attention_match_tokens=[1088],
        sparse_retention_miss_tokens=[1088],
        hit_tokens=[0],
    )
    causes = {k: int(v[0]) for k, v in levels.causes().items()}
    assert causes == {
        "unshared_tokens": 1088,
        "lost_routing_tokens": 0,
        "lost_in_flight_tokens": 0,
        "lost_granularity_tokens": 0,
        "lost_eviction_tokens": 0,
        "sparse_retention_miss_tokens": 1088,
        "lost_spec_decode_tokens": 0,
        "hit_tokens": 0,
    }


@pytest.mark.parametrize(
    ("scheduled", "in_flight", "granularity", "eviction"),
    [
        (1700, 0, 68, 1088),  # all 1,700 shared tokens scheduled; floored to 1,632; evicted
        (1650, 50, 18, 1088),  # the producer was 50 tokens short of the shared prefix
        (1100, 600, 12, 544),  # 1,100 of 1,700 scheduled: 1,088 matchable, 544 resident
        (544, 1156, 0, 0),  # what was scheduled is resident: the rest was still in flight
        (0, 1156, 0, 0),  # held at L4 (never below what attention matched)
        (2176, 0, 68, 1088),  # held at L2
    ],
)
def test_in_flight_loss_is_shared_not_yet_scheduled(scheduled, in_flight, granularity, eviction):
    """The waterfall's L2b: in flight comes before granularity, which floors what was scheduled."""
    levels = build_levels(
        prompt_tokens=[2176],
        shared_any_tokens=[1700],
        shared_replica_tokens=[1700],
        align_tokens=544,
        attention_match_tokens=[544],
        sparse_retention_miss_tokens=[0],
        hit_tokens=[544],
        shared_scheduled_tokens=[scheduled],
    )
    causes = levels.causes()
    assert int(causes["lost_in_flight_tokens"][0]) == in_flight
    assert int(causes["lost_granularity_tokens"][0]) == granularity
    assert int(causes["lost_eviction_tokens"][0]) == eviction
    assert sum(int(v[0]) for v in causes.values()) == 2176


def test_spec_decode_loss_is_after_the_sparse_miss():
    # FA plain match 1,088; EAGLE drop leaves 544 in attention; Mamba has state at 544.
    levels = build_levels(
        prompt_tokens=[2176],
        shared_any_tokens=[1088],
        shared_replica_tokens=[1088],
        align_tokens=544,
        attention_match_tokens=[1088],
        sparse_retention_miss_tokens=[0],
        hit_tokens=[544],
    )
    assert int(levels.causes()["lost_spec_decode_tokens"][0]) == 544


def test_rising_level_is_reported():
    with pytest.raises(WaterfallError, match="lost_eviction_tokens is -544 at request index 0"):
        build_levels(
            prompt_tokens=[2176],
            shared_any_tokens=[1088],
            shared_replica_tokens=[1088],
            align_tokens=544,
            attention_match_tokens=[1632],
            sparse_retention_miss_tokens=[0],
            hit_tokens=[0],
        )


@given(
    st.lists(
        st.tuples(
            st.integers(2, 5000),
            st.integers(0, 5000),
            st.integers(0, 5000),
            st.integers(0, 5000),
            st.integers(0, 5000),
            st.integers(0, 5000),
        ),
        min_size=1,
        max_size=20,
    ),
    st.sampled_from([1, 16, 528, 544]),
)
def test_causes_sum_to_prompt_tokens(rows, align):
    # Build a consistent chain top-down, then check the sum.
    p = np.array([r[0] for r in rows])
    l1 = np.minimum([r[1] for r in rows], p)
    l2 = np.minimum([r[2] for r in rows], l1)
    l3 = matchable(l2, p, align)
    l4 = np.minimum([r[3] for r in rows], l3)
    hit = np.minimum([r[4] for r in rows], l4)
    miss = np.minimum([r[5] for r in rows], l4 - hit)
    levels = build_levels(
        prompt_tokens=p,
        shared_any_tokens=l1,
        shared_replica_tokens=l2,
        align_tokens=align,
        attention_match_tokens=l4,
        sparse_retention_miss_tokens=miss,
        hit_tokens=hit,
    )
    causes = levels.causes()
    total = sum(causes[name] for name in CAUSES) + causes["hit_tokens"]
    assert total.tolist() == p.tolist()
    assert all((causes[name] >= 0).all() for name in CAUSES)
