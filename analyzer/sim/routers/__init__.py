"""The live and static routers of a simulated fleet (`analyzer.config.routers` lists them).

`make_router(routing, num_replicas, knobs)` builds the router a policy names: it imports the
module of that row of the router table and instantiates its `ROUTER` class with the router's
resolved knobs (`router_seed`, `router_refresh_s` and its own options; empty for a static
router) and a `Ties` seeded with `router_seed`.

Each module follows one upstream router; its docstring cites the repository, path, function
and version it follows, and says where hpa's model departs from it (hpa routes on block ids,
where most upstream routers hash characters).
"""

from __future__ import annotations

import importlib
from typing import Any

from analyzer.config.routers import COMMON_KEYS, ROUTER_OPTIONS, router
from analyzer.sim.routers.base import Router, Ties


def make_router(routing: str, num_replicas: int, knobs: dict[str, Any]) -> Router:
    """The router named `routing` for `num_replicas` replicas (ConfigError if unknown)."""
    row = router(routing)
    module = importlib.import_module(row.module)
    built = module.ROUTER(num_replicas, knobs, Ties(knobs.get("router_seed")))
    built.routing = routing
    return built


def option(knobs: dict[str, Any], key: str) -> Any:
    """A router knob: its resolved value, or the table's default when `knobs` lacks it (tests
    and callers may pass only the keys they change)."""
    if key in knobs:
        return knobs[key]
    spec = ROUTER_OPTIONS.get(key) or COMMON_KEYS[key]
    return spec.default


def leading_run(held: Any, blocks: Any) -> int:
    """How many leading `blocks` are in `held` (a set or dict of block ids), for an index
    with the prefix property: it holds a chained block id only with every block before it
    (ids are chained, so a block id stands for its whole prefix). Binary search: O(log n)."""
    lo, hi = 0, len(blocks)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if blocks[mid - 1] in held:
            lo = mid
        else:
            hi = mid - 1
    return lo
