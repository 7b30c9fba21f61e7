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
import struct
from pathlib import Path
from typing import Any

from analyzer.traces.records import INT64_MAX, INT64_MIN, Int64Ids

Memo = dict[tuple[int, int], int]
Chain = tuple[list[int], list[int]]  # local ids, their chained ids


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


def chained(start: int, local: Any, memo: Memo | None = None, previous: Chain | None = None) -> Any:
    """Global chained ids of a list of local int64 ids; anything else is returned as is, for
    `validate_record` to reject with its reason. `memo` (prev, local) -> id saves rehashing
    the prefixes a file repeats; leave it out where memory must not grow with the file.
    `previous`: (local ids, their global ids) of a list chained before from the same
    `start`: the prefix `local` shares with it takes those ids as they are (an id is a
    function of its whole prefix), and only the rest is looked up or hashed (a WEKA request
    mostly extends the one before: 11.2 M ids, 0.55 M past that prefix)."""
    if not isinstance(local, list) or list(map(type, local)).count(int) != len(local):
        return local
    shared = 0 if previous is None else shared_prefix(local, previous[0])
    rest = local[shared:]  # the shared prefix's ids are int64: equal to `previous`'s
    if rest and not (INT64_MIN <= min(rest) and max(rest) <= INT64_MAX):
        return local
    ids = Int64Ids(previous[1][:shared]) if shared else Int64Ids()
    prev, append = ids[-1] if shared else start, ids.append
    # int64(prev's 8 bytes + h's) inline, from a copy of an empty blake2b (a new one costs
    # 100 ns more): 590 ns an id with a memo, 410 without, where calling int64 took 940, 770
    if memo is None:
        for h in rest:
            state = _EMPTY.copy()
            state.update(_PACK(prev, h))
            prev = _UNPACK(state.digest())[0]
            append(prev)
        return ids
    for h in rest:
        key = (prev, h)
        prev = memo.get(key)
        if prev is None:
            state = _EMPTY.copy()
            state.update(_PACK(*key))
            prev = memo[key] = _UNPACK(state.digest())[0]
        append(prev)
    return ids


_EMPTY = hashlib.blake2b(digest_size=8)  # copied, never updated
_PACK, _UNPACK = struct.Struct("<qq").pack, struct.Struct("<q").unpack


def shared_prefix(a: list, b: list) -> int:
    """How many leading elements `a` and `b` share (==): the first difference is found by
    halving, each half compared at C speed, so the cost is that of one comparison pass."""
    n = min(len(a), len(b))
    lo, hi = 0, n  # a[:lo] == b[:lo]; a difference, if any, lies in [lo, hi)
    if a[:n] == b[:n]:
        return n
    while hi - lo > _SCAN:
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    while a[lo] == b[lo]:
        lo += 1
    return lo


_SCAN = 16  # below this many elements, `shared_prefix` steps one by one
