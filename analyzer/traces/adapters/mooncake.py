"""Mooncake FAST'25 traces (kvcache-ai/Mooncake `FAST25-release/traces/`).

One JSON object per line: ``{"timestamp": 0, "input_length": 6758, "output_length": 500,
"hash_ids": [0, 1, ...]}``; `timestamp` in milliseconds from trace start, `hash_ids`
prefix-chained ids of 512-token blocks (the last one partial).

Canonical record: request_id = "<file scope>:<line>" (`hashchain.file_scope`: the name
before the first dot and 8 hex digits of the file's sha256), timestamp in seconds,
block_hash_ids = hash_ids chained from a seed of the file's sha256 (`hashchain.chained`:
the trace numbers blocks densely from 0 in every file, so two files would otherwise share
ids that name different blocks), block_size = 512, prompt_tokens = input_length (so the
partial last block counts only its remainder), output_tokens = output_length. Other
fields are kept in `extra`. A record whose lengths disagree is rejected with the
canonical reason (e.g. "prompt_tokens: 6758 tokens need 14 blocks of 512, ...").
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from analyzer.traces.adapters import Adapter, hashchain
from analyzer.traces.batches import Batch, SourceInfo, exact_batch
from analyzer.traces.jsonlines import json_line_chunks
from analyzer.traces.records import KNOWN_FIELDS, RecordError, type_name

NAME = "mooncake"
BLOCK_SIZE = 512
SOURCE = SourceInfo(
    BLOCK_SIZE,
    "Mooncake FAST'25 traces (Moonshot AI / Kimi), "
    "https://github.com/kvcache-ai/Mooncake/tree/main/FAST25-release/traces, Apache-2.0",
)
_OWN_FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")
# Fields of other hash-id formats (Qwen-Bailian) that make a record not Mooncake.
_FOREIGN_FIELDS = ("chat_id", "parent_chat_id", "turn", "type")


def looks_like(first: Any) -> bool:
    """True when a file's first record is unambiguously Mooncake."""
    return (
        isinstance(first, dict)
        and isinstance(first.get("hash_ids"), list)
        and "input_length" in first
        and not any(k in first for k in _FOREIGN_FIELDS)
        and not any(k in first for k in KNOWN_FIELDS if k != "timestamp")
    )


def read_mooncake(path: Path, stream: BinaryIO, progress: Callable[[], None]) -> Iterator[Batch]:
    """Batches of canonical rows from a Mooncake JSONL stream."""
    scope, digest = hashchain.file_scope(path)
    seed = hashchain.seed(f"mooncake:{digest}")
    for items in json_line_chunks(path, stream, progress):
        yield exact_batch([(n, _canonical(obj, scope, seed, n), raw) for n, obj, raw in items])


def _canonical(obj: Any, scope: str, seed: int, line_no: int) -> Any:
    """The canonical record of one Mooncake record (or a RecordError / the object as is)."""
    if not isinstance(obj, dict):
        return obj  # a RecordError, or a non-object the validator rejects with its reason
    rec = {k: v for k, v in obj.items() if v is not None}
    for name in ("hash_ids", "input_length"):
        if name not in rec:
            return RecordError(name, "missing (required in a Mooncake record)")
    out: dict[str, Any] = {
        k: v for k, v in rec.items() if k not in _OWN_FIELDS and k not in KNOWN_FIELDS
    }
    out["request_id"] = f"{scope}:{line_no}"
    if "timestamp" in rec:
        ms = rec["timestamp"]
        if type(ms) not in (int, float):
            return RecordError(
                "timestamp", f"expected milliseconds (a number), got {type_name(ms)}"
            )
        out["timestamp"] = ms / 1000.0
    out["block_hash_ids"] = hashchain.chained(seed, rec["hash_ids"])
    out["block_size"] = BLOCK_SIZE
    out["prompt_tokens"] = rec["input_length"]
    if "output_length" in rec:
        out["output_tokens"] = rec["output_length"]
    return out


ADAPTER = Adapter(NAME, read_mooncake, SOURCE, record=lambda first, head: looks_like(first))
