"""config/policy_files.py: a policy file in JSON, TOML or YAML gives the same keys, and one
that does not parse is one line naming the file and the line."""

from __future__ import annotations

import json

import pytest
import yaml
from click.testing import CliRunner

from analyzer.cli import cli
from analyzer.config.bundled import preset_text
from analyzer.config.policy import presets, read_source
from analyzer.errors import ConfigError


@pytest.mark.parametrize("name", presets())
def test_every_preset_reads_the_same_as_yaml(name, tmp_path):
    keys = json.loads(preset_text("policies", name))
    for suffix in (".yaml", ".yml"):
        path = tmp_path / f"p{suffix}"
        path.write_text(yaml.safe_dump(keys), encoding="utf-8")
        assert read_source(str(path)) == keys


TOML = """engine = "vllm"
block_size = 544
groups = ["full_attention", "mamba"]
"""
YAML = """# the same policy
engine: vllm
block_size: 544
groups: [full_attention, mamba]
retention_interval: ~
"""
JSON = '{"engine": "vllm", "block_size": 544, "groups": ["full_attention", "mamba"]}'


@pytest.mark.parametrize(
    ("file", "text", "keys"),
    [
        (
            "p.toml",
            TOML,
            {"engine": "vllm", "block_size": 544, "groups": ["full_attention", "mamba"]},
        ),
        (
            "p.json",
            JSON,
            {"engine": "vllm", "block_size": 544, "groups": ["full_attention", "mamba"]},
        ),
        (
            "p.yaml",
            YAML,
            {
                "engine": "vllm",
                "block_size": 544,
                "groups": ["full_attention", "mamba"],
                "retention_interval": None,
            },
        ),
        ("p.YML", "model: qwen3.5-4b\n", {"model": "qwen3.5-4b"}),
        # a date stays the text it is (no date object reaches a policy)
        ("p.yaml", "model: 2026-10-01\n", {"model": "2026-10-01"}),
        (
            "p.yaml",
            "retention_interval: null\nnum_blocks: 400\n",
            {"retention_interval": None, "num_blocks": 400},
        ),
    ],
)
def test_formats_read_alike(file, text, keys, tmp_path):
    path = tmp_path / file
    path.write_text(text, encoding="utf-8")
    assert read_source(str(path)) == keys


@pytest.mark.parametrize(
    ("file", "text", "error"),
    [
        (
            "d.yaml",
            "engine: vllm\nblock_size: 544\nblock_size: 1088\n",
            "policy {}:3: key 'block_size' is given twice",
        ),
        (
            "d.json",
            '{"engine": "vllm",\n "engine": "sglang"}',
            "policy {}: key 'engine' is given twice",
        ),
        (
            "d.toml",
            'engine = "vllm"\nengine = "sglang"\n',
            "policy {}:2: not valid TOML (Cannot overwrite a value)",
        ),
        (
            "b.yaml",
            "engine: vllm\nmodel: [qwen\n",
            "policy {}:3: not valid YAML (expected ',' or ']', but got '<stream end>')",
        ),
        (
            "t.yaml",
            "engine: vllm\n\tmodel: x\n",
            "policy {}:2: not valid YAML (found character '\\t' that cannot start any token)",
        ),
        (
            "b.json",
            '{"engine": "vllm",\n "x" 3}',
            "policy {}:2: not valid JSON (Expecting ':' delimiter)",
        ),
        (
            "b.toml",
            'engine = "vllm"\nx 3\n',
            "policy {}:2: not valid TOML (Expected '=' after a key in a key/value pair)",
        ),
        ("l.yaml", "- a\n- b\n", "policy {}: expected an object of policy keys"),
        ("e.yaml", "", "policy {}: expected an object of policy keys"),
        (
            "k.yaml",
            "blocksize: 16\n",
            "policy {}: unknown policy key 'blocksize'; did you mean 'block_size'? "
            "(hpa replay --help lists every key)",
        ),
        (
            "u.yaml",
            b"engine: \xff\n",
            "policy {}: cannot read ('utf-8' codec can't decode byte 0xff in "
            "position 8: invalid start byte)",
        ),
    ],
)
def test_a_file_that_does_not_parse_is_one_line(file, text, error, tmp_path):
    path = tmp_path / file
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        read_source(str(path))
    assert str(info.value) == error.format(path)


def test_a_yaml_policy_replays_as_its_json(mixed_db, tmp_path):
    """The same keys as YAML and as JSON store the same policy and the same figures."""
    keys = {"model": "qwen3-next-80b-a3b", "retention_interval": None, "num_blocks": 300}
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(keys), encoding="utf-8")
    (tmp_path / "p.json").write_text(json.dumps(keys), encoding="utf-8")
    outputs = []
    for file in ("p.yaml", "p.json"):
        out = CliRunner().invoke(
            cli, ["replay", "--db", str(mixed_db), "--policy", str(tmp_path / file)]
        )
        assert out.exit_code == 0, out.output
        outputs.append([x for x in out.output.splitlines() if not x.startswith("run ")])
    assert outputs[0] == outputs[1]
