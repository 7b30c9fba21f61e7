"""A replay's state is freed as the replay ends, by reference counts: no reference cycle
holds it until the collector's next full pass. A plan replays a hundred times in one
process; cycles through a replica (a pool's hook back to its replay, the scheduled prefixes'
callback, a tier's policy back to its tier) kept each replay's state alive until then:
528 MiB of peak memory on planning.md's latency plan with a host tier, 181 MiB without them.
Checked on the offload fuzzer's random cases: serial, concurrent and 2-replica fleets, every
layout, with and without a tier. SGLang's and Marconi's radix trees (a child linked to its
parent, SGLang's split hook back to its cache) are checked on their engines' random policies,
and Marconi's alpha tuning on the clones of its tree it replays and drops."""

from __future__ import annotations

import gc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analyzer.config.policy import policy_values
from analyzer.sim import dispatch
from analyzer.sim.dispatch import make_policy
from analyzer.sim.fleet import replay_fleet
from analyzer.sim.marconi import MarconiReplay
from analyzer.sim.records import SimRequest
from analyzer.sim.vllm import concurrent_replay, replay
from tests.sim.engine_checks import cat, req, toks
from tests.sim.marconi.test_marconi import marconi_policies
from tests.sim.sglang.test_sglang import sglang_policies
from tests.sim.strategies import traces
from tests.sim.vllm.fuzz_offload import fleet_case


def _replay(values: dict, requests: list[SimRequest]) -> None:
    policy = make_policy(values)
    if policy.replicas > 1:
        replay_fleet(requests, policy)
    elif policy.schedule == "concurrent":
        list(concurrent_replay(policy).run(requests))
    else:
        list(replay(requests, policy))


def _left_in_cycles(run) -> list[str]:
    """The simulator's objects that only the collector would free after `run()`."""
    gc.collect()
    enabled, flags = gc.isenabled(), gc.get_debug()
    gc.disable()  # (an automatic pass would free them unseen)
    try:
        run()
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        return sorted(
            {
                f"{type(o).__module__}.{type(o).__qualname__}"
                for o in gc.garbage
                if type(o).__module__.startswith("analyzer.")
            }
        )
    finally:
        gc.set_debug(flags)
        gc.garbage.clear()
        if enabled:
            gc.enable()


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32), tier=st.booleans())
def test_a_replay_leaves_no_cycle(seed, tier):
    values, requests = fleet_case(seed, tier=tier)
    assert _left_in_cycles(lambda: _replay(values, requests)) == []


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_a_concurrent_replay_with_a_tier_leaves_no_cycle(seed):
    values, requests = fleet_case(seed, tier=True)
    values = {**values, "schedule": "concurrent", "async_scheduling": False}
    values = {**values, "host_tier_chunks": 64}
    assert _left_in_cycles(lambda: _replay(values, requests)) == []


@settings(max_examples=25, deadline=None)
@given(trace=traces(), policy=sglang_policies())
def test_an_sglang_replay_leaves_no_cycle(trace, policy):
    assert _left_in_cycles(lambda: list(dispatch.replay(trace, policy))) == []


@settings(max_examples=25, deadline=None)
@given(trace=traces(), policy=marconi_policies())
def test_a_marconi_replay_leaves_no_cycle(trace, policy):
    assert _left_in_cycles(lambda: list(dispatch.replay(trace, policy))) == []


def test_marconi_s_alpha_tuning_frees_the_trees_it_tried():
    system = toks(0, 1100)
    a, b = cat(system, toks(1000, 1100)), cat(system, toks(2000, 2150))
    requests = [
        req("r0", a, toks(5000, 5040)),
        req("r1", cat(a, toks(5000, 5039), toks(6000, 6050))),
        req("r2", b),
        req("r3", cat(b, toks(7000, 7100)), toks(8000, 8010)),
        req("r4", cat(system, toks(9000, 9300))),
    ]
    values = {**policy_values("marconi-default"), "block_size": 16, "num_blocks": 100}
    engine = MarconiReplay(make_policy({**values, "marconi_bootstrap": 1}))
    assert _left_in_cycles(lambda: list(engine.run(requests))) == []
    assert engine.tuning is not None  # a clone of the tree replayed per alpha, then dropped


@pytest.mark.parametrize("seed", range(4))
def test_a_fleet_behind_sglang_s_router_leaves_no_cycle(seed):
    """The router's own radix tree (tree.rs's, a child linked to its parent) goes with it."""
    values, requests = fleet_case(seed, tier=False)
    values = {**values, "routing": "sglang", "replicas": 2, "schedule": "concurrent"}
    assert _left_in_cycles(lambda: _replay(values, requests)) == []
