"""Model presets (`schemas/models/<name>.json`): a model's cache groups, block size in tokens,
KV-cache groups per type and, where derived, bytes per pool block."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from analyzer.errors import ConfigError

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"
# Whose cache groups and block size a search without --model assumes (SPEC 6's geometry).
DEFAULT_GEOMETRY_MODEL = "qwen3-next-80b-a3b"


def model_names() -> list[str]:
    """The model presets there are, sorted."""
    return sorted(p.stem for p in (SCHEMAS / "models").glob("*.json"))


def load_model(name: str) -> dict[str, Any]:
    """A model preset from `schemas/models/<name>.json`."""
    known = model_names()
    if name not in known:
        raise ConfigError(f"unknown model preset {name!r}; known: {', '.join(known)}")
    return json.loads((SCHEMAS / "models" / f"{name}.json").read_text())
