"""SGLang's unified radix cache for full_attention + sliding_window + mamba
(reference/hybrid-policies.md 1.3), replayed serially. Units: tokens unless a name says pages.

One tree with three components: FULL (a node's KV, always present in the tree), SWA (swa.py:
`state` = the node's sliding-window KV resident) and MAMBA (`mamba` = a recurrent state after
the node's last token), each with its own pool and LRU order.

- Hit: the deepest matched node where every validator passes: FULL (matched KV), SWA (the
  window validator of swa.py), MAMBA (the node holds a state).
- Write: inserts are SWA inserts (slid-out pages tombstoned, the tail live, tombstones still
  in the window revived) made at the Mamba placement points of `sglang_strategy`
  (placement.py); the insert's end node gets the state ("mamba_exist": an existing one wins);
  an insert that stops short (its tail wholly out of the window) drops the state.
  Window (SWARun's rules, swa.py): a request frees slid-out SWA KV only at a checkpoint of an
  unfinished request and during decode, never while a chunk is computed. After each prefill
  chunk of an unfinished request one checkpoint: its key is the chunk's end (no_buffer) or its
  Mamba track point (extra_buffer; none, no checkpoint); the SWA KV that slid out before the
  key's last token is freed (ceil_P(max(W, P)) and what the tree holds kept), then the key,
  floored to whole pages, is inserted with the state. A request that finishes with its
  prefill is not checkpointed after its last chunk: that chunk's state is handed over at
  release. Branch points: Mamba branching_seqlen = the matched KV floored to the track grid
  (extra_buffer's track rule); no SWA branch point (with a Mamba component SGLang lets Mamba
  choose the insert length). The finished sequence is inserted as in placement.py, its SWA
  freed below what decode freed. extra_buffer: no free reaches the window behind the
  request's last tracked state (the prefill's last track point, in decode the last decode
  track), so the state there keeps a live window (swa_retain_floor).
- Pools: full KV, SWA KV (swa.py), and `num_states` state slots which also hold the running
  request's 1 (no_buffer) or 3 (extra_buffer) slots.
- Eviction, per component LRU: FULL -> the least recent unlocked leaf, deleted with all its
  data; SWA -> an internal node becomes an SWA tombstone and loses its state too (the cascade
  FULL > SWA > MAMBA), a leaf is deleted; MAMBA -> an internal node loses its state only, a leaf
  is deleted. A parent left a leaf stays while it holds its full KV.
- LRU refresh: FULL the matched path, SWA the live nodes within W + page above the hit, MAMBA
  the hit node only; an insert the same from its end, MAMBA the node that got the state.
- Locks: FULL the running request's path, SWA its last W tokens, MAMBA its current node.
"""

from __future__ import annotations

import heapq

from analyzer.sim.common.tree import Node
from analyzer.sim.sglang.placement import (
    RESERVED_SLOTS,
    Geometry,
    branch_point,
    final_depth,
    track_point,
)
from analyzer.sim.sglang.swa import SWARadixCache, SWAReplay, SWARun


class UnifiedRadixCache(SWARadixCache):
    """The SWA radix cache plus a Mamba component: `mamba_states` held by tree nodes out of
    `mamba_slots` (None = unbounded), `reserved` of them by the running request."""

    def __init__(
        self,
        page: int,
        window: int,
        full_tokens: int | None,
        swa_tokens: int | None,
        mamba_slots: int | None,
    ) -> None:
        super().__init__(page, window, full_tokens, swa_tokens)
        self.mamba_slots = mamba_slots
        self.mamba_states = 0
        self.mamba_heap: list[tuple[int, int, Node]] = []

    def usable(self, node: Node) -> bool:
        return node.mamba

    def touch_mamba(self, node: Node) -> None:
        """Mamba-LRU refresh of the one node whose state was used or stored."""
        if node.parent is None or not node.mamba:
            return
        node.mamba_stamp = self.tick()
        heapq.heappush(self.mamba_heap, (node.mamba_stamp, node.uid, node))

    def alloc_mamba(self) -> None:
        """Make room for one more state slot (Mamba-LRU eviction); the pool was sized so an
        unlocked state always exists."""
        cap = self.mamba_slots
        while cap is not None and self.mamba_states + self.reserved + 1 > cap:
            node = self._pop(
                self.mamba_heap,
                lambda e: e[2].alive and e[2].mamba and e[2].mamba_stamp == e[0],
                self.mamba_locked,
            )
            if node is None:
                raise AssertionError("state pool too small for one request")
            if node.children:
                self._drop_mamba(node)
            else:
                self._delete(node)

    def add_mamba(self, node: Node, points: set[int]) -> None:
        """Give `node` the state in a fresh slot (allocated by `alloc_mamba`)."""
        if node.parent is None:
            return
        if not node.mamba:
            node.mamba = True
            self.mamba_states += 1
            points.add(node.pages[-1])
        self.touch_mamba(node)

    def mamba_locked(self, node: Node) -> bool:
        """The running request's state, or a leaf on its path (it cannot be deleted)."""
        return node.state_lock > 0 or (node.lock > 0 and not node.children)

    def _drop_mamba(self, node: Node) -> None:
        node.mamba = False
        self.mamba_states -= 1

    def _tombstone(self, node: Node) -> None:
        super()._tombstone(node)  # SWA KV freed: the state there is useless, it goes too
        if node.mamba:
            self._drop_mamba(node)

    def _free(self, node: Node) -> None:
        super()._free(node)
        if node.mamba:
            self._drop_mamba(node)


class UnifiedReplay(SWAReplay):
    """One replica's unified cache (full_attention + sliding_window + mamba)."""

    def __init__(self, g: Geometry) -> None:
        super().__init__(g.page, g.window, g.budget, g.kv_tokens, g.swa_tokens)
        self.geo = g
        self.cache = UnifiedRadixCache(g.page, g.window, g.kv_tokens, g.swa_tokens, g.num_states)
        self.points: set[int] = set()  # keys of pages that ever ended a node with a state

    def serve(self, keys: list[int], prompt: int, total: int) -> tuple[int, int, int, list, str]:
        """Match, prefill, decode and cache one request: (hit, kept, match pages, prefill
        chunks, error or None)."""
        cache, page = self.cache, self.page
        path, matched = cache.match(keys[: (prompt - 1) // page])
        node = cache.hit_node(path)
        cache.touch_window(node)
        cache.touch_mamba(node)
        kept = self._kept(keys, node.end, matched, self.points)
        run = _Unified(self, keys, node, matched * page)
        chunks = run.prefill(prompt, total)
        error = run.finish(prompt, total) if chunks is not None else run.abort()
        return node.end, kept, matched, chunks or [], error


class _Unified(SWARun):
    """The running request of the unified cache: SWARun's window rules (SWA freed only at
    checkpoints of an unfinished request and in decode) with Mamba's insert lengths, its
    state slots and the depth of its last state (`tracked`). With a Mamba component SGLang
    lets Mamba choose every insert's length (the SWA component's prepare_for_caching_req
    defers to it), so there is no SWA branch point here."""

    def __init__(self, replay: UnifiedReplay, keys: list[int], node: Node, kv_hit: int) -> None:
        super().__init__(replay, keys, node, kv_hit)
        g = replay.geo
        self.branch = None  # no SWA branch point (above)
        self.tracked = node.end * g.page
        self.mamba_branch = branch_point(g, kv_hit, self.tracked)  # Mamba branching_seqlen
        self.last_track: int | None = None
        self.prefill_track: int | None = None  # the prefill's last Mamba track point
        self.prompt = 0
        self.reserve = RESERVED_SLOTS[g.strategy]
        for _ in range(self.reserve):
            self.cache.alloc_mamba()
            self.cache.reserved += 1

    def prefill(self, prompt: int, total: int) -> list[int] | None:
        """Prefill chunks (None when a pool cannot hold the request). After each chunk of an
        unfinished request a checkpoint: the key is the chunk's end (no_buffer) or its Mamba
        track point (extra_buffer; none, nothing); the SWA KV that slid out of the window at
        the key's last token is freed, then the key is inserted with the state. A request
        that finishes with its prefill hands its last chunk's state over at release."""
        g = self.replay.geo
        self.prompt = prompt
        chunks = []
        while self.pos < prompt:
            start = self.pos
            c = min(prompt - start, self.chunk_limit(prompt, total))
            if not self.grow(start + c, release=False):
                return None
            chunks.append(c)
            track = track_point(g, start, c, self.mamba_branch)
            if track is not None:
                self.prefill_track = track
            if self.pos == prompt and total == prompt:
                self.last_track = track
                break
            if track is None:
                continue
            key_len = self.pos if g.strategy == "no_buffer" else track
            self.free(key_len - 1)
            self.cache_state(track, True, self.evicted)
        return chunks

    def retain_floor(self, pre_len: int) -> int | None:
        """extra_buffer: a free never reaches the window behind the request's last tracked
        state (SGLang's swa_retain_floor: mamba_last_track_seqlen - W), the prefill's last
        track point or, in decode, the last decode track at or below `pre_len`."""
        g = self.replay.geo
        if g.strategy != "extra_buffer":
            return None
        track = self.prefill_track
        decode = pre_len - pre_len % g.decode_grid
        if decode > self.prompt:
            track = decode
        return None if track is None else track - self.replay.window

    def cache_state(self, depth: int, state: bool, slid: int | None = None) -> None:
        """Insert up to `depth` tokens (SWA freed below `slid`), with a state there if
        `state` and the insert reaches it."""
        if depth <= self.owned:
            return
        if state:
            self.cache.alloc_mamba()
            self.tracked = depth
        node = self.cache_to(depth, slid)
        if state and node is not None and node.end * self.replay.page == depth:
            self.cache.add_mamba(node, self.replay.points)

    def finish(self, prompt: int, total: int) -> str | None:
        if not self.decode(prompt, total):
            return self.abort()
        self.give_back()  # the live / ping-pong slot is donated to the tree
        tracked = max(self.tracked, self.last_track or 0)
        depth = final_depth(self.replay.geo, prompt, total, tracked)
        self.cache_state(depth, True, self.evicted)
        self.release()
        return None

    def abort(self) -> str:
        self.give_back()
        return super().abort()

    def give_back(self) -> None:
        self.cache.reserved -= self.reserve
        self.reserve = 0
