"""The replay from shared prefixes (full attention alone, unbounded) gives exactly what the
request-by-request replay gives, on random traces; and it is used only where it applies."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analyzer.access.trace import LoadedTrace
from analyzer.pipeline import replay as replay_module
from analyzer.pipeline.replay import replay_rows
from analyzer.sim.dispatch import make_policy, replay

FA = {"engine": "vllm", "groups": ["full_attention"]}


def _trace(requests: list[dict]) -> LoadedTrace:
    n = len(requests)
    columns = {
        "arrival_seq": list(range(n)),
        "request_id": [f"r{i}" for i in range(n)],
        "timestamp_s": [float(i) for i in range(n)],
        "prompt_tokens": [len(r["prompt"]) for r in requests],
        "block_size": [None] * n,
        "output_tokens": [r.get("count") for r in requests],
        "model_revision": [r.get("revision", "m") for r in requests],
        "prompt_family": [None] * n,
        "replica": [r.get("replica") for r in requests],
        "conversation_id": [None] * n,
        "cache_salt": [r.get("salt") for r in requests],
        "lora_name": [None] * n,
    }
    prompts = [np.asarray(r["prompt"], dtype=np.int32) for r in requests]
    outputs = [
        None if r.get("output") is None else np.asarray(r["output"], dtype=np.int32)
        for r in requests
    ]
    return LoadedTrace(columns, prompts, outputs)


tokens = st.lists(st.integers(0, 2), min_size=0, max_size=12)


@st.composite
def requests(draw):
    bases = draw(st.lists(tokens, min_size=1, max_size=3))
    out = []
    for _ in range(draw(st.integers(1, 12))):
        base = draw(st.sampled_from(bases))
        if out and draw(st.booleans()):  # a follow-up: an earlier prompt + output + more
            earlier = draw(st.sampled_from(out))
            base = earlier["prompt"] + (earlier.get("output") or [])
        # ingest rejects empty prompts: at least one token
        prompt = base[: draw(st.integers(0, len(base)))] + draw(tokens) or [0]
        r = {"prompt": prompt}
        kind = draw(st.sampled_from(["none", "ids", "count"]))
        if kind == "ids":
            r["output"] = draw(st.lists(st.integers(0, 2), min_size=1, max_size=6))
            r["count"] = len(r["output"])
        elif kind == "count":
            r["count"] = draw(st.integers(0, 6))
        r["salt"] = draw(st.sampled_from([None, None, "s"]))
        r["revision"] = draw(st.sampled_from(["m", "m", "m2"]))
        r["replica"] = draw(st.sampled_from([None, "a", "b"]))
        out.append(r)
    return out


POLICIES = st.fixed_dictionaries(
    {
        "block_size": st.sampled_from([1, 2, 4, 16]),
        "max_num_batched_tokens": st.sampled_from([None, 3, 8]),
        "cache_scope": st.sampled_from(["revision", "shared"]),
    }
)


def _assert_same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for name in a:
        left, right = a[name], b[name]
        if isinstance(left, np.ndarray) or isinstance(right, np.ndarray):
            assert np.array_equal(np.asarray(left), np.asarray(right)), name
        else:
            assert list(left) == list(right), name


@settings(max_examples=150, deadline=None)
@given(requests(), POLICIES)
def test_the_same_rows_as_the_replay_request_by_request(reqs, knobs):
    trace = _trace(reqs)
    policy = make_policy({**FA, **knobs})
    _assert_same(replay_rows(trace, policy), replay_rows(trace, policy, replayer=replay))


def _used(monkeypatch, trace, values) -> bool:
    calls = []
    original = replay_module._replay_partitions
    monkeypatch.setattr(
        replay_module,
        "_replay_partitions",
        lambda *a, **k: calls.append(1) or original(*a, **k),
    )
    replay_rows(trace, make_policy(values))
    return not calls


@pytest.mark.parametrize(
    "values, applies",
    [
        ({**FA, "block_size": 4}, True),
        ({**FA, "block_size": 4, "max_num_batched_tokens": 8}, True),
        ({"engine": "vllm", "groups": ["full_attention", "mamba"], "block_size": 4}, False),
        ({**FA, "block_size": 4, "num_blocks": 50}, False),
        ({**FA, "block_size": 4, "schedule": "concurrent"}, False),
        (
            {
                **FA,
                "block_size": 4,
                "sliding_window": 8,
                "groups": ["full_attention", "sliding_window"],
            },
            False,
        ),
        ({"engine": "sglang", "groups": ["full_attention"], "block_size": 4}, False),
    ],
)
def test_used_only_where_it_applies(monkeypatch, values, applies):
    trace = _trace([{"prompt": [1, 2, 3, 4, 5]}, {"prompt": [1, 2, 3, 4, 6], "count": 2}])
    assert _used(monkeypatch, trace, values) is applies
