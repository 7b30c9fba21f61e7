"""Properties every live router keeps, and make_router's contract."""

from __future__ import annotations

import pytest

from analyzer.config.routers import ROUTERS, resolve_router
from analyzer.errors import ConfigError
from analyzer.sim.routers import make_router
from tests.sim.routers.conftest import chain, idle, req

LIVE = [name for name, row in ROUTERS.items() if row.live]


def knobs(routing: str, **values) -> dict:
    return dict(resolve_router(routing, values))


def run(routing: str, n: int, seed, requests) -> list[int]:
    router = make_router(routing, n, knobs(routing, router_seed=seed))
    view = idle(n)
    return [router.route(r, view) for r in requests]


def workload() -> list:
    """Repeated and fresh prefixes, so routers see both ties and matches."""
    out = []
    for i in range(40):
        group = i % 5
        out.append(req(i, chain(1000 * group, 3) + chain(100_000 + 10 * i, 2), arrival_s=i))
    return out


@pytest.mark.parametrize("routing", LIVE)
def test_one_replica_always_zero(routing):
    assert set(run(routing, 1, 7, workload())) == {0}


@pytest.mark.parametrize("routing", LIVE)
def test_same_seed_same_choices(routing):
    assert run(routing, 4, 11, workload()) == run(routing, 4, 11, workload())


@pytest.mark.parametrize("routing", [r for r in LIVE if r != "least_loaded"])
def test_unseeded_first_tie_goes_to_the_lowest_index(routing):
    # an idle fleet and an empty index: every replica ties on the first request
    assert run(routing, 4, None, [req(0, chain(0, 4))]) == [0]


def test_least_loaded_ties_rotate_as_upstream():
    # vLLM 0.33.0 rotates the scan start after every choice: ties go round robin
    assert run("least_loaded", 3, None, [req(i, chain(0, 2)) for i in range(4)]) == [0, 1, 2, 0]


def test_make_router_builds_every_row():
    for routing, row in ROUTERS.items():
        router = make_router(routing, 3, knobs(routing))
        assert router.live == row.live
        assert router.routing == routing


def test_make_router_unknown():
    with pytest.raises(ConfigError):
        make_router("nope", 2, {})
