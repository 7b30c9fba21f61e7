"""Replay policies: defaults, presets, overrides, and one-line errors for bad keys/values."""

from __future__ import annotations

import json

import jsonschema
import pytest

from analyzer.config.bundled import SCHEMAS
from analyzer.config.models import load_model, model_names
from analyzer.config.policy import presets
from analyzer.errors import ConfigError
from analyzer.sim.dispatch import load_policy, make_policy

SCHEMA = json.loads((SCHEMAS / "policy.schema.json").read_text())


def test_defaults_and_model_preset():
    p = make_policy({"model": "qwen3-next-80b-a3b"})
    assert (p.engine, p.groups, p.block_size, p.retention_interval) == (
        "vllm",
        ("full_attention", "mamba"),
        544,
        0,
    )
    assert p.hash_block_tokens == 544
    assert make_policy({"block_size": 64, "prefix_match_unit": 16}).hash_block_tokens == 16


def test_overrides_parse_json_values(tmp_path):
    path = tmp_path / "p.json"
    path.write_text('{"block_size": 544, "retention_interval": 1088}')
    p = load_policy(
        str(path),
        [
            "retention_interval=null",
            "groups=full_attention,mamba",
            "num_blocks=200",
            "spec_decode=eagle_drop",
        ],
    )
    assert (p.retention_interval, p.num_blocks, p.spec_decode) == (None, 200, "eagle_drop")
    toml = tmp_path / "p.toml"
    toml.write_text('block_size = 528\ngroups = ["mamba", "full_attention"]\n')
    assert load_policy(str(toml)).groups == ("full_attention", "mamba")


def test_presets_load_and_validate():
    assert {"vllm-default", "vllm-dense", "vllm-concurrent"} <= set(presets())
    for name in presets():
        data = json.loads((SCHEMAS / "policies" / f"{name}.json").read_text())
        jsonschema.validate(data, SCHEMA)
        # Engine presets that pin a geometry keep it; the others take the trace's.
        block = data.get("block_size", 544)
        assert load_policy(name, [f"block_size={block}"]).block_size == block


def test_model_presets_are_consistent():
    for name in model_names():
        model = load_model(name)
        assert model["name"] == name and model["block_size"] > 0 and model["source"]
        if model["bytes_per_block"] is not None:
            assert model["bytes_per_block"] == (
                model["layers_per_group"]
                * model["block_size"]
                * model["kv_bytes_per_token_per_layer"]
            )
            assert (
                model["bytes_per_state"] == model["num_groups"]["mamba"] * model["bytes_per_block"]
            )
            _check_vllm_layout(model)


def _check_vllm_layout(model: dict) -> None:
    """The block size and groups vLLM 0.33 derives from the layer counts and state bytes:
    the attention page grows in 16-token steps until it holds one layer's state, and layers
    are grouped by the smaller count (the larger one when it is under 1.5x the smaller)."""
    kv = model["kv_bytes_per_token_per_layer"]
    state = model["mamba_state_bytes_per_layer"]
    assert model["block_size"] == 16 * -(-state // (16 * kv))
    counts = (model["num_full_attention_layers"], model["num_mamba_layers"])
    size = max(counts) if max(counts) < 1.5 * min(counts) else min(counts)
    assert model["layers_per_group"] == size
    assert model["num_groups"] == {
        "full_attention": -(-counts[0] // size),
        "mamba": -(-counts[1] // size),
    }


def test_schema_examples_are_valid_policies():
    for example in SCHEMA["examples"]:
        jsonschema.validate(example, SCHEMA)
        make_policy(example)


BAD = [
    ({"block_size": 544, "colour": "red"}, "unknown policy key 'colour'; known: engine, groups,"),
    (
        {},
        "policy key 'block_size': required, or give 'model' (a preset: nemotron-nano-9b-v2, "
        "qwen3-next-80b-a3b, qwen3.5-4b, qwen3.6-27b; or a config.json), e.g. --set "
        "model=nemotron-nano-9b-v2",
    ),
    ({"block_size": 544, "engine": "lmcache"}, "policy key 'engine': 'lmcache' is not one of vllm"),
    (
        {"block_size": 544, "trtllm_interval": 1024},
        "policy key 'trtllm_interval' applies to engine trtllm, not vllm",
    ),
    (
        {"block_size": 64, "engine": "sglang", "sglang_strategy": "lazy"},
        "policy key 'sglang_strategy': 'lazy' is not one of no_buffer, extra_buffer",
    ),
    (
        {"block_size": 64, "engine": "trtllm", "trtllm_save_last": 1},
        "policy key 'trtllm_save_last': expected true or false, got 1",
    ),
    (
        {"block_size": 64, "engine": "marconi", "marconi_alpha": -1},
        "policy key 'marconi_alpha': expected a number >= 0 and <= 2,147,483,647 or 'auto', got -1",
    ),
    (
        {"block_size": 64, "engine": "marconi", "marconi_alpha": True},
        "policy key 'marconi_alpha': expected a number >= 0 and <= 2,147,483,647 or 'auto', "
        "got True",
    ),
    (
        {"block_size": 64, "engine": "marconi", "marconi_bootstrap": 1.5},
        "policy key 'marconi_bootstrap': expected an integer >= 1 and <= 2,147,483,647, got 1.5",
    ),
    (
        {"block_size": 544, "groups": ["mamba"]},
        "policy key 'groups': each group once, full_attention included",
    ),
    (
        {"block_size": 544, "groups": ["full_attention", "gdn"]},
        "policy key 'groups': 'gdn' is not one of full_attention, sliding_window, mamba",
    ),
    (
        {"block_size": 544, "groups": ["full_attention"], "retention_interval": 1088},
        "policy key 'retention_interval': 1088 needs a sparse group (mamba or sliding_window) "
        "to retain; give 0 or null",
    ),
    (
        {"block_size": 544, "retention_interval": -1},
        "policy key 'retention_interval': expected an integer >= 0 or null, got -1",
    ),
    (
        {"block_size": 544, "retention_interval": 1.5},
        "policy key 'retention_interval': expected an integer >= 0 or null, got 1.5",
    ),
    (
        {"block_size": 544, "prefix_match_unit": 100},
        "policy key 'prefix_match_unit': 100 must divide block_size 544",
    ),
    (
        {"block_size": 544, "groups": ["full_attention"], "prefix_match_unit": 32},
        "a single full-attention group matches at its block size only",
    ),
    (
        {"block_size": 544, "groups": ["full_attention", "sliding_window"]},
        "policy key 'sliding_window': give a window exactly when groups include sliding_window",
    ),
    (
        {"block_size": 544, "spec_decode": "mtp"},
        "policy key 'spec_decode': 'mtp' is not one of none, eagle_lookahead, eagle_drop",
    ),
    (
        {"block_size": 544, "routing": "random"},
        "policy key 'routing': 'random' is not one of trace, round_robin, session, "
        "least_loaded, prefix_aware, llm-d, dynamo, sglang, chwbl",
    ),
    (
        {"block_size": 544, "routing": "dynamo"},
        "policy key 'routing': dynamo reads the replicas' load as requests arrive, so it "
        "needs schedule: concurrent (static routers: trace, round_robin, session)",
    ),
    (
        {"block_size": 544, "routing": "round_robin", "router_seed": 3},
        "policy key 'router_seed' applies to a live router; routing 'round_robin' is decided "
        "before the replay",
    ),
    (
        {"block_size": 544, "schedule": "concurrent", "routing": "dynamo", "llmd_kv_weight": 1},
        "policy key 'llmd_kv_weight' applies to routing llm-d, not dynamo",
    ),
    (
        {"block_size": 544, "schedule": "concurrent", "routing": "llm-d", "llmd_prefix": "x"},
        "policy key 'llmd_prefix': 'x' is not one of approximate, precise",
    ),
    (
        {"block_size": 544, "schedule": "concurrent", "gpu": "H200"},
        "policy key 'model': a step time from the model and the GPU needs both "
        "(--set model=... --set gpu=...)",
    ),
    (
        {"model": "qwen3-next-80b-a3b", "gpu": "H200"},
        "policy key 'gpu': a step time needs schedule: concurrent (a serial replay has no clock)",
    ),
    (
        {"model": "qwen3-next-80b-a3b", "schedule": "concurrent", "gpu": "H9"},
        "policy key 'gpu': 'H9' is not one of H100, H200, B200, MI300X, A100, L40S",
    ),
    (
        {"model": "qwen3-next-80b-a3b", "schedule": "concurrent", "gpu": "H200", "step_base_ms": 9},
        "policy key 'step_base_ms': the linear step's; with a gpu the step time comes from the "
        "model and the GPU (set step_model: linear without a gpu to use it)",
    ),
    (
        {"model": "qwen3-next-80b-a3b", "schedule": "concurrent", "step_efficiency": {"fp8": 1}},
        "policy key 'step_efficiency': the roofline's (give a gpu)",
    ),
    (
        {
            "model": "qwen3-next-80b-a3b",
            "schedule": "concurrent",
            "gpu": "H200",
            "step_efficiency": {"speed": 1},
        },
        "policy key 'step_efficiency': unknown factor 'speed'",
    ),
    (
        {
            "model": "qwen3-next-80b-a3b",
            "schedule": "concurrent",
            "gpu": "H200",
            "step_efficiency": {"bandwidth": 2},
        },
        "policy key 'step_efficiency': step efficiency bandwidth 2.0: expected 0 < x <= 1",
    ),
    (
        {"block_size": 544, "num_blocks": "many"},
        "policy key 'num_blocks': expected an integer >= 2 or null, got 'many'",
    ),
    # Issue 13, item 9: a value past what the replay can hold was an OverflowError traceback.
    (
        {"block_size": 10**23},
        "policy key 'block_size': expected an integer <= 2,147,483,647 or null, "
        "got 100000000000000000000000",
    ),
    (
        {"block_size": 544, "replicas": 1 << 20},
        "policy key 'replicas': expected an integer <= 65,536 or null, got 1048576",
    ),
    (
        {"block_size": 64, "engine": "marconi", "marconi_alpha": float("nan")},
        "policy key 'marconi_alpha': expected a number >= 0 and <= 2,147,483,647 or 'auto', "
        "got nan",
    ),
    (
        {"block_size": 64, "engine": "marconi", "marconi_alpha": 1e300},
        "policy key 'marconi_alpha': expected a number >= 0 and <= 2,147,483,647 or 'auto', "
        "got 1e+300",
    ),
    ({"model": "gpt-9"}, "unknown model preset 'gpt-9'; known: nemotron-nano-9b-v2,"),
]


@pytest.mark.parametrize(("values", "message"), BAD)
def test_bad_policy_is_a_config_error(values, message):
    with pytest.raises(ConfigError) as info:
        make_policy(values)
    assert message in str(info.value)


def test_engine_options_default_and_are_part_of_the_identity():
    policy = make_policy({"block_size": 64, "engine": "trtllm", "trtllm_interval": 256})
    assert make_policy({"block_size": 544, "engine": "trtllm"}).option("trtllm_interval") is None
    assert policy.option("trtllm_interval") == 256
    assert policy.option("trtllm_save_last") is False
    values = json.loads(policy.to_json())
    assert values["trtllm_interval"] == 256 and "options" not in values
    assert make_policy(values) == policy  # the stored JSON rebuilds the same policy
    assert "trtllm_interval" not in make_policy({"block_size": 64}).to_json()
    assert (
        load_policy(None, ["engine=trtllm", "block_size=64", "trtllm_interval=128"]).option(
            "trtllm_interval"
        )
        == 128
    )


def test_number_or_auto_option():
    policy = load_policy(None, ["engine=marconi", "block_size=64", "marconi_alpha=auto"])
    assert (policy.option("marconi_alpha"), policy.option("marconi_bootstrap")) == ("auto", 5)
    assert make_policy(json.loads(policy.to_json())) == policy
    jsonschema.validate({"block_size": 64, "marconi_alpha": "auto"}, SCHEMA)
    jsonschema.validate({"block_size": 64, "marconi_alpha": 0.5}, SCHEMA)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"block_size": 64, "marconi_alpha": "fast"}, SCHEMA)


def test_bad_overrides_and_sources(tmp_path):
    with pytest.raises(ConfigError, match="--set 'block_size': expected KEY=VALUE"):
        load_policy(None, ["block_size"])
    with pytest.raises(ConfigError, match="unknown policy key 'size'"):
        load_policy(None, ["size=3"])
    with pytest.raises(ConfigError, match="policy 'nope': no such file or preset; presets: "):
        load_policy("nope")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match=r"bad.json:1: not valid JSON \(Expecting property name"):
        load_policy(str(bad))
    assert SCHEMAS.is_dir()
