"""Mamba / GDN / linear-attention groups in vLLM's "align" mode (vLLM `MambaManager`).

Slot p of a Mamba block table holds the recurrent state after exactly (p + 1) * B tokens, and
a state exists only where a prefill chunk ended (the scheduler cuts chunks on block
boundaries). A request keeps just its running state (+ the one before it, + speculative
blocks); older states are released as it moves on, hashed ones stay hittable until evicted.
A hit needs one state block at the boundary, nothing before it. Units: tokens; B = block size.

    prompt 2176, B 544, one chunk to 1632 then 544:
    slots  [NULL][NULL][s1632][s2176]   only s1632 is hashed under retention 0 (replay boundary)
"""

from __future__ import annotations

from analyzer.sim.vllm.block_pool import NULL
from analyzer.sim.vllm.layout import CacheLayout, cdiv
from analyzer.sim.vllm.managers import Manager, ReqState


def checkpoint_position(num_tokens: int, unit: int, drop: bool, lookahead: int) -> int:
    """Last `unit`-aligned boundary whose state a later request can resume from.

    Leaves the last token (recomputed for logits) and the lookahead tokens the boundary's hash
    needs; legacy EAGLE backs off one more unit (vLLM `get_mamba_prefill_checkpoint_position`).

        2176 tokens, unit 544: (2176 - 1) // 544 * 544 = 1632
    """
    limit = num_tokens if drop else num_tokens - max(1, lookahead)
    position = limit // unit * unit - (unit if drop else 0)
    return max(position, 0)


class MambaManager(Manager):
    kind = "mamba"
    sparse = True
    REQUEST_FIELDS = (*Manager.REQUEST_FIELDS, "last_state", "retired", "allocated")

    handoffs: list[tuple[int, int]] | None = None  # set by a host tier (offload.py)

    def start(self) -> None:
        super().start()
        self.last_state: int | None = None  # slot of the state the previous step started from
        self.retired = 0  # slots below this were already released
        self.allocated = False  # vLLM: request in `_allocated_block_reqs`

    def swap(self, saved: tuple | None) -> tuple:
        mine = (
            *(self.blocks, self.ncached, self.active, self.partial_hit),
            *(self.last_state, self.retired, self.allocated),
        )
        if saved is None:
            self.start()
        else:
            self.blocks, self.ncached, self.active, self.partial_hit = saved[:4]
            self.last_state, self.retired, self.allocated = saved[4:]
        return mine

    @staticmethod
    def longest_hit(
        probe, hashes: list[int], max_len: int, drop: bool, layout: CacheLayout
    ) -> tuple[int, list[tuple[int, ...]]]:
        """(hit tokens, rows): the highest retained state at or below `max_len`.

        Right to left, one block suffices; rows before it are NULL. With sub-block hits on,
        every hash boundary is probed (states registered at prompt tails live there).
        """
        B, H = layout.block_size, layout.hash_block_size
        s = B // H
        if layout.alignment < B:
            for f in range(min(max_len // H, len(hashes)) - 1, -1, -1):
                row = probe(hashes[f])
                if row is not None:
                    return (f + 1) * H, [None] * (f // s) + [row]
            return 0, []
        for i in range(min(max_len // B, len(hashes) // s) - 1, -1, -1):
            row = probe(hashes[(i + 1) * s - 1])
            if row is not None:
                return (i + 1) * B, [None] * i + [row]
        return 0, []

    def skipped_tokens(self, computed: int) -> int:
        return computed - 1  # only the state after the last computed token is read

    def blocks_needed(
        self,
        hit: list[int],
        num_tokens: int,
        computed: int,
        hit_tokens: int,
        main_tokens: int,
        admission: bool = False,
    ) -> int:
        # Lookahead (draft) slots are not allocated: drafters have no Mamba layers.
        spec = self.layout.mamba_spec_blocks
        new = cdiv(main_tokens, self.B) + spec - len(hit) - len(self.blocks)
        partial = bool(hit and hit_tokens % self.B) or self.partial_hit is not None
        if partial:
            new = max(new, 0) + 1
        if new > 0:
            # Only the running state (and spec / copy-on-write blocks) is ever allocated.
            new = min(new, 1 + partial + (0 if self.allocated else spec))
        return new + self.pool.evictable(hit)

    def allocate(self, num_tokens: int, main_tokens: int, copies: list[int]) -> None:
        """Allocate the state block(s) for this step, NULL-padding the slots in between.

        B=544, 0 -> 1632: table [NULL][NULL][new]   (states at 544, 1088 never exist)
        """
        spec = self.layout.mamba_spec_blocks
        blocks, pool = self.blocks, self.pool
        required = cdiv(main_tokens, self.B) + spec
        partial = self.partial_hit
        if required <= len(blocks) and partial is None:
            self.allocated = True
            return
        prev = len(blocks)
        if self.allocated:
            self.last_state = prev - 1 - spec
        elif prev > 0:
            self.last_state = prev - 1  # a hit: its last block holds the hit state
        skipped = required - spec - 1
        if prev < skipped:
            blocks += [NULL] * (skipped - prev)
        if self.allocated:
            for slot in range(prev - spec, prev):  # move spec blocks up to the new tail
                if slot >= skipped:
                    break
                blocks.append(blocks[slot])
                blocks[slot] = NULL
        new = max(required - len(blocks), 0) + (partial is not None)
        fresh = pool.new_blocks(new)
        if partial is not None:
            self._copy_on_write(partial, fresh.pop(0), copies)
        blocks += fresh
        self.allocated = True
        self.partial_hit = None

    def _copy_on_write(self, partial: tuple[int, int], cow: int, copies: list[int]) -> None:
        """A state entered mid-block gets a private copy (the running state overwrites it)."""
        slot, source = partial
        pool = self.pool
        if self.allocated:
            # Our own prompt-tail state: the cache entry moves to the copy.
            pool.move_hashes(source, cow)
            if self.this_step is not None and pool.primary[cow] != -1:
                self.this_step.add(pool.primary[cow])  # filled only by this step's copy
            if pool.bounded:
                pool.ref[source] += 1
        else:
            # A hit inside a block: the request continues from the copy.
            self.blocks[slot] = cow
            if pool.bounded:
                pool.ref[cow] += 1
        copies += (source, cow)  # both stay held until the copy has run (end of step)

    def remove_skipped(self, computed: int) -> None:
        """Release states the request has moved past (and the one it started this step from)."""
        blocks, pool = self.blocks, self.pool
        skipped = computed - 1
        if skipped > 0:
            first = self.retired
            last = min(skipped // self.B, len(blocks))
            if first < last:
                freed = []
                for i in range(last - 1, first - 1, -1):
                    if blocks[i] != NULL:
                        freed.append(blocks[i])
                        blocks[i] = NULL
                if freed:
                    pool.free_blocks(freed)
                self.retired = last
        slot = self.last_state
        if slot is not None and slot < cdiv(computed, self.B) - 1 and blocks[slot] != NULL:
            pool.free_blocks([blocks[slot]])
            blocks[slot] = NULL

    def mask(self, start: int, end: int, boundaries: list[int]) -> list[bool] | None:
        """States to hash among slots [start, end): all (retention None), those at multiples
        of the retention interval N, and those at `boundaries` (replay boundary, junction).

            B=544, N=1088: slot i hashed when (i + 1) % 2 == 0 -> states at 1088, 2176, ...
        """
        retention = self.layout.retention_interval
        if retention is None:
            return None
        B, align = self.B, self.layout.alignment
        mask = [False] * (end - start)
        if retention:
            per = retention // B
            if per <= 1:
                return None
            for i in range((start + per) // per * per - 1 - start, len(mask), per):
                mask[i] = True
        for boundary in boundaries:
            slot = boundary // align * align // B - 1
            if start <= slot < end:
                mask[slot - start] = True
        return mask

    def cache(self, req: ReqState, num_tokens: int, boundaries: list[int]) -> None:
        before = self.ncached
        super().cache(req, num_tokens, boundaries)
        if self.handoffs is not None and self.ncached > before:
            self._hand_off(before, self.ncached, boundaries)
        self._cache_prompt_tail(req, num_tokens)

    def _hand_off(self, start: int, end: int, boundaries: list[int]) -> None:
        """The states just hashed, as (group, boundary tokens), for a host tier to store
        (vLLM `MambaManager.cache_blocks`' boundary-state offloads)."""
        mask = self.mask(start, end, boundaries)
        blocks = self.blocks
        for i in range(start, end):
            if blocks[i] != NULL and (mask is None or mask[i - start]):
                self.handoffs.append((self.gid, (i + 1) * self.B))

    def _cache_prompt_tail(self, req: ReqState, num_tokens: int) -> None:
        """Key the running state at the prompt's last hash boundary when a chunk ends there
        inside a block (sub-block hits); the next step moves the entry to a private copy."""
        H, B = self.H, self.B
        if num_tokens <= 0 or num_tokens % H:
            return
        layout = self.layout
        if num_tokens != checkpoint_position(
            req.prompt, H, layout.eagle_drop, layout.hash_lookahead
        ):
            return
        slot = cdiv(num_tokens, B) - 1
        if slot >= len(self.blocks):
            return
        source = self.blocks[slot]
        if source == NULL or (
            self.pool.primary[source] != -1 and self.pool.primary_tokens[source] == num_tokens
        ):
            return
        key = self.cache_partial(req, source, num_tokens)
        if key is not None and num_tokens % B:
            self.partial_hit = (slot, source)
            self.ncached = slot
