"""Chained block hashes as small integers, exact (no collisions).

vLLM hashes block i as H(hash of block i-1, tokens of block i, extra keys). A replay only needs
prefix identity, so each block gets an integer id interned from (parent id, the block's bytes):
two ids are equal exactly when the two token prefixes (and namespaces) are equal. With L
lookahead tokens (EAGLE in vLLM 0.33) a block's bytes also cover the L tokens after it, as
vLLM's hash does, so a block matches only if the next L tokens agree too.
"""

from __future__ import annotations

from array import array
from collections.abc import Hashable

import numpy as np

from analyzer.errors import ConfigError
from analyzer.sim.records import SimRequest


class HashInterner:
    """Block ids: `ids[(parent id, block bytes)]`, a new id for each new pair, so equal ids
    mean equal prefixes; `roots` gives each namespace its own parent for block 0."""

    __slots__ = ("ids", "roots", "next_id")

    def __init__(self) -> None:
        self.ids: dict[tuple[int, bytes], int] = {}
        self.roots: dict[Hashable, int] = {}
        self.next_id = 1

    def root(self, namespace: Hashable) -> int:
        """The parent id of block 0 in `namespace` (cache_salt / LoRA isolation)."""
        rid = self.roots.get(namespace)
        if rid is None:
            rid = self.roots[namespace] = self.fresh()
        return rid

    def fresh(self) -> int:
        """An id no other block has (a block holding tokens nobody else can produce)."""
        self.next_id += 1
        return self.next_id - 1


class BlockHashes:
    """One request's hash ids, one per hash block (HBS tokens), extended on demand.

    `data` holds the bytes the hashes are made of: int32 token ids, or for hash-id traces int64
    trace block ids. `unit` is the bytes of one hash block and `look` the bytes of the
    lookahead after it. Blocks from index `known` on hold tokens nobody else can produce
    (decode output given only as a count): each gets a fresh id and can match nothing.
    """

    __slots__ = ("interner", "data", "unit", "look", "known", "ids", "_root")

    def __init__(
        self, interner: HashInterner, data: bytes, unit: int, look: int, known: int, root: int
    ) -> None:
        self.interner = interner
        self.data = data
        self.unit = unit
        self.look = look
        self.known = known
        self.ids: list[int] = []
        self._root = root

    def extend(self, count: int) -> list[int]:
        """Make sure the first `count` ids exist; returns the id list (shared, do not mutate)."""
        ids = self.ids
        start = len(ids)
        if start >= count:
            return ids
        table = self.interner.ids
        data, unit, look = self.data, self.unit, self.look
        parent = ids[-1] if ids else self._root
        known = self.known
        for i in range(start, count):
            if i >= known:
                parent = self.interner.fresh()
            else:
                lo = i * unit
                key = (parent, data[lo : lo + unit + look])
                found = table.get(key)
                if found is None:
                    found = table[key] = self.interner.fresh()
                parent = found
            ids.append(parent)
        return ids


def token_bytes(tokens) -> bytes:
    """Token ids as int32 bytes (one layout for every request, whatever container came in)."""
    if isinstance(tokens, np.ndarray):
        if tokens.dtype != np.int32:
            tokens = tokens.astype(np.int32)
        return tokens.tobytes()
    return array("i", tokens).tobytes()


def request_hashes(
    interner: HashInterner, req: SimRequest, hash_block: int, lookahead: int
) -> tuple[BlockHashes, BlockHashes | None]:
    """(hashes vLLM uses, plain hashes without lookahead or None when lookahead is 0).

    Hash-id requests are replayed at the trace block granularity: a hash block is the run of
    trace ids it covers, so the match unit must be a multiple of the trace block size. Their
    lookahead token is unknown; the next trace block's id stands in for it, which can only
    under-count matches (documented approximation).
    """
    if req.prompt_token_ids is not None:
        root = interner.root(req.namespace)
        data = token_bytes(req.prompt_token_ids)
        if req.output_token_ids is not None and len(req.output_token_ids):
            data += token_bytes(req.output_token_ids)
        unit, look = 4 * hash_block, 4 * lookahead
        known_tokens = len(data) // 4
    elif req.block_hash_ids is not None:
        trace_block = req.trace_block_size
        if not trace_block or hash_block % trace_block:
            raise ConfigError(
                f"request {req.request_id!r}: a hash-id trace with {trace_block}-token blocks "
                f"can only be replayed with a match unit (prefix_match_unit, else block_size) "
                f"that is a multiple of {trace_block}; got {hash_block}"
            )
        # Trace ids never equal token ids: their chains start from a root of their own.
        root = interner.root(("block_hash_ids", trace_block, req.namespace))
        data = np.asarray(req.block_hash_ids, dtype=np.int64).tobytes()
        unit, look = 8 * (hash_block // trace_block), 8 if lookahead else 0
        known_tokens = req.num_prompt_tokens
        blocks = len(req.block_hash_ids)
        if not (blocks - 1) * trace_block < known_tokens <= blocks * trace_block:
            raise ConfigError(
                f"request {req.request_id!r}: {blocks} block hash ids of "
                f"{trace_block} tokens cannot hold {known_tokens} prompt tokens"
            )
    else:
        raise ConfigError(f"request {req.request_id!r}: needs prompt_token_ids or block_hash_ids")
    main = BlockHashes(interner, data, unit, look, (known_tokens - lookahead) // hash_block, root)
    plain = BlockHashes(interner, data, unit, 0, known_tokens // hash_block, root) if look else None
    return main, plain
