"""The one-pass capacity curve equals separate vLLM replays, capacity by capacity."""

from __future__ import annotations

import numpy as np
import pytest

from analyzer.sim.dispatch import make_policy, replay
from analyzer.sim.records import SimRequest
from analyzer.sim.vllm.compiled.stack_distance import capacity_curve


def _replayed(requests, block_size: int, num_blocks: int | None, budget: int | None = None):
    policy = make_policy(
        {
            "groups": ["full_attention"],
            "block_size": block_size,
            "num_blocks": num_blocks,
            "max_num_batched_tokens": budget,
        }
    )
    return list(replay(requests, policy))


@pytest.mark.parametrize("block_size", [64, 528])
def test_curve_equals_replays_on_mixed_sample(mixed_partitions, block_size):
    for requests in mixed_partitions:
        curve = capacity_curve(requests, block_size)
        assert curve.exact_below is None  # no duplicate blocks in this sample
        lo, top = curve.min_num_blocks, curve.saturation() + 3
        for n in sorted({lo, lo + 1, *np.linspace(lo, top, 5).astype(int).tolist(), top}):
            want = _replayed(requests, block_size, int(n))
            assert not any(r.error for r in want)
            got = curve.results(int(n))
            assert [r.hit_tokens for r in got] == [r.hit_tokens for r in want], n
            assert got == want  # every field, chunks included
        # Beyond saturation the curve is the unbounded replay.
        unbounded = [r.hit_tokens for r in _replayed(requests, block_size, None)]
        assert curve.hit_tokens(top).tolist() == unbounded


def test_curve_every_capacity_one_partition(mixed_partitions):
    requests = mixed_partitions[0]
    curve = capacity_curve(requests, 528)
    for n in range(curve.min_num_blocks, curve.saturation() + 2, 9):
        want = [r.hit_tokens for r in _replayed(requests, 528, n)]
        assert curve.hit_tokens(n).tolist() == want, n


def _req(rid: str, tokens, outputs: int = 1) -> SimRequest:
    return SimRequest(rid, prompt_token_ids=np.asarray(tokens, np.int64), output_tokens=outputs)


def test_small_exact_numbers():
    # B=4. a: 10 tokens (2 full blocks + 1 partial), b shares a's first 8 tokens, c = a again.
    a = list(range(100, 110))
    b = a[:8] + [7, 7, 7]
    c = list(a)
    reqs = [_req("a", a), _req("b", b), _req("c", c), _req("d", [1, 2, 3, 4, 5, 6, 7, 8, 9])]
    curve = capacity_curve(reqs, 4)
    assert curve.min_num_blocks == 4  # 3 blocks for the longest request + the null block
    assert curve.exact_below is None
    for n in (4, 5, 6, 7, 8, 20):
        assert curve.hit_tokens(n).tolist() == [r.hit_tokens for r in _replayed(reqs, 4, n)], n
    assert curve.hit_tokens(4).tolist() == [0, 8, 8, 0]
    assert curve.hit_tokens(20).tolist() == [0, 8, 8, 0]


def test_partial_block_counts_while_held():
    # x fills 2 blocks, y (unrelated, 2 full blocks + a partial one) takes 3 while it runs:
    # with 4 usable blocks x's older block 1 is evicted (only 1 slot left beyond y's 3).
    x = list(range(8)) + [99]  # 9 tokens: 2 full blocks + partial
    y = list(range(200, 209))
    reqs = [_req("x", x), _req("y", y), _req("x2", x)]
    curve = capacity_curve(reqs, 4)
    for n in range(curve.min_num_blocks, 10):
        assert curve.hit_tokens(n).tolist() == [r.hit_tokens for r in _replayed(reqs, 4, n)], n


def test_duplicate_blocks_mark_the_curve_inexact():
    # A prompt of exactly 2 blocks resent: its last block is never hittable (prompt - 1 cap)
    # and is recomputed while the old copy is still resident: vLLM holds two copies.
    p = list(range(8))
    other = list(range(50, 58))
    reqs = [_req("p", p), _req("p2", p), _req("o", other), _req("p3", p), _req("o2", other)]
    curve = capacity_curve(reqs, 4)
    assert curve.exact_below is not None
    for n in range(curve.min_num_blocks, curve.exact_below):
        assert curve.valid(n)
        assert curve.hit_tokens(n).tolist() == [r.hit_tokens for r in _replayed(reqs, 4, n)], n
    assert not curve.valid(curve.exact_below)
    assert not curve.valid(curve.min_num_blocks - 1)
    assert not curve.valid(None)


def test_random_small_traces_exact_wherever_valid():
    """Seeded fuzz: wherever the curve claims validity it equals the replay; and duplicates
    do make it wrong somewhere beyond `exact_below` (the condition is needed)."""
    rng = np.random.default_rng(7)
    wrong_beyond = 0
    for _ in range(120):
        stems = [list(range(i * 10, i * 10 + int(rng.choice([4, 8, 9, 12])))) for i in range(3)]
        reqs = []
        for k in range(8):
            stem = stems[int(rng.integers(3))]
            cut = int(rng.choice([4, 8, len(stem)]))
            tail = [int(rng.integers(500, 510))] if rng.random() < 0.3 else []
            reqs.append(_req(str(k), stem[:cut] + tail, int(rng.choice([1, 3, 6]))))
        curve = capacity_curve(reqs, 4)
        for n in range(curve.min_num_blocks, 16):
            want = [r.hit_tokens for r in _replayed(reqs, 4, n)]
            got = curve.hit_tokens(n).tolist()
            if curve.valid(n):
                assert got == want, n
            else:
                wrong_beyond += got != want
    assert wrong_beyond > 0


def test_an_empty_prompt_holds_no_block_and_fails_as_in_the_replay():
    """A request with no prompt is never admitted: it takes and frees no block (its decode
    steps hold nothing) and its result is the replay's error."""
    reqs = [
        _req("a", list(range(10)), outputs=9),
        SimRequest("empty", np.zeros(0, np.int32), output_tokens=20),
        _req("c", list(range(12)), outputs=1),
    ]
    curve = capacity_curve(reqs, 4)
    assert curve.min_num_blocks == 6  # request a: 18 computed tokens, 5 blocks + the null one
    for n in range(curve.min_num_blocks, 10):
        assert curve.results(n) == _replayed(reqs, 4, n), n
    assert curve.results(6)[1].error == "empty prompt"


@pytest.mark.parametrize("budget", [2048, 8192])
def test_a_token_budget_changes_only_the_chunks_on_mixed_sample(mixed_partitions, budget):
    """The one pass applies under any `max_num_batched_tokens` (one_pass_applies): a chunked
    prefill takes the same blocks from the same queue head, so every capacity's replay with
    the budget is the curve's results with it, every field (chunks split by the budget)."""
    for requests in mixed_partitions[:2]:
        curve = capacity_curve(requests, 528)
        lo, top = curve.min_num_blocks, curve.saturation() + 3
        for n in sorted({lo, *np.linspace(lo, top, 4).astype(int).tolist()}):
            want = _replayed(requests, 528, int(n), budget)
            assert curve.results(int(n), budget) == want, n
            if budget == 2048:  # the budget does split prefills here
                assert any(r.prompt_tokens - r.hit_tokens > budget for r in want)


def test_random_small_traces_with_budgets_exact_wherever_valid():
    """Seeded fuzz with budgets below a block, of a block and between blocks: wherever the
    curve is valid its results equal the budgeted replay's, every field."""
    rng = np.random.default_rng(11)
    compared = 0
    for _ in range(200):
        stems = [list(range(i * 10, i * 10 + int(rng.choice([4, 8, 9, 12, 17])))) for i in range(3)]
        reqs = []
        for k in range(8):
            stem = stems[int(rng.integers(3))]
            cut = int(rng.choice([4, 8, len(stem)]))
            tail = [int(rng.integers(500, 510))] if rng.random() < 0.3 else []
            reqs.append(_req(str(k), stem[:cut] + tail, int(rng.choice([1, 3, 6]))))
        curve = capacity_curve(reqs, 4)
        budget = int(rng.choice([1, 3, 4, 5, 8, 13]))
        for n in range(curve.min_num_blocks, 24):
            if curve.valid(n):
                assert curve.results(n, budget) == _replayed(reqs, 4, n, budget), (n, budget)
                compared += 1
    assert compared > 100
