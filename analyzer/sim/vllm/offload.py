"""vLLM 0.33's scheduler-side offloading connector (`OffloadingConnectorScheduler`) over a host
tier (`host_tier.HostTier`): what a request looks up, loads and stores, step by step
(../shared/reference/kv-offload.md sections 2.3 to 2.5). One chunk is one GPU block.

- Lookup, only beyond the block-aligned GPU hit: full-attention groups need every chunk key
  from there on (a prefix run); sliding-window groups a run of the window's chunks ending at
  the hit's end, Mamba groups (window 1) a state exactly there. With a windowed group the end
  is capped at the sequence - 1 (and floored to a chunk with Mamba). A hit adds whole chunks
  or nothing; a key still being stored or loaded by another request defers the request.
- Stores, write-through: in each step, every full chunk the step computes (of the prompt
  alone when `prompt_only`) is offered from the store cursor on, one offer per request; the
  chunks a GPU hit adopted are offered again in the first step (a host hit skips them). An
  offer that finds no slot is dropped and the cursor stays: offered again next step.
  Sliding-window groups offer the blocks their mask keeps; Mamba groups offer the states
  the GPU cache hashes (one offer each, never retried). A store is readable once the step
  after it has run (its completion comes with that step's outputs).
- Keys are pool keys: the chunk's last block hash x groups + group id.
"""

from __future__ import annotations

from analyzer.config.host_tier import NEVER_STORED
from analyzer.sim.vllm.block_pool import NULL
from analyzer.sim.vllm.coordinator import Coordinator
from analyzer.sim.vllm.host_tier import HIT, MISS, PENDING, Access, HostTier, HostTierSpec
from analyzer.sim.vllm.layout import FULL, MAMBA, SWA, CacheLayout, cdiv
from analyzer.sim.vllm.managers import ReqState


class Offload:
    """One request's connector state (vLLM `RequestOffloadState`)."""

    __slots__ = (
        "access",
        "next_chunk",
        "handoffs",
        "loaded_keys",
        "host_hit",
        "wait_steps",
        "wait_s",
        "keys",
        "awaiting",
        "done_s",
        "issued_s",
        "computed_upto",
        "evicted",
        "never_stored",
    )

    def __init__(self, num_groups: int) -> None:
        self.access = Access()
        self.next_chunk = [0] * num_groups  # store cursor per group
        self.handoffs: list[tuple[int, int]] = []  # Mamba states hashed this step
        self.loaded_keys = 0
        self.host_hit = 0  # tokens of the first admission's host hit
        self.wait_steps = 0  # steps spent waiting for loads (every admission's)
        self.wait_s: float | None = None  # their time (None: no load)
        self.keys: list[int] | None = None  # the load in flight, None: none
        # vLLM's WAITING_FOR_REMOTE_KVS: from the load's issue until the waiting pass
        # reaches the request after it landed (a pass that stops before it leaves it so)
        self.awaiting = False
        self.done_s = 0.0  # when it lands
        self.issued_s = 0.0  # when it was issued
        self.computed_upto = [0] * num_groups  # chunks recorded as computed, per group
        self.evicted = 0  # the first admission's host miss (Connector.explain)
        self.never_stored = (0, 0, 0)  # by kind (config.host_tier.NEVER_STORED)

    def figures(self) -> dict:
        """Its SimResult fields."""
        return {
            "host_hit_tokens": self.host_hit,
            "host_wait_steps": self.wait_steps,
            "host_wait_s": self.wait_s,
            "host_evicted_tokens": self.evicted,
            **self.never_stored_figures(),
        }

    def never_stored_figures(self) -> dict:
        """`host_never_stored_tokens` and its kinds."""
        out = {"host_never_stored_tokens": sum(self.never_stored)}
        for kind, tokens in zip(NEVER_STORED, self.never_stored, strict=True):
            out[kind.column] = tokens
        return out


class Connector:
    """The host tier and the connector's rules, for one cache."""

    def __init__(self, layout: CacheLayout, coord: Coordinator, spec: HostTierSpec) -> None:
        self.layout = layout
        self.coord = coord
        self.spec = spec
        self.tier = HostTier(spec)
        self.c = layout.block_size  # tokens per chunk (one block)
        self.s = layout.block_size // layout.hash_block_size  # hashes per chunk
        self.groups = coord.pool.num_groups
        types = layout.group_types
        self.windows = [self._window(t) for t in types]
        full = [(g, None) for g, t in enumerate(types) if t == FULL]
        windowed = sorted(
            ((g, self.windows[g]) for g, t in enumerate(types) if t != FULL),
            key=lambda row: -row[1],
        )
        self.lookup_groups = tuple(full + windowed)
        self.windowed_groups = tuple(windowed)
        self.mamba = MAMBA in types
        self.in_flight: list[list[int]] = []  # the store jobs of the last step
        self.loading: dict[int, int] = {}  # key -> loads reading it (being loaded)
        self.computed: set[int] = set()  # every chunk key a step computed (`explain`)
        self.dropped: set[int] = set()  # keys of offers that found no slot (`explain`)
        self.past_prompt: set[int] = set()  # keys prompt-only kept from an offer (`explain`)
        self.mamba_gids = frozenset(g for g, t in enumerate(types) if t == MAMBA)
        for m in coord.managers:
            if m.kind == MAMBA:
                m.handoffs = []

    def _window(self, kind: str) -> int | None:
        """Chunks a windowed group's hit needs (vLLM `sliding_window_size_in_chunks`)."""
        if kind == MAMBA:
            return 1
        if kind == SWA:
            W, c = self.layout.sliding_window, self.c
            return max(cdiv(W, c), cdiv(W - 1, c))
        return None

    def key(self, req: ReqState, gid: int, chunk: int) -> int:
        """The key of chunk `chunk` (0-based) of group `gid`, its position recorded."""
        return req.hashes[(chunk + 1) * self.s - 1] * self.groups + gid

    def _note(self, off: Offload, key: int, gid: int, chunk: int) -> int:
        off.access.position.setdefault(key, ((chunk + 1) * self.c, gid))
        return key

    # -- lookup --------------------------------------------------------------------------------

    def lookup(self, req: ReqState, local: int, present=None) -> int | None:
        """Tokens the host tier adds to the block-aligned GPU hit `local` (0: none), or None:
        a key it needs is still being stored or loaded (the request waits a step).
        `present(key)` (MISS or HIT) replaces the tier's own keys for the diagnostics
        (`explain`): nothing is then deferred."""
        c = self.c
        num_keys = len(req.hashes) // self.s
        top = req.num_tokens
        if self.windowed_groups:
            top -= 1
            if self.mamba:
                top = top // c * c
        hit, defer, looked_windowed = 0, False, False
        groups = self.lookup_groups
        start = local // c
        while groups:
            todo, groups = groups, ()
            for gid, window in todo:
                top = min(top, num_keys * c)
                if top - local < c:
                    return 0
                end = min(cdiv(top, c), num_keys)
                if window is None:
                    n = self._prefix_run(req, gid, start, end, present)
                else:
                    first = self._load_window(gid, min(top, end * c))
                    n = self._window_run(req, gid, start, end, window, first, present)
                if n == 0:
                    return 0
                if n is None:
                    defer = True
                else:
                    top = min(top, c * (start + n))
                new = top - local
                if new < c:
                    return 0
                if new < hit:
                    if defer:
                        defer, groups = False, self.lookup_groups
                    elif looked_windowed and not groups:
                        groups = self.windowed_groups
                looked_windowed |= window is not None
                hit = new
        if present is None and (defer or self._being_loaded(req, local, hit)):
            return None
        return hit

    def explain(self, req: ReqState, off: Offload, local: int, host_hit: int) -> None:
        """Why the tier gave back no more than `host_hit` beyond `local` (a request's first
        admission), in tokens: `evicted`, what it would have added had no key ever been
        evicted; `never_stored`, what it would further have added had every chunk the
        earlier requests computed been stored, by kind, each lookup adding keys to the one
        before: `no_slot`, had the offers dropped for want of a slot been stored; `decode`,
        had prompt-only not kept the chunks past a prompt from an offer (the chunk holding
        the prompt's end included); `sparse`, had every other computed key been stored (a
        Mamba group's states between its kept boundaries, a window's dropped blocks)."""
        tier, computed = self.tier, self.computed
        dropped, past_prompt = self.dropped, self.past_prompt
        ref, ever = tier.ref, tier.stored_ever

        def stored_ever(key: int) -> int:
            return HIT if key in ref or key in ever else MISS

        def offered(key: int) -> int:  # (every key offered or in the tier was computed)
            return HIT if key in ref or key in ever or key in dropped else MISS

        def offerable(key: int) -> int:
            if key in ref or key in ever or key in dropped:
                return HIT
            return HIT if key in past_prompt and key in computed else MISS

        def any_computed(key: int) -> int:
            return HIT if key in computed or key in ref else MISS

        stored = max(self.lookup(req, local, stored_ever), host_hit)
        off.evicted = stored - host_hit
        no_slot = max(self.lookup(req, local, offered), stored) if dropped else stored
        decode = max(self.lookup(req, local, offerable), no_slot) if past_prompt else no_slot
        every = max(self.lookup(req, local, any_computed), decode)
        off.never_stored = (no_slot - stored, decode - no_slot, every - decode)

    def _prefix_run(
        self, req: ReqState, gid: int, start: int, end: int, present=None
    ) -> int | None:
        lookup, n, defer = present or self.tier.lookup, 0, False
        for chunk in range(start, end):
            found = lookup(self.key(req, gid, chunk))
            if found == MISS:
                break
            n += 1
            defer |= found == PENDING
        return None if defer else n

    def _window_run(
        self,
        req: ReqState,
        gid: int,
        start: int,
        end: int,
        window: int,
        first: int,
        present=None,
    ) -> int | None:
        """The end (in chunks from `start`) of the right-most run of `window` present keys
        (`first` for the first run), scanning from the right; a run from `start` shorter
        than the window when none is found."""
        lookup = present or self.tier.lookup
        run, pending, need = 0, False, first
        for i in range(end - start - 1, -1, -1):
            found = lookup(self.key(req, gid, start + i))
            if found == MISS:
                run, pending, need = 0, False, window
            else:
                run += 1
                pending |= found == PENDING
            if run == need:
                return None if pending else i + need
        return None if pending else run

    def _load_window(self, gid: int, tokens: int) -> int:
        """Chunks a load of a windowed group reads when the hit ends at `tokens`."""
        window = self.windows[gid]
        if self.layout.group_types[gid] == SWA:
            pad = -tokens % self.c
            window = max(window, cdiv(self.layout.sliding_window - 1 + pad, self.c))
        return window

    def _being_loaded(self, req: ReqState, local: int, hit: int) -> bool:
        if not self.loading:
            return False
        c = self.c
        start = local // c
        end = cdiv(local + hit, c)
        for gid, window in self.lookup_groups:
            chunks = range(start, end)
            if window is not None:
                chunks = chunks[-self._load_window(gid, local + hit) :]
            if any(self.key(req, gid, i) in self.loading for i in chunks):
                return True
        return False

    # -- load ----------------------------------------------------------------------------------

    def load(self, req: ReqState, off: Offload, local: int, ext: int) -> list[int]:
        """The keys a load of `ext` tokens after `local` reads, pinned (vLLM
        `update_state_after_alloc`): per group, from its first fresh block to the end. The
        store cursors move past the hit (its chunks are not offered again)."""
        pool, end = self.coord.pool, local + ext
        keys: list[int] = []
        chunks = cdiv(end, self.c)
        for m in self.coord.managers:
            blocks = m.blocks
            first = chunks
            for i in range(cdiv(local, self.c), chunks):
                if blocks[i] != NULL and pool.primary[blocks[i]] == -1:
                    first = i
                    break
            keys += [
                self._note(off, self.key(req, m.gid, i), m.gid, i) for i in range(first, chunks)
            ]
            off.next_chunk[m.gid] = chunks
        self.tier.prepare_load(keys, off.access)
        for key in keys:
            self.loading[key] = self.loading.get(key, 0) + 1
        off.loaded_keys = len(keys)
        return keys

    def loaded(self, keys: list[int]) -> None:
        """A load finished: its keys are idle again."""
        self.tier.complete_load(keys)
        loading = self.loading
        for key in keys:
            loading[key] -= 1
            if not loading[key]:
                del loading[key]

    # -- stores --------------------------------------------------------------------------------

    def take_handoffs(self, off: Offload) -> None:
        """The Mamba states the bound request's last cache call hashed."""
        for m in self.coord.managers:
            if m.kind == MAMBA and m.handoffs:
                off.handoffs += m.handoffs
                m.handoffs.clear()

    def offer_states(self, req: ReqState, off: Offload, jobs: list[list[int]]) -> None:
        """Offer the Mamba states the request hashed (vLLM `_build_aligned_boundary_store_jobs`):
        one offer each, those past the offloadable horizon left out, failures dropped."""
        horizon = self._offloadable(req, req.num_tokens)
        for gid, boundary in off.handoffs:
            if boundary % self.c:
                continue
            chunk = boundary // self.c - 1
            if boundary > horizon:
                if self.spec.prompt_only and boundary <= req.num_tokens:
                    self.past_prompt.add(self.key(req, gid, chunk))
                continue
            key = self._note(off, self.key(req, gid, chunk), gid, chunk)
            stored = self.tier.prepare_store([key], off.access)
            if stored is None:
                self.dropped.add(key)
            elif stored:
                jobs.append(stored)
        off.handoffs.clear()

    def offer_chunks(
        self,
        req: ReqState,
        off: Offload,
        horizon: int,
        boundaries: list[int],
        jobs: list,
        tables: list[list[int]] | None = None,
    ) -> None:
        """Offer the full chunks up to `horizon` tokens from the cursors on (vLLM
        `_build_store_jobs`, one request), from its block `tables` per group (default: the
        bound request's); a failed offer leaves the cursors where they are."""
        offloadable = self._offloadable(req, horizon)
        num_keys = len(req.hashes) // self.s
        self._computed(req, off, min(horizon, req.num_tokens) // self.c, num_keys)
        keys: list[int] = []
        ends = []
        for m in self.coord.managers:
            blocks = m.blocks if tables is None else tables[m.gid]
            end = min(offloadable // self.c, len(blocks), num_keys)
            ends.append(end)
            start = off.next_chunk[m.gid]
            if m.kind == MAMBA or end <= start:
                continue
            mask = m.mask(start, end, boundaries) if m.kind == SWA else None
            for i in range(start, end):
                if blocks[i] == NULL or (mask is not None and not mask[i - start]):
                    continue
                keys.append(self._note(off, self.key(req, m.gid, i), m.gid, i))
        stored = self.tier.prepare_store(keys, off.access) if keys else []
        if stored is None:
            self.dropped.update(keys)
            return
        for gid, end in enumerate(ends):
            off.next_chunk[gid] = max(off.next_chunk[gid], end)
        if stored:
            jobs.append(stored)

    def offers(self, req: ReqState, off: Offload, horizon: int) -> bool:
        """Whether `offer_chunks` up to `horizon` can do anything: a chunk to offer past a
        cursor, or one newly computed to record (most decode steps: neither). Runs for
        every request every step: spelled out."""
        c, num_keys = self.c, len(req.hashes) // self.s
        tokens = horizon if horizon < req.num_tokens else req.num_tokens
        computed = tokens // c
        if min(off.computed_upto) < (computed if computed < num_keys else num_keys):
            return True
        if self.spec.prompt_only and tokens > req.prompt:
            tokens = req.prompt
        offered = tokens // c
        return min(off.next_chunk) < (offered if offered < num_keys else num_keys)

    def _computed(self, req: ReqState, off: Offload, chunks: int, num_keys: int) -> None:
        """Record every group's keys of the request's first `chunks` full chunks as
        computed, stored or not."""
        end = min(chunks, num_keys)
        upto = off.computed_upto
        # prompt-only keeps these from an offer (a Mamba state: `offer_states`)
        past = req.prompt // self.c if self.spec.prompt_only else end
        for gid in range(len(upto)):
            if end > upto[gid]:
                self.computed.update(self.key(req, gid, i) for i in range(upto[gid], end))
                if end > past and gid not in self.mamba_gids:
                    start = max(past, upto[gid])
                    self.past_prompt.update(self.key(req, gid, i) for i in range(start, end))
                upto[gid] = end

    def _offloadable(self, req: ReqState, tokens: int) -> int:
        tokens = min(tokens, req.num_tokens)
        return min(tokens, req.prompt) if self.spec.prompt_only else tokens

    def end_step(self, jobs: list[list[int]]) -> None:
        """A step's outputs came back: the stores planned in the step before it completed;
        this step's are in flight."""
        for keys in self.in_flight:
            self.tier.complete_store(keys)
        self.in_flight = jobs

    def drain(self) -> None:
        """Every store in flight completes (the serial replay waits for them)."""
        self.end_step([])
        self.end_step([])


__all__ = ["HIT", "Connector", "Offload"]
