"""Model presets (`analyzer/schemas/models/<name>.json`, package data: `config.bundled`): a
model's cache groups, block size in tokens, KV-cache groups per type and, where derived, bytes
per pool block and the BF16 weights' bytes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from analyzer.config.bundled import preset_names, preset_text
from analyzer.errors import ConfigError

# Whose cache groups and block size a search without --model assumes (SPEC 6's geometry).
DEFAULT_GEOMETRY_MODEL = "qwen3-next-80b-a3b"


def model_names() -> list[str]:
    """The model presets there are, sorted."""
    return preset_names("models")


def load_model(name: str) -> dict[str, Any]:
    """A model preset from `analyzer/schemas/models/<name>.json`, or a model file (a path
    ending in .json, in the presets' layout: at least `block_size` and `groups`)."""
    if name.endswith(".json"):
        return _model_file(Path(name))
    known = model_names()
    if name not in known:
        raise ConfigError(
            f"unknown model preset {name!r}; known: {', '.join(known)} (or a .json model file)"
        )
    return json.loads(preset_text("models", name))


def _model_file(path: Path) -> dict[str, Any]:
    try:
        model = json.loads(path.read_text())
    except OSError as exc:
        raise ConfigError(f"model file {path}: cannot read ({exc.strerror or exc})") from None
    except ValueError as exc:
        raise ConfigError(f"model file {path}: not JSON ({exc})") from None
    if not isinstance(model, dict):
        raise ConfigError(f"model file {path}: expected a JSON object like a model preset")
    block, groups = model.get("block_size"), model.get("groups")
    if type(block) is not int or block < 1:
        raise ConfigError(f"model file {path}: 'block_size' must be an integer >= 1")
    if not isinstance(groups, list) or "full_attention" not in groups:
        raise ConfigError(f"model file {path}: 'groups' must be a list with full_attention")
    per_block = model.get("bytes_per_block")
    if per_block is not None and (type(per_block) is not int or per_block < 1):
        raise ConfigError(f"model file {path}: 'bytes_per_block' must be an integer >= 1")
    weights = model.get("weights_bytes")
    if weights is not None and (type(weights) is not int or weights < 1):
        raise ConfigError(f"model file {path}: 'weights_bytes' must be an integer >= 1")
    return model
