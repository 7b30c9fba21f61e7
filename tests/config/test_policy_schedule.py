"""The schedule keys (docs/definitions.md#the-concurrent-schedule): `schedule` and the concurrent
schedule's four keys, validated with one-line errors, consistent with the engine, and out of a
serial policy's identity."""

from __future__ import annotations

import json

import pytest

from analyzer.config.engines import ENGINE_NAMES
from analyzer.config.policy import KEYS, Policy, build_policy, parse_override, policy_values
from analyzer.config.schedule import (
    CONCURRENT_KEYS,
    SCHEDULE_KEYS,
    VLLM_SERVE_MAX_NUM_BATCHED_TOKENS,
)
from analyzer.errors import ConfigError

CONCURRENT = {"block_size": 16, "schedule": "concurrent"}

# Today's canonical JSON of serial policies: every stored run, report and golden keeps it.
# (A policy that names no budget gets vllm serve's 8192; one that says null, one chunk per
# prompt, keeps the identity every run had while null was the default.)
SERIAL_IDENTITY = [
    (
        {"block_size": 544, "max_num_batched_tokens": None},
        '{"block_size":544,"engine":"vllm","groups":["full_attention","mamba"],'
        '"max_num_batched_tokens":null,"model":null,"num_blocks":null,"prefix_match_unit":null,'
        '"replicas":1,"retention_interval":0,"routing":"trace","sliding_window":null,'
        '"spec_decode":"none"}',
    ),
    (
        {"block_size": 544},
        '{"block_size":544,"engine":"vllm","groups":["full_attention","mamba"],'
        '"max_num_batched_tokens":8192,"model":null,"num_blocks":null,"prefix_match_unit":null,'
        '"replicas":1,"retention_interval":0,"routing":"trace","sliding_window":null,'
        '"spec_decode":"none"}',
    ),
    (
        {"model": "qwen3-next-80b-a3b", "num_blocks": 4000, "max_num_batched_tokens": 2048},
        '{"block_size":544,"engine":"vllm","groups":["full_attention","mamba"],'
        '"max_num_batched_tokens":2048,"model":"qwen3-next-80b-a3b","num_blocks":4000,'
        '"prefix_match_unit":null,"replicas":1,"retention_interval":0,"routing":"trace",'
        '"sliding_window":null,"spec_decode":"none"}',
    ),
    (
        {"block_size": 64, "engine": "sglang", "max_num_batched_tokens": None},
        '{"block_size":64,"engine":"sglang","groups":["full_attention","mamba"],'
        '"max_num_batched_tokens":null,"model":null,"num_blocks":null,"prefix_match_unit":null,'
        '"replicas":1,"retention_interval":0,"routing":"trace","sglang_chunk_tokens":64,'
        '"sglang_num_states":null,"sglang_strategy":"no_buffer",'
        '"sglang_swa_full_tokens_ratio":0.8,"sglang_track_interval":256,"sliding_window":null,'
        '"spec_decode":"none"}',
    ),
]


@pytest.mark.parametrize(("values", "identity"), SERIAL_IDENTITY, ids=json.dumps)
def test_a_serial_policy_keeps_its_identity(values, identity):
    assert build_policy(values).to_json() == identity
    # Naming the schedule keys at their defaults is the same policy, the same identity.
    explicit = {**values, "schedule": "serial", "max_num_seqs": 256, "step_base_ms": 5}
    assert build_policy(explicit).to_json() == identity


def test_defaults():
    p = build_policy({"block_size": 16})
    assert (p.schedule, p.max_num_seqs, p.step_base_ms, p.step_token_us, p.time_scale) == (
        "serial",
        256,
        5.0,
        100.0,
        1.0,
    )
    assert p == Policy(block_size=16)
    assert {k: CONCURRENT_KEYS[k].default for k in CONCURRENT_KEYS} == {
        k: getattr(Policy(), k) for k in CONCURRENT_KEYS
    }
    assert set(SCHEDULE_KEYS) <= set(KEYS)


def test_a_concurrent_policy_has_all_six_keys_in_its_identity():
    p = build_policy({**CONCURRENT, "max_num_seqs": 8, "time_scale": 2, "step_token_us": 50})
    values = json.loads(p.to_json())
    assert {k: values[k] for k in SCHEDULE_KEYS} == {
        "schedule": "concurrent",
        "max_num_seqs": 8,
        "step_base_ms": 5.0,
        "step_token_us": 50.0,
        "time_scale": 2.0,
        "async_scheduling": True,
    }
    assert build_policy(values) == p  # the stored JSON rebuilds the same policy
    # An int and the same float are one configuration, one identity.
    assert build_policy({**CONCURRENT, "time_scale": 2.0, "step_token_us": 50.0}).to_json() == (
        build_policy({**CONCURRENT, "time_scale": 2, "step_token_us": 50}).to_json()
    )
    assert isinstance(p.max_num_seqs, int) and isinstance(p.time_scale, float)


@pytest.mark.parametrize(
    ("values", "budget"),
    [
        ({"block_size": 16}, 8192),  # vllm serve's default
        ({"block_size": 16, "max_num_batched_tokens": None}, None),  # one chunk a prompt
        ({"block_size": 16, "max_num_batched_tokens": 2048}, 2048),
        (CONCURRENT, 8192),
        ({**CONCURRENT, "max_num_batched_tokens": None}, 8192),
        ({**CONCURRENT, "max_num_batched_tokens": 2048}, 2048),
    ],
    ids=json.dumps,
)
def test_step_token_budget(values, budget):
    p = build_policy(values)
    assert p.step_token_budget == budget
    assert p.max_num_batched_tokens == values.get("max_num_batched_tokens", 8192)
    assert Policy().max_num_batched_tokens == VLLM_SERVE_MAX_NUM_BATCHED_TOKENS == 8192


def test_set_overrides():
    values = policy_values(None, ["block_size=16", "schedule=concurrent", "time_scale=0.5"])
    assert values == {"block_size": 16, "schedule": "concurrent", "time_scale": 0.5}
    p = build_policy(values)
    assert (p.schedule, p.time_scale) == ("concurrent", 0.5)
    assert parse_override("max_num_seqs=4") == ("max_num_seqs", 4)
    assert parse_override("step_base_ms=2.5") == ("step_base_ms", 2.5)


NOT_SERIAL = "needs schedule: concurrent (a serial replay runs one request at a time, on no clock)"
M = "policy key "
BAD = [
    ({"schedule": "async"}, "policy key 'schedule': 'async' is not one of serial, concurrent"),
    ({"schedule": None}, "policy key 'schedule': None is not one of serial, concurrent"),
    (
        {"schedule": "concurrent", "async_scheduling": 1},
        "policy key 'async_scheduling': expected true or false, got 1",
    ),
    (
        {"schedule": "concurrent", "async_scheduling": "false"},
        "policy key 'async_scheduling': expected true or false, got 'false'",
    ),
    (
        {"max_num_seqs": 0},
        "policy key 'max_num_seqs': expected an integer >= 1 and <= 2,147,483,647, got 0",
    ),
    (
        {"max_num_seqs": 2.0},
        "policy key 'max_num_seqs': expected an integer >= 1 and <= 2,147,483,647, got 2.0",
    ),
    (
        {"max_num_seqs": True},
        "policy key 'max_num_seqs': expected an integer >= 1 and <= 2,147,483,647, got True",
    ),
    (
        {"max_num_seqs": None},
        "policy key 'max_num_seqs': expected an integer >= 1 and <= 2,147,483,647, got None",
    ),
    (
        {"step_base_ms": -1},
        "policy key 'step_base_ms': expected a number >= 0 and <= 1,000,000.0, got -1",
    ),
    (
        {"step_base_ms": "5"},
        "policy key 'step_base_ms': expected a number >= 0 and <= 1,000,000.0, got '5'",
    ),
    (
        {"step_token_us": False},
        "policy key 'step_token_us': expected a number >= 0 and <= 1,000,000.0, got False",
    ),
    (
        {"step_token_us": 1e400},
        "policy key 'step_token_us': expected a number >= 0 and <= 1,000,000.0, got inf",
    ),
    ({"time_scale": 0}, "policy key 'time_scale': expected a number > 0 and <= 1,000,000.0, got 0"),
    (
        {"time_scale": -0.5},
        "policy key 'time_scale': expected a number > 0 and <= 1,000,000.0, got -0.5",
    ),
    (
        {"max_num_seqs": 1 << 31},
        M + "'max_num_seqs': expected an integer >= 1 and <= 2,147,483,647, got 2147483648",
    ),
    (
        {"step_base_ms": 1e300},
        M + "'step_base_ms': expected a number >= 0 and <= 1,000,000.0, got 1e+300",
    ),
    (
        {"time_scale": 10**23},
        M + "'time_scale': expected a number > 0 and <= 1,000,000.0, got 100000000000000000000000",
    ),
    (
        {"time_scale": float("nan")},
        "policy key 'time_scale': expected a number > 0 and <= 1,000,000.0, got nan",
    ),
]


@pytest.mark.parametrize(("values", "message"), BAD, ids=lambda x: str(x))
def test_bad_value_is_a_one_line_error(values, message):
    for schedule in ("concurrent", "serial"):  # the value is checked on either schedule
        with pytest.raises(ConfigError) as info:
            build_policy({"block_size": 16, "schedule": schedule, **values})
        assert str(info.value) == message


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("max_num_seqs", 8),
        ("step_base_ms", 0),
        ("step_token_us", 0.5),
        ("time_scale", 10),
        ("async_scheduling", False),
    ],
)
def test_a_concurrent_key_on_a_serial_policy_is_an_error(key, value):
    for values in ({key: value}, {key: value, "schedule": "serial"}):
        with pytest.raises(ConfigError) as info:
            build_policy({"block_size": 16, **values})
        assert str(info.value) == f"policy key {key!r} {NOT_SERIAL}"
    assert getattr(build_policy({**CONCURRENT, key: value}), key) == value


@pytest.mark.parametrize("engine", [name for name in ENGINE_NAMES if name != "vllm"])
def test_concurrent_is_vllm_only(engine):
    with pytest.raises(ConfigError) as info:
        build_policy({**CONCURRENT, "engine": engine})
    assert str(info.value) == (
        f"policy key 'schedule': engine {engine} has no concurrent replay; "
        "only vllm's scheduler is modelled"
    )
    assert build_policy({"block_size": 16, "engine": engine, "schedule": "serial"}).engine == engine


def test_the_preset():
    p = build_policy({**policy_values("vllm-concurrent"), "block_size": 544})
    assert p == build_policy({**policy_values("vllm-default"), **CONCURRENT, "block_size": 544})
