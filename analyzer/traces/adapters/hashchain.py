"""Chained, namespaced block ids for hash-id traces whose ids are local or per block.

A trace's block ids may be comparable only inside one file (WEKA), or may name a block's
content rather than its whole prefix (Qwen-Bailian hashes each 16-token block). The
canonical record needs ids that are equal exactly when the whole prefix up to and
including the block is equal, so each id becomes hash(previous global id, local id),
starting from a per-namespace seed: equal local prefixes stay equal, a local id after a
different prefix or in another namespace never matches (collisions: about 2^-64 per pair).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from analyzer.traces.records import INT64_MAX, INT64_MIN

Memo = dict[tuple[int, int], int]


def int64(data: bytes) -> int:
    """A signed 64-bit id from `data` (blake2b)."""
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little", signed=True)


def file_scope(path: Path) -> tuple[str, str]:
    """(scope, sha256 hex) of a trace file whose ids are local to it: the scope is
    "<name before the first dot>.<first 8 hex digits of the file's sha256>", so two files
    never share ids (`day1/trace.jsonl` and `day2/trace.jsonl` included) and the same bytes
    always get the same ones. The file is read once more for its digest."""
    with open(path, "rb") as f:
        digest = hashlib.file_digest(f, "sha256").hexdigest()
    return f"{path.name.split('.')[0]}.{digest[:8]}", digest


def seed(namespace: str | bytes) -> int:
    """The chain's starting value for one namespace (a file, a conversation)."""
    return int64(
        b"hpa-namespace:" + (namespace.encode() if isinstance(namespace, str) else namespace)
    )


def chained(start: int, local: Any, memo: Memo | None = None) -> Any:
    """Global chained ids of a list of local int64 ids; anything else is returned as is, for
    `validate_record` to reject with its reason. `memo` (prev, local) -> id saves rehashing
    the prefixes a file repeats; leave it out where memory must not grow with the file."""
    if not isinstance(local, list) or not all(
        type(h) is int and INT64_MIN <= h <= INT64_MAX for h in local
    ):
        return local
    ids, prev = [], start
    for h in local:
        key = (prev, h)
        found = memo.get(key) if memo is not None else None
        if found is None:
            found = int64(
                prev.to_bytes(8, "little", signed=True) + h.to_bytes(8, "little", signed=True)
            )
            if memo is not None:
                memo[key] = found
        ids.append(found)
        prev = found
    return ids
