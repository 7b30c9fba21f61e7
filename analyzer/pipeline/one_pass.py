"""The one-pass `num_blocks` sweep: which policies it applies to, the replayer that gives
every capacity of a partition from one stack-distance curve (stack_distance.py), the
`num_blocks=auto` capacities, and a sweep's points from the curves.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from analyzer.config.policy import Policy
from analyzer.pipeline.replay import num_groups, replay_rows, routed_partitions
from analyzer.sim.dispatch import replay
from analyzer.sim.vllm.compiled.stack_distance import capacity_curve
from analyzer.sim.vllm.gates import CAPACITY_CURVE, unmodelled_keys
from analyzer.sim.vllm.layout import make_layout

AUTO_POINTS = 12


def one_pass_applies(policy: Policy) -> bool:
    """An LRU full-attention-only cache replayed serially: the stack-distance pass is exact
    (under the per-capacity conditions `CapacityCurve.valid` checks), whatever the token
    budget (it only splits the prefill: `sim/vllm/compiled/stack_distance.py`). Never under the
    concurrent schedule, where requests in flight pin blocks and preempt. What the pass
    models is declared by its gate (`analyzer.sim.vllm.gates.CAPACITY_CURVE`)."""
    if policy.engine != "vllm" or policy.schedule != "serial" or unmodelled_keys(policy):
        return False
    return CAPACITY_CURVE.admits(make_layout(policy, num_groups(policy)))


class OnePass:
    """A replayer for `replay_rows`: per partition one curve, then any capacity from it."""

    def __init__(self) -> None:
        self.curves: dict[tuple, Any] = {}
        self.fallbacks = 0
        self.seconds = 0.0

    def curve(self, requests, block_size: int):
        key = (block_size, tuple(r.request_id for r in requests))
        if key not in self.curves:
            started = time.perf_counter()
            self.curves[key] = capacity_curve(requests, block_size)
            self.seconds += time.perf_counter() - started
        return self.curves[key]

    def __call__(self, requests, policy: Policy, *, num_groups=None):
        requests = list(requests)
        curve = self.curve(requests, policy.block_size)
        if not curve.valid(policy.num_blocks):
            self.fallbacks += 1
            return list(replay(requests, policy, num_groups=num_groups))
        return curve.results(policy.num_blocks, policy.max_num_batched_tokens)


def auto_capacities(trace, policy: Policy, one: OnePass) -> list[int]:
    """`num_blocks=auto`: ~12 pool sizes from the smallest that fits every request to the
    saturation of the curve (or the last exact one), geometrically spaced."""
    ns, _, partitions = routed_partitions(trace, policy)
    members: dict[tuple, list[int]] = {}
    for i, key in enumerate(partitions):
        members.setdefault(key, []).append(i)
    lo, hi = 2, 2
    for idx in members.values():
        curve = one.curve([trace.sim_request(i, ns[i]) for i in idx], policy.block_size)
        lo = max(lo, curve.min_num_blocks)
        top = curve.saturation()
        if curve.exact_below is not None:
            top = min(top, curve.exact_below - 1)
        hi = max(hi, top)
    hi = max(hi, lo)
    grid = np.unique(np.geomspace(lo, hi, AUTO_POINTS).round().astype(int))
    return [int(v) for v in grid]


def uses_one_pass(knob: str, policies: list[Policy]) -> bool:
    """A num_blocks sweep whose every point the stack-distance pass can give."""
    return knob == "num_blocks" and all(one_pass_applies(p) for p in policies)


def one_pass_points(trace, policies: list[Policy], one: OnePass, tick=None) -> list[tuple]:
    """(rows, seconds, from the curve) per point of a num_blocks sweep, from `one`'s curves
    (a point whose capacity the curve cannot give exactly is replayed)."""
    computed = []
    for policy in policies:
        before = one.fallbacks
        started = time.perf_counter()
        rows = replay_rows(trace, policy, one)
        computed.append((rows, time.perf_counter() - started, one.fallbacks == before))
        if tick:
            tick()
    return computed
