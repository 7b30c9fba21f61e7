"""The incident section's waterfalls with a host KV tier: the hit split into the GPU's own and
what the host tier won back, as the main waterfall splits it, only where a side has host hits."""

from __future__ import annotations

import pytest

from analyzer.pipeline.compare import compare
from analyzer.pipeline.replay import run_replay
from analyzer.report.incident import _cause_rows, change_figure, incident_figure, parts
from analyzer.sim.dispatch import make_policy
from tests.host_trace import BASE, TIER, host_trace_db

CAUSES = ["sparse_retention", "spec_decode", "eviction", "granularity", "in_flight", "routing",
          "unshared"]  # fmt: skip


@pytest.fixture(scope="module")
def runs_db(tmp_path_factory):
    """Run 1 without a tier, run 2 with one (all its hits from the host), run 3 without
    again, run 4 a GPU pool of 16 blocks that keeps every prefix (all its hits the GPU's)."""
    db = host_trace_db(tmp_path_factory.mktemp("incident_host"))
    for policy in (BASE, {**BASE, **TIER}, BASE, {**BASE, "num_blocks": 16}):
        run_replay(make_policy(policy), db_path=db)
    return db


@pytest.mark.parametrize(
    ("runs", "figures", "bars", "causes"),
    [
        (
            (1, 3),
            ["hit", *CAUSES],
            [("lost to dense eviction", [32.0, 32.0]),
             ("unshared (no common prefix)", [68.0, 68.0])],
            [["eviction", "32.0%", "32.0%", "+0.00", "+0.00", "+0.00"],
             ["unshared", "68.0%", "68.0%", "+0.00", "+0.00", "+0.00"]],
        ),
        (
            (1, 2),
            ["gpu_hit", "host_hit", *CAUSES],
            [("won back by the host tier (loaded)", [0.0, 32.0]),
             ("lost to dense eviction", [32.0, 0.0]),
             ("unshared (no common prefix)", [68.0, 68.0])],
            [["eviction", "32.0%", "0.0%", "-32.00", "-32.00", "+0.00"],
             ["host hit", "0.0%", "32.0%", "+32.00", "+32.00", "+0.00"],
             ["unshared", "68.0%", "68.0%", "+0.00", "+0.00", "+0.00"]],
        ),
        (
            (4, 2),
            ["gpu_hit", "host_hit", *CAUSES],
            [("hit on the GPU (reused)", [32.0, 0.0]),
             ("won back by the host tier (loaded)", [0.0, 32.0]),
             ("unshared (no common prefix)", [68.0, 68.0])],
            [["gpu hit", "32.0%", "0.0%", "-32.00", "-32.00", "+0.00"],
             ["host hit", "0.0%", "32.0%", "+32.00", "+32.00", "+0.00"],
             ["unshared", "68.0%", "68.0%", "+0.00", "+0.00", "+0.00"]],
        ),
    ],
)  # fmt: skip
def test_the_hit_splits_only_where_a_side_has_host_hits(runs_db, runs, figures, bars, causes):
    comparison = compare(db_path=runs_db, runs=runs)
    assert [figure for figure, _, _ in parts(comparison)] == figures
    assert [(t.name, list(t.x)) for t in incident_figure(comparison).data] == bars
    assert _cause_rows(comparison) == causes
    change = change_figure(comparison).data[-1]
    assert list(change.y) == [name for name, _ in bars if name != "unshared (no common prefix)"] + [
        "unshared (no common prefix)"
    ]


def test_the_gpu_hit_is_the_hit_less_the_host_hit_in_tokens(runs_db):
    bar = incident_figure(compare(db_path=runs_db, runs=(4, 2))).data[0]
    assert [list(c) for c in bar.customdata] == [[128, 0.32], [0, 0.0]]
