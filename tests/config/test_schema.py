"""The committed policy schema is the one the config tables generate, and it accepts and
rejects what `build_policy` does."""

import json
from pathlib import Path

import jsonschema
import pytest

from analyzer.config.engines import ENGINE_NAMES
from analyzer.config.options import OPTIONS
from analyzer.config.policy import KEYS, build_policy
from analyzer.config.schema import policy_schema, schema_text
from analyzer.errors import ConfigError

# The checkout's files (what is committed), not the installed package's.
SCHEMAS = Path(__file__).resolve().parents[2] / "analyzer" / "schemas"


def test_the_committed_schema_is_generated_from_the_tables():
    committed = (SCHEMAS / "policy.schema.json").read_text()
    assert committed == schema_text(), (
        "run `make schemas` and commit analyzer/schemas/policy.schema.json"
    )


def test_every_key_engine_and_option_is_in_the_schema():
    props = policy_schema()["properties"]
    assert list(props) == list(KEYS)
    assert props["engine"]["enum"] == list(ENGINE_NAMES)
    for name in ENGINE_NAMES:
        assert f"{name} = " in props["engine"]["description"]
    for key, option in OPTIONS.items():
        assert props[key]["default"] == option.default, key
        assert props[key]["description"].startswith(f"engine {option.engine}: "), key


@pytest.mark.parametrize("preset", sorted((SCHEMAS / "policies").glob("*.json")), ids=str)
def test_every_preset_is_valid(preset):
    jsonschema.validate(json.loads(preset.read_text()), policy_schema())


@pytest.mark.parametrize(
    "values",
    [
        {"block_size": 0},
        {"block_size": 16, "num_blocks": 1},
        {"block_size": 16, "num_blocks": 99999999999999999999999},
        {"block_size": 16, "num_blocks": (1 << 24) + 1},
        {"block_size": 16, "retention_interval": -1},
        {"block_size": 16, "replicas": 0},
        {"block_size": 16, "routing": "random"},
        {"block_size": 16, "spec_decode": "medusa"},
        {"block_size": 16, "groups": ["full_attention", "lstm"]},
        {"block_size": 16, "engine": "tgi"},
        {"block_size": 16, "sizes": 3},
        {"block_size": 16, "engine": "sglang", "sglang_strategy": "buffer"},
        {"block_size": 16, "engine": "sglang", "sglang_chunk_tokens": 0},
        {"block_size": 16, "engine": "trtllm", "trtllm_save_last": 1},
        {"block_size": 16, "engine": "marconi", "marconi_alpha": "fast"},
        {"block_size": 16, "schedule": "async"},
        {"block_size": 16, "schedule": "concurrent", "max_num_seqs": 0},
        {"block_size": 16, "schedule": "concurrent", "max_num_seqs": 2.5},
        {"block_size": 16, "schedule": "concurrent", "step_base_ms": -1},
        {"block_size": 16, "schedule": "concurrent", "step_token_us": "fast"},
        {"block_size": 16, "schedule": "concurrent", "time_scale": 0},
        {"block_size": 16, "max_num_seqs": 8},
        {"block_size": 16, "schedule": "serial", "time_scale": 2},
        {"block_size": 16, "schedule": "concurrent", "engine": "sglang"},
        {"block_size": 16, "schedule": "concurrent", "engine": "oracle"},
    ],
    ids=json.dumps,
)
def test_the_schema_rejects_what_build_policy_rejects(values):
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(values, policy_schema())
    with pytest.raises(ConfigError):
        build_policy(values)


@pytest.mark.parametrize(
    "values",
    [
        {"block_size": 16, "num_blocks": 2, "retention_interval": None},
        {"block_size": 16, "engine": "marconi", "marconi_alpha": "auto"},
        {"block_size": 16, "engine": "sglang", "sglang_num_states": None},
        {"model": "qwen3-next-80b-a3b", "replicas": 2, "routing": "prefix_aware"},
        {"block_size": 16, "schedule": "serial", "max_num_seqs": 256, "time_scale": 1},
        {"block_size": 16, "engine": "sglang", "schedule": "serial"},
        {"block_size": 16, "schedule": "concurrent", "engine": "vllm", "max_num_seqs": 1},
        {
            "block_size": 16,
            "schedule": "concurrent",
            "step_base_ms": 0,
            "step_token_us": 12.5,
            "time_scale": 0.01,
            "max_num_batched_tokens": 2048,
        },
    ],
    ids=json.dumps,
)
def test_the_schema_accepts_what_build_policy_accepts(values):
    jsonschema.validate(values, policy_schema())
    build_policy(values)
