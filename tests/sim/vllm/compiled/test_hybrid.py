"""The compiled hybrid replay (sim/vllm/compiled/hybrid.py) against the reference, the
block-level replay in Python,
request by request: every field (hits, the miss split, junctions, chunks, errors), on
random traces, layouts (full attention with sliding-window and Mamba groups, copies of
each), retention intervals, budgets and pools small enough to evict, refuse and stop
mid-request; and which layouts it takes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analyzer.sim.dispatch import make_policy
from analyzer.sim.records import SimRequest
from analyzer.sim.vllm import VllmReplay
from analyzer.sim.vllm.compiled import fast_replay
from analyzer.sim.vllm.compiled import hybrid as hybrid_module
from analyzer.sim.vllm.compiled.hybrid import HybridReplay, fresh_caches, hybrid_applies
from analyzer.sim.vllm.layout import make_layout
from analyzer.sim.vllm.reference import NOT_SCHEDULABLE
from tests.sim.strategies import traces

MANY = settings(max_examples=500, deadline=None)
FA, SWA, MAMBA = "full_attention", "sliding_window", "mamba"
LAYOUTS = [[FA, MAMBA], [FA, SWA], [FA, SWA, MAMBA], [FA]]


@st.composite
def hybrid_policies(draw):
    """(policy, group counts) the compiled loop replays (FA alone only as copies)."""
    groups = draw(st.sampled_from(LAYOUTS))
    block = draw(st.sampled_from([1, 2, 3, 4, 6, 8]))
    values = {"groups": groups, "block_size": block}
    units = [u for u in (1, 2, 3, 4) if u < block and block % u == 0]
    if groups != [FA] and units and draw(st.booleans()):
        # sub-block hits with Mamba and no window; finer hashes only otherwise
        values["prefix_match_unit"] = draw(st.sampled_from(units))
    retention = [0, None, block, 2 * block, 3 * block]
    values["retention_interval"] = draw(st.sampled_from(retention if groups != [FA] else [0, None]))
    if SWA in groups:
        values["sliding_window"] = draw(st.integers(2, 3 * block + 2))
    if draw(st.booleans()):
        values["max_num_batched_tokens"] = draw(st.integers(1, 24))
    values["spec_decode"] = spec = draw(
        st.sampled_from(["none", "none", "eagle_lookahead", "eagle_drop"])
    )
    # unbounded without a window, a sub-block unit or a drafter: the closed form's (fast.py)
    closed = SWA not in groups and "prefix_match_unit" not in values and spec == "none"
    if closed or draw(st.booleans()):
        values["num_blocks"] = draw(st.integers(2, 60))
    counts = {g: draw(st.integers(1, 2)) for g in groups}
    if groups == [FA] and spec == "none":
        counts[FA] = 2  # one group alone in a bounded pool is dense.py's
    return make_policy(values), counts


def _both(requests: list[SimRequest], policy, counts) -> tuple[list, list]:
    compiled = fast_replay(make_layout(policy, counts), NOT_SCHEDULABLE)
    assert isinstance(compiled, HybridReplay)
    python = VllmReplay(policy, num_groups=counts)
    return list(compiled.run(requests)), list(python.run(requests))


@MANY
@given(traces(max_requests=16, max_len=30), hybrid_policies(), st.integers(1, 5))
def test_equals_the_block_level_replay(requests, drawn, step):
    """Every field of every result, whatever the requests handed to the loop at once."""
    policy, counts = drawn
    with pytest.MonkeyPatch.context() as m:
        m.setattr(hybrid_module, "STEP_REQUESTS", step)
        got, want = _both(requests, policy, counts)
    assert got == want


# (name, policy values, prompts (token lists), outputs per request)
CASES = [
    (
        "a junction: attention matches, Mamba has no state there",
        {"groups": [FA, MAMBA], "block_size": 4, "retention_interval": 0, "num_blocks": 99},
        [[1] * 13, [1] * 9 + [2] * 8, [1] * 9 + [2] * 4 + [3] * 5],
        0,
    ),
    (
        "an evicted state is a miss by eviction",
        {"groups": [FA, MAMBA], "block_size": 2, "retention_interval": 0, "num_blocks": 9},
        [[1, 2, 3, 4, 5, 6, 7], [9] * 12, [1, 2, 3, 4, 5, 6, 7, 8]],
        0,
    ),
    (
        "a window needs its last blocks resident",
        {"groups": [FA, SWA], "block_size": 2, "sliding_window": 5, "num_blocks": 12},
        [[1, 2, 3, 4, 5, 6, 7, 8, 9], [1, 2, 3, 4, 5, 6, 7, 8, 9, 9], [4] * 10],
        3,
    ),
    (
        "three types reach a fixed point",
        {"groups": [FA, SWA, MAMBA], "block_size": 2, "sliding_window": 3}
        | {"retention_interval": 4},
        [[1, 2, 3, 4, 5, 6, 7, 8, 9], [1, 2, 3, 4, 5, 6, 7, 8, 1, 1], [1, 2, 3, 4, 5, 6, 0]],
        2,
    ),
    (
        "too big to admit",
        {"groups": [FA, MAMBA], "block_size": 2, "num_blocks": 3},
        [[1, 2, 3, 4, 5, 6, 7]],
        0,
    ),
    (
        "stops in prefill, then in decode",
        {"groups": [FA, MAMBA], "block_size": 2, "num_blocks": 7, "max_num_batched_tokens": 2},
        [[1, 2, 3, 4, 5, 6, 7, 8, 9], [5, 6, 7]],
        9,
    ),
    ("empty prompt", {"groups": [FA, SWA], "block_size": 2, "sliding_window": 3}, [[], [1, 2]], 0),
]


@pytest.mark.parametrize(
    "values, prompts, outputs", [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_cases(values, prompts, outputs):
    requests = [SimRequest(f"r{i}", p, None, outputs) for i, p in enumerate(prompts)]
    got, want = _both(requests, make_policy(values), None)
    assert got == want


@pytest.mark.parametrize(
    "values, counts, applies",
    [
        ({"groups": [FA, MAMBA], "block_size": 16, "num_blocks": 100}, None, True),
        ({"groups": [FA, SWA], "block_size": 16, "sliding_window": 8}, None, True),
        ({"groups": [FA], "block_size": 16, "num_blocks": 100}, {FA: 2}, True),
        ({"groups": [FA, MAMBA], "block_size": 16, "prefix_match_unit": 4}, None, True),
        ({"groups": [FA, MAMBA], "block_size": 16, "spec_decode": "eagle_lookahead"}, None, True),
        ({"groups": [FA, MAMBA], "block_size": 16, "spec_decode": "eagle_drop"}, None, True),
    ],
)
def test_the_layouts_it_replays(values, counts, applies):
    assert hybrid_applies(make_layout(make_policy(values), counts)) is applies


def test_hash_id_requests_beside_token_ids():
    """Hash-id requests are hashed as the replay hashes them, token-id ones by the compiled
    interner, from one id counter: each matches its own kind."""
    hashed = [
        SimRequest("h0", block_hash_ids=[1, 2, 3], trace_block_size=2, prompt_tokens=6),
        SimRequest("t0", [1, 2, 3, 4, 5, 6]),
        SimRequest("h1", block_hash_ids=[1, 2, 9], trace_block_size=2, prompt_tokens=5),
        SimRequest("t1", [1, 2, 3, 4, 5, 6, 7], None, 3),
        SimRequest("h2", block_hash_ids=[1, 2, 3, 4], trace_block_size=2, output_tokens=2),
    ]
    for num_blocks in (4, 8, 40):
        for spec in ("none", "eagle_lookahead", "eagle_drop"):
            values = {"groups": [FA, MAMBA], "block_size": 2, "num_blocks": num_blocks}
            got, want = _both(hashed, make_policy(values | {"spec_decode": spec}), None)
            assert got == want


def test_cached_code_is_flushed_when_any_loop_module_changes(tmp_path):
    """numba checks a function's own file only; the loop's functions call each other across
    its modules, so a digest of them all decides whether the cached code still holds."""

    class FunctionCache:  # what `fresh_caches` uses of numba's
        cache_path = str(tmp_path / "cache")

        def __init__(self) -> None:
            self.flushed = 0

        def flush(self) -> None:
            self.flushed += 1

    caches = [FunctionCache(), FunctionCache()]
    for digest, flushed in [("a", 1), ("a", 1), ("b", 2), ("b", 2)]:
        fresh_caches(caches, digest, "loop.sources")
        assert [c.flushed for c in caches] == [flushed, flushed]
