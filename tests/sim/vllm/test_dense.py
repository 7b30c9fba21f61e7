"""The compiled bounded full-attention replay (sim/vllm/dense.py) against the block-level
replay in Python, request by request: hits, chunks and errors, on random traces and pools
small enough to evict, refuse and stop mid-request; and which layouts it takes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analyzer.sim.policy import make_policy
from analyzer.sim.records import SimRequest
from analyzer.sim.vllm import VllmReplay
from analyzer.sim.vllm import dense as dense_module
from analyzer.sim.vllm.dense import dense_applies
from analyzer.sim.vllm.layout import make_layout
from tests.sim.strategies import traces

MANY = settings(max_examples=400, deadline=None)


@st.composite
def dense_policies(draw):
    values = {
        "groups": ["full_attention"],
        "block_size": draw(st.sampled_from([1, 2, 3, 4, 8])),
        "num_blocks": draw(st.integers(2, 40)),
        "retention_interval": draw(st.sampled_from([0, None])),
    }
    if draw(st.booleans()):
        values["max_num_batched_tokens"] = draw(st.integers(1, 24))
    return make_policy(values)


def _both(requests: list[SimRequest], policy) -> tuple[list, list]:
    compiled = VllmReplay(policy)
    assert compiled._dense is not None
    return list(compiled.run(requests)), list(VllmReplay(policy, fast=False).run(requests))


@MANY
@given(traces(max_requests=16, max_len=30), dense_policies(), st.integers(1, 5))
def test_equals_the_block_level_replay(requests, policy, step):
    """Every field of every result, whatever the requests handed to the loop at once."""
    with pytest.MonkeyPatch.context() as m:
        m.setattr(dense_module, "STEP_REQUESTS", step)
        got, want = _both(requests, policy)
    assert got == want


CASES = [  # (name, block, num_blocks, budget, prompts (token lists), outputs per request)
    ("hit then evicted", 2, 4, None, [[1, 2, 3, 4, 5], [1, 2, 3, 4, 5], [7, 7, 7, 7, 7]], 0),
    ("a resend keeps a duplicate", 2, 8, None, [[1, 2, 3, 4], [1, 2, 3, 4], [1, 2, 3, 4]], 0),
    ("too big to admit", 2, 3, None, [[1, 2, 3, 4, 5, 6, 7]], 0),
    ("stops in prefill", 2, 4, 2, [[1, 2, 3, 4, 5, 6, 7, 8, 9]], 0),
    ("stops in decode", 2, 3, None, [[1, 2, 3]], 6),
    ("decode fills blocks", 3, 20, 4, [[1, 2, 3, 4, 5], [1, 2, 3, 4, 5, 9, 9, 9, 9]], 5),
    ("empty prompt", 2, 4, None, [[], [1, 2, 3]], 0),
]


@pytest.mark.parametrize(
    "block, num_blocks, budget, prompts, outputs", [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_cases(block, num_blocks, budget, prompts, outputs):
    values = {"groups": ["full_attention"], "block_size": block, "num_blocks": num_blocks}
    if budget:
        values["max_num_batched_tokens"] = budget
    requests = [SimRequest(f"r{i}", p, None, outputs) for i, p in enumerate(prompts)]
    got, want = _both(requests, make_policy(values))
    assert got == want


@pytest.mark.parametrize(
    "values, applies",
    [
        ({"groups": ["full_attention"], "block_size": 16, "num_blocks": 100}, True),
        ({"groups": ["full_attention"], "block_size": 16}, False),  # unbounded: closed form
        ({"groups": ["full_attention", "mamba"], "block_size": 16, "num_blocks": 100}, False),
        (
            {"groups": ["full_attention"], "block_size": 16, "num_blocks": 100}
            | {"spec_decode": "eagle_lookahead"},
            False,
        ),
    ],
)
def test_the_layouts_it_replays(values, applies):
    assert dense_applies(make_layout(make_policy(values))) is applies
