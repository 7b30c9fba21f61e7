"""The host-tier goldens (tests/golden/oracle_offload/, vLLM 0.33's OffloadingConnector) hold
what the reference note (kv-offload.md) says vLLM does, and hpa's replay with the host tier
(policy keys host_tier_*, analyzer/sim/vllm/offload.py) gives the oracle's figures request by
request: GPU hit, host hit, steps waiting for the load, and the chunks scheduled (issue 51
items 1 and 3).

The rules the goldens pin, per case and request:

- a host hit only extends the GPU hit, from a block-aligned GPU hit, in whole chunks, up to
  the prompt (prompt - 1 with a sliding-window or Mamba group);
- a host hit costs exactly one step in WAITING_FOR_REMOTE_KVS (the fake worker completes a
  load in the step it is issued), and no other request waits there;
- the load reads one key per full-attention chunk of the hit, plus one Mamba state, plus the
  window's chunks for a sliding-window group;
- a tier smaller than the GPU pool adds no hit (vLLM's docs), nor does any tier beside a pool
  that never evicts;
- the prefill computes exactly what the two hits leave;
- until the first host load, the GPU side is hpa's replay without a tier, request by request.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from analyzer.sim.dispatch import make_policy
from analyzer.sim.records import SimRequest
from analyzer.sim.vllm import concurrent_replay, replay
from analyzer.sim.vllm.layout import make_layout

GOLDEN = Path(__file__).resolve().parents[2] / "golden" / "oracle_offload"
DATA = json.loads((GOLDEN / "cases.json").read_text())
CASES = DATA["cases"]


def _rows(name: str) -> tuple[list[dict], dict]:
    lines = (GOLDEN / CASES[name]["expected"]).read_text().splitlines()
    rows = [json.loads(line) for line in lines if line.strip()]
    return rows[:-1], rows[-1]


def _trace(name: str) -> dict[str, dict]:
    lines = (GOLDEN / CASES[name]["trace"]).read_text().splitlines()
    return {r["request_id"]: r for r in map(json.loads, lines)}


def _policy(name: str) -> dict:
    """The case's GPU side with its host tier, as hpa policy keys."""
    case = CASES[name]
    tier = case["host_tier"]
    assert tier["blocks_per_chunk"] == 1  # hpa's chunk is one block (vLLM's default)
    return {
        **case["policy"],
        "host_tier_chunks": tier["chunks"],
        "host_tier_policy": tier["eviction_policy"],
        "offload_prompt_only": tier["offload_prompt_only"],
    }


def _requests(name: str, ids: list[str]) -> list[SimRequest]:
    trace = _trace(name)
    return [
        SimRequest(rid, trace[rid]["prompt_token_ids"], trace[rid]["output_token_ids"],
                   timestamp_s=trace[rid]["timestamp"])
        for rid in ids
    ]  # fmt: skip


@pytest.mark.parametrize("name", sorted(CASES))
def test_hpa_gives_the_oracles_figures_request_by_request(name):
    """Every case, serial and concurrent: the GPU hit, the host hit, the steps waiting for
    the load and the chunks each step scheduled, as vLLM's own scheduler gave them."""
    rows, _ = _rows(name)
    results = replay(_requests(name, [r["request_id"] for r in rows]), make_policy(_policy(name)))
    got = [
        (s.request_id, s.hit_tokens, s.host_hit_tokens, s.host_wait_steps, list(s.chunks))
        for s in results
    ]
    want = [
        (r["request_id"], r["gpu_hit"], r["host_hit"], r["wait_steps"], r["chunks"]) for r in rows
    ]
    assert got == want


CONCURRENT = sorted(n for n, c in CASES.items() if c["policy"].get("schedule") == "concurrent")


@pytest.mark.parametrize("name", CONCURRENT)
def test_the_concurrent_clock_delays_and_preempts_as_the_oracle(name):
    """On the concurrent clock, each request's steps from its arrival to its first scheduled
    tokens (queueing, deferred lookups and the load's step) and its preemptions."""
    rows, _ = _rows(name)
    run = concurrent_replay(make_policy(_policy(name)))
    results = list(run.run(_requests(name, [r["request_id"] for r in rows])))
    got = [(f.sim.request_id, f.first_step - f.added[0], s.num_preemptions)
           for f, s in zip(run.flights, results, strict=True)]  # fmt: skip
    assert got == [(r["request_id"], r["delay_steps"], r["preemptions"]) for r in rows]


def test_a_host_tier_in_gib_takes_its_slots_from_the_model():
    """0.125 GiB at qwen3.5-4b's 512 KiB per 16-token block (one worker) is 256 slots; the
    tier gives the 256-slot case's figures."""
    name = "chat_fa_lru_big"
    values = {**_policy(name), "model": "qwen3.5-4b", "host_tier_gib": 0.125}
    del values["host_tier_chunks"]
    policy = make_policy(values)
    assert make_layout(policy).host_tier.num_chunks == 256
    rows, _ = _rows(name)
    results = list(replay(_requests(name, [r["request_id"] for r in rows]), policy))
    assert [s.host_hit_tokens for s in results] == [r["host_hit"] for r in rows]
    # the load's time on the link: each key (a chunk: 16 tokens) moves 512 KiB at 50 GB/s
    # (pcie5, the default)
    assert [s.host_wait_s for s in results] == [
        r["host_hit"] // 16 * 524288 / (50.0 * 1e9) if r["host_hit"] else None for r in rows
    ]


def _chunk(name: str) -> int:
    case = CASES[name]
    return case["policy"]["block_size"] * case["host_tier"]["blocks_per_chunk"]


def test_the_goldens_cover_the_issue():
    """At least 12 cases: full attention alone, + Mamba, + sliding window; LRU and ARC;
    tiers below and above the GPU pool; serial and concurrent."""
    assert len(CASES) >= 12
    kinds = {
        (
            tuple(c["policy"]["groups"]),
            c["host_tier"]["eviction_policy"],
            c["host_tier"]["chunks"] < c["policy"]["num_blocks"] - 1,
            c["policy"].get("schedule", "serial"),
        )
        for c in CASES.values()
    }
    assert {k[0] for k in kinds} == {
        ("full_attention",),
        ("full_attention", "mamba"),
        ("full_attention", "sliding_window"),
    }
    assert {k[1] for k in kinds} == {"lru", "arc"}
    assert {k[2] for k in kinds} == {True, False}
    assert {k[3] for k in kinds} == {"serial", "concurrent"}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_summary_adds_up(name):
    rows, summary = _rows(name)
    assert summary["requests"] == len(rows) == len(_trace(name))
    assert summary["gpu_hits"] == sum(r["gpu_hit"] for r in rows)
    assert summary["host_hits"] == sum(r["host_hit"] for r in rows)
    assert summary["wait_steps"] == sum(r["wait_steps"] for r in rows)
    assert summary["errors"] == 0


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_host_hit_extends_the_gpu_hit_in_whole_chunks(name):
    rows, _ = _rows(name)
    chunk, block = _chunk(name), CASES[name]["policy"]["block_size"]
    sparse = len(CASES[name]["policy"]["groups"]) > 1
    for r in rows:
        if not r["host_hit"]:
            continue
        assert r["host_hit"] % chunk == 0, r
        assert r["gpu_hit"] % block == 0, r
        assert r["gpu_hit"] + r["host_hit"] <= r["num_prompt_tokens"] - sparse, r


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_host_hit_waits_exactly_one_step(name):
    rows, _ = _rows(name)
    for r in rows:
        assert r["wait_steps"] == (1 if r["host_hit"] else 0), r
        assert r["delay_steps"] >= r["wait_steps"], r


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_load_reads_one_key_per_chunk_and_group(name):
    rows, _ = _rows(name)
    policy = CASES[name]["policy"]
    extra = 0
    if "mamba" in policy["groups"]:
        extra = 1  # the state at the hit's end
    if "sliding_window" in policy["groups"]:
        extra = -(-policy["sliding_window"] // _chunk(name))  # the window's chunks
    for r in rows:
        want = r["host_hit"] // _chunk(name) + extra if r["host_hit"] else 0
        assert r["loaded_keys"] == want, r


@pytest.mark.parametrize(
    "name",
    sorted(
        n
        for n, c in CASES.items()
        if c["host_tier"]["chunks"] < c["policy"]["num_blocks"] - 1
        or c["policy"]["num_blocks"] >= 100_000
    ),
)
def test_a_tier_below_the_gpu_pool_or_beside_one_that_never_evicts_adds_no_hit(name):
    rows, _ = _rows(name)
    assert [r["request_id"] for r in rows if r["host_hit"]] == []


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_prefill_computes_what_the_hits_leave(name):
    rows, _ = _rows(name)
    trace = _trace(name)
    for r in rows:
        if r["preemptions"]:
            continue
        prompt = r["num_prompt_tokens"]
        hit = min(r["gpu_hit"] + r["host_hit"], prompt - 1)
        decode = len(trace[r["request_id"]]["output_token_ids"]) - 1
        assert sum(r["chunks"]) == prompt - hit + decode, r


SERIAL = sorted(n for n, c in CASES.items() if c["policy"].get("schedule") != "concurrent")


@pytest.mark.parametrize("name", SERIAL)
def test_until_the_first_load_the_gpu_side_is_hpas_replay(name):
    rows, _ = _rows(name)
    trace = _trace(name)
    first = next((i for i, r in enumerate(rows) if r["wait_steps"]), len(rows))
    requests = [
        SimRequest(r["request_id"], trace[r["request_id"]]["prompt_token_ids"],
                   trace[r["request_id"]]["output_token_ids"])
        for r in rows[:first]
    ]  # fmt: skip
    results = list(replay(requests, make_policy(CASES[name]["policy"])))
    got = [(s.request_id, s.hit_tokens, list(s.chunks)) for s in results]
    assert got == [(r["request_id"], r["gpu_hit"], r["chunks"]) for r in rows[:first]]
