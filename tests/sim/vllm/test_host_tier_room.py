"""A host tier that never evicted (`host_tier.slots_used`): any tier of at least the slots it
took replays alike, step for step, and one slot fewer evicts or drops a store. The plan
skips the replays of such tiers (`pipeline/plan/evaluate.py`); these hold that on the
offload fuzzer's random cases: serial and concurrent, every layout, LRU and ARC, one
replica and a fleet."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from analyzer.sim.dispatch import make_policy
from analyzer.sim.fleet import replay_fleet
from analyzer.sim.records import SimRequest
from analyzer.sim.vllm import concurrent_replay, replay
from analyzer.sim.vllm.host_tier import slots_used, tiers_built
from tests.sim.vllm.fuzz_offload import fleet_case


def _run(values: dict, requests: list[SimRequest], chunks: int) -> tuple[list, int | None]:
    """(results, slots used) of the case with a tier of `chunks` slots."""
    policy = make_policy({**values, "host_tier_chunks": chunks})
    with tiers_built() as tiers:
        if policy.replicas > 1:
            results = replay_fleet(requests, policy).results
        elif policy.schedule == "concurrent":
            results = list(concurrent_replay(policy).run(requests))
        else:
            results = list(replay(requests, policy))
    return results, slots_used(tiers)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32), more=st.integers(0, 3))
def test_a_tier_of_the_slots_a_roomy_one_took_replays_alike(seed, more):
    values, requests = fleet_case(seed)
    roomy, used = _run(values, requests, 4096)
    assert used is not None  # (the fuzzer's traces take a few hundred keys at most)
    same, again = _run(values, requests, used + more)
    assert same == roomy and again == used
    if used > 1:  # (a policy names one slot at least)
        _, fewer = _run(values, requests, used - 1)
        assert fewer is None  # it evicted a key or dropped a store


def test_a_tier_that_evicted_says_nothing():
    for seed in range(40):
        values, requests = fleet_case(seed)
        if values["host_tier_chunks"] < _run(values, requests, 4096)[1]:
            assert _run(values, requests, values["host_tier_chunks"])[1] is None
            return
    raise AssertionError("no case evicted")
