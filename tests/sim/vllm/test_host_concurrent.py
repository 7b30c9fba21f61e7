"""The concurrent replay with a host tier (analyzer/sim/vllm/host_concurrent.py) lets decoders
sleep through the steps where nothing the tier models can change, and runs sleeper-only
stretches as clock ticks while the connector is idle: its results, request by request and
field by field, its step and token counts and its clock equal the step-by-step replay's
(`HostTierConcurrent.every_step`), on the offload goldens and on random conversations with
long outputs (host hits, slow loads over several steps, small tiers retrying offers,
decode offload)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analyzer.sim.dispatch import make_policy
from analyzer.sim.records import SimRequest
from analyzer.sim.vllm import concurrent_replay
from analyzer.sim.vllm.host_concurrent import HostTierConcurrent
from tests.sim.vllm.fuzz_offload import draw_case, draw_trace, sim_requests

GOLDEN = Path(__file__).resolve().parents[2] / "golden" / "oracle_offload"
CASES = json.loads((GOLDEN / "cases.json").read_text())["cases"]


def _run(policy, requests, every_step: bool) -> tuple:
    """(results, steps, tokens, clock), (steps scheduled one by one, requests simulated in
    them: a sleeper is not, steps run as clock ticks)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(HostTierConcurrent, "every_step", every_step)
        run = concurrent_replay(policy)
    assert isinstance(run, HostTierConcurrent)
    visits = [0, 0, 0]
    connector_step, quiet_steps = run._connector_step, run._quiet_steps

    def counted(scheduled):
        visits[0] += 1
        visits[1] += len(scheduled)
        return connector_step(scheduled)

    def ticks(horizon_s):
        done = quiet_steps(horizon_s)
        visits[2] += done
        return done

    run._connector_step = counted
    run._quiet_steps = ticks
    results = list(run.run(requests))
    return (results, run.num_steps, run.num_tokens, run.clock), tuple(visits)


def _same(policy, requests) -> tuple[int, int, int, int]:
    """Both replays equal; (steps, steps visited, requests simulated in the steps: step by
    step, skipping)."""
    plain, (plain_steps, plain_requests, plain_ticks) = _run(policy, requests, True)
    skipping, (steps, requests, _) = _run(policy, requests, False)
    assert skipping == plain and plain_ticks == 0
    return plain[1], steps, plain_requests, requests


def _golden(name: str) -> tuple[dict, list[SimRequest]]:
    case = CASES[name]
    tier = case["host_tier"]
    values = {
        **case["policy"],
        "host_tier_chunks": tier["chunks"],
        "host_tier_policy": tier["eviction_policy"],
        "offload_prompt_only": tier["offload_prompt_only"],
        "schedule": "concurrent",
        "async_scheduling": False,
    }
    lines = (GOLDEN / case["trace"]).read_text().splitlines()
    requests = [
        SimRequest(r["request_id"], r["prompt_token_ids"], r["output_token_ids"],
                   timestamp_s=r["timestamp"])
        for r in map(json.loads, lines) if r
    ]  # fmt: skip
    return values, requests


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_goldens_skipping_quiet_steps_as_step_by_step(name):
    """Every offload golden on the concurrent clock (the serial ones too)."""
    values, requests = _golden(name)
    steps, visited, plain_requests, requests = _same(make_policy(values), requests)
    assert visited <= steps and requests <= plain_requests


def test_the_goldens_have_quiet_decode_steps():
    """Their outputs are short, requests a few ms apart: decoders sleep, no stretch is
    sleepers alone."""
    slept = ticks = 0
    for name in sorted(CASES):
        values, requests = _golden(name)
        steps, visited, plain_requests, requests = _same(make_policy(values), requests)
        slept += plain_requests - requests
        ticks += steps - visited
    assert (slept, ticks) == (195, 0)


def _random_case(seed: int) -> tuple[dict, list[SimRequest]]:
    """A fuzzer case on the concurrent clock with 10 to 60 more output tokens a request; half
    of those without Mamba priced with a model's blocks over a slow link (loads that span
    steps)."""
    rng = random.Random(seed)
    trace = draw_trace(rng)
    for r in trace:
        r["output_token_ids"] += [rng.randrange(50_000) for _ in range(rng.randint(10, 60))]
    _, values = draw_case(rng)
    values.update(schedule="concurrent", async_scheduling=False, max_num_seqs=16)
    values["max_num_batched_tokens"] = rng.choice((8192, 64, 32))
    if rng.random() < 0.5 and "mamba" not in values["groups"]:  # (its page: 528 tokens)
        values.update(model="qwen3.5-4b", host_bandwidth_gbps=rng.choice((0.02, 0.2, 50)))
    requests = sim_requests(trace)
    return values, requests


@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, 2**32))
def test_random_conversations_skipping_quiet_steps_as_step_by_step(seed):
    values, requests = _random_case(seed)
    steps, visited, plain_requests, requests = _same(make_policy(values), requests)
    # (none may sleep: a tiny tier that drops an offer every step keeps its decoder awake;
    # the fixed seeds below hold that sleeping and clock ticks happen)
    assert requests <= plain_requests


def test_the_random_cases_load_retry_and_wait():
    """What the property's cases exercise (fixed seeds): host hits, loads waiting more than
    one step, offers retried in small tiers, decode offload, stretches of clock ticks."""
    loaded = waited = small = decode = ticks = 0
    for seed in range(12):
        values, requests = _random_case(seed)
        (results, *_), (*_, quiet) = _run(make_policy(values), requests, False)
        ticks += quiet
        loaded += sum(s.host_hit_tokens > 0 for s in results)
        waited += sum(s.host_wait_steps > 1 for s in results)
        small += values["host_tier_chunks"] <= 8
        decode += not values["offload_prompt_only"]
    assert (loaded, waited, small, decode, ticks) == (24, 6, 4, 5, 170)


# A 10-block pool, a 64-chunk tier over a 0.02 GB/s link (26 ms a chunk of qwen3.5-4b), 5 ms
# + 100 us a token: a's prompt is stored, b's evicts it from the GPU, c loads it back (4
# chunks, 105 ms) while d and e decode; d's next block preempts e with c's load in flight.
PRICED = {
    "engine": "vllm",
    "groups": ["full_attention"],
    "block_size": 16,
    "num_blocks": 10,
    "schedule": "concurrent",
    "async_scheduling": False,
    "model": "qwen3.5-4b",
    "host_bandwidth_gbps": 0.02,
    "host_tier_chunks": 64,
    "step_base_ms": 5,
    "step_token_us": 100,
}


def _preempting_trace() -> list[SimRequest]:
    def request(name, prompt, outputs, at_s):
        return SimRequest(name, list(prompt), list(range(9000, 9000 + outputs)), timestamp_s=at_s)

    a = range(1000, 1064)
    return [
        request("a", a, 1, 0.0),
        request("b", range(2000, 2128), 1, 0.001),
        request("d", range(3000, 3016), 40, 0.002),
        request("e", range(4000, 4016), 40, 0.002),
        request("c", [*a, *range(5000, 5016)], 2, 0.05),
    ]


def _steps(every_step: bool) -> list[tuple[float, float, int, bool, float | None]]:
    """Each step the replay scheduled: (start, end, tokens, whether it preempted, when the
    first load in flight lands or None)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(HostTierConcurrent, "every_step", every_step)
        run = concurrent_replay(make_policy(PRICED))
    steps = []
    start_step = run._start_step

    def recorded():
        before, start_s = len(run.in_flight), run.clock
        start_step()
        if len(run.in_flight) > before:
            end_s, *_, tokens, _ = run.in_flight[-1]
            loads = [f.host.done_s for f in run.holding if f.host.keys is not None]
            steps.append((start_s, end_s, tokens, run.preempted, min(loads, default=None)))

    run._start_step = recorded
    list(run.run(_preempting_trace()))
    return steps


@pytest.mark.parametrize("every_step", [True, False])
def test_a_step_that_preempted_is_priced_by_what_it_kept(every_step):
    """vLLM skips the waiting requests in a step that preempted, but runs the model for the
    running ones it kept, while the load crosses the link: the step lasts what the time
    model gives its tokens, not until the load lands. Every step that scheduled tokens does."""
    steps = _steps(every_step)
    base_s, token_s = PRICED["step_base_ms"] / 1000, PRICED["step_token_us"] / 1e6
    kept = [s for s in steps if s[3] and s[2] > 0 and s[4] is not None]
    assert len(kept) == 1
    start_s, end_s, tokens, _, lands_s = kept[0]
    assert (tokens, end_s) == (1, start_s + (base_s + token_s * 1))
    assert lands_s > end_s + 0.02  # before: the step lasted until then (37.3 ms)
    for start_s, end_s, tokens, *_ in steps:
        if tokens:
            assert end_s == start_s + (base_s + token_s * tokens)


@pytest.mark.parametrize("every_step", [True, False])
def test_a_landed_load_the_waiting_pass_does_not_reach_still_waits(monkeypatch, every_step):
    """vLLM counts a request's wait steps while its status is WAITING_FOR_REMOTE_KVS: from
    its load's issue until the waiting pass reaches it with the load in, so a pass that stops
    before it (the budget, max_num_seqs, a head that does not fit) leaves it waiting. hpa
    counted only the steps its load was crossing: r13 waited 1 step where vLLM 0.33's own
    scheduler counted 5, the same steps to its first token (found by `python -m
    tests.sim.vllm.fuzz_offload --seed 52072 --cases 4`, case 3: 16 blocks of 16 tokens, 16
    host chunks, LRU, concurrent, 16 sequences; the oracle's row for r13 below)."""
    from tests.sim.vllm.fuzz_offload import run_hpa

    monkeypatch.setattr(HostTierConcurrent, "every_step", every_step)
    rng = random.Random(52072 * 1_000_003 + 3)
    trace = draw_trace(rng)
    _, hpa = draw_case(rng)
    rows = {row[0]: row for row in run_hpa(trace, hpa)}
    assert rows["r13"] == ("r13", 48, 32, 5, [73, 1, 1, 1, 1], 20, 0)
