"""`hpa replay` with a host KV tier: its columns stored per request (the host hit part of the
hit, the wait), summed per group, the waterfall net of it; nothing new without a tier."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from analyzer.cli import cli
from analyzer.pipeline.replay import run_replay
from analyzer.sim.dispatch import make_policy
from analyzer.store.ingest import ingest
from tests.conftest import db_rows as rows
from tests.host_trace import BASE, REQUESTS, TIER, host_trace_db


@pytest.fixture
def host_db(tmp_path):
    return host_trace_db(tmp_path)


COLUMNS = (
    "request_id, hit_tokens, host_hit_tokens, host_wait_steps, lost_eviction_tokens, "
    "unshared_tokens, fresh_prefill_tokens, host_evicted_tokens, host_never_stored_tokens, "
    "host_never_stored_no_slot_tokens, host_never_stored_decode_tokens, "
    "host_never_stored_sparse_tokens"
)


@pytest.mark.parametrize(
    ("tier", "expected"),
    [
        (
            {},
            [
                ("a", 0, 0, 0, 0, 80, 80, 0, 0, 0, 0, 0),
                ("b", 0, 0, 0, 0, 80, 80, 0, 0, 0, 0, 0),
                ("c", 0, 0, 0, 0, 80, 80, 0, 0, 0, 0, 0),
                ("d", 0, 0, 0, 64, 16, 80, 0, 0, 0, 0, 0),
                ("e", 0, 0, 0, 64, 16, 80, 0, 0, 0, 0, 0),
            ],
        ),
        (
            {"host_tier_chunks": 32},
            [
                ("a", 0, 0, 0, 0, 80, 80, 0, 0, 0, 0, 0),
                ("b", 0, 0, 0, 0, 80, 80, 0, 0, 0, 0, 0),
                ("c", 0, 0, 0, 0, 80, 80, 0, 0, 0, 0, 0),
                ("d", 64, 64, 1, 0, 16, 16, 0, 0, 0, 0, 0),
                ("e", 64, 64, 1, 0, 16, 16, 0, 0, 0, 0, 0),
            ],
        ),
        # a tier smaller than the GPU pool adds no hit (vLLM's docs say so too): with 4 slots
        # the offers were dropped for want of a slot, so P's and Q's chunks were never stored
        (
            {"host_tier_chunks": 4},
            [
                ("a", 0, 0, 0, 0, 80, 80, 0, 0, 0, 0, 0),
                ("b", 0, 0, 0, 0, 80, 80, 0, 0, 0, 0, 0),
                ("c", 0, 0, 0, 0, 80, 80, 0, 0, 0, 0, 0),
                ("d", 0, 0, 0, 64, 16, 80, 0, 64, 64, 0, 0),
                ("e", 0, 0, 0, 64, 16, 80, 0, 64, 64, 0, 0),
            ],
        ),
    ],
)
def test_host_columns_are_stored_per_request(host_db, tier, expected):
    run_replay(make_policy({**BASE, **tier}), db_path=host_db)
    assert rows(host_db, f"SELECT {COLUMNS} FROM replay_requests ORDER BY arrival_seq") == expected
    assert rows(
        host_db,
        "SELECT count(*) FROM replay_requests WHERE unshared_tokens + lost_routing_tokens"
        " + lost_in_flight_tokens + lost_granularity_tokens + lost_eviction_tokens"
        " + sparse_retention_miss_tokens + lost_spec_decode_tokens + hit_tokens"
        " != prompt_tokens",
    ) == [(0,)]
    assert rows(
        host_db,
        "SELECT count(*) FROM replay_requests WHERE host_never_stored_tokens !="
        " host_never_stored_no_slot_tokens + host_never_stored_decode_tokens"
        " + host_never_stored_sparse_tokens",
    ) == [(0,)]


@pytest.mark.parametrize(
    ("tier", "expected"),
    [
        ({}, (0, 0.0, 0, None, None, 0.0, 0, 0, 0, 0, 0)),
        ({"host_tier_chunks": 4}, (0, 0.0, 0, None, None, 0.0, 0, 128, 128, 0, 0)),
        # 128 of 400 prompt tokens from the host; two requests waited one step each;
        # no model preset: no bytes per block, so the load takes 0 s on the link
        ({"host_tier_chunks": 32}, (128, 0.32, 2, 0.0, 0.0, 0.32, 0, 0, 0, 0, 0)),
    ],
)
def test_host_figures_are_summed_per_group(host_db, tier, expected):
    outcome = run_replay(make_policy({**BASE, **tier}), db_path=host_db)
    (s,) = outcome.summary.to_pylist()
    got = tuple(
        s[k]
        for k in (
            "host_hit_tokens",
            "host_hit_ratio",
            "host_waited_requests",
            "host_wait_mean_s",
            "host_wait_p99_s",
            "useful_hit_ratio",
            "host_evicted_tokens",
            "host_never_stored_tokens",
            "host_never_stored_no_slot_tokens",
            "host_never_stored_decode_tokens",
            "host_never_stored_sparse_tokens",
        )
    )
    assert got == expected


@pytest.mark.parametrize(
    ("tier", "line"),
    [
        ([], None),
        (
            ["--set", "host_tier_chunks=32"],
            "host KV tier: 128 of the hit tokens loaded from it (32.0% of prompt tokens); not "
            "given back: 0 tokens stored then evicted, 0 never stored; 2 requests waited for a "
            "load, mean wait 0.00 ms, p99 0.00 ms",
        ),
        (
            ["--set", "host_tier_chunks=4"],
            "host KV tier: 0 of the hit tokens loaded from it (0.0% of prompt tokens); not given "
            "back: 0 tokens stored then evicted, 128 never stored (128 dropped for want of a "
            "slot); 0 requests waited for a load",
        ),
    ],
)
def test_replay_prints_the_host_line_only_with_a_tier(host_db, tier, line):
    sets = [a for k, v in BASE.items() for a in ("--set", f"{k}={json.dumps(v)}")]
    result = CliRunner().invoke(cli, ["replay", "--db", str(host_db), *sets, *tier])
    assert result.exit_code == 0, result.output
    host = [x for x in result.output.splitlines() if x.startswith("host KV tier:")]
    assert host == ([] if line is None else [line])


def test_the_host_line_gives_the_waits_of_the_whole_run_with_several_groups(tmp_path):
    """(the mean and p99 wait were printed only where the run had one prompt family x model
    revision: on the bundled mixed sample, 8 groups, '149 requests waited for a load' and no
    wait, where hpa compare said 'mean wait 1.78 ms')"""
    trace = tmp_path / "families.jsonl"
    families = {"a": "x", "b": "y", "c": "x", "d": "x", "e": "y"}
    trace.write_text(
        "".join(
            json.dumps(
                {"request_id": r, "timestamp": float(i), "prompt_family": families[r],
                 "prompt_token_ids": t}
            ) + "\n"
            for i, (r, t) in enumerate(REQUESTS)
        )
    )  # fmt: skip
    db = tmp_path / "f.duckdb"
    ingest([trace], db_path=db)
    # d's and e's loads: 64 tokens of qwen3.5-4b, 2 MiB, over 0.1 GB/s: 20.97 ms each
    sets = {**BASE, **TIER, "model": "qwen3.5-4b", "host_bandwidth_gbps": 0.1}
    args = [a for k, v in sets.items() for a in ("--set", f"{k}={json.dumps(v)}")]
    result = CliRunner().invoke(cli, ["replay", "--db", str(db), *args])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[-1] == (
        "host KV tier: 128 of the hit tokens loaded from it (32.0% of prompt tokens); not given "
        "back: 0 tokens stored then evicted, 0 never stored; 2 requests waited for a load, mean "
        "wait 20.97 ms, p99 20.97 ms"
    )
