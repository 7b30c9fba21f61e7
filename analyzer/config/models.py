"""Model presets (`analyzer/schemas/models/<name>.json`, package data: `config.bundled`): a
model's cache groups, block size in tokens, KV-cache groups per type and, where derived, bytes
per pool block and the BF16 weights' bytes; or the same derived from a Hugging Face
`config.json` (`analyzer.config.hf_config`, docs/models.md)."""

from __future__ import annotations

import copy
import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from analyzer.config.bundled import preset_names, preset_text
from analyzer.config.hf_config import derive_model
from analyzer.config.hf_read import is_hf_config, read_json
from analyzer.config.model_figures import ModelFigures
from analyzer.errors import ConfigError

# Whose cache groups and block size a search without --model assumes (that of
# docs/definitions.md#worked-examples).
DEFAULT_GEOMETRY_MODEL = "qwen3-next-80b-a3b"


def model_names() -> list[str]:
    """The model presets there are, sorted."""
    return preset_names("models")


def load_model(name: str) -> dict[str, Any]:
    """A model preset from `analyzer/schemas/models/<name>.json`, or a model file: a path
    ending in .json (or a folder holding config.json) in the presets' layout (at least
    `block_size` and `groups`) or a Hugging Face config.json (it has `architectures` or
    `model_type`), from which vLLM 0.33's geometry and the model's figures are derived."""
    path = Path(name)
    if name.endswith(".json") or (path.is_dir() and (path / "config.json").is_file()):
        if path.is_dir():
            path = path / "config.json"
        stat = _stat(path)
        return copy.deepcopy(_model_file(path, *stat))
    known = model_names()
    if name not in known and path.is_dir():
        raise ConfigError(
            f"model folder {name}: no config.json in it (a model folder is read for its "
            "Hugging Face config.json)"
        )
    if name not in known and path.is_file():
        raise ConfigError(
            f"model file {name}: not a .json file (a model file is a preset's layout or a "
            "Hugging Face config.json)"
        )
    if name not in known:
        raise ConfigError(
            f"unknown model preset {name!r}; known: {', '.join(known)} (or a .json model "
            "file: a preset's layout or a Hugging Face config.json)"
        )
    return json.loads(preset_text("models", name))


def _stat(path: Path) -> tuple[int, int]:
    try:
        stat = path.stat()
    except OSError as exc:
        raise ConfigError(f"model file {path}: cannot read ({exc.strerror or exc})") from None
    return stat.st_mtime_ns, stat.st_size


@lru_cache(maxsize=32)
def _model_file(path: Path, mtime_ns: int = 0, size: int = 0) -> dict[str, Any]:
    """The model of file `path` (cached per path, modification time and size: a command
    loads its model several times). Callers get a copy (`load_model`)."""
    model = read_json(path)
    if is_hf_config(model):
        return derive_model(path, model)
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
    counts = model.setdefault("num_groups", dict.fromkeys(groups, 1))  # one KV group a type
    if not isinstance(counts, dict) or any(
        type(v) is not int or v < 1 or k not in groups for k, v in counts.items()
    ):
        raise ConfigError(
            f"model file {path}: 'num_groups' must map each of its groups to an integer >= 1"
        )
    return model


def model_figures(name: str) -> ModelFigures:
    """The compute and memory figures of a model (preset or config.json) for the step model;
    ConfigError for a preset-layout file that has none."""
    figures = load_model(name).get("figures")
    if figures is None:
        raise ConfigError(
            f"model {name!r} has no compute figures (a preset-layout file): give its "
            "Hugging Face config.json to price steps from the model and the GPU"
        )
    return ModelFigures.from_dict(figures)
