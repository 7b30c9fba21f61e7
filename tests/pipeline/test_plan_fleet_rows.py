"""The latency plan's table: one row a fleet (issue 47 item 16: the one-replica answer was
printed twice, as round_robin and as prefix_aware)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from analyzer.pipeline.plan import fleet as fleet_module
from analyzer.pipeline.plan.fleet import Check, Fleet, FleetSearch, Shape


@pytest.mark.parametrize(
    ("shape", "smaller"),
    [
        (Shape(None, "prefix_aware", 2), Shape(None, "round_robin", 1)),
        (Shape(2, "dynamo", 2), Shape(2, "round_robin", 1)),
        (Shape(None, "dynamo", 3), Shape(None, "dynamo", 2)),
        (Shape(None, "round_robin", 2), Shape(None, "round_robin", 1)),
    ],
)
def test_one_replica_is_one_fleet_whichever_router_it_came_from(shape, smaller):
    assert shape.smaller() == smaller
    assert smaller.one_router() == smaller
    assert Shape(None, "dynamo", 1).one_router() == Shape(None, "round_robin", 1)


def test_a_smaller_fleet_the_check_finds_is_one_row(monkeypatch):
    """The search found 2 replicas with prefix_aware first and 1 replica (round robin) too;
    the check found the smaller fleet of the first meets: one row for one replica."""

    def fleet(shape: Shape) -> Fleet:
        return Fleet(shape, None, None, SimpleNamespace(load=None))

    found = {
        "prefix_aware": fleet(Shape(None, "prefix_aware", 2)),
        "round_robin": fleet(Shape(None, "round_robin", 1)),
    }
    fs = object.__new__(FleetSearch)
    fs.routers, fs.notes, fs.revisions = tuple(found), [], 1
    monkeypatch.setattr(fleet_module, "floor_blocks", lambda *a, **k: 10)
    fs.policy = lambda shape, blocks: None
    fs.tensor_parallels = lambda floor: [None]
    fs._fewest = lambda tp, routing, seen: found[routing]
    fs._pool = lambda f, floor, bound=None: f
    fs._rank = lambda f: -f.shape.replicas  # the 2 replicas first (say, the least cache)
    fs.confirm = lambda f, tps, floor: (fleet(f.shape.smaller()), Check(None, None, None))
    fs.ev = None
    outcome = fs.run()
    assert [f.shape for f in outcome.fleets] == [
        Shape(None, "round_robin", 1),
        Shape(None, "prefix_aware", 2),
    ]


@pytest.mark.parametrize(
    ("missed", "said"),
    [
        (("hit ratio",), "falls short of the hit ratio"),
        (("ttft p99",), "falls short of TTFT p99"),
        (("hit ratio", "ttft p99"), "falls short of the hit ratio and TTFT p99"),
        (
            ("schedulable", "hit ratio", "tpot p99"),
            "falls short of every request scheduled, the hit ratio and TPOT p99",
        ),
    ],
)
def test_the_check_line_says_the_targets_missed_in_words(missed, said):
    """(it said 'misses hit ratio, ttft p99': miss is a cache's word in hpa)"""
    from analyzer.pipeline.plan.answer import short_of

    assert short_of(missed) == said
