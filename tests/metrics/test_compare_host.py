"""`hpa compare` of runs with and without a host KV tier: the host's hits as a figure after
the hit, a line per side on the tier, the JSON's host_tier; nothing of it without a tier."""

from __future__ import annotations

import json

import pytest

from analyzer.pipeline.compare import compare
from analyzer.pipeline.replay import run_replay
from analyzer.sim.dispatch import make_policy
from tests.host_trace import BASE, TIER, host_trace_db


@pytest.fixture(scope="module")
def runs_db(tmp_path_factory):
    """Run 1 without a tier, run 2 with one, run 3 without again, run 4 with a tier of 4
    slots (below the 8-block GPU pool: it gives nothing back)."""
    db = host_trace_db(tmp_path_factory.mktemp("compare_host"))
    for policy in (BASE, {**BASE, **TIER}, BASE, {**BASE, "host_tier_chunks": 4}):
        run_replay(make_policy(policy), db_path=db)
    return db


# A side without a tier: nothing from the host, nothing it did not give back.
NO_TIER = {
    "host_hit_tokens": 0,
    "host_hit_ratio": 0.0,
    "host_waited_requests": 0,
    "host_wait_mean_s": None,
    "host_evicted_tokens": 0,
    "host_never_stored_tokens": 0,
    "host_never_stored_no_slot_tokens": 0,
    "host_never_stored_decode_tokens": 0,
    "host_never_stored_sparse_tokens": 0,
}


@pytest.mark.parametrize(
    ("runs", "figures", "host"),
    [
        ((1, 3), ["unshared", "eviction"], None),
        (
            (1, 2),
            ["hit", "host_hit", "unshared", "eviction"],
            {
                "baseline": NO_TIER,
                "current": {
                    "host_hit_tokens": 128,
                    "host_hit_ratio": 0.32,
                    "host_waited_requests": 2,
                    "host_wait_mean_s": 0.0,
                    "host_evicted_tokens": 0,
                    "host_never_stored_tokens": 0,
                    "host_never_stored_no_slot_tokens": 0,
                    "host_never_stored_decode_tokens": 0,
                    "host_never_stored_sparse_tokens": 0,
                },
            },
        ),
        # a tier with no hits still has its side's figures: what it did not give back
        (
            (1, 4),
            ["unshared", "eviction"],
            {
                "baseline": NO_TIER,
                "current": {
                    "host_hit_tokens": 0,
                    "host_hit_ratio": 0.0,
                    "host_waited_requests": 0,
                    "host_wait_mean_s": None,
                    "host_evicted_tokens": 0,
                    "host_never_stored_tokens": 128,
                    "host_never_stored_no_slot_tokens": 128,
                    "host_never_stored_decode_tokens": 0,
                    "host_never_stored_sparse_tokens": 0,
                },
            },
        ),
    ],
)
def test_host_figures_only_where_a_side_has_a_tier(runs_db, runs, figures, host):
    result = compare(db_path=runs_db, runs=runs)
    rows = [r for r in result.causes.to_pylist() if r["baseline_tokens"] or r["current_tokens"]]
    assert [r["figure"] for r in rows] == figures
    assert result.host_tier == host
    assert json.loads(result.to_json()).get("host_tier") == host
    assert len(result.host_lines()) == (0 if host is None else 2)


def test_host_hit_row_and_line(runs_db):
    result = compare(db_path=runs_db, runs=(1, 2))
    host = next(r for r in result.causes.to_pylist() if r["figure"] == "host_hit")
    assert (host["baseline_share"], host["current_share"], host["change_points"]) == (
        0.0,
        0.32,
        pytest.approx(32.0),
    )
    assert result.host_lines()[1] == (
        "host KV tier, current: 32.0% of prompt tokens from the host (128 tokens), "
        "2 requests waited for a load, mean wait 0.00 ms; not given back: 0 tokens stored "
        "then evicted, 0 never stored"
    )


def test_host_line_names_what_the_tier_did_not_give_back(runs_db):
    """The 4-slot tier's offers found no slot: the kind says what to change (its size)."""
    assert compare(db_path=runs_db, runs=(1, 4)).host_lines()[1] == (
        "host KV tier, current: 0.0% of prompt tokens from the host (0 tokens), "
        "0 requests waited for a load; not given back: 0 tokens stored then evicted, "
        "128 never stored (128 dropped for want of a slot)"
    )
