"""prefix_aware: hpa's own prefix-and-load router (no upstream; fixed rules).

The router keeps, per replica, the set of block ids it has sent there (`Request.blocks`:
chained ids, so a block id stands for its whole prefix). It never forgets: it is blind to
what the replica evicts, like a gateway that tracks where it sent prefixes. For each request:

    matched[r]  = leading blocks of the request in replica r's index
    cost[r]     = (prompt blocks - matched[r])
                  + prefix_aware_load_weight * waiting_prompt_tokens[r] / block_size

`prompt blocks` is len(Request.blocks) (full blocks); `waiting_prompt_tokens` is the prompt
tokens the replica's waiting requests still have to compute (`view.load(r)`, stale by up to
router_refresh_s). The first term is the prefill this request would add there, the second
the prefill already queued there, both in blocks; weight 0 makes the router load-blind. The
lowest cost wins; ties go to `Ties` (seeded, or the lowest index). After the pick the
request's blocks join the chosen replica's index.
"""

from __future__ import annotations

from typing import Any

from analyzer.sim.routers import leading_run, option
from analyzer.sim.routers.base import FleetView, Request, Router, Ties


class PrefixAwareRouter(Router):
    """Fewest blocks to compute, counting the replica's queued prefill."""

    def __init__(self, num_replicas: int, knobs: dict[str, Any], ties: Ties) -> None:
        super().__init__(num_replicas, knobs, ties)
        self.load_weight = float(option(knobs, "prefix_aware_load_weight"))
        self.sent: list[set[int]] = [set() for _ in range(num_replicas)]

    def costs_blocks(self, request: Request, view: FleetView) -> list[float]:
        """Each replica's cost for `request`, in blocks."""
        blocks = request.blocks
        out = []
        for r in range(self.num_replicas):
            new_blocks = len(blocks) - leading_run(self.sent[r], blocks)
            queued_blocks = view.load(r).waiting_prompt_tokens / request.block_size
            out.append(new_blocks + self.load_weight * queued_blocks)
        return out

    def route(self, request: Request, view: FleetView) -> int:
        costs = self.costs_blocks(request, view)
        low = min(costs)
        pick = self.ties.pick([r for r, c in enumerate(costs) if c == low])
        self.sent[pick].update(request.blocks)
        return pick


ROUTER = PrefixAwareRouter
