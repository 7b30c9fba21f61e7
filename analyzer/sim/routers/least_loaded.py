"""least_loaded: vLLM's data-parallel load balancer, as in vLLM 0.33.0.

Follows vllm-project/vllm `vllm/v1/engine/core_client.py`,
`DPLBAsyncMPClient.get_core_engine_for_request` (release v0.33.0, read from the PyPI wheel).
Per engine, in scan order from a start index:

    score = max(client_count * inflight, waiting + running)
    if waiting: score += waiting * 6 * max(0, kv_cache_usage - 0.5)

and the first engine with the strictly lowest score wins. `waiting`, `running` and
`kv_cache_usage` are the coordinator's stats snapshot (published every >= 100 ms); `inflight`
is the client's exact count of its own unfinished requests to that engine (+1 when routed,
-1 when finished). After each choice the client adds `client_count` to the chosen engine's
waiting count in its local copy of the snapshot (overwritten by the next snapshot) and
rotates the scan start by one, so ties go round robin instead of to engine 0. Earlier
releases scored `4 * waiting + running` with a fixed start; 0.33.0 is the formula here.

hpa's model, one client (client_count 1, start index 0):
- the snapshot is `view.load(r)`: num_waiting, num_running and kv_usage (vllm
  kv_cache_usage_perc), exact at the arrival when router_refresh_s is 0, else as scraped at
  the last multiple of router_refresh_s;
- the optimistic increment is router-local state, cleared whenever the scrape changes (a new
  multiple of router_refresh_s); with router_refresh_s 0 the view already holds every routed
  request, so no increment is kept;
- ties follow upstream's rotating scan start (deterministic); `router_seed` plays no part.
"""

from __future__ import annotations

import math
from typing import Any

from analyzer.sim.routers import option
from analyzer.sim.routers.base import FleetView, Request, Router, Ties

# vLLM 0.33.0: waiting requests cost up to 3x more as KV usage ramps from 50 % to 100 %.
KV_RAMP_START = 0.5
KV_RAMP_WEIGHT = 6.0


def engine_score(waiting: int, running: int, kv_usage: float, inflight: int) -> float:
    """vLLM 0.33.0's load score of one engine for one client (client_count 1)."""
    score = float(max(inflight, waiting + running))
    if waiting:
        score += waiting * KV_RAMP_WEIGHT * max(0.0, kv_usage - KV_RAMP_START)
    return score


class LeastLoadedRouter(Router):
    """vLLM DP load balancing: lowest score, scanned from a rotating start."""

    def __init__(self, num_replicas: int, knobs: dict[str, Any], ties: Ties) -> None:
        super().__init__(num_replicas, knobs, ties)
        self.refresh_s = float(option(knobs, "router_refresh_s"))
        self.start = 0  # eng_start_index: client_index * n // client_count = 0
        self.inflight = [0] * num_replicas
        self.local_waiting = [0] * num_replicas
        self.scrape: int | None = None

    def route(self, request: Request, view: FleetView) -> int:
        n = self.num_replicas
        self._follow_scrape(view.now_s)
        best, best_score = 0, math.inf
        for i in range(n):
            idx = (self.start + i) % n
            load = view.load(idx)
            waiting = load.num_waiting + self.local_waiting[idx]
            score = engine_score(waiting, load.num_running, load.kv_usage, self.inflight[idx])
            if score < best_score:
                best, best_score = idx, score
        if self.refresh_s > 0:
            self.local_waiting[best] += 1
        self.start = (self.start + 1) % n
        self.inflight[best] += 1
        return best

    def on_finished(self, request: Request, replica: int, t_s: float) -> None:
        self.inflight[replica] -= 1

    def _follow_scrape(self, now_s: float) -> None:
        """A new scrape replaces the snapshot, and with it the local increments."""
        if self.refresh_s <= 0:
            return
        scrape = math.floor(now_s / self.refresh_s)
        if scrape != self.scrape:
            self.scrape = scrape
            self.local_waiting = [0] * self.num_replicas


ROUTER = LeastLoadedRouter
