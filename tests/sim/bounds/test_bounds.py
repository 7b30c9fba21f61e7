"""The bound engines (attention_only, oracle): worked cases, invariants, ordering vs vLLM."""

from __future__ import annotations

import numpy as np
import pytest

from analyzer.errors import ConfigError
from analyzer.sim.bounds import replay as bound_replay
from analyzer.sim.dispatch import make_policy, replay
from analyzer.sim.records import SimRequest
from tests.sim.conftest import shared_prefix_requests


def _policy(engine: str, **values):
    return make_policy({"engine": engine, "block_size": 544, **values})


@pytest.mark.parametrize(
    ("engine", "expected"),
    [("attention_only", [0, 1088, 1088]), ("oracle", [0, 1088, 1088]), ("vllm", [0, 0, 1088])],
)
def test_three_requests_of_2176(engine, expected):
    results = list(replay(shared_prefix_requests(1, 3, 2176, 1088), _policy(engine)))
    assert [r.hit_tokens for r in results] == expected
    if engine != "vllm":
        for r in results:
            assert r.sparse_retention_miss_tokens == 0 and r.junction_tokens == 0
            assert r.attention_match_tokens == r.attention_match_after_spec_tokens == r.hit_tokens
            assert r.chunks == (2176 - r.hit_tokens,) and r.error is None


def test_geometry_oracle_aligns_like_vllm_attention_only_at_the_unit():
    # 3 prompts of 40 tokens sharing 27; block 8, unit 4: sub-block hits on (Mamba, no SWA).
    reqs = shared_prefix_requests(1, 3, 40, 27)
    fine = {"block_size": 8, "prefix_match_unit": 4}
    assert [
        r.hit_tokens for r in bound_replay(reqs, make_policy({"engine": "oracle", **fine}))
    ] == [
        0,
        24,
        24,
    ]
    swa = {**fine, "groups": ["full_attention", "sliding_window"], "sliding_window": 8}
    oracle = make_policy({"engine": "oracle", **swa})
    attention_only = make_policy({"engine": "attention_only", **swa})
    assert [r.hit_tokens for r in bound_replay(reqs, oracle)] == [0, 24, 24]
    assert [r.hit_tokens for r in bound_replay(reqs, attention_only)] == [0, 24, 24]
    reqs = shared_prefix_requests(1, 3, 40, 29)
    assert [r.hit_tokens for r in bound_replay(reqs, oracle)] == [0, 24, 24]
    assert [r.hit_tokens for r in bound_replay(reqs, attention_only)] == [0, 28, 28]


def test_cap_outputs_namespaces_and_budget():
    tokens = np.arange(1, 17, dtype=np.int32)
    policy = make_policy({"engine": "attention_only", "block_size": 4, "max_num_batched_tokens": 3})
    first = SimRequest("a", tokens[:8], output_token_ids=tokens[8:14])
    # Same 16 tokens as a's prompt + output; cap prompt - 1 = 15, floored to 12; a cached
    # 8 + 6 - 1 = 13 computed tokens = 3 blocks.
    again = SimRequest("b", tokens)
    salted = SimRequest("c", tokens, namespace="salt")
    counted = SimRequest("d", tokens[:8], output_tokens=9)
    r = list(bound_replay([first, again, salted, counted], policy))
    assert [x.hit_tokens for x in r] == [0, 12, 0, 4]
    assert r[0].chunks == (3, 3, 2, 1, 1, 1, 1, 1)
    assert r[1].chunks == (3, 1)
    assert r[3].chunks == (3, 1) + (1,) * 8


def test_hash_id_requests_and_empty_prompt():
    policy = make_policy({"engine": "oracle", "block_size": 32})
    a = SimRequest("a", block_hash_ids=[1, 2, 3], trace_block_size=16, prompt_tokens=40)
    b = SimRequest("b", block_hash_ids=[1, 2, 4], trace_block_size=16, prompt_tokens=48)
    empty = SimRequest("e", [])
    r = list(bound_replay([a, b, empty], policy))
    assert [x.hit_tokens for x in r] == [0, 32, 0]
    assert r[2].error == "empty prompt" and r[2].chunks == ()


def test_unbounded_only_and_engine_listed():
    with pytest.raises(ConfigError, match="num_blocks"):
        make_policy({"engine": "oracle", "block_size": 16, "num_blocks": 100})
    with pytest.raises(ConfigError, match="vllm, sglang, marconi, .*, attention_only, oracle"):
        make_policy({"engine": "lmcache", "block_size": 16})


def _random_trace(rng, n=60):
    bases = [rng.integers(1, 50, size=int(rng.integers(1, 90))).astype(np.int32) for _ in range(5)]
    out = []
    for i in range(n):
        base = bases[int(rng.integers(len(bases)))]
        cut = int(rng.integers(0, len(base) + 1))
        tail = rng.integers(1, 50, size=int(rng.integers(0, 40))).astype(np.int32)
        prompt = np.concatenate([base[:cut], tail])
        kind = i % 3
        out.append(
            SimRequest(
                f"r{i}",
                prompt,
                output_token_ids=rng.integers(1, 50, size=5).astype(np.int32)
                if kind == 0
                else None,
                output_tokens=int(rng.integers(0, 6)) if kind == 1 else 0,
                namespace="x" if i % 7 == 0 else None,
            )
        )
    return out


POLICIES = [
    {"block_size": 8},
    {"block_size": 8, "retention_interval": None, "max_num_batched_tokens": 16},
    {"block_size": 8, "prefix_match_unit": 4},
    {"block_size": 4, "groups": ["full_attention"]},
    {"block_size": 8, "groups": ["full_attention", "sliding_window"], "sliding_window": 12},
]


@pytest.mark.parametrize("values", POLICIES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_invariants_and_order(values, seed):
    trace = _random_trace(np.random.default_rng(seed))
    results = {
        engine: list(replay(trace, make_policy({**values, "engine": engine})))
        for engine in ("vllm", "oracle", "attention_only")
    }
    for engine in ("oracle", "attention_only"):
        for req, r in zip(trace, results[engine], strict=True):
            prompt = req.num_prompt_tokens
            assert r.request_id == req.request_id and r.prompt_tokens == prompt
            assert 0 <= r.hit_tokens == r.attention_match_after_spec_tokens
            assert r.attention_match_after_spec_tokens == r.attention_match_tokens
            assert r.attention_match_tokens <= max(prompt - 1, 0)
            assert r.sparse_retention_miss_tokens == 0 == r.junction_tokens
            assert r.sparse_retention_miss_never_kept_tokens == 0
            assert r.sparse_retention_miss_evicted_tokens == 0
            if prompt:
                decode = max(req.num_output_tokens - 1, 0)
                assert sum(r.chunks) == prompt - r.hit_tokens + decode
                assert all(c >= 1 for c in r.chunks)
    for v, o, a in zip(results["vllm"], results["oracle"], results["attention_only"], strict=True):
        assert v.hit_tokens <= v.attention_match_tokens <= o.hit_tokens <= a.hit_tokens
