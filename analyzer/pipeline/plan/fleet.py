"""A plan with a latency target: the fewest GPUs whose fleet meets every target.

A fleet's shape is its tensor parallel (GPUs a replica; the step time and the pool its GPUs
hold follow from it), its router, its replica count and its pool per replica. Every figure
comes from a fleet replay (`sim/fleet.py`: every replica on one clock, routed live), its
steps priced on the GPU at that tensor parallel (the roofline, or the policy's step model).

The search:

1. **Tensor parallel.** With a GPU, the powers of two up to `MAX_SEARCHED_TP` (or the one
   asked) whose GPUs hold the weights and the floor (the smallest pool that schedules the
   heaviest requests alone: a lower bound, found as the hit-ratio plan finds its floor).
   Without a GPU the step time and the pool do not depend on it: one shape per router.
2. **Replicas**, for each tensor parallel (ascending) and router (in the order asked): the
   fewest that meet every target at the pool the GPUs hold, by galloping (1, 2, 4, ...) and
   bisection, every count possible. Once a fleet of G GPUs meets them, a later (tensor
   parallel, router) is tried only within G GPUs: at its most replicas first, one replay
   that rules it out when it misses (`most_gpus` bounds every one so from the start). A
   count that reaches the latency targets but not the hit ratio ends the climb (more
   replicas split the prefixes further).
3. **Replays cut short.** A replay that has already missed the TTFT p99 target stops there
   (`sim/watch.py`), and a policy replayed once is not replayed again (with one replica
   every router is the same).
4. **The pool per replica**: for the fleets with the fewest GPUs, the smallest pool that
   still meets the targets (`pool.smallest_pool`, within 5 %); the least cache in all wins.
5. **Confirmed.** The answer and the fleet with one replica fewer (one replica: the next
   smaller tensor parallel) at the answer's pool are both replayed to their end; the answer
   meets every target and the smaller fleet misses one. Where the smaller one meets after
   all (the figures need not fall monotonically with the fleet), it becomes the answer and is
   checked the same way.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from analyzer.config.hardware import gpu_plan
from analyzer.config.policy import MAXIMUMS, Policy
from analyzer.pipeline.plan.evaluate import Evaluator, Measure
from analyzer.pipeline.plan.pool import TOLERANCE, Found, floor_blocks, sized_by
from analyzer.pipeline.plan.search import Search
from analyzer.pipeline.replay import num_groups

MAX_SEARCHED_TP = 8  # one node: the most GPUs a searched replica takes
MAX_REPLICAS = 64  # the most replicas a latency search tries (--max-replicas)
MAX_TIES = 3  # fleets with the fewest GPUs whose pools are searched
MAX_DESCENTS = 8  # smaller fleets that turned out to meet, followed before giving up
MIN_REPLAY_LIMIT = 1 << 18  # pools up to this many blocks are replayed as the GPUs hold them


@dataclass(frozen=True)
class Shape:
    """A fleet: tensor parallel (None: no GPU named), router, replicas."""

    tensor_parallel: int | None
    routing: str
    replicas: int

    def smaller(self) -> Shape:
        return replace(self, replicas=self.replicas - 1).one_router()

    def one_router(self) -> Shape:
        """One replica said as round robin: every router sends every request to it (one
        fleet, whichever router the search came from)."""
        return replace(self, routing="round_robin") if self.replicas == 1 else self

    def said(self) -> str:
        tp = "" if self.tensor_parallel is None else f" x TP{self.tensor_parallel}"
        if self.replicas == 1:
            return f"1 replica{tp}"
        return f"{self.replicas} replicas{tp}, {self.routing}"


@dataclass(frozen=True)
class Fleet:
    """A fleet that met the targets: its shape, the pool per replica its GPUs hold (None:
    unbounded) and its replay there; after the pool search, `found` (the smallest pool)."""

    shape: Shape
    policy: Policy
    room_blocks: int | None
    measure: Measure
    found: Found | None = None


@dataclass(frozen=True)
class Check:
    """The answer's confirmation: the answer's replay and the smaller fleet's (None: no
    smaller fleet exists, `why`)."""

    answer: Measure
    smaller: Shape | None
    smaller_measure: Measure | None
    why: str = ""


@dataclass(frozen=True)
class FleetOutcome:
    """The fleets found (the fewest replicas of each tensor parallel and router that met
    the targets; the answer first when there is one), its check, the tensor parallels
    searched and left out, and the nearest miss when none met."""

    fleets: list[Fleet]
    check: Check | None
    floor_blocks: int | None
    searched_tp: tuple[int | None, ...]
    notes: tuple[str, ...]
    nearest: tuple[Shape, Measure] | None = None


class FleetSearch:
    """The search above over one plan's trace. `make(**keys)` makes a policy from the plan's
    base with the keys the search sets (routing, replicas, num_blocks, tensor_parallel)."""

    def __init__(
        self,
        search: Search,
        ev: Evaluator,
        make: Callable[..., Policy],
        routers: tuple[str, ...],
        max_replicas: int = MAX_REPLICAS,
        priced: bool = False,
        most_gpus: int | None = None,
    ) -> None:
        self.search, self.ev, self.make = search, ev, make
        self.routers = routers
        self.max_replicas = max_replicas
        # No fleet of more GPUs (replicas without a GPU) is tried: a plan beside a host tier
        # searches only fleets that could replace the answer without it.
        self.most_gpus = most_gpus
        self.priced = priced  # steps priced on the GPU at each tensor parallel
        self.targets = search.targets
        self.revisions = 1 if make().cache_scope == "shared" else search.num_revisions
        self.notes: list[str] = []
        self.missed: list[tuple[Shape, Measure]] = []
        # The largest pool replayed (a pool's arrays take about 150 bytes a block a replica).
        self.replay_limit = max(self._all_blocks(make()), MIN_REPLAY_LIMIT)
        self.capped: set[int] = set()

    # -- the shapes ------------------------------------------------------------------------

    def policy(self, shape: Shape, num_blocks: int | None, **more) -> Policy:
        """The policy of `shape` at `num_blocks` a replica (with `more` keys besides)."""
        keys = {"routing": shape.routing, "replicas": shape.replicas, "num_blocks": num_blocks}
        if shape.tensor_parallel is not None and self.priced:
            keys["tensor_parallel"] = shape.tensor_parallel
        return self.make(**keys, **more)

    def gpus(self, shape: Shape) -> int:
        """GPUs in all (replicas without a GPU named), every model revision its own fleet."""
        return shape.replicas * (shape.tensor_parallel or 1) * self.revisions

    def room(self, tp: int | None) -> int | None:
        """The pool per replica: what `tp` GPUs hold for the KV cache (within the memory
        budget), the budget alone without a GPU (None: unbounded)."""
        s = self.search
        room = None
        if tp is not None and s.gpu is not None and s.per_block:
            held = gpu_plan(
                cache_bytes=0,
                weights_bytes=s.weights_bytes,
                num_caches=1,
                gpu=s.gpu,
                tensor_parallel=tp,
                bytes_per_block=s.per_block,
            ).pool_blocks_fit
            room = min(held, MAXIMUMS["num_blocks"])
        if s.budget_blocks is not None:
            room = s.budget_blocks if room is None else min(room, s.budget_blocks)
        if room is not None and room > self.replay_limit:
            if room not in self.capped:
                self.capped.add(room)
                self.notes.append(
                    f"a pool of {room:,} blocks (what {s.gpu.name if s.gpu else 'the budget'}"
                    f"{f' x {tp}' if tp else ''} holds) is replayed as {self.replay_limit:,}: it "
                    "holds the whole trace four times over, and a replay's memory grows with its "
                    "pool"
                )
            room = self.replay_limit
        return room

    def tensor_parallels(self, floor: int) -> list[int | None]:
        """The tensor parallels searched: the one asked, else the powers of two up to
        MAX_SEARCHED_TP whose GPUs hold the weights and the floor (a note for the others)."""
        s = self.search
        if s.gpu is None:
            return [None]
        asked = [s.tensor_parallel] if s.tensor_parallel is not None else None
        tps = asked or [
            1 << k for k in range(MAX_SEARCHED_TP.bit_length()) if 1 << k <= MAX_SEARCHED_TP
        ]
        kept, short = [], []
        for tp in tps:
            room = self.room(tp)
            (kept if room is not None and room >= floor else short).append(tp)
        if short:
            self.notes.append(short_tp_note(short, s.gpu.name, floor))
        return kept

    # -- the search --------------------------------------------------------------------------

    def run(self) -> FleetOutcome:
        probe = self.policy(Shape(None, "round_robin", 1), None)
        floor = floor_blocks(self.ev, probe, MAXIMUMS["num_blocks"], whole=False)
        if floor is None:
            return FleetOutcome([], None, None, (), tuple(self.notes))
        tps = self.tensor_parallels(floor)
        found: list[Fleet] = []
        for tp in tps:
            for routing in self.routers:
                fleet = self._fewest(tp, routing, found)
                if fleet is not None and fleet.shape not in {f.shape for f in found}:
                    found.append(fleet)
        if not found:
            return FleetOutcome([], None, floor, tuple(tps), tuple(self.notes), self._nearest())
        found.sort(key=self._rank)
        least = self.gpus(found[0].shape)
        ties = [f for f in found if self.gpus(f.shape) == least][:MAX_TIES]
        pooled: list[Fleet] = []
        for fleet in ties:  # the cheapest at its GPUs' room first
            # (a fleet met only without a pool limit costs no finite cache: it bounds nothing)
            costs = [c for c in map(self._cost, pooled) if math.isfinite(c)]
            bound = min(costs, default=None)
            fleet = self._pool(fleet, floor, bound)
            if fleet is not None:
                pooled.append(fleet)
        pooled.sort(key=self._rank)
        best, check = self.confirm(pooled[0], tps, floor)
        searched = {f.shape: f for f in pooled}
        # one row a fleet: a smaller fleet the check found is not printed again
        rest = [searched.get(f.shape, f) for f in found if f.shape != best.shape.one_router()]
        return FleetOutcome([best, *rest], check, floor, tuple(tps), tuple(self.notes))

    def _rank(self, f: Fleet) -> tuple:
        """Fewest GPUs, then the least cache in all, then the lowest TTFT p99."""
        load = f.measure.load
        return (self.gpus(f.shape), self._cost(f), load.ttft_p99_s if load else 0.0)

    def _cost(self, f: Fleet) -> float:
        """The cache in all at the fleet's pool (its smallest once searched)."""
        blocks = f.found.num_blocks if f.found is not None else f.room_blocks
        return self.search.cost(f.policy, blocks) if blocks is not None else float("inf")

    def _measure(self, shape: Shape, num_blocks: int | None) -> Measure:
        what = f"{shape.said()}, " + (
            "unbounded" if num_blocks is None else f"{num_blocks:,} blocks"
        )
        m = self.ev.measure(self.policy(shape, num_blocks), what, stop_early=True)
        if not m.meets(self.targets):
            self.missed.append((shape, m))
        return m

    def _fewest(self, tp: int | None, routing: str, found: list[Fleet]) -> Fleet | None:
        """The fewest replicas of (tp, routing) meeting the targets at the pool its GPUs
        hold; within the GPUs of the best fleet found so far."""
        room = self.room(tp)
        top = self.max_replicas
        bounds = [self.gpus(f.shape) for f in found]
        if self.most_gpus is not None:
            bounds.append(self.most_gpus)
        if bounds:
            top = min(top, min(bounds) // ((tp or 1) * self.revisions))
            if top < 1:
                return None
        shape = Shape(tp, routing, 1)
        met: dict[int, Measure] = {}

        def meets(n: int) -> bool:
            m = self._measure(replace(shape, replicas=n), room)
            if m.meets(self.targets):
                met[n] = m
                return True
            return False

        lo, hi = 0, None  # lo: a count known to miss (0: none); hi: the fewest known to meet
        if bounds:  # within a bound: its most replicas first, one replay that rules it out
            if not meets(top):
                return None
            hi = top
        n = 1
        while hi is None:
            if meets(n):
                hi = n
                break
            lo = n
            if self._hit_missed(replace(shape, replicas=n), room) or n >= top:
                return None
            n = min(2 * n, top)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if meets(mid) else (mid, hi)
        shape = replace(shape, replicas=hi).one_router()
        return Fleet(shape, self.policy(shape, room), room, met[hi])

    def _hit_missed(self, shape: Shape, room: int | None) -> bool:
        """Whether the replay at `shape` met the latency targets but not the hit ratio."""
        m = self.ev.memo_of(self.policy(shape, room))
        if m is None or m.stopped:
            return False
        missed = m.misses(self.targets)
        return bool(missed) and all(x in ("hit ratio",) for x in missed)

    def _pool(self, fleet: Fleet, floor: int, bound: float | None = None) -> Fleet | None:
        """The fleet at the smallest pool per replica that meets the targets (within
        TOLERANCE), by bisection on the pool's logarithm between the floor and the pool the
        fleet met at; None when `bound` (the cache in all of a fleet found before) is given
        and no pool costing less meets them."""
        room = fleet.room_blocks
        cap = self._all_blocks(fleet.policy) if room is None else room
        policy = self.policy(fleet.shape, None)
        hi, at_hi = cap, fleet.measure
        if room is None:  # met without a pool limit: the first bounded pool that meets
            hi, at_hi = self._bounded(fleet, floor, cap)
            if at_hi is None:  # none up to a pool that holds the whole trace: unbounded
                return fleet
        if bound is not None:
            per_cache = bound / max(1, self.search.caches(policy))
            top = self._blocks_within(per_cache)
            if top < hi:
                if top < floor:
                    return None
                m = self._measure(fleet.shape, top)
                if not m.meets(self.targets):
                    return None
                hi, at_hi = top, m
        lo, below = floor - 1, None  # treated as missing: the floor is where pools start
        if bound is not None:  # near a like fleet's pool: galloping down from it
            step = max(1, int(hi * TOLERANCE))
            while hi - step > lo:
                m = self._measure(fleet.shape, hi - step)
                if not m.meets(self.targets):
                    lo, below = hi - step, m
                    break
                hi, at_hi, step = hi - step, m, 2 * step
        while hi - lo > max(1, int(hi * TOLERANCE)):
            guess = self._guess(lo, below, hi, at_hi)
            if guess is None:  # bisection on the pool's logarithm
                tries = [round(math.sqrt(max(lo, 1) * hi))]
            else:  # straddle the interpolated pool: above it, then below it
                tries = [math.ceil(guess * (1 + TOLERANCE / 2)), int(guess * (1 - TOLERANCE / 2))]
            for n in tries:
                n = min(hi - 1, max(lo + 1, n))
                if not lo < n < hi:
                    break
                m = self._measure(fleet.shape, n)
                if m.meets(self.targets):
                    hi, at_hi = n, m
                else:
                    lo, below = n, m
                    break  # the pool below it would miss too
        sized = "longest request" if hi == floor else sized_by(below, self.targets)
        found = Found(hi, at_hi, floor, sized)
        return replace(fleet, policy=self.policy(fleet.shape, hi), found=found)

    def _guess(self, lo: int, below: Measure | None, hi: int, at_hi: Measure) -> float | None:
        """Where the hit ratio meets its target, interpolated linearly in the pool's
        logarithm between a pool that missed only the hit ratio and one that met every
        target; None where that is not the case (bisect)."""
        if below is None or below.stopped or below.misses(self.targets) != ("hit ratio",):
            return None
        target, low, high = self.targets.hit_ratio, below.useful_hit_ratio, at_hi.useful_hit_ratio
        if not low < target <= high:
            return None
        share = (target - low) / (high - low)
        return math.exp(math.log(lo) + share * (math.log(hi) - math.log(lo)))

    def _all_blocks(self, policy: Policy) -> int:
        """A pool that holds the whole trace, four times over: every prompt and output in
        blocks, for each KV-cache group. Beyond it a bounded pool caches nothing more; a
        fleet that meets the targets only without a limit (a router that reads the pool's
        usage can tell a huge pool from none) is answered unbounded."""
        c = self.ev.trace.columns
        prompts = np.asarray(c["prompt_tokens"], dtype=np.int64)
        tokens = int(prompts.sum()) + sum(int(o or 0) for o in c["output_tokens"])
        groups = sum((num_groups(policy) or {}).values()) or len(policy.groups)
        blocks = 4 * groups * (-(-tokens // policy.block_size) + len(prompts))
        return min(MAXIMUMS["num_blocks"], blocks)

    def _bounded(self, fleet: Fleet, floor: int, cap: int) -> tuple[int, Measure | None]:
        """A pool that meets the targets, doubling from the floor ((cap, None): none)."""
        n = floor
        while True:
            m = self._measure(fleet.shape, n)
            if m.meets(self.targets):
                return n, m
            if n >= cap:
                return cap, None
            n = min(2 * n, cap)

    def _blocks_within(self, per_cache: float) -> int:
        """The most blocks a cache can have within `per_cache` (GiB, or blocks)."""
        per_block = self.search.per_block
        if not per_block:
            return int(per_cache)
        return int(per_cache * (1 << 30) / per_block + 1e-6)

    def confirm(self, fleet: Fleet, tps: list, floor: int) -> tuple[Fleet, Check]:
        """The answer and the smaller fleet replayed to their end at the answer's pool; a
        smaller fleet that meets becomes the answer."""
        for _ in range(MAX_DESCENTS):
            answer = self.ev.measure(fleet.policy, f"check: {fleet.shape.said()}")
            smaller, blocks, why = self._smaller(fleet, tps, floor)
            if smaller is None:
                return fleet, Check(answer, None, None, why)
            m = self.ev.measure(self.policy(smaller, blocks), f"check: {smaller.said()}")
            if not m.meets(self.targets):
                return fleet, Check(answer, smaller, m)
            room = self.room(smaller.tensor_parallel)
            found = Found(blocks or 0, m, floor, fleet.found.sized_by if fleet.found else "target")
            fleet = Fleet(smaller, self.policy(smaller, blocks), room, m, found)
        return fleet, Check(answer, None, None, "the smaller fleets kept meeting the targets")

    def _smaller(self, fleet: Fleet, tps: list, floor: int):
        """(shape, pool) of the fleet one step smaller: one replica fewer, or with one
        replica the next smaller tensor parallel searched; (None, None, why) when none."""
        shape = fleet.shape
        blocks = fleet.found.num_blocks if fleet.found is not None else fleet.room_blocks
        if shape.replicas > 1:
            return shape.smaller(), blocks, ""
        tp = shape.tensor_parallel
        below = [t for t in tps if t is not None and tp is not None and t < tp]
        if not below:
            if tp is None or tp == 1:
                return None, None, "one replica is the smallest fleet"
            return None, None, "no smaller tensor parallel holds the weights and the floor"
        t = below[-1]
        room = self.room(t)
        pool = blocks if room is None or blocks is None else min(blocks, room)
        return Shape(t, "round_robin", 1), max(pool, floor) if pool is not None else None, ""

    def _nearest(self) -> tuple[Shape, Measure] | None:
        """Of the fleets that missed, the one nearest the targets: a full replay that met
        the hit ratio first, then the least over its latency targets. When every replay was
        cut short, the largest fleet tried is replayed to its end for its figures."""
        full = [(s, m) for s, m in self.missed if m.load is not None]
        if not full and self.missed:
            shape = max((s for s, _ in self.missed), key=self.gpus)  # the first of the largest
            room = self.room(shape.tensor_parallel)
            m = self.ev.measure(self.policy(shape, room), f"nearest: {shape.said()}")
            full = [(shape, m)] if m.load is not None else []
        if not full:
            return None
        return min(
            full,
            key=lambda sm: (
                "hit ratio" in sm[1].misses(self.targets),
                self._excess(sm[1]),
                -sm[0].replicas,
            ),
        )

    def _excess(self, m: Measure) -> float:
        """How far a replay is from its latency targets: the largest figure / target."""
        t, load = self.targets, m.load
        ratios = [0.0]
        if t.ttft_p99_s is not None:
            ratios.append(load.ttft_p99_s / t.ttft_p99_s)
        if t.tpot_p99_s is not None and load.tpot_p99_s is not None:
            ratios.append(load.tpot_p99_s / t.tpot_p99_s)
        return max(ratios)


def short_tp_note(short: list[int], gpu: str, floor: int) -> str:
    """The note on the tensor parallels not searched: how many GPUs each would be, as the
    answer counts them ('1 x H200 does not hold ...')."""
    fleets = [f"{tp} x {gpu}" for tp in short]
    named = fleets[0] if len(fleets) == 1 else ", ".join(fleets[:-1]) + f" and {fleets[-1]}"
    verb = "does" if len(fleets) == 1 else "do"
    return (
        f"tensor parallel {', '.join(map(str, short))} not searched: {named} {verb} not hold "
        f"the weights and the {floor:,}-block floor (a replica's heaviest requests)"
    )
