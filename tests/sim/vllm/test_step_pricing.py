"""The concurrent replay priced by a step model (`config/step_models.py`): each step's
prefill chunks (new tokens, tokens computed before them) and decodes (count, contexts in all)
reach the model; a sleeping decoder's context comes from one kept sum (`sleepers.py`)."""

from __future__ import annotations

import numpy as np
import pytest

import analyzer.sim.vllm.concurrent as concurrent
from analyzer.sim.dispatch import make_policy
from analyzer.sim.records import SimRequest
from analyzer.sim.vllm import replay
from tests.sim.vllm.test_concurrent_golden import CASES, GOLDEN, _requests


class LinearAgain:
    """The linear step through the step-model interface, recording what it was given."""

    def __init__(self, policy):
        self.base_s = policy.step_base_ms / 1000
        self.token_s = policy.step_token_us / 1e6
        self.seen = []

    def step_s(self, prefill, decode_requests, decode_context_tokens):
        self.seen.append((tuple(prefill), decode_requests, decode_context_tokens))
        total = sum(n for n, _ in prefill) + decode_requests
        return self.base_s + self.token_s * total


@pytest.mark.skipif(not CASES, reason="no concurrent goldens")
@pytest.mark.parametrize("name", sorted(CASES))
def test_a_step_model_that_is_the_linear_step_changes_nothing(name, monkeypatch):
    case = CASES[name]
    requests = _requests(GOLDEN / case["trace"])
    policy = make_policy(case["policy"])
    inline = list(replay(requests, policy))
    made = []
    monkeypatch.setattr(concurrent, "step_model", lambda p: made.append(LinearAgain(p)) or made[-1])
    priced = list(replay(requests, policy))
    assert priced == inline  # every field, the times to the last bit
    seen = made[0].seen
    assert all(n > 0 and done >= 0 for step in seen for n, done in step[0])
    # a decode's context is what it had computed: at least its prompt
    prompts = min(r.num_prompt_tokens for r in requests)
    assert all(ctx >= prompts * count for _, count, ctx in seen)


def _crowded():
    """30 decoders at once on a budget of 12 tokens a step: the budget leaves sleepers out
    (and a small pool preempts some), which the goldens seldom do."""
    rng = np.random.default_rng(3)
    requests = [
        SimRequest(
            f"r{i}",
            rng.integers(0, 50, size=int(rng.integers(4, 40))).tolist(),
            output_tokens=int(rng.integers(20, 90)),
            timestamp_s=float(i // 10) * 0.01,
        )
        for i in range(30)
    ]
    policy = {
        "engine": "vllm",
        "groups": ["full_attention"],
        "block_size": 16,
        "schedule": "concurrent",
        "max_num_batched_tokens": 12,
    }
    return requests, policy


CROWDED = {"crowded": _crowded(), "crowded_small_pool": _crowded()}
CROWDED["crowded_small_pool"][1]["num_blocks"] = 60


@pytest.mark.parametrize("name", sorted(CASES) + sorted(CROWDED))
def test_sleepers_contexts_are_what_simulating_every_step_gives(name, monkeypatch):
    """The same replay with and without sleeping decoders gives the step model the same
    figures, step by step (the sleepers' contexts: a kept sum, against every request
    simulated at every step)."""
    if name in CROWDED:
        requests, values = CROWDED[name]
    else:
        requests, values = _requests(GOLDEN / CASES[name]["trace"]), CASES[name]["policy"]
    policy = make_policy(values)
    runs = []
    for sleeps in (True, False):
        made = []
        monkeypatch.setattr(
            concurrent, "step_model", lambda p, made=made: made.append(LinearAgain(p)) or made[-1]
        )
        if not sleeps:
            monkeypatch.setattr(concurrent.ConcurrentReplay, "_sleep", lambda self, f: None)
        results = list(replay(requests, policy))
        runs.append((results, [(tuple(sorted(p)), d, c) for p, d, c in made[0].seen]))
    assert runs[0][0] == runs[1][0]
    assert runs[0][1] == runs[1][1]
