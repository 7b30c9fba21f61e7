"""Cache pool memory: bytes per pool block from a model preset, pool sizes in GiB, and the
sizes users write (`--memory-budget 40GiB`)."""

from __future__ import annotations

import re

from analyzer.config.models import load_model
from analyzer.errors import ConfigError

GIB = 2**30
_UNITS = {"b": 1, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
_UNITS.update({"kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12})
SIZE_UNITS = "B, KiB, MiB, GiB, TiB, or decimal KB, MB, GB, TB"


def parse_size(text: str, option: str = "--memory-budget") -> int:
    """`40GiB`, `512 MiB`, `1.5TiB`, `80GB` -> bytes. A number without a unit is an error
    (`40` is not 40 bytes, nor 40 GiB): ConfigError naming `option` and the units."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*", text)
    if m and not m.group(2):
        raise ConfigError(
            f"{option} {text!r}: a size needs a unit: {SIZE_UNITS} (e.g. {m.group(1)}GiB)"
        )
    if not m or m.group(2).lower() not in _UNITS:
        raise ConfigError(
            f"{option} {text!r}: expected a size such as 40GiB or 512MiB (units: {SIZE_UNITS})"
        )
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def bytes_per_block(model: str | None, block_size: int | None = None) -> int | None:
    """Bytes of one pool block of model preset `model` (None: no model, or a preset without
    `bytes_per_block`), for blocks of `block_size` tokens (default: the preset's): a page
    holds block_size tokens of KV, so it scales with the block. Raises ConfigError for an
    unknown preset."""
    if model is None:
        return None
    preset = load_model(model)
    per_block = preset.get("bytes_per_block")
    if per_block is None or block_size is None or block_size == preset["block_size"]:
        return per_block
    return per_block * block_size // preset["block_size"]


def pool_gib(num_blocks: int, per_block_bytes: int) -> float:
    """A pool of `num_blocks` blocks of `per_block_bytes` bytes, in GiB."""
    return num_blocks * per_block_bytes / GIB


def policy_pool_gib(
    model: str | None, num_blocks: int | None, block_size: int | None = None
) -> float | None:
    """The cache pool of a policy in GiB: num_blocks x its model's bytes per block of
    `block_size` tokens (None when the pool is unbounded or the model preset gives no
    bytes per block)."""
    if num_blocks is None:
        return None
    per_block = bytes_per_block(model, block_size)
    return None if per_block is None else pool_gib(num_blocks, per_block)
