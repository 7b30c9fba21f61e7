"""`hpa plan --host-memory-budget`: the GPU cache a host KV tier saves at the target, the
smallest tier that saves it (checked by replays at it and without it), or that it adds
nothing."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from analyzer.access.trace import load_trace
from analyzer.cli import cli
from analyzer.pipeline.plan import Evaluator
from analyzer.sim.dispatch import make_policy
from analyzer.store.db import connect
from analyzer.store.ingest import ingest
from tests.conftest import write_jsonl
from tests.host_trace import rotating_records

BLOCK = 528  # qwen3.5-4b's block
PLAN = ("--target-useful-hit-ratio", "0.5", "--model", "qwen3.5-4b")


@pytest.fixture(scope="module")
def rotating_db(tmp_path_factory) -> Path:
    """Four documents of four blocks asked in turn, six times each: a GPU pool holding one
    keeps none of them for its next turn, a host tier holding all four gives them back."""
    tmp = tmp_path_factory.mktemp("rotating")
    records = rotating_records(24, block=BLOCK)
    db = tmp / "t.duckdb"
    ingest([write_jsonl(tmp / "t.jsonl", records)], db_path=db)
    return db


def _plan(db: Path, *extra: str):
    r = CliRunner().invoke(cli, ["plan", "--db", str(db), *PLAN, *extra, "--format", "json"])
    assert r.exit_code == 0, r.output
    return orjson.loads(r.output)


def _ratio(db: Path, setting: dict, **keys) -> float:
    con = connect(db, create=False)
    try:
        trace = load_trace(con)
    finally:
        con.close()
    policy = make_policy({"model": "qwen3.5-4b", **setting, **keys})
    return Evaluator(trace, None).measure(policy).useful_hit_ratio


def test_a_tier_that_saves_gpu_memory_is_cut_to_the_smallest_that_does(rotating_db):
    answer = _plan(rotating_db, "--host-memory-budget", "1GiB")
    host = answer["host_tier"]
    without, with_tier = host["without_tier"], host["with_tier"]
    assert answer["num_blocks"] == without["num_blocks"] == 33  # the plan's own answer
    assert host["saves_gpu_memory"] is True
    assert with_tier["num_blocks"] == 12 < without["num_blocks"]
    assert (host["host_tier_gib"], host["host_tier_chunks"]) == (0.46, 28)
    assert host["host_memory_budget_gib"] == 1.0
    # checked by replays: at the answer the target is met, without the tier it is not
    setting = {k: with_tier[k] for k in ("retention_interval", "routing", "num_blocks")}
    assert _ratio(rotating_db, setting, host_tier_gib=0.46) == host["useful_hit_ratio"] >= 0.5
    assert _ratio(rotating_db, setting) < 0.5


def test_a_tier_below_the_gpu_pool_adds_nothing_and_says_so(rotating_db):
    answer = _plan(rotating_db, "--host-memory-budget", "64MiB")
    host = answer["host_tier"]
    assert host["saves_gpu_memory"] is False
    assert host["host_tier_gib"] is None
    assert host["with_tier"]["num_blocks"] == host["without_tier"]["num_blocks"] == 33
    assert host["message"] == (
        "host tier: 0.0625 GiB of host memory per cache saves no GPU memory at this target "
        "(the cheapest pool with it is the same, 0.53 GiB): a host tier adds nothing here, "
        "and one no larger than the GPU pool never does (vLLM writes every computed chunk "
        "through to it)"
    )


def test_the_text_answer_ends_with_the_host_line(rotating_db):
    r = CliRunner().invoke(
        cli, ["plan", "--db", str(rotating_db), *PLAN, "--host-memory-budget", "1GiB"]
    )
    assert r.exit_code == 0, r.output
    assert r.output.splitlines()[-1] == (
        "host tier: with 1 GiB of host memory per cache, the cheapest: retention_interval=0 "
        "prefix_match_unit=null replicas=1 routing=trace num_blocks=12 host_tier_gib=0.46 -> "
        "useful hit ratio 0.830 for 0.19 GiB of GPU cache in all (0.53 GiB without) and 0.46 "
        "GiB of host memory per cache (28 slots)"
    )


def test_without_a_budget_the_plan_says_nothing_of_a_tier(rotating_db):
    assert _plan(rotating_db)["host_tier"] is None


# A budget the engine's tier refuses, before any replay and naming the flag (it was `policy
# key 'host_tier_gib': 0.0009765625 GiB holds no slot ...` after the plan's replays without it)
@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--host-memory-budget", "1MiB"],
         "--host-memory-budget 1MiB: holds no slot of 17,301,504 bytes"),
        (["--host-memory-budget", "1GiB", "--set", "spec_decode=eagle_drop"],
         "--host-memory-budget 1GiB: the host tier is not modelled with speculative decoding "
         "(EAGLE groups keep their last chunk back); use spec_decode none"),
    ],
)  # fmt: skip
def test_a_budget_the_tier_refuses_is_one_line_before_any_replay(rotating_db, extra, message):
    r = CliRunner().invoke(cli, ["plan", "--db", str(rotating_db), *PLAN, *extra])
    assert (r.exit_code, r.output) == (2, f"Error: {message}\n")


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--host-memory-budget", "1GiB"],
         "Error: --host-memory-budget needs a --model preset with bytes_per_block"),
        (["--model", "qwen3.5-4b", "--host-memory-budget", "1"],
         "Error: --host-memory-budget '1': a size needs a unit: B, KiB, MiB, GiB, TiB, or "
         "decimal KB, MB, GB, TB (e.g. 1GiB)"),
        (["--model", "qwen3.5-4b", "--host-memory-budget", "0GiB"],
         "Error: --host-memory-budget 0GiB: expected a size above 0 (leave the option out to "
         "plan without a host tier)"),
        (["--model", "qwen3.5-4b", "--memory-budget", "0MiB"],
         "Error: --memory-budget 0MiB: expected a size above 0 (leave the option out to plan "
         "without a pool limit)"),
        # with a latency target (tests/pipeline/test_plan_host_fleet.py) on async scheduling
        (["--model", "qwen3.5-4b", "--host-memory-budget", "1GiB", "--schedule", "concurrent",
          "--tpot-p99", "2"],
         "Error: --host-memory-budget with --tpot-p99: a host tier is modelled on vLLM's "
         "synchronous loop only; add --set async_scheduling=false (the fleets with and "
         "without the tier are then both searched on it)"),
    ],
)  # fmt: skip
def test_option_errors(rotating_db, extra, message):
    args = ["plan", "--db", str(rotating_db), "--target-useful-hit-ratio", "0.5", *extra]
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 2, r.output
    assert r.output.strip().splitlines()[-1] == message
