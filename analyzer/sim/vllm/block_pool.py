"""vLLM's block pool: one free queue that every cache group draws from, plus the hash map.

Blocks are ints; block 0 is vLLM's null block (a placeholder, never allocated, never cached),
so a pool of `num_blocks` (vLLM's num_gpu_blocks) holds num_blocks - 1 usable blocks.

Free-queue order (head = next to reuse): initially ascending ids. Freeing a block whose ref
count drops to 0 puts it at the head if it carries no hash (reused first) and at the tail if it
does (kept as long as possible, LRU). Allocation pops the head; if that block carries hashes they
leave the map right then: that is the eviction.

    head -> [unhashed, newest first] [never used, ascending] [hashed, oldest first] <- tail

A hash key is `hash_id * num_groups + group_id`: each group has its own entries. Several blocks
may carry the same key (vLLM does not de-duplicate); a lookup returns the oldest one.

Without a capacity (`num_blocks=None`) nothing is ever evicted, so the queue and the reference
counts are not kept at all: allocation hands out new ids and free/touch do nothing.
"""

from __future__ import annotations

from collections import OrderedDict
from itertools import islice
from operator import itemgetter

NULL = 0


class BlockPool:
    """Blocks, their hashes and the free queue, with vLLM 0.33's order of operations."""

    def __init__(
        self, num_blocks: int | None, num_groups: int, sparse_groups: frozenset[int] = frozenset()
    ) -> None:
        self.num_groups = num_groups
        self.bounded = num_blocks is not None
        # key -> block, or a list of blocks holding the same key (oldest first).
        self.cached: dict[int, int | list[int]] = {}
        # Bumped at every change to the map (and what lookups read with it: the shadow
        # counts, the sparse removals, the groups' `ever` sets): equal versions, equal lookups.
        self.version = 0
        self.primary: list[int] = [-1]  # block -> its primary key, -1 = none
        self.primary_tokens: list[int] = [0]  # tokens the primary key stands for
        self.extra: dict[int, set[int]] = {}  # block -> further (partial) keys
        # Plain-hash shadow keys of attention blocks (EAGLE lookahead diagnostics).
        self.shadow_of: dict[int, list[int]] = {}
        self.shadow_count: dict[int, int] = {}
        self.sparse_groups = sparse_groups
        self.sparse_removals = 0  # keys of sparse groups ever removed
        # Keys evicted (their block reused), when a replay asks: what the pool would still
        # hold had it never evicted is then what it holds plus these (None: not recorded).
        self.evicted: set[int] | None = None
        # Blocks handed out, where a replay asks (its host tier's connector: the blocks of a
        # step); a set the replay owns and clears, so the pool holds no reference back to it.
        self.handed_out: set[int] | None = None
        if self.bounded:
            self.ref = [0] * num_blocks
            self.primary = [-1] * num_blocks
            self.primary_tokens = [0] * num_blocks
            self.free: OrderedDict[int, None] = OrderedDict.fromkeys(range(1, num_blocks))
        else:
            self.next_block = 1

    # -- the hash map ---------------------------------------------------------------------

    def get(self, key: int) -> int | None:
        """The block a lookup of `key` returns (the oldest holder), or None."""
        found = self.cached.get(key)
        if found is None or type(found) is int:
            return found
        return found[0]

    def holds(self, key: int, block: int) -> bool:
        found = self.cached.get(key)
        return found == block or (type(found) is list and block in found)

    def insert(self, key: int, block: int, num_tokens: int, shadow: int = -1) -> None:
        """Register `key` on `block` (vLLM `_insert_block_hash`): primary if it has none.

        A block carries a key exactly when the map lists it under that key, so the block's
        own keys tell whether it is registered already."""
        primary = self.primary
        first = primary[block]
        if first == key:
            return
        if first == -1:
            primary[block] = key
            self.primary_tokens[block] = num_tokens
        else:
            extra = self.extra.get(block)
            if extra is None:
                self.extra[block] = {key}
            elif key in extra:
                return
            else:
                extra.add(key)
        self.version += 1
        cached = self.cached
        found = cached.get(key)
        if found is None:
            cached[key] = block
        elif type(found) is int:
            cached[key] = [found, block]
        else:
            found.append(block)
        if shadow != -1:
            self.shadow_of.setdefault(block, []).append(shadow)
            self.shadow_count[shadow] = self.shadow_count.get(shadow, 0) + 1

    def remove_hashes(self, block: int) -> bool:
        """Drop every key `block` carries from the map; True if it carried any."""
        key = self.primary[block]
        extra = self.extra.pop(block, None) if self.extra else None
        if key == -1 and not extra:
            return False
        if key != -1:
            self.primary[block] = -1
            self.primary_tokens[block] = 0
            self._unmap(key, block)
        if extra:
            for other in extra:
                self._unmap(other, block)
        if self.shadow_of:
            shadows = self.shadow_of.pop(block, None)
            if shadows:
                counts = self.shadow_count
                for shadow in shadows:
                    counts[shadow] -= 1
                    if not counts[shadow]:
                        del counts[shadow]
        return True

    def _unmap(self, key: int, block: int) -> None:
        """Take `block` out of `key`'s holders (counting sparse groups' removals)."""
        self.version += 1
        cached = self.cached
        found = cached.get(key)
        if found == block:
            del cached[key]
        elif type(found) is list and block in found:
            found.remove(block)
            if len(found) == 1:
                cached[key] = found[0]
        if self.sparse_groups and key % self.num_groups in self.sparse_groups:
            self.sparse_removals += 1

    def move_hashes(self, src: int, dst: int) -> None:
        """Re-point `src`'s entries to the unhashed `dst` (vLLM `move_block_hashes`).

        Only Mamba states move (a prompt-tail state copied before it is overwritten), and
        those carry no plain-hash shadow keys.
        """
        tokens = self.primary_tokens[src]
        keys = [self.primary[src]] if self.primary[src] != -1 else []
        keys += sorted(self.extra.get(src, ()))
        removals = self.sparse_removals
        self.remove_hashes(src)
        self.sparse_removals = removals  # the entries stay live: not an eviction
        for key in keys:
            self.insert(key, dst, tokens)

    # -- allocation and the free queue --------------------------------------------------------

    def num_free(self) -> int | float:
        return len(self.free) if self.bounded else float("inf")

    def new_blocks(self, count: int) -> list[int]:
        """`count` blocks from the head of the free queue, evicting the hashes they carry."""
        if not self.bounded:
            first = self.next_block
            self.next_block += count
            self.primary.extend([-1] * count)
            self.primary_tokens.extend([0] * count)
            if self.handed_out is not None:
                self.handed_out.update(range(first, first + count))
            return list(range(first, first + count))
        if count > len(self.free):
            raise ValueError(f"cannot get {count} free blocks from the pool")
        free, ref, primary, extra = self.free, self.ref, self.primary, self.extra
        out = list(islice(free, count))  # the queue's head, oldest first
        # An eviction of a block with one key and no side entries, inlined (the common one).
        simple = not (extra or self.shadow_of or self.sparse_groups or self.evicted is not None)
        cached, tokens = self.cached, self.primary_tokens
        for block in out:
            del free[block]
            key = primary[block]
            if key == -1:
                if extra and block in extra:
                    if self.evicted is not None:
                        self.evicted.update(extra[block])
                    self.remove_hashes(block)  # the eviction
            elif simple and type(held := cached.pop(key)) is int:
                self.version += 1
                primary[block] = -1  # it was the key's only holder
                tokens[block] = 0
            else:
                if simple:
                    cached[key] = held  # several blocks hold the key
                if self.evicted is not None:
                    self.evicted.add(key)
                    self.evicted.update(extra.get(block, ()))
                self.remove_hashes(block)
            ref[block] = 1
        if self.handed_out is not None:
            self.handed_out.update(out)
        return out

    def touch(self, blocks: list[int]) -> None:
        """A lookup hit: take the blocks out of the free queue (if free) and pin them."""
        if not self.bounded:
            return
        ref, free = self.ref, self.free
        for block in blocks:
            if block == NULL:
                continue
            if ref[block] == 0:
                del free[block]
            ref[block] += 1

    def free_blocks(self, ordered: list[int]) -> None:
        """Release blocks in eviction-priority order (first = evicted first among them)."""
        if not self.bounded:
            return
        ref, primary, extra, free = self.ref, self.primary, self.extra, self.free
        first: list[int] = []  # unhashed: to the head, after the loop (head and tail commute)
        if NULL in ordered:
            ordered = [block for block in ordered if block != NULL]
        for block in ordered:
            count = ref[block] - 1
            ref[block] = count
            if count == 0:
                if primary[block] == -1 and not (extra and block in extra):
                    first.append(block)
                else:
                    free[block] = None  # hashed: to the tail, in order
        for block in reversed(first):
            free[block] = None
            free.move_to_end(block, last=False)

    def evictable(self, blocks: list[int]) -> int:
        """How many of `blocks` sit in the free queue (a hit on them takes a free slot)."""
        if not self.bounded or not blocks:
            return 0
        if len(blocks) == 1:
            return int(blocks[0] != NULL and self.ref[blocks[0]] == 0)
        # The null block's count stays 0 (it is never allocated): take its slots back out.
        return itemgetter(*blocks)(self.ref).count(0) - blocks.count(NULL)
