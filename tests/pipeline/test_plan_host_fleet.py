"""`hpa plan --ttft-p99 --host-memory-budget`: the latency plan answered without a tier, then
searched again with the whole budget as every replica's tier within the answer's replicas,
the tier cut down where it saves some; each answer confirmed here by replays of its own: the
fleet meets every target with the tier kept, one replica fewer misses, and where the tier
saves replicas the fleet misses without it and with a tenth less tier."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from analyzer.access.trace import load_trace
from analyzer.cli import cli
from analyzer.config.memory import bytes_per_block, parse_size
from analyzer.pipeline.plan import Evaluator
from analyzer.pipeline.plan.evaluate import Targets
from analyzer.sim.dispatch import make_policy
from analyzer.store.db import connect
from analyzer.store.ingest import ingest
from tests.conftest import SAMPLES, write_jsonl
from tests.host_trace import rotating_records

MODEL = "qwen3.5-4b"
SYNC = ("--set", "async_scheduling=false")  # a host tier is modelled on the synchronous loop


def _rotating(tmp: Path, n: int) -> Path:
    """Four documents of four blocks asked in turn, 1 s apart: a GPU pool of 12 blocks holds
    one of them, a 1 GiB tier all four."""
    records = rotating_records(n)
    return write_jsonl(tmp / "rotating.jsonl", records)


# name: (trace, target, TTFT p99 s, time scale, GPU pool budget in blocks, host budget,
#        routers (None: the plan's), replicas a model revision without the tier (None: none
#        meets) and with it, the tier kept in GiB)
CASES = {
    # 48 turns 0.1 s apart: computing a document takes 216 ms, loading it 1.4 ms
    "rotating, the tier saves a replica": (
        "rotating48", 0.3, 0.5, 0.1, 12, "1GiB", None, 3, 2, 0.23),
    # 24 turns 1 s apart: no router keeps a document on a replica that a later turn meets
    "rotating, only the tier reaches the target": (
        "rotating24", 0.5, 10.0, 1.0, 12, "1GiB", None, None, 1, 0.46),
    # the groups sample: each group's four requests in a row, its prefix still in the pool
    "groups sample, the tier saves nothing": (
        "groups_1600.jsonl", 0.3, 2.0, 0.3, 16, "1GiB", None, 1, 1, 1.0),
    # the mixed sample's 300 hash-id requests, two model revisions: a fleet each
    "mixed hash-id sample, the tier saves a replica a revision": (
        "mixed_hash_ids.jsonl.gz", 0.25, 2.0, 2.0, 20, "4GiB", "llm-d,round_robin", 4, 3, 0.55),
}  # fmt: skip


@pytest.fixture(scope="module")
def planned(tmp_path_factory) -> dict:
    """Each case's trace stored and planned once by the CLI: name -> (db, case, JSON)."""
    out = {}
    per_block = bytes_per_block(MODEL, 528)
    for name, case in CASES.items():
        trace, target, ttft, scale, pool, host, routers = case[:7]
        tmp = tmp_path_factory.mktemp("plan_host_fleet")
        if trace.startswith("rotating"):
            source = _rotating(tmp, int(trace.removeprefix("rotating")))
        else:
            source = SAMPLES / trace
        db = tmp / "t.duckdb"
        ingest([source], db_path=db)
        args = ["plan", "--db", str(db), "--target-useful-hit-ratio", str(target)]
        args += ["--model", MODEL, "--schedule", "concurrent", "--ttft-p99", str(ttft)]
        args += ["--time-scale", str(scale), "--max-replicas", "8", *SYNC]
        args += ["--memory-budget", f"{pool * per_block}B", "--host-memory-budget", host]
        args += ["--routers", routers] if routers else []
        r = CliRunner().invoke(cli, [*args, "--format", "json"])
        assert r.exit_code in (0, 1), r.output
        out[name] = (db, case, orjson.loads(r.output))
    return out


def _trace(db: Path):
    con = connect(db, create=False)
    try:
        return load_trace(con)
    finally:
        con.close()


def _meets(planned: tuple, fleet: dict, replicas: int, **keys) -> tuple[bool, str]:
    """A replay to its end of `fleet` at `replicas` (and its pool): whether it meets the
    plan's targets, and what it misses."""
    db, case, answer = planned
    trace = _trace(db)
    routing = fleet["routing"] if replicas > 1 else "round_robin"
    policy = make_policy(
        {
            "model": MODEL,
            "schedule": "concurrent",
            "async_scheduling": False,
            "block_size": answer["block_size"],
            "time_scale": case[3],
            "retention_interval": fleet["retention_interval"],
            "prefix_match_unit": fleet["prefix_match_unit"],
            "replicas": replicas,
            "routing": routing,
            "num_blocks": fleet["num_blocks"],
            **keys,
        }
    )
    targets = Targets(answer["target_useful_hit_ratio"], answer["target_ttft_p99_s"])
    m = Evaluator(trace, None, targets=targets).measure(policy)
    return m.meets(targets), ", ".join(m.misses(targets))


@pytest.mark.parametrize("name", list(CASES))
def test_the_tier_fleet_is_the_fewest_replicas_by_replays(planned, name):
    db, case, answer = planned[name]
    without, with_tier, kept = case[7:]
    revisions = len(set(_trace(db).columns["model_revision"]))
    host = answer["host_tier"]
    budget = parse_size(case[5]) / 2**30
    assert host["per"] == "replica" and host["host_memory_budget_gib"] == budget
    assert host["host_tier_gib"] == kept
    in_all = None if without is None else without * revisions
    assert host["gpus_without_tier"] == in_all
    assert host["gpus_with_tier"] == with_tier * revisions
    assert host["gpus_saved"] == (None if without is None else (without - with_tier) * revisions)
    assert answer["reachable"] == (without is not None)
    if without is not None:  # the plan's own answer, as without a budget, is the one compared
        assert host["without_tier"]["replicas"] == answer["replicas"] == without
    fleet = host["with_tier"]
    assert fleet["replicas"] == with_tier
    gib = {"host_tier_gib": kept}
    assert _meets(planned[name], fleet, with_tier, **gib) == (True, "")
    if with_tier > 1:
        assert not _meets(planned[name], fleet, with_tier - 1, **gib)[0]
    if without is None or without > with_tier:  # what the tier saves is the tier's doing
        assert not _meets(planned[name], fleet, with_tier)[0]
        # the tier was cut to within 5% of the smallest that meets: a tenth less misses
        assert kept < budget
        assert not _meets(planned[name], fleet, with_tier, host_tier_gib=0.9 * kept)[0]
    else:  # it saves nothing: the whole budget said, not searched
        assert kept == budget
    assert host["check"].startswith(f"host tier checked: {_said(fleet)} meets every target")


def _said(fleet: dict) -> str:
    n = fleet["replicas"]
    return "1 replica" if n == 1 else f"{n} replicas, {fleet['routing']}"


def test_the_text_answer_says_what_the_tier_saves(planned):
    db, case, answer = planned["rotating, the tier saves a replica"]
    host = answer["host_tier"]
    assert host["message"].startswith(
        "host tier: with 1 GiB of host memory on each replica, cut to host_tier_gib=0.23 (14 "
        "slots: the smallest, within 5%, with which the fleet below still meets the "
        f"targets), fewest replicas: 2 in all (2 replicas, {host['with_tier']['routing']} "
        "routing, "
    )
    assert host["message"].endswith(
        f": 1 fewer than the 3 replicas without it at the same targets [{host['replays']} "
        "replays with the tier]"
    )
    _, case, unreached = planned["rotating, only the tier reaches the target"]
    assert ", where no fleet meets the targets without it [" in unreached["host_tier"]["message"]
    _, case, same = planned["groups sample, the tier saves nothing"]
    assert same["host_tier"]["message"].startswith(
        "host tier: with 1 GiB of host memory on each replica (host_tier_gib=1, 62 slots), "
    )
    assert (
        ": the same 1 replica as without it: it saves none at these targets ["
        in (same["host_tier"]["message"])
    )


def test_async_scheduling_with_a_tier_is_a_one_line_error(planned):
    db = planned["rotating, the tier saves a replica"][0]
    args = ["plan", "--db", str(db), "--target-useful-hit-ratio", "0.3", "--model", MODEL]
    args += ["--schedule", "concurrent", "--ttft-p99", "1", "--host-memory-budget", "1GiB"]
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 2
    assert r.output == (
        "Error: --host-memory-budget with --ttft-p99: a host tier is modelled on vLLM's "
        "synchronous loop only; add --set async_scheduling=false (the fleets with and without "
        "the tier are then both searched on it)\n"
    )
