"""Static routers answer per request exactly as `analyzer.sim.routing.route` does."""

from __future__ import annotations

import pytest

from analyzer.sim.routers import make_router
from analyzer.sim.routing import route
from tests.sim.routers.conftest import idle, req

CONVS = ["c1", None, "c1", "c2", None, "c2", "c3"]
TRACE = ["1", None, "0", "1", "0", "1", "0"]


@pytest.mark.parametrize("routing", ["round_robin", "session", "trace"])
def test_static_matches_routing_py(routing):
    n = 2
    router = make_router(routing, n, {})
    assert router.live is False
    requests = [
        req(i, (i,), conversation_id=c, trace_replica=t)
        for i, (c, t) in enumerate(zip(CONVS, TRACE, strict=True))
    ]
    got = [str(router.route(r, idle(n))) for r in requests]
    assert got == route(routing, n, trace_replicas=TRACE, conversation_ids=CONVS)


def test_trace_label_must_be_a_replica_number():
    router = make_router("trace", 2, {})
    with pytest.raises(ValueError):
        router.route(req(0, trace_replica="a"), idle(2))
