"""What a router sees and how it is called (the fleet's side is `analyzer.sim.fleet`).

A router picks, for each request as it arrives, the replica that serves it. The fleet calls

    router.route(request, view) -> replica index (0 .. num_replicas - 1)

at the request's arrival instant, after every replica has advanced to it (`fleet.py` says the
clock's rules), and tells the router what happened to each request it routed, in time order,
before the next `route` call:

    router.on_first_token(request, replica, t_s)   its first token was sampled (prefill done)
    router.on_finished(request, replica, t_s)      it finished (or was aborted); blocks freed

A static router (round_robin, session, trace) decides from the request alone; a live one reads
`view`: each replica's load (`ReplicaLoad`, as scraped; stale by up to `router_refresh_s`)
and, for a precise prefix index, what the replica's pool holds right now
(`view.cached_blocks`). Router-local signals (requests it sent that have not finished, their
prompt tokens, ...) are the router's own state, kept from the hooks above, as the upstream
routers keep them.

Ties: where the upstream breaks ties at random, `Ties` draws from a seeded generator
(`router_seed`); with `router_seed` null every tie goes to the lowest replica index.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class Request:
    """One request as a router sees it. `blocks`: the chained ids of its prompt's full blocks
    (policy `block_size` tokens each; for a hash-id trace, the trace's blocks): equal ids mean
    equal prefixes up to that block's end, on every replica (the ids are content, not slots).
    `text_units`: the prompt's length in the units an approximate index counts (tokens)."""

    index: int  # arrival order within the fleet (0, 1, ...)
    request_id: str
    arrival_s: float
    prompt_tokens: int
    output_tokens: int  # the tokens it will decode (a router may not look; Dynamo does not)
    blocks: tuple[int, ...]
    block_size: int
    conversation_id: str | None
    trace_replica: str | None
    namespace: tuple  # the cache namespace: (block_size, cache_salt, lora_name)


@dataclass(frozen=True)
class ReplicaLoad:
    """One replica's load as its metrics report it (vLLM /metrics): requests waiting and
    running, the prompt tokens its waiting requests still have to compute, its pool's blocks
    in use and in all (None: unbounded)."""

    num_waiting: int
    num_running: int
    waiting_prompt_tokens: int
    kv_blocks_used: int
    kv_blocks_total: int | None

    @property
    def kv_usage(self) -> float:
        """Fraction of the pool in use (vllm:kv_cache_usage_perc); 0 for an unbounded pool."""
        total = self.kv_blocks_total
        return self.kv_blocks_used / total if total else 0.0


class FleetView(Protocol):
    """What a live router may read at the arrival instant."""

    now_s: float
    num_replicas: int

    def load(self, replica: int) -> ReplicaLoad:
        """The replica's load as last scraped (exact when router_refresh_s is 0)."""

    def cached_blocks(self, replica: int, blocks: Sequence[int]) -> int:
        """How many leading blocks of `blocks` the replica's pool holds now (full attention's
        cached block hashes: what its KV events would have reported)."""


class Ties:
    """Tie-breaking: uniform at random from a seeded generator, or the lowest index when the
    seed is None (so a golden compares request by request)."""

    def __init__(self, seed: int | None) -> None:
        self.rng = random.Random(seed) if seed is not None else None

    def pick(self, candidates: Sequence[int]) -> int:
        """One of `candidates` (replica indices in increasing order)."""
        if self.rng is None or len(candidates) == 1:
            return candidates[0]
        return candidates[self.rng.randrange(len(candidates))]

    def random(self) -> float:
        """A uniform draw in [0, 1) (0.0 when unseeded: a draw never below a probability)."""
        return self.rng.random() if self.rng is not None else 1.0


class Router:
    """Base: a router that needs no hooks ignores them. `live`: reads the fleet's state, so
    the replicas must replay on one clock; a static router's choices are known beforehand."""

    live = True

    def __init__(self, num_replicas: int, knobs: dict[str, Any], ties: Ties) -> None:
        self.num_replicas = num_replicas
        self.knobs = knobs
        self.ties = ties

    def route(self, request: Request, view: FleetView) -> int:
        raise NotImplementedError

    def on_first_token(self, request: Request, replica: int, t_s: float) -> None:
        pass

    def on_finished(self, request: Request, replica: int, t_s: float) -> None:
        pass
