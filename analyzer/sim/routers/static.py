"""Static routers (trace, round_robin, session): decided before the replay.

`analyzer.sim.routing.route` assigns these from the trace alone, so each replica replays on
its own; the fleet never needs them live. `StaticRouter.route` still answers per request,
equal to `routing.py` (round_robin: request i to replica i mod n; session: a conversation's
requests to one replica, conversations and requests without one round robin in order of
first appearance; trace: the record's own replica when it is a replica number).
"""

from __future__ import annotations

from typing import Any

from analyzer.sim.routers.base import FleetView, Request, Router, Ties


class StaticRouter(Router):
    """trace / round_robin / session, request by request (`make_router` sets `routing`)."""

    live = False

    def __init__(self, num_replicas: int, knobs: dict[str, Any], ties: Ties) -> None:
        super().__init__(num_replicas, knobs, ties)
        self.routing = "round_robin"
        self._sessions: dict[str, int] = {}
        self._turn = 0

    def route(self, request: Request, view: FleetView) -> int:
        if self.routing == "round_robin":
            return request.index % self.num_replicas
        if self.routing == "session":
            return self._session(request.conversation_id)
        if self.routing == "trace":
            label = request.trace_replica if request.trace_replica is not None else "0"
            if not label.isdigit() or int(label) >= self.num_replicas:
                raise ValueError(f"trace replica {label!r} is not a replica number")
            return int(label)
        raise ValueError(f"static router has no routing {self.routing!r}")

    def _session(self, conversation_id: str | None) -> int:
        if conversation_id is not None and conversation_id in self._sessions:
            return self._sessions[conversation_id]
        replica = self._turn % self.num_replicas
        self._turn += 1
        if conversation_id is not None:
            self._sessions[conversation_id] = replica
        return replica


ROUTER = StaticRouter
