"""The pool sizes of a plan: the floor (the smallest pool that schedules every request) and the
smallest pool that reaches the targets.

The floor is what the engine's own admission needs, found by the replay itself: a bisection
on "every request is scheduled". Most of a request's need does not depend on the others (in
a serial replay the pool it meets holds only evictable blocks and its own hit; under load a
request that fits alone waits or preempts, and only one that does not fit alone is refused),
so the bisection first replays the heaviest requests (the longest prompts, and prompts plus
outputs) on their own, a few thousand tokens, not the trace. On a hybrid model the need
also depends on the hit (the hit's blocks and its Mamba state's copies are held), which
depends on what ran before, so the whole trace then settles it: replayed at that floor and
one block below, it moves the floor down or up until the floor schedules every request and
one block less does not (`_whole_fits_from`). The search then starts there: the floor
reaches the target or it does not; if not, doubling to a pool that does, and bisection to
within 5% of the smallest that does (`TOLERANCE`). A plan's later settings start from a
like setting's answer instead (`hint`), a few replays from their own.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from analyzer.config.models import load_model
from analyzer.config.policy import MINIMUMS, Policy
from analyzer.pipeline.plan.evaluate import Evaluator, Measure, Targets

TOLERANCE = 0.05  # the answer is at most this far above the smallest pool reaching the targets
NUM_HEAVIEST = 8  # requests of each kind (longest prompt, longest prompt + outputs) tried alone
MIN_POOL = MINIMUMS["num_blocks"]  # the smallest num_blocks a policy can name


@dataclass(frozen=True)
class Found:
    """The smallest pool reaching the targets, and how it was bounded."""

    num_blocks: int
    measure: Measure
    floor_blocks: int
    sized_by: str  # "target", "ttft p99", "tpot p99" or "longest request"


def attention_blocks(policy: Policy, trace) -> int:
    """A lower bound on any floor: the full-attention blocks of the longest prompt (each
    full-attention group keeps every block of a running request)."""
    groups = 1
    if policy.model:
        groups = load_model(policy.model)["num_groups"].get("full_attention", 1)
    longest = max(int(p) for p in trace.columns["prompt_tokens"])
    return max(MIN_POOL, groups * -(-longest // policy.block_size))


def heaviest(trace) -> list[int]:
    """Arrival indices of the requests that need the most blocks: the longest prompts and the
    longest prompts plus outputs (ties by arrival)."""
    prompt = np.asarray(trace.columns["prompt_tokens"], dtype=np.int64)
    outputs = np.asarray([o or 0 for o in trace.columns["output_tokens"]], dtype=np.int64)
    picked = set(np.argsort(-prompt, kind="stable")[:NUM_HEAVIEST].tolist())
    picked |= set(np.argsort(-(prompt + outputs), kind="stable")[:NUM_HEAVIEST].tolist())
    return sorted(picked)


def floor_blocks(ev: Evaluator, policy: Policy, cap: int, whole: bool = True) -> int | None:
    """The smallest pool (num_blocks per cache) in which the heaviest requests, replayed
    alone, are all scheduled, confirmed on the whole trace (`whole`; else a lower bound);
    None when not even `cap` blocks are enough."""
    alone = ev.trace.take(heaviest(ev.trace))

    def fits(n: int) -> bool:
        rows = ev.rows(replace(policy, num_blocks=n), alone, f"floor: num_blocks={n:,}")
        return all(e is None for e in rows["error"])

    hi = min(attention_blocks(policy, ev.trace), cap)
    lo = MIN_POOL - 1  # below the smallest pool a policy can name: fails by definition
    if hi - 1 > lo and not fits(hi - 1):
        lo = hi - 1
    floor = _climb(fits, lo, hi, cap)
    if floor is None or not whole:
        return floor
    return _whole_fits_from(ev, policy, floor, cap)


def _whole_fits_from(ev: Evaluator, policy: Policy, floor: int, cap: int) -> int | None:
    """The floor on the whole trace, from the heaviest requests' `floor`: a hybrid
    request's need depends on its hit (it holds the hit's blocks and its Mamba state's
    copies), and its hit on what ran before it, so the heaviest requests replayed together
    can need more blocks than the trace (an example: 17 together, 16 in the trace, where a
    request between evicts the prefix they share) or fewer (6 together, 8 in the trace).
    The whole trace is replayed at the floor and one block below, and the search goes down
    (galloping, then bisection) or up from there: the answer schedules every request and
    one block less does not, both replayed. A replay here is the search's own measure (its
    pool search starts at the floor: no second replay there)."""

    def fits(n: int) -> bool:
        if n < MIN_POOL:
            return False  # below the smallest pool a policy can name
        m = ev.measure(replace(policy, num_blocks=n), f"floor: num_blocks={n:,}, all")
        return m.schedulable

    if not fits(floor):
        return None if floor >= cap else _climb(fits, floor, min(floor * 2, cap), cap)
    if not fits(floor - 1):
        return floor
    hi, step = floor - 1, 1  # fits
    while True:
        n = hi - step
        if not fits(n):
            return _bisect(fits, n, hi)
        hi, step = n, step * 2


def _bisect(fits, lo: int, hi: int) -> int:
    """The smallest n in (lo, hi] with fits(n): lo does not fit, hi fits."""
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if fits(mid) else (mid, hi)
    return hi


def _climb(fits, lo: int, hi: int, cap: int) -> int | None:
    """The smallest n in (lo, cap] with fits(n), `lo` known not to fit: galloping up from
    `hi` (doubling), then bisecting; None when not even `cap` fits."""
    while not fits(hi):
        if hi >= cap:
            return None
        lo, hi = hi, min(hi * 2, cap)
    return _bisect(fits, lo, hi)


def smallest_pool(
    ev: Evaluator,
    policy: Policy,
    targets: Targets,
    floor: int,
    cap: int,
    hint: int | None = None,
    stop_early: bool = False,
) -> Found | None:
    """The smallest pool from `floor` up to `cap` reaching the targets, within TOLERANCE
    (None when `cap` does not). `hint`: a pool near the answer (a like setting's), where
    the search starts, stepping TOLERANCE x hint away from it and doubling each step;
    without one it starts at the floor and doubles. `stop_early`: replays that miss the
    TTFT target are cut short (`Evaluator.measure`)."""

    def measure(n: int) -> Measure:
        return ev.measure(
            replace(policy, num_blocks=n), f"search: num_blocks={n:,}", stop_early=stop_early
        )

    start = floor if hint is None else min(max(hint, floor), cap)
    step = start if hint is None else max(1, int(start * TOLERANCE))
    bracket = _bracket(measure, targets, start, step, floor, cap)
    if bracket is None:
        return None
    (low, below), (hi, at_hi) = bracket
    while hi - low > max(1, int(hi * TOLERANCE)):
        mid = (low + hi) // 2
        m = measure(mid)
        if m.meets(targets):
            hi, at_hi = mid, m
        else:
            low, below = mid, m
    return Found(hi, at_hi, floor, "longest request" if hi == floor else sized_by(below, targets))


def _bracket(measure, targets: Targets, start, step, floor, cap):
    """((low, its measure or None), (hi, its measure)): a pool that misses the targets (or
    floor - 1) and one that reaches them, found by galloping from `start` (down from it when
    it reaches them, else up), `step` doubling; None when `cap` misses them."""
    at = measure(start)
    if at.meets(targets):
        hi, at_hi = start, at
        while hi > floor:
            n = max(floor, hi - step)
            m = measure(n)
            if not m.meets(targets):
                return (n, m), (hi, at_hi)
            hi, at_hi, step = n, m, step * 2
        return (floor - 1, None), (hi, at_hi)
    low, below = start, at
    while low < cap:
        n = min(cap, low + step)
        m = measure(n)
        if m.meets(targets):
            return (low, below), (n, m)
        low, below, step = n, m, step * 2
    return None


def sized_by(below: Measure | None, targets: Targets) -> str:
    """What set a pool above the floor: the hit ratio ("target"), or the latency target the
    pool below it missed (it reached the hit ratio)."""
    if below is None:
        return "target"
    missed = below.misses(targets)
    if "schedulable" in missed or "hit ratio" in missed:
        return "target"
    return missed[0] if missed else "target"
