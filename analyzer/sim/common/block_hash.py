"""Chained block hashes as small integers, exact (no collisions).

vLLM hashes block i as H(hash of block i-1, tokens of block i, extra keys). A replay only needs
prefix identity, so each block gets an integer id that stands for (parent id, the block's
bytes): two ids are equal exactly when the two token prefixes (and namespaces) are equal. With
L lookahead tokens (EAGLE in vLLM 0.33) a block's bytes also cover the L tokens after it, as
vLLM's hash does, so a block matches only if the next L tokens agree too.

Ids come in runs. When a chain reaches a prefix nobody had, its remaining blocks get
consecutive ids and their bytes are kept once, as one run. A child is then found without a map
lookup per block: id p + 1 is the child of p whose bytes are the run's next block; any other
child of p is an edge in `ids[(p, bytes)]`, which names the first id of another run. Matching
a shared prefix is a byte comparison per run hop, not a dictionary lookup per block.

    chain A  [a0 a1 a2 a3]        new: run 10..13, no edges but (root, a0) -> 10
    chain B  [a0 a1 b2 b3]        10, 11 by the run; (11, b2) is new -> run 14..15
    chain C  [a0 a1 b2 a3]        10, 11, then edge (11, b2) -> 14; (14, a3) new -> run 16
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from collections.abc import Hashable

import numpy as np

from analyzer.errors import ConfigError
from analyzer.sim.records import SimRequest


class HashInterner:
    """Block ids: runs of consecutive ids with their bytes, and `ids[(parent id, block
    bytes)]` for a run's first block; `roots` gives each namespace its own parent for block
    0. Ids that are no run's (roots, fresh ids) have no implicit child."""

    __slots__ = ("ids", "roots", "next_id", "ahead", "run_first", "run_data", "run_shape")

    def __init__(self, *, ahead: bool = False) -> None:
        # `ahead`: a chain's first extension gives ids to all its known blocks at once (later
        # ones only reveal them). Ids still mean prefix identity; only their numbering moves,
        # so it is for replays that compare ids and never order by them.
        self.ahead = ahead
        self.ids: dict[tuple[int, bytes], int] = {}
        self.roots: dict[Hashable, int] = {}
        self.next_id = 1
        self.run_first: list[int] = []  # a run's first id, ascending
        self.run_data: list[bytes] = []  # its blocks' bytes (+ the last one's lookahead)
        self.run_shape: list[tuple[int, int]] = []  # (bytes per block, lookahead bytes)

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

    def continuation(self, parent: int, data: bytes, lo: int, count: int, shape) -> int:
        """How many of the `count` blocks of `data` from byte `lo` continue `parent`'s run
        (they are ids parent + 1, parent + 2, ...). `shape`: (bytes per block, lookahead)."""
        r = bisect_right(self.run_first, parent) - 1
        if r < 0 or self.run_shape[r] != shape:
            return 0
        unit, look = shape
        run = self.run_data[r]
        start = (parent - self.run_first[r] + 1) * unit  # the run's next block
        count = min(count, (len(run) - look - start) // unit)
        if count <= 0:
            return 0  # parent is no run's, or its run's last id
        width = unit + look
        if run[start : start + width] != data[lo : lo + width]:
            return 0  # the first block differs (a chain leaving the run at once, often)
        size = count * unit + look
        if count == 1 or run[start : start + size] == data[lo : lo + size]:
            return count  # all of them (a follow-up walking its parent's run, often)
        mine = np.frombuffer(data, np.uint8, size, lo)
        first = int((mine != np.frombuffer(run, np.uint8, size, start)).argmax())  # they differ
        return (first - look) // unit

    def new_run(self, key: tuple[int, bytes], owner: BlockHashes, lo: int, count: int) -> int:
        """Ids for `count` blocks of `owner`'s bytes from byte `lo` that extend a prefix
        nobody had; `key` is the first block's (parent, bytes). Returns the first id."""
        first = self.next_id
        self.next_id += count
        self.ids[key] = first
        self.run_first.append(first)
        self.run_data.append(owner.data[lo : lo + count * owner.unit + owner.look])
        self.run_shape.append((owner.unit, owner.look))
        return first


class BlockHashes:
    """One request's hash ids, one per hash block (HBS tokens), extended on demand.

    `data` holds the bytes the hashes are made of: int32 token ids, or for hash-id traces int64
    trace block ids. `unit` is the bytes of one hash block and `look` the bytes of the
    lookahead after it. Blocks from index `known` on hold tokens nobody else can produce
    (decode output given only as a count): each gets a fresh id and can match nothing.
    """

    __slots__ = (
        *("interner", "data", "unit", "look", "known", "ids", "root", "_ahead"),
        *("item_bytes", "item_tokens"),
    )

    def __init__(
        self,
        interner: HashInterner,
        data: bytes,
        unit: int,
        look: int,
        known: int,
        root: int,
        item: tuple[int, int] = (4, 1),
    ) -> None:
        self.interner = interner
        self.data = data
        self.unit = unit
        self.look = look
        self.known = known
        self.ids: list[int] = []
        self.root = root  # the parent of block 0
        self._ahead: list[int] | None = None  # every known block's id (interner.ahead)
        # One item of `data`: (bytes, tokens): a token id (4, 1) or a trace block id (8, TB).
        self.item_bytes, self.item_tokens = item

    def extend(self, count: int) -> list[int]:
        """Make sure the first `count` ids exist; returns the id list (shared, do not mutate)."""
        ids = self.ids
        if len(ids) >= count:
            return ids
        interner = self.interner
        if not interner.ahead:
            self._walk(ids, min(count, self.known))
        else:
            if self._ahead is None:
                self._ahead = self._walk([], self.known)
            ids.extend(self._ahead[len(ids) : count])
        if count > len(ids):  # tokens nobody else can produce: fresh ids
            first = interner.next_id
            interner.next_id += count - len(ids)
            ids.extend(range(first, interner.next_id))
        return ids

    def _walk(self, ids: list[int], stop: int) -> list[int]:
        """Append the ids of blocks len(ids)..stop-1 (all known) to `ids`; returns it."""
        interner = self.interner
        data, unit, shape = self.data, self.unit, (self.unit, self.look)
        parent = ids[-1] if ids else self.root
        i = len(ids)
        while i < stop:
            lo = i * unit
            n = i and interner.continuation(parent, data, lo, stop - i, shape)  # a root has none
            if n:  # the next n blocks continue parent's run
                ids.extend(range(parent + 1, parent + 1 + n))
                i += n
                parent += n
                continue
            key = (parent, data[lo : lo + unit + self.look])
            found = interner.ids.get(key)
            if found is None:
                first = interner.new_run(key, self, lo, stop - i)
                ids.extend(range(first, first + stop - i))
                break
            ids.append(found)
            parent = found
            i += 1
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
    item = (4, 1) if req.prompt_token_ids is not None else (8, req.trace_block_size)
    known = (known_tokens - lookahead) // hash_block
    main = BlockHashes(interner, data, unit, look, known, root, item)
    if not look:
        return main, None
    return main, BlockHashes(interner, data, unit, 0, known_tokens // hash_block, root, item)
