"""L2b (`shared_scheduled_tokens`): the prompt's prefix shared with what the earlier requests
had scheduled when it was admitted (sim/vllm/scheduled.py), token by token."""

from __future__ import annotations

import numpy as np
import pytest

from analyzer.sim.dispatch import make_policy
from analyzer.sim.records import SimRequest
from analyzer.sim.vllm import replay

STEP_S, TOKEN_S = 0.005, 100e-6  # the default time model


def _policy(block_size: int, **values) -> dict:
    return make_policy(
        {
            "engine": "vllm",
            "groups": ["full_attention"],
            "block_size": block_size,
            "schedule": "concurrent",
            "async_scheduling": False,  # `_admission_step` counts the synchronous loop's steps
            **values,
        }
    )


def _request(rid: str, prompt: list[int], outputs: list[int], at_s: float) -> SimRequest:
    return SimRequest(rid, np.asarray(prompt), np.asarray(outputs), timestamp_s=at_s)


def _admission_step(prompt_tokens: int, arrival_s: float) -> int:
    """The step (1-based) a request arriving at `arrival_s` is admitted in, while one
    earlier request prefilled `prompt_tokens` in step 1 and decodes one token a step."""
    start_s, step = STEP_S + TOKEN_S * prompt_tokens, 2
    while start_s < arrival_s:
        start_s += STEP_S + TOKEN_S
        step += 1
    return step


PROMPT = list(range(1, 21))  # 20 tokens
OUTPUTS = list(range(100, 130))  # 30 tokens


@pytest.mark.parametrize("block_size", [4, 16])
@pytest.mark.parametrize("arrival_s", [0.011, 0.03, 0.06, 1.0])
def test_a_follow_up_shares_what_its_parent_has_decoded_so_far(block_size, arrival_s):
    """The parent is still decoding (asleep between its event positions at B = 16): the
    follow-up shares its prompt and the outputs scheduled so far, not the rest of the 25."""
    follow_up = PROMPT + OUTPUTS[:25] + [7, 7, 7]
    parent = _request("p", PROMPT, OUTPUTS, 0.0)
    results = list(replay([parent, _request("c", follow_up, [1], arrival_s)], _policy(block_size)))
    step = _admission_step(len(PROMPT), arrival_s)
    scheduled = len(PROMPT) + len(OUTPUTS) if step > len(OUTPUTS) else len(PROMPT) + step - 1
    assert results[1].shared_scheduled_tokens == min(len(PROMPT) + 25, scheduled)


@pytest.mark.parametrize(
    ("prompt", "shared"),
    [
        (PROMPT[:6] + [50, 51, 52, 53], 6),  # leaves a block the parent scheduled whole
        (PROMPT[:8] + [50], 8),  # leaves at a block boundary
        (PROMPT + OUTPUTS + [5], 50),  # the parent's whole sequence, last output included
        ([60, 61, 62, 63, 64], 0),  # nothing in common
        (PROMPT[:3], 3),  # a prompt inside the parent's first block
    ],
)
def test_after_the_parent_finished_the_whole_common_prefix_counts(prompt, shared):
    """Nothing in flight: L2b is the token-level common prefix (granularity floors it later)."""
    requests = [_request("p", PROMPT, OUTPUTS, 0.0), _request("c", prompt, [1], 5.0)]
    assert list(replay(requests, _policy(4)))[1].shared_scheduled_tokens == shared


def test_the_best_of_several_earlier_requests_counts():
    """One sibling diverged early, one shares more but had scheduled little of it."""
    long = list(range(1, 41))
    requests = [
        _request("a", long[:9] + [90] * 5, [1], 0.0),  # finished long before
        _request("b", long, list(range(200, 260)), 1.0),  # decoding when c arrives
        _request("c", long + [300], [1], 1.02),
    ]
    results = list(replay(requests, _policy(4)))
    assert results[2].shared_scheduled_tokens == 40  # b's prompt was scheduled whole


def test_a_serial_replay_leaves_it_unset():
    requests = [_request("p", PROMPT, OUTPUTS, 0.0), _request("c", PROMPT, [1], 5.0)]
    serial = make_policy({"engine": "vllm", "groups": ["full_attention"], "block_size": 4})
    assert list(replay(requests, serial))[1].shared_scheduled_tokens is None


class _Checked:
    """Wraps the replay's ScheduledPrefixes: every `shared` answer is checked against the
    definition, the best over every earlier request r of min(common prefix of the prompt and
    r's sequence, tokens r had scheduled), capped at the prompt."""

    def __init__(self, inner):
        self.inner = inner
        self.seen = {}

    def record(self, f, start, end):
        self.seen[f.index] = f
        self.inner.record(f, start, end)

    def scheduled_blocks(self, f, resident):
        return self.inner.scheduled_blocks(f, resident)

    def shared(self, f, j, scheduled_tokens):
        got = self.inner.shared(f, j, scheduled_tokens)
        mine = np.frombuffer(f.req.source.data, np.int32)[: f.req.prompt]
        want = 0
        for other in self.seen.values():
            if other is f:
                continue
            theirs = np.frombuffer(other.req.source.data, np.int32)
            size = min(len(mine), len(theirs))
            differ = np.flatnonzero(mine[:size] != theirs[:size])
            common = int(differ[0]) if len(differ) else size
            want = max(want, min(common, scheduled_tokens(other)))
        assert got == min(want, f.req.prompt), (f.index, got, want)
        return got


@pytest.mark.parametrize("seed", range(12))
def test_shared_is_its_definition_on_random_traffic(seed, monkeypatch):
    import analyzer.sim.vllm.concurrent as concurrent

    made = concurrent.ScheduledPrefixes
    monkeypatch.setattr(concurrent, "ScheduledPrefixes", lambda *a: _Checked(made(*a)))
    rng = np.random.default_rng(seed)
    heads = [rng.integers(0, 4, size=int(rng.integers(1, 24))).tolist() for _ in range(4)]
    requests = []
    for i in range(40):
        head = heads[int(rng.integers(0, len(heads)))]
        prompt = head[: int(rng.integers(0, len(head) + 1))]
        prompt = prompt + rng.integers(0, 4, size=int(rng.integers(1, 20))).tolist()
        outputs = rng.integers(0, 4, size=int(rng.integers(1, 6))).tolist()
        requests.append(_request(f"r{i}", prompt, outputs, float(rng.uniform(0, 0.05))))
    requests.sort(key=lambda r: r.timestamp_s)
    policy = _policy(int(rng.choice([2, 4, 8])), step_base_ms=1.0, max_num_batched_tokens=16)
    results = list(replay(requests, policy))
    assert len(results) == 40
