"""The hybrid coordinator: one lookup over all groups, and each step's allocate/cache/free.

Lookup (vLLM `HybridKVCacheCoordinator.find_longest_cache_hit`), a fixed point:

    hit = cap (prompt - 1); longest = 0
    repeat:
        cur = hit
        for each group type, full attention first:
            full attention, second pass: cur = min(cur, its first result)   (downward-closed)
            otherwise: cur = that type's longest_hit(hashes, cur)           (only shrinks)
            longest = max(longest, cur)
        stop when cur == hit (or after one pass with exactly two types, full attention first)
        hit = cur
    sparse-retention miss = longest - hit   (attention matched it, a sparse group vetoed it)

Copies of one type (several groups with one spec) are looked up jointly: a block must be
resident in every copy. Units: tokens.
"""

from __future__ import annotations

from operator import itemgetter

from analyzer.config.policy import GROUPS
from analyzer.sim.vllm.block_pool import NULL, BlockPool
from analyzer.sim.vllm.layout import CacheLayout, cdiv
from analyzer.sim.vllm.mamba import MambaManager
from analyzer.sim.vllm.managers import FullAttentionManager, Manager, ReqState
from analyzer.sim.vllm.sliding_window import SlidingWindowManager

_first = itemgetter(0)  # a lookup row's block, for a spec group of one member

FULL, SWA, MAMBA = GROUPS
MANAGERS: dict[str, type[Manager]] = {
    FULL: FullAttentionManager,
    SWA: SlidingWindowManager,
    MAMBA: MambaManager,
}


class Coordinator:
    """All groups of one replay, over one shared pool."""

    def __init__(self, layout: CacheLayout) -> None:
        self.layout = layout
        types = layout.group_types
        sparse = frozenset(g for g, t in enumerate(types) if t != FULL)
        self.pool = BlockPool(layout.num_blocks, len(types), sparse)
        self.managers = [MANAGERS[t](g, self.pool, layout) for g, t in enumerate(types)]
        # Spec groups in lookup order: full attention first, then the others in group order.
        self.spec_groups: list[list[Manager]] = []
        for kind in (FULL, SWA, MAMBA):
            members = [m for m in self.managers if m.kind == kind]
            if members:
                self.spec_groups.append(members)
        for m in self.spec_groups[0]:
            m.use_eagle = layout.eagle_drop  # the drafter shares full-attention group 0
        self.hybrid = layout.hybrid
        # Every group full attention, whole-block hashes, no drafter: `decode` applies.
        self.plain = (
            set(types) == {FULL}
            and not layout.speculative
            and layout.alignment == layout.block_size
        )
        self.bound: ReqState | None = None  # the request the managers hold (concurrent)
        # Copy-on-write endpoints per manager, freed when the step ends (concurrent schedule);
        # None: freed right after the allocation (serial: one request per step).
        self.pending_copies: list[list[int]] | None = None
        self.step_keys: list[set[int]] = []  # the managers' `this_step` sets (concurrent)

    # -- the concurrent schedule ----------------------------------------------------------

    def schedule_concurrently(self) -> None:
        """Several requests per step: track the keys Mamba hashes in a step, and free
        copy-on-write endpoints at the step's end (vLLM `take_kv_cache_block_copies`)."""
        self.pending_copies = [[] for _ in self.managers]
        for m in self.managers:
            if m.kind == MAMBA:
                m.this_step = set()
                self.step_keys.append(m.this_step)
            elif m.kind == FULL:
                m.ever = set()  # every attention key ever hashed: what was scheduled

    def bind(self, req: ReqState) -> None:
        """Let the managers work on `req` (the bound request's tables are kept on it)."""
        bound = self.bound
        if bound is req:
            return
        tables = req.tables
        if len(self.managers) == 1:  # the common single-group model: no list to build
            saved = [self.managers[0].swap(tables[0] if tables else None)]
        else:
            saved = [m.swap(tables[m.gid] if tables else None) for m in self.managers]
        req.tables = None
        if bound is not None:
            bound.tables = saved
        self.bound = req

    def new_step(self) -> None:
        """A step starts (vLLM `new_step_starts`)."""
        for keys in self.step_keys:
            keys.clear()

    def end_step(self) -> None:
        """The step's copies have run: release their endpoints, manager by manager."""
        pending = self.pending_copies
        if any(pending):
            self.pool.free_blocks([b for mine in pending for b in mine])
            for mine in pending:
                mine.clear()

    def deferred(self, req: ReqState, hit_tokens: int) -> bool:
        """Mamba's same-step rule: a hit whose state was hashed in this step (by another
        request) waits for the next step (vLLM returns num_gpu_blocks + 1 blocks needed)."""
        if not hit_tokens:
            return False
        h = req.hashes[hit_tokens // self.layout.hash_block_size - 1]
        groups = self.pool.num_groups
        return any(
            m.this_step is not None and h * groups + m.gid in m.this_step for m in self.managers
        )

    # -- lookup ------------------------------------------------------------------------------

    def _probe(self, members: list[Manager], index=None):
        """probe(hash_id) -> row of blocks (one per member) or None, against `index`."""
        groups = self.pool.num_groups
        if index is None:
            cached = self.pool.cached
            if len(members) == 1:
                gid = members[0].gid

                def probe(h):
                    found = cached.get(h * groups + gid)
                    if found is None:
                        return None
                    return (found if type(found) is int else found[0],)

                return probe
            get, contains = self.pool.get, cached.__contains__
            gids = [m.gid for m in members]
            first = gids[0]

            def probe_all(h):
                key = h * groups
                if not contains(key + first):  # most probes miss in every group
                    return None
                row = tuple([get(key + g) for g in gids])
                return None if None in row else row

            return probe_all
        gids = [m.gid for m in members]
        if len(gids) == 1:
            gid = gids[0]
            return lambda h: (0,) if h * groups + gid in index else None

        def probe_index(h):
            return (0,) * len(gids) if all(h * groups + g in index for g in gids) else None

        return probe_index

    def lookup(self, hashes: list[int], max_len: int, indexes=None, first=None):
        """(hit, longest attention-side match, rows per spec group) for a request.

        `indexes` replaces the hash map per spec group (membership only) for the diagnostic
        re-lookups, and `first` then gives full attention's already known (hit, rows).
        """
        layout = self.layout
        attention, rows = first if first is not None else self._attention_hit(hashes, max_len)
        found = [rows] + [None] * (len(self.spec_groups) - 1)
        hit = max_len
        while True:
            cur = min(hit, attention)  # full attention is downward-closed: looked up once
            for idx in range(1, len(self.spec_groups)):
                members = self.spec_groups[idx]
                probe = self._probe(members, None if indexes is None else indexes[idx])
                cur, found[idx] = members[0].longest_hit(probe, hashes, cur, False, layout)
            shrunk = cur < hit
            hit = cur
            if not shrunk or len(self.spec_groups) == 2:
                break  # fixed point (two types: one pass suffices)
        del found[0][cdiv(hit, layout.block_size) :]
        return hit, attention, found

    def _attention_hit(self, hashes: list[int], max_len: int):
        """Full attention's (hit, rows). Legacy EAGLE matches one unit more (a hash block if
        fine, else a block) and drops it; a single-group model drops within the cap."""
        layout = self.layout
        members = self.spec_groups[0]
        if len(members) == 1 and not layout.eagle_drop and layout.alignment == layout.block_size:
            return self._leading_run(members[0].gid, hashes, max_len)
        limit = max_len
        if layout.eagle_drop and self.hybrid:
            limit = min(max_len + layout.alignment, len(hashes) * layout.hash_block_size)
        return members[0].longest_hit(
            self._probe(members), hashes, limit, layout.eagle_drop, layout
        )

    def _leading_run(self, gid: int, hashes: list[int], max_len: int):
        """`FullAttentionManager.longest_hit` for one group, whole blocks, no drop: the
        blocks are probed in bulk (the first alone: a miss there is common)."""
        B = self.layout.block_size
        s = B // self.layout.hash_block_size
        count = min(max_len // B, len(hashes) // s)
        if count == 0:
            return 0, []
        groups, get = self.pool.num_groups, self.pool.cached.get
        if get(hashes[s - 1] * groups + gid) is None:
            return 0, []
        ids = hashes[s - 1 : count * s : s]
        found = list(map(get, ids if groups == 1 else [h * groups + gid for h in ids]))
        if None in found:
            del found[found.index(None) :]
        if list in set(map(type, found)):  # keys several blocks hold: the oldest one
            return len(found) * B, [(b if type(b) is int else b[0],) for b in found]
        return len(found) * B, list(zip(found))

    def hit_blocks(self, found: list) -> list[list[int]]:
        """Per manager (group id order): its hit blocks, NULL in the rows' gaps."""
        out: list[list[int]] = [[] for _ in self.managers]
        for members, rows in zip(self.spec_groups, found, strict=True):
            rows = rows or ()
            if len(members) == 1 and None not in rows:  # full attention: one block a row
                out[members[0].gid] = list(map(_first, rows))
                continue
            for k, m in enumerate(members):
                out[m.gid] = [NULL if row is None else row[k] for row in rows]
        return out

    # -- one scheduled step -------------------------------------------------------------------

    def start(self) -> None:
        for m in self.managers:
            m.start()

    def step(
        self,
        req: ReqState,
        num_new: int,
        hit_tokens: int = 0,
        hit: list[list[int]] | None = None,
        boundaries: list[int] = (),
        in_flight: int = 0,
    ) -> bool:
        """vLLM `allocate_slots` for `num_new` tokens after `req.computed` (+ a fresh hit).
        `in_flight`: of the computed tokens, those a step in flight still computes (async
        scheduling); what a group no longer reads is released below them only.

        At admission (`hit` given) the whole prompt must fit first (vLLM's default
        `scheduler_reserve_full_isl`). Then: release what the request no longer reads, check
        this step fits (False = it does not; only those releases happened), adopt the hit,
        allocate, cache the full blocks, and free copy-on-write sources once copied.
        """
        layout, managers = self.layout, self.managers
        if hit_tokens and self.pending_copies is not None and self.deferred(req, hit_tokens):
            return False
        computed = req.computed + hit_tokens
        main_tokens = computed + num_new
        slots = main_tokens + layout.alloc_lookahead
        exact = self.pool.bounded and self._may_not_fit(req, slots, hit)
        full = req.num_tokens
        if exact and hit is not None and not self._fits(hit, full, computed, hit_tokens, full):
            return False
        for m in managers:
            m.remove_skipped(computed - in_flight)
        if exact and not self._fits(hit, slots, computed, hit_tokens, main_tokens, False):
            return False
        if hit_tokens:
            for m in managers:
                m.add_hit(hit[m.gid], hit_tokens)
        copies: list[int] = []
        pending = self.pending_copies
        for m in managers:
            m.allocate(slots, main_tokens, copies if pending is None else pending[m.gid])
        self.cache(req, min(main_tokens, req.num_tokens), boundaries)
        if copies:
            self.pool.free_blocks(copies)
        return True

    def admit_loading(
        self, req: ReqState, local: int, ext: int, hit: list[list[int]], reserved: int = 0
    ) -> bool:
        """vLLM's admission of a request whose GPU hit (`local` tokens, blocks `hit` per
        manager) a connector extends by `ext` tokens it loads: the whole sequence must fit,
        and the load's blocks beside the `reserved` ones the prefills in flight still need;
        each group adopts the hit blocks within the window of local + ext (NULL before),
        takes fresh blocks for the rest, and nothing is cached until the load is in
        (`allocate_slots` with `delay_cache_blocks`). False: it does not fit."""
        total, full, B = local + ext, req.num_tokens, self.layout.block_size
        if self.pool.bounded:
            need = sum(
                m.blocks_needed(hit[m.gid], total, total, local, total) for m in self.managers
            )
            if not self._fits(hit, full, total, local, full) or (
                need > self.pool.num_free() - reserved
            ):
                return False
        for m in self.managers:
            skipped = m.skipped_tokens(total) // B
            adopted = hit[m.gid][skipped:]
            self.pool.touch(adopted)
            m.blocks = [NULL] * skipped + list(adopted)
            m.ncached = len(m.blocks)
            m.active = True
        for m in self.managers:
            new = cdiv(total, B) - len(m.blocks)
            if new > 0:
                m.blocks += self.pool.new_blocks(new)
        for m in self.managers:
            m.allocate(total, total, [])
        return True

    def decode(self, req: ReqState) -> bool:
        """`step(req, 1)` for a decode token (sequence = computed + 1) when every group is
        full attention without a drafter (`plain`): allocate the block the token starts,
        hash the block it fills. False = the free queue is too short (nothing done)."""
        managers, B, tokens = self.managers, self.layout.block_size, req.computed + 1
        blocks_after = -(-tokens // B)
        need = 0
        for m in managers:
            if blocks_after > len(m.blocks):
                need += blocks_after - len(m.blocks)
        if need:
            if need > self.pool.num_free():
                return False
            for m in managers:
                if blocks_after > len(m.blocks):
                    m.blocks += self.pool.new_blocks(blocks_after - len(m.blocks))
        known = min(tokens, req.num_tokens)  # async: the token sampled in flight is not
        for m in managers:
            if known // B > m.ncached:  # a block became full (else `cache` does nothing)
                m.cache(req, known, ())
        return True

    def _fits(
        self,
        hit,
        slots: int,
        computed: int,
        hit_tokens: int,
        main_tokens: int,
        admission: bool = True,
    ) -> bool:
        """vLLM's exact check: the blocks every group takes <= the free queue's length."""
        empty: list[int] = []
        need = sum(
            m.blocks_needed(
                hit[m.gid] if hit else empty, slots, computed, hit_tokens, main_tokens, admission
            )
            for m in self.managers
        )
        return need <= self.pool.num_free()

    def _may_not_fit(self, req: ReqState, slots: int, hit: list[list[int]] | None) -> bool:
        """False when the step surely fits: the free queue holds more blocks than any group
        could take (all of its table, +1 copy-on-write, +spec blocks, + the hit pinned)."""
        layout = self.layout
        per_group = (
            cdiv(max(slots, req.num_tokens), layout.block_size) + 2 + (layout.mamba_spec_blocks)
        )
        bound = len(self.managers) * per_group + (sum(map(len, hit)) if hit else 0)
        return bound > len(self.pool.free)

    def cache(self, req: ReqState, num_tokens: int, boundaries: list[int]) -> None:
        """Offer the full blocks up to `num_tokens` to every group's hash map."""
        layout = self.layout
        if not self.hybrid:
            tokens = num_tokens
        elif layout.fine:
            tokens = num_tokens
        else:
            tokens = num_tokens // layout.block_size * layout.block_size
        for m in self.managers:
            count = tokens
            if m.use_eagle and tokens > 0:
                aligned = (
                    num_tokens
                    if layout.fine
                    else (num_tokens // layout.block_size * layout.block_size)
                )
                count = min(num_tokens, aligned + layout.block_size)
            m.cache(req, count, boundaries)

    def release_skipped(self, req: ReqState) -> None:
        """A finished request hands its table to a KV connector: first every group frees
        what the request no longer reads (vLLM `_connector_finished` calls
        `remove_skipped_blocks`), which puts those blocks in the free queue before the rest."""
        for m in self.managers:
            m.remove_skipped(req.computed)

    def free(self) -> None:
        """The request finished: each group frees its blocks, group by group, tail first."""
        for m in self.managers:
            m.free()
        self.bound = None


def replay_boundaries(prompt: int, block: int, eagle_drop: bool) -> list[int]:
    """Positions a later request replaying this prompt resumes at (vLLM `replay_boundaries`).

    Without the legacy EAGLE drop: prompt - 1 (a resend's cap). With it, one block below both
    a resend's landing point and a longer sibling's:  prompt 2176, B 544 -> {1088, 1632}.
    """
    if not eagle_drop:
        return [prompt - 1]
    resend = (prompt - 1) // block * block
    extension = prompt // block * block
    return sorted({max(resend - block, 0), max(extension - block, 0)})
