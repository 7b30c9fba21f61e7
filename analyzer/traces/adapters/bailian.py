"""Qwen-Bailian KVCache traces (alibaba-edu/qwen-bailian-usagetraces-anon, `qwen_*_blksz_16.jsonl`).

Built from the documented schema (the trace files are Git LFS objects, not available here).
One JSON object per line: ``{"chat_id": 159, "parent_chat_id": 55, "timestamp": 61.114,
"input_length": 521, "output_length": 132, "type": "text", "turn": 2, "hash_ids": [1089,
...]}``: `chat_id` names the request, `parent_chat_id` the previous turn (-1 for a root),
`timestamp` seconds from the trace start, `hash_ids` one salted SipHash-2-4 per 16-token
block of the input (the last block partial), remapped to integers per file. Every row
carries its whole input, history included.

Canonical record: request_id "<file scope>:<chat_id>" (`hashchain.file_scope`: the name
before the first dot and 8 hex digits of the file's sha256), parent_request_id likewise from
`parent_chat_id`, conversation_id "<file scope>:<root chat_id>" (the root reached through the
parents seen earlier in the file, as rows are in time order), prompt_family = `type`,
timestamp = `timestamp`, prompt_tokens = input_length, output_tokens = output_length,
block_size 16, `turn` kept in `extra`. The ids are hashed per block and remapped per
file, so they become chained ids hash(previous, id) seeded by the file's sha256
(`hashchain`): a block only matches after an equal prefix, and two files never share an
id. A record whose ids disagree with input_length (ceil(input_length / 16) of them) is
rejected with the canonical reason. The last input block may hold padding, so it can
differ from the next turn's block at the same place (the trace's own Q&A notes it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from analyzer.traces.adapters import Adapter, hashchain
from analyzer.traces.batches import Batch, SourceInfo, exact_batch
from analyzer.traces.jsonlines import json_line_chunks
from analyzer.traces.records import KNOWN_FIELDS, RecordError, type_name

NAME = "bailian"
BLOCK_SIZE = 16
SOURCE = SourceInfo(
    BLOCK_SIZE,
    "Qwen-Bailian KVCache traces (Alibaba Cloud Bailian, KVCache in the Wild, ATC'25), "
    "https://github.com/alibaba-edu/qwen-bailian-usagetraces-anon, Apache-2.0",
)
_OWN_FIELDS = (
    "chat_id",
    "parent_chat_id",
    "timestamp",
    "input_length",
    "output_length",
    "hash_ids",
    "type",
)
ROOT = -1  # parent_chat_id of a conversation's first request


def looks_like(first: Any) -> bool:
    """True when a file's first record is unambiguously Qwen-Bailian."""
    return (
        isinstance(first, dict)
        and isinstance(first.get("hash_ids"), list)
        and "input_length" in first
        and "chat_id" in first
        and "parent_chat_id" in first
        and not any(k in first for k in KNOWN_FIELDS if k != "timestamp")
    )


def read_bailian(path: Path, stream: BinaryIO, progress: Callable[[], None]) -> Iterator[Batch]:
    """Batches of canonical rows from a Qwen-Bailian JSONL stream."""
    lineage = _Lineage(*hashchain.file_scope(path))
    for items in json_line_chunks(path, stream, progress):
        yield exact_batch([(n, lineage.canonical(obj), raw) for n, obj, raw in items])


class _Lineage:
    """The file's id namespace and each chat's conversation root (chat ids are ints)."""

    def __init__(self, scope: str, digest: str) -> None:
        self.scope = scope  # prefixes the file's request ids
        self.seed = hashchain.seed(f"bailian:{digest}")
        self.root_of: dict[int, int] = {}

    def canonical(self, obj: Any) -> Any:
        """The canonical record of one Bailian record (or a RecordError / the object as is)."""
        if not isinstance(obj, dict):
            return obj  # a RecordError, or a non-object the validator rejects with its reason
        rec = {k: v for k, v in obj.items() if v is not None}
        for name in ("chat_id", "hash_ids", "input_length"):
            if name not in rec:
                return RecordError(name, "missing (required in a Qwen-Bailian record)")
        try:
            chat, parent = self._ids(rec)
        except RecordError as err:
            return err
        out: dict[str, Any] = {k: v for k, v in rec.items() if k not in _OWN_FIELDS}
        out["request_id"] = f"{self.scope}:{chat}"
        if parent != ROOT:
            out["parent_request_id"] = f"{self.scope}:{parent}"
        root = chat if parent == ROOT else self.root_of.get(parent, parent)
        self.root_of[chat] = root
        out["conversation_id"] = f"{self.scope}:{root}"
        if "timestamp" in rec:
            if type(rec["timestamp"]) not in (int, float):
                return RecordError(
                    "timestamp", f"expected seconds (a number), got {type_name(rec['timestamp'])}"
                )
            out["timestamp"] = rec["timestamp"]
        if "type" in rec:
            out["prompt_family"] = rec["type"]
        out["block_hash_ids"] = hashchain.chained(self.seed, rec["hash_ids"])
        out["block_size"] = BLOCK_SIZE
        out["prompt_tokens"] = rec["input_length"]
        if "output_length" in rec:
            out["output_tokens"] = rec["output_length"]
        return out

    def _ids(self, rec: dict[str, Any]) -> tuple[int, int]:
        chat, parent = rec["chat_id"], rec.get("parent_chat_id", ROOT)
        for name, value in (("chat_id", chat), ("parent_chat_id", parent)):
            if type(value) is not int:
                raise RecordError(name, f"expected an integer, got {type_name(value)}")
        if chat < 0:
            raise RecordError("chat_id", f"{chat} is negative")
        if parent == chat:
            raise RecordError("parent_chat_id", f"{parent} is the request's own chat_id")
        if parent < 0 and parent != ROOT:
            raise RecordError("parent_chat_id", f"{parent} is neither a chat_id nor -1 (root)")
        return chat, parent


ADAPTER = Adapter(NAME, read_bailian, SOURCE, record=lambda first, head: looks_like(first))
