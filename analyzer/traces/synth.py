"""Seeded synthetic traces (`hpa synth`): canonical records for tests, samples and benchmarks.

Deterministic: the same scenario, parameters and seed give byte-identical files (numpy
``default_rng(seed)`` only, no wall clock). All lengths are in tokens, all times in seconds.

Scenarios (``SCENARIOS``): ``diagnostic`` (the seed article's 3-request test), ``groups`` (groups of
requests sharing one prefix each, docs/definitions.md#worked-examples) and ``mixed`` (a realistic
multi-family trace, see :mod:`analyzer.traces.synth_mixed`). ``block_size`` turns any of them into a
hash-id trace.
"""

from __future__ import annotations

import dataclasses
import gzip
import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import orjson

from analyzer.errors import ConfigError
from analyzer.traces.io import written_whole
from analyzer.traces.synth_mixed import (
    MixedConfig,
    distinct_tokens,
    mixed_records,
    random_tokens,
    require,
)


@dataclass(frozen=True)
class DiagnosticConfig:
    """`num_requests` prompts of `prompt_tokens`; all share exactly the first `shared_tokens`."""

    num_requests: int = 3
    prompt_tokens: int = 2176
    shared_tokens: int = 1088

    def __post_init__(self) -> None:
        require(self.num_requests >= 1, "num_requests must be >= 1")
        require(self.prompt_tokens >= 1, "prompt_tokens must be >= 1")
        require(
            0 <= self.shared_tokens <= self.prompt_tokens,
            "shared_tokens must be in [0, prompt_tokens]",
        )


@dataclass(frozen=True)
class GroupsConfig:
    """`num_groups` x `group_size` prompts of `prompt_tokens`; each group shares `shared_tokens`."""

    num_groups: int = 8
    group_size: int = 4
    prompt_tokens: int = 2200
    shared_tokens: int = 1600

    def __post_init__(self) -> None:
        require(self.num_groups >= 1 and self.group_size >= 1, "num_groups, group_size >= 1")
        require(self.prompt_tokens >= 1, "prompt_tokens must be >= 1")
        require(
            0 <= self.shared_tokens <= self.prompt_tokens,
            "shared_tokens must be in [0, prompt_tokens]",
        )


# What to ask for where the vocabulary runs out: every request's first token after the shared
# prefix (and every group's first token) is one no other such token and no shared prefix has.
_GROUPS_ADVICE = (
    "ask for fewer groups (num_groups), fewer requests a group (group_size) or shorter "
    "shared prefixes (shared_tokens)"
)
_DIAGNOSTIC_ADVICE = "ask for fewer requests (num_requests)"


def _grouped_prompts(
    rng: np.random.Generator,
    num_groups: int,
    group_size: int,
    prompt_tokens: int,
    shared: int,
    advice: str,
) -> Iterator[tuple[int, np.ndarray]]:
    """(group, prompt) pairs, group by group; shared prefixes and tails never agree by chance.

    Every group's first token and every tail's first token is distinct from all other such tokens
    and from the group's shared tokens, so two prompts share exactly `shared` tokens within a group
    and none across groups. `advice`: what to ask for where the vocabulary runs out
    (`distinct_tokens`), in the scenario's parameters.
    """
    banned: set[int] = set()
    firsts = distinct_tokens(rng, num_groups, banned, advice=advice) if shared else None
    for group in range(num_groups):
        prefix = random_tokens(rng, shared)
        if firsts is not None:
            prefix[0] = firsts[group]
            banned.update(np.unique(prefix).tolist())
        tails = random_tokens(rng, group_size * (prompt_tokens - shared))
        tails = tails.reshape(group_size, prompt_tokens - shared)
        if prompt_tokens > shared:
            tails[:, 0] = distinct_tokens(rng, group_size, banned, advice=advice)
        for tail in tails:
            yield group, np.concatenate([prefix, tail])


def _diagnostic(cfg: DiagnosticConfig, rng: np.random.Generator) -> Iterator[dict]:
    """The seed article's test; request i arrives at i seconds."""
    prompts = _grouped_prompts(
        rng, 1, cfg.num_requests, cfg.prompt_tokens, cfg.shared_tokens, _DIAGNOSTIC_ADVICE
    )
    for i, (_, prompt) in enumerate(prompts):
        yield {
            "request_id": f"diag-{i}",
            "timestamp": float(i),
            "prompt_family": "diagnostic",
            "prompt_token_ids": prompt,
        }


def _groups(cfg: GroupsConfig, rng: np.random.Generator) -> Iterator[dict]:
    """Groups in order (group 0's requests first); request i arrives at i seconds."""
    prompts = _grouped_prompts(
        rng, cfg.num_groups, cfg.group_size, cfg.prompt_tokens, cfg.shared_tokens, _GROUPS_ADVICE
    )
    for i, (group, prompt) in enumerate(prompts):
        yield {
            "request_id": f"group{group}-{i % cfg.group_size}",
            "timestamp": float(i),
            "prompt_family": f"group-{group}",
            "prompt_token_ids": prompt,
        }


ScenarioFn = Callable[[Any, np.random.Generator], Iterator[dict]]

SCENARIOS: dict[str, ScenarioFn] = {
    "diagnostic": _diagnostic,
    "groups": _groups,
    "mixed": mixed_records,
}
CONFIG_TYPES: dict[str, type] = {
    "diagnostic": DiagnosticConfig,
    "groups": GroupsConfig,
    "mixed": MixedConfig,
}
_PY_TYPES: dict[str, tuple[type, ...]] = {"int": (int,), "float": (int, float), "str": (str,)}


def config_class(scenario: str) -> type:
    """The frozen config dataclass of `scenario`; ConfigError naming the known ones otherwise."""
    if scenario not in SCENARIOS:
        known = ", ".join(sorted(SCENARIOS))
        raise ConfigError(f"unknown scenario {scenario!r}; known scenarios: {known}")
    return CONFIG_TYPES[scenario]


def _field_types(scenario: str) -> dict[str, str]:
    return {f.name: str(f.type) for f in dataclasses.fields(config_class(scenario))}


def _unknown_key(scenario: str, key: str, types: dict[str, str]) -> ConfigError:
    return ConfigError(f"scenario {scenario!r} has no parameter {key!r}; known: {', '.join(types)}")


def make_config(scenario: str, params: dict[str, Any]) -> Any:
    """Build and validate the config of `scenario` from Python values."""
    types = _field_types(scenario)
    for key, value in params.items():
        if key not in types:
            raise _unknown_key(scenario, key, types)
        type_name = types[key]
        base = type_name.split("|")[0].strip()
        if value is None and "None" in type_name:
            continue
        if isinstance(value, bool) or not isinstance(value, _PY_TYPES[base]):
            raise ConfigError(f"parameter {key}: expected {type_name}, got {value!r}")
    return config_class(scenario)(**params)


def _coerce(key: str, raw: str, type_name: str) -> Any:
    if "None" in type_name and raw.lower() in ("none", "null"):
        return None
    base = type_name.split("|")[0].strip()
    try:
        if base == "int":
            # Accept 5e7 and 50_000_000 for big token counts, but never a fraction.
            number = float(raw) if any(c in raw.lower() for c in ".e") else int(raw)
            if float(number) != int(number):
                raise ValueError
            return int(number)
        return float(raw) if base == "float" else raw
    except (ValueError, OverflowError):
        raise ConfigError(f"parameter {key}: {raw!r} is not a valid {base}") from None


def parse_params(scenario: str, items: Iterable[str]) -> dict[str, Any]:
    """Turn CLI ``KEY=VALUE`` strings into typed parameters of `scenario`."""
    types = _field_types(scenario)
    params: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"--param {item!r}: expected KEY=VALUE")
        if key not in types:
            raise _unknown_key(scenario, key, types)
        params[key] = _coerce(key, raw.strip(), types[key])
    return params


class BlockHasher:
    """Hash ids for chained prefix blocks: equal ids at a position iff equal token prefixes.

    An id is keyed by its parent block's id and the block's own tokens, so it stands for every
    token up to the block's end. Ids are handed out in order of first appearance (deterministic).
    Memory grows with the number of distinct blocks (about 100 bytes each).
    """

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self._ids: dict[tuple[int, bytes], int] = {}

    def hash_ids(self, tokens: np.ndarray) -> list[int]:
        """One id per full block plus one for the final partial block (ceil(len / block_size))."""
        raw = np.ascontiguousarray(tokens, dtype="<i4").tobytes()
        step = 4 * self.block_size
        ids: list[int] = []
        parent = -1
        for start in range(0, len(raw), step):
            parent = self._ids.setdefault((parent, raw[start : start + step]), len(self._ids))
            ids.append(parent)
        return ids


def _with_hash_ids(record: dict, hasher: BlockHasher) -> dict:
    """The hash-id variant of a token record; output ids are dropped, their count kept."""
    out: dict = {}
    for key, value in record.items():
        if key == "prompt_token_ids":
            out["block_hash_ids"] = hasher.hash_ids(value)
            out["block_size"] = hasher.block_size
            out["prompt_tokens"] = len(value)
        elif key != "output_token_ids":
            out[key] = value
    return out


def _as_lists(record: dict) -> dict:
    for key in ("prompt_token_ids", "output_token_ids"):
        if key in record:
            record[key] = record[key].tolist()
    return record


def generate(
    scenario: str,
    *,
    seed: int = 0,
    block_size: int | None = None,
    arrays: bool = False,
    **params: Any,
) -> Iterator[dict]:
    """Canonical trace records of `scenario` in arrival order, produced lazily.

    `params` are the fields of the scenario's config dataclass. `block_size` (tokens) emits
    ``block_hash_ids``/``block_size``/``prompt_tokens`` instead of token ids. `arrays=True` leaves
    token ids as numpy int32 arrays (what `write_jsonl` writes fastest) instead of lists.
    Arguments are checked here, before the first record, so errors surface at the call.
    """
    cfg = make_config(scenario, params)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ConfigError(f"seed must be a non-negative integer, got {seed!r}")
    if block_size is not None and (
        isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1
    ):
        raise ConfigError(f"block_size must be a positive integer, got {block_size!r}")
    records = SCENARIOS[scenario](cfg, np.random.default_rng(seed))
    if block_size is not None:
        hasher = BlockHasher(block_size)
        return (_with_hash_ids(r, hasher) for r in records)
    return records if arrays else (_as_lists(r) for r in records)


@dataclass(frozen=True)
class WriteStats:
    """What `write_jsonl` wrote: record count and total prompt tokens."""

    records: int
    prompt_tokens: int
    path: Path


@contextmanager
def _open_out(path: Path, suffix: str) -> Iterator[BinaryIO]:
    """A binary sink for `path`; `suffix` .gz or .zst compresses (no timestamp or name stored)."""
    with open(path, "wb") as raw:
        if suffix == ".gz":
            with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=6) as gz:
                yield gz  # type: ignore[misc]
        elif suffix == ".zst":
            import zstandard

            with zstandard.ZstdCompressor(level=6).stream_writer(raw, closefd=False) as zst:
                yield zst  # type: ignore[misc]
        else:
            yield raw


def write_jsonl(records: Iterable[dict], path: str | os.PathLike[str]) -> WriteStats:
    """Write `records` as JSON lines (orjson; numpy arrays allowed) to `path`, atomically.

    The file appears only when complete (written beside it, then renamed: `written_whole`).
    """
    path = Path(path)
    count = tokens = 0
    option = orjson.OPT_APPEND_NEWLINE | orjson.OPT_SERIALIZE_NUMPY
    with written_whole(path, lambda why: f"cannot write {path}: {why}") as tmp:
        with _open_out(tmp, path.suffix) as out:
            for record in records:
                out.write(orjson.dumps(record, option=option))
                count += 1
                tokens += record.get("prompt_tokens") or len(record["prompt_token_ids"])
    return WriteStats(count, tokens, path)
