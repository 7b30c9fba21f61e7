"""Per-group cache managers (vLLM `SingleTypeKVCacheManager`): the base and full attention.

One manager instance per KV-cache group. A manager tracks one request at a time, the one
bound to it: its block table `blocks` (block ids; NULL where a slot holds nothing) and
`ncached`, how many leading slots have already been offered to the hash map. A serial replay
binds each request in turn; the concurrent one swaps the bound request's fields
(`REQUEST_FIELDS`, `swap`) whenever it works on another request.

Units: `B` = block size in tokens, `H` = hash block size (match unit) in tokens, `s = B // H`
hashes per block. A block table slot i covers tokens [i*B, (i+1)*B).
"""

from __future__ import annotations

from typing import ClassVar

from analyzer.sim.vllm.block_pool import NULL, BlockPool
from analyzer.sim.vllm.layout import CacheLayout, cdiv


class ReqState:
    """The request in flight, as the managers see it (vLLM `Request`), in tokens.

    `hashes` are the block hashes vLLM has computed so far (one per H tokens; a hash exists once
    its block and its lookahead tokens exist); `plain` the same without lookahead (None when
    there is no lookahead). `junction` is vLLM's `shared_prefix_boundary` (0 = none).
    """

    __slots__ = (
        "prompt",
        "num_tokens",
        "computed",
        "junction",
        "hashes",
        "plain",
        "source",
        "plain_source",
        "tables",
    )

    def __init__(self, prompt: int, source, plain_source) -> None:
        self.prompt = prompt
        self.num_tokens = prompt
        self.computed = 0
        self.junction = 0
        self.source = source
        self.plain_source = plain_source
        self.hashes: list[int] = source.ids
        self.plain: list[int] | None = plain_source.ids if plain_source else None
        self.tables: list[list] | None = None  # per group, while another request is bound


class Manager:
    """Behaviour every group shares (full attention keeps it all as is)."""

    kind: ClassVar[str] = ""
    sparse: ClassVar[bool] = False  # keeps states only at some boundaries (Mamba, SWA)
    REQUEST_FIELDS: ClassVar[tuple[str, ...]] = ("blocks", "ncached", "active", "partial_hit")

    def __init__(self, gid: int, pool: BlockPool, layout: CacheLayout) -> None:
        self.gid = gid
        self.pool = pool
        self.layout = layout
        self.B = layout.block_size
        self.H = layout.hash_block_size
        self.groups = pool.num_groups
        self.use_eagle = False  # set by the coordinator (legacy EAGLE drop groups)
        self.admission_cap: int | None = None  # blocks a recycling group can hold at most
        # Keys ever cached, for sparse groups: tells evicted states from never-kept ones.
        self.ever: set[int] | None = set() if self.sparse else None
        # Keys hashed in the current step (Mamba under the concurrent schedule); None = off.
        self.this_step: set[int] | None = None
        self.start()

    def start(self) -> None:
        """A new request: empty table (vLLM frees and forgets the previous one)."""
        self.blocks: list[int] = []
        self.ncached = 0
        self.active = False  # vLLM: request id in `num_cached_block`
        self.partial_hit: tuple[int, int] | None = None  # (slot, shared source block)

    def swap(self, saved: tuple | None) -> tuple:
        """Unbind the bound request (its REQUEST_FIELDS are returned, in order) and bind
        `saved` (None: a new request with an empty table). Spelled out: it runs at every
        switch between requests."""
        mine = (self.blocks, self.ncached, self.active, self.partial_hit)
        if saved is None:
            self.start()
        else:
            self.blocks, self.ncached, self.active, self.partial_hit = saved
        return mine

    # -- sizes -------------------------------------------------------------------------------

    def skipped_tokens(self, computed: int) -> int:
        """Tokens before the window of the next token (vLLM `get_num_skipped_tokens`)."""
        return 0

    def blocks_needed(
        self,
        hit: list[int],
        num_tokens: int,
        computed: int,
        hit_tokens: int,
        main_tokens: int,
        admission: bool = False,
    ) -> int:
        """New pool blocks this step takes, hit blocks leaving the free queue included.

        `num_tokens` slots must exist after the step (`main_tokens` without draft slots);
        `admission` = vLLM's whole-prompt admission check (caps recycling groups).
        """
        required = cdiv(num_tokens, self.B)
        if admission and self.admission_cap is not None:
            required = min(required, self.admission_cap)
        if self.active:
            return max(required - len(self.blocks), 0)
        skipped = self.skipped_tokens(computed) // self.B
        new = max(required - max(skipped, len(hit) + len(self.blocks)), 0)
        evict = self.pool.evictable(hit[max(0, skipped - len(self.blocks)) :])
        if hit and hit_tokens % self.B:
            new += 1  # the copy-on-write block of a partial hit
        return new + evict

    # -- admission and allocation ------------------------------------------------------------

    def add_hit(self, hit: list[int], hit_tokens: int) -> None:
        """Adopt the lookup's blocks: pin them, NULL-pad the skipped head."""
        skipped = self.skipped_tokens(hit_tokens) // self.B
        if skipped:
            hit = hit[skipped:]
        self.pool.touch(hit)
        self.blocks = [NULL] * skipped + list(hit)
        self.ncached = len(self.blocks)
        self.active = True
        if hit and hit_tokens % self.B:
            # The hit ends inside the last block: it gets a private copy at allocation.
            self.partial_hit = (hit_tokens // self.B, hit[-1])
            self.ncached = hit_tokens // self.B

    def allocate(self, num_tokens: int, main_tokens: int, copies: list[int]) -> None:
        """Grow the table to cover `num_tokens` slots; queue copy-on-write pairs in `copies`."""
        blocks = self.blocks
        if self.partial_hit is not None:
            slot, source = self.partial_hit
            self.partial_hit = None
            cow = self.pool.new_blocks(1)[0]
            blocks[slot] = cow
            if self.pool.bounded:
                self.pool.ref[cow] += 1  # held until the copy has run (end of step)
            copies += (source, cow)
        new = cdiv(num_tokens, self.B) - len(blocks)
        if new > 0:
            blocks += self.pool.new_blocks(new)

    def remove_skipped(self, computed: int) -> None:
        """Free blocks the request no longer reads (vLLM `remove_skipped_blocks`)."""
        skipped = self.skipped_tokens(computed)
        if skipped <= 0:
            return
        blocks = self.blocks
        stop = min(skipped // self.B, len(blocks))
        freed = []
        for i in range(stop - 1, -1, -1):  # newest first; earlier ones were freed already
            if blocks[i] == NULL:
                break
            freed.append(blocks[i])
            blocks[i] = NULL
        if freed:
            self.pool.free_blocks(freed)

    def free(self) -> None:
        """The request finished: release its blocks, tail first (evicted before the head)."""
        if self.pool.bounded and self.blocks:
            self.pool.free_blocks(self.blocks[::-1])  # NULL slots are skipped
        self.start()

    # -- caching -----------------------------------------------------------------------------

    def mask(self, start: int, end: int, boundaries: list[int]) -> list[bool] | None:
        """Which of slots [start, end) may be hashed; None = all (dense)."""
        return None

    def cache(self, req: ReqState, num_tokens: int, boundaries: list[int]) -> None:
        """Hash the newly full blocks up to `num_tokens` (vLLM `cache_blocks`)."""
        hashes = req.hashes
        B, H = self.B, self.H
        full = min(num_tokens, len(hashes) * H) // B
        start = self.ncached
        if start >= full:
            return
        mask = self.mask(start, full, boundaries)
        if B == H and self.groups == 1 and mask is None and req.plain is None:
            self._cache_dense(hashes[start:full], self.blocks[start:full], start * B)
        else:
            self._cache_each(req, start, full, mask)
        self.ncached = full
        self.active = True

    def _cache_dense(self, keys: list[int], blocks: list[int], start_tokens: int) -> None:
        """Key `blocks` (from token `start_tokens` on) with `keys`: one hash a block, one
        group, no mask, no shadow keys (full attention, where most replays spend)."""
        pool, B = self.pool, self.B
        primary, primary_tokens = pool.primary, pool.primary_tokens
        setdefault = pool.cached.setdefault
        pool.version += 1
        tokens = start_tokens
        for block, key in zip(blocks, keys, strict=True):
            tokens += B
            if block == NULL:
                continue
            if primary[block] != -1:
                pool.remove_hashes(block)  # a partial entry promoted to the full block
            if setdefault(key, block) is block:  # pool.insert, inlined: a new key
                primary[block] = key
                primary_tokens[block] = tokens
            else:  # another block holds the key already
                pool.insert(key, block, tokens)
        if self.ever is not None:
            if NULL in blocks:
                keys = [key for key, block in zip(keys, blocks, strict=True) if block != NULL]
            self.ever.update(keys)
            if self.this_step is not None:
                self.this_step.update(keys)

    def _cache_each(self, req: ReqState, start: int, full: int, mask: list[bool] | None) -> None:
        """`cache` for blocks [start, full) in general: sub-block hashes, several groups,
        masked slots (sparse groups), shadow keys."""
        hashes, B, s = req.hashes, self.B, self.B // self.H
        pool, blocks, groups, gid = self.pool, self.blocks, self.groups, self.gid
        ever, this_step, plain = self.ever, self.this_step, req.plain
        primary, cached, primary_tokens = pool.primary, pool.cached, pool.primary_tokens
        pool.version += 1
        if s == 1 and groups == 1:
            keys = hashes[start:full]  # one hash a block, one group: the hash is the key
        else:
            keys = [hashes[(i + 1) * s - 1] * groups + gid for i in range(start, full)]
        for i, block, key in zip(range(start, full), blocks[start:full], keys, strict=True):
            if block == NULL or (mask is not None and not mask[i - start]):
                continue
            if primary[block] != -1:
                pool.remove_hashes(block)  # a partial entry promoted to the full block
            if plain is None and key not in cached:
                # pool.insert, inlined for the common case: a new key on a block without keys
                primary[block] = key
                primary_tokens[block] = (i + 1) * B
                cached[key] = block
            else:
                shadow = -1 if plain is None else self._plain(req, (i + 1) * s - 1)
                pool.insert(key, block, (i + 1) * B, shadow)
            if ever is not None:
                ever.add(key)
                if this_step is not None:
                    this_step.add(key)

    def _plain(self, req: ReqState, index: int) -> int:
        """Plain (no lookahead) shadow key of hash `index`, for attention-only diagnostics."""
        return -1

    def cache_partial(
        self, req: ReqState, block: int, num_tokens: int, replace: bool = False, shadow: int = -1
    ) -> int | None:
        """Key `block` at the sub-block boundary `num_tokens` (vLLM `cache_partial_block`)."""
        if block == NULL:
            return None
        pool = self.pool
        key = req.hashes[num_tokens // self.H - 1] * self.groups + self.gid
        if replace:
            pool.remove_hashes(block)
        elif (
            pool.primary[block] != key
            and not pool.holds(key, block)
            and pool.primary[block] != -1
            and pool.primary_tokens[block] < num_tokens
        ):
            pool.remove_hashes(block)
        pool.insert(key, block, num_tokens, shadow)
        if self.ever is not None:
            self.ever.add(key)
            if self.this_step is not None:
                self.this_step.add(key)
        return key


class FullAttentionManager(Manager):
    """Every block of every computed token is kept (prompt and output), until evicted."""

    kind = "full_attention"

    @staticmethod
    def longest_hit(
        probe, hashes: list[int], max_len: int, drop: bool, layout: CacheLayout
    ) -> tuple[int, list[tuple[int, ...]]]:
        """(hit tokens, hit rows): the leading run of resident blocks.

        `probe(hash_id)` returns a row, the block of each jointly looked-up group, or None. With
        sub-block hits on (`fine`), the first missing block is then probed at its interior hash
        boundaries, highest first. Legacy EAGLE (`drop`) gives back one unit at the end.

            B=4, H=2, resident: [b0][b1] and a partial entry at token 10
            tokens 0    4    8  10   -> run = 8, partial probe inside block 2 -> hit 10
        """
        B, H, align = layout.block_size, layout.hash_block_size, layout.alignment
        s = B // H
        rows = []
        for j in range(min(max_len // B, len(hashes) // s)):
            row = probe(hashes[(j + 1) * s - 1])
            if row is None:
                break
            rows.append(row)
        hit = len(rows) * B
        if align < B:
            first = len(rows) * s
            for f in range(min(first + s - 1, max_len // H, len(hashes)) - 1, first - 1, -1):
                row = probe(hashes[f])
                if row is not None:
                    rows.append(row)
                    hit = (f + 1) * H
                    break
        if drop and hit > 0:
            hit -= min(align, B)
        hit -= hit % align
        del rows[cdiv(hit, B) :]
        return hit, rows

    def cache(self, req: ReqState, num_tokens: int, boundaries: list[int]) -> None:
        super().cache(req, num_tokens, boundaries)
        if self.B != self.H:
            self._cache_prompt_tail(req, num_tokens)

    def _cache_prompt_tail(self, req: ReqState, num_tokens: int) -> None:
        """Register the prompt's last hash boundary when it falls inside a block.

        B=8, H=2, prompt of 13 tokens: limit 12 -> boundary 12, inside slot 1 -> entry
        """
        limit = req.prompt if self.use_eagle else req.prompt - 1
        boundary = min(limit // self.H, len(req.hashes)) * self.H
        if boundary == 0 or boundary > num_tokens or boundary % self.B == 0:
            return
        slot = boundary // self.B
        if slot >= len(self.blocks):
            return
        shadow = -1 if req.plain is None else self._plain(req, boundary // self.H - 1)
        self.cache_partial(req, self.blocks[slot], boundary, shadow=shadow)

    def _plain(self, req: ReqState, index: int) -> int:
        return req.plain_source.extend(index + 1)[index] * self.groups + self.gid
