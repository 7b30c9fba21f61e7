"""SGLang's sliding-window component (full attention + sliding window on the unified cache;
reference/hybrid-policies.md 1.2, 1.3), replayed serially. Units: tokens unless a name says
pages.

A node's `state` means "its sliding-window KV is resident"; without it the node is an SWA
tombstone (full KV kept). Two pools: full KV (`full_tokens`) and SWA KV (`swa_tokens`), each
shared by the tree and the running request.

- Hit (window validator): the deepest node on the matched path such that the path has no
  tombstone, or the live (non-tombstone) run ending at the node is >= W tokens.
- Write (SWARun): a running request frees the SWA KV that slid out of its window only at the
  checkpoint of an unfinished request and during decode (SWARun's docstring); inserting its
  tokens makes what it freed a tombstone and the rest live, and recovers tombstones of the
  tree beyond its own prefix whose tokens it still holds. Where its full-KV match passes its
  hit, its first insert reaching the match's page floor stops there (the SWA branch point).
  WindowRun, the base class, frees as it computes; the all-three cache (unified.py) uses it.
- First chunk: a prompt whose peak SWA reservation can never fit the SWA pool has its first
  chunk cut to the pool less the decode headroom (SGLang's prefill budget; SWARun.chunk_limit).
- New leaf split: a new live leaf longer than one window (W rounded up to whole pages) is cut
  there, the older part its parent (SGLang's _maybe_split_leaf_for_swa_lock), so an SWA
  eviction of that part tombstones it and keeps its full KV.
- Eviction: full side first (least recent unlocked leaf), then the SWA LRU (internal node ->
  tombstone, leaf -> deleted); a parent left childless stays while it holds its full KV, live
  or a tombstone (the unified cache deletes a node only when its full KV goes). The running
  request locks its path; SWA-locked are its path's nodes within W tokens of its current node.
- LRU refresh: a match refreshes the whole matched path (full) and, in the SWA order, the live
  nodes within W + page tokens above the hit node, the node itself the most recent; an insert
  does the same from its end. A split puts the new upper part just behind the lower one.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from analyzer.sim.common.tree import Node
from analyzer.sim.sglang.cache import MambaRadixCache, pages_between


class SWARadixCache(MambaRadixCache):
    """The radix tree with per-node SWA residency; `states` counts live SWA pages."""

    def __init__(
        self, page: int, window: int, full_tokens: int | None, swa_tokens: int | None
    ) -> None:
        super().__init__(page, full_tokens, None, stateful=True)
        self.window = window
        self.swa_tokens = swa_tokens
        self.private_swa = 0
        self.current_end = 0  # tokens: depth of the running request's locked node

    def units(self, node: Node) -> int:
        return len(node.pages)

    def split(self, node: Node, k: int) -> Node:
        upper = self.tree.split(node, k)
        upper.state = node.state  # SWA KV is per token: both halves keep it
        if node.state:
            # SGLang places the new upper part right behind the lower one in the SWA LRU
            # (unified_tree_core._split_node): just older, so it goes first
            upper.state_stamp = node.state_stamp - 0.5
            heapq.heappush(self.state_heap, (upper.state_stamp, upper.uid, upper))
        return upper

    def state_locked(self, node: Node) -> bool:
        if node.lock == 0:
            return False
        return not node.children or node.end * self.page > self.current_end - self.window

    def hit_node(self, path: list[Node]) -> Node:
        """The window validator (see the module docstring)."""
        best, run, seen_tombstone = self.tree.root, 0, False
        for node in path:
            if not node.state:
                run, seen_tombstone = 0, True
                continue
            run += len(node.pages) * self.page
            if (not seen_tombstone or run >= self.window) and self.usable(node):
                best = node
        return best

    def usable(self, node: Node) -> bool:
        """What other components require of a hit node (none here; see unified.py)."""
        return True

    def touch_window(self, node: Node) -> None:
        """SWA-LRU refresh of the live nodes within W + page tokens above `node`."""
        floor = node.end * self.page - self.window - self.page
        nodes = []
        while node.parent is not None and node.end * self.page > floor:
            nodes.append(node)
            node = node.parent
        for node in reversed(nodes):  # the node itself the most recent
            self.touch_state(node)

    def used_swa(self) -> int:
        return self.states * self.page + self.private_swa

    def alloc(self, pos: int, new_pos: int, window_low: int, decode: bool = False) -> bool:
        """Room for the running request to grow from `pos` to `new_pos` tokens, its SWA KV
        below `window_low` freed first (SGLang frees out-of-window SWA before it allocates):
        full side first, each pool evicted for SGLang's demand (`demand`; decode steps as
        `decode_demand`)."""
        if decode:
            return self._grow(pos, new_pos, window_low, self.decode_demand(pos, new_pos))
        return self._grow(pos, new_pos, window_low, self.demand(new_pos - pos))

    def _grow(self, pos: int, new_pos: int, window_low: int, need: int) -> bool:
        self.make_room(need)
        if not self._take(pages_between(pos, new_pos, self.page)):
            return False
        self.private_swa = max(_ceil(pos, self.page) - window_low, 0)
        cap = self.swa_tokens
        while cap is not None and self.used_swa() + need > cap:
            if not self._evict_state():
                break
        new = pages_between(pos, new_pos, self.page)
        if cap is not None and self.used_swa() + new > cap:
            return False
        self.private_swa += new
        return True

    def insert_window(
        self, keys: Sequence[int], owned: int, slid: int, stored: set[int]
    ) -> tuple[Node, int]:
        """Insert the request's `keys` (it owns nothing in the tree past `owned` tokens and
        freed its SWA KV below `slid`); returns (the node it now ends at, its depth)."""
        page = self.page
        path, matched, partial = self.tree.walk(keys)
        if partial is not None:
            path.append(self.split(partial, matched - partial.start))
        for node in path:  # recover tombstones the request still holds in its window
            if node.state or node.start * page < owned or node.end * page <= slid:
                continue
            if node.start * page < slid:
                self.split(node, slid // page - node.start)  # the upper part stays a tombstone
            self._revive(node, stored)
        end = len(keys)
        if matched < end and slid < end * page:
            if slid > matched * page:
                self.tree.insert(keys[: slid // page])  # a tombstone: state False
            leaf = self.tree.insert(keys)[0][-1]
            self._revive(leaf, stored)
            self._cap_leaf(leaf)
        else:
            end = matched
        node = self.tree.root
        if end:
            node = self.tree.walk(keys[:end])[0][-1]
        self.private_tokens -= max(end * page - owned, 0)
        self.touch(node.path())
        self.touch_window(node)
        return node, max(end * page, owned)

    def _cap_leaf(self, leaf: Node) -> None:
        """Split a new live leaf longer than one window (W rounded up to whole pages) so its
        lower part is that window and the older part its parent: an SWA eviction of the
        parent then keeps the parent's full KV (an internal node becomes a tombstone), where
        evicting the whole leaf would delete it (SGLang caps a fresh SWA leaf so that
        locking it pins one window: components/swa.py, _maybe_split_leaf_for_swa_lock)."""
        tail = -(-self.window // self.page)
        if len(leaf.pages) > tail:
            self.split(leaf, len(leaf.pages) - tail)

    def _revive(self, node: Node, stored: set[int]) -> None:
        """Publish `node`'s SWA KV: live, and the most recent in the SWA order (SGLang's
        insert publishes each window it writes, older fragments first)."""
        node.state = True
        self.states += len(node.pages)
        stored.update(node.pages)
        self.touch_state(node)


class SWAReplay:
    """One replica's SWARadixCache, replayed request by request."""

    def __init__(self, page: int, window: int, budget, full_tokens, swa_tokens) -> None:
        self.page = page
        self.window = window
        self.budget = budget
        self.cache = SWARadixCache(page, window, full_tokens, swa_tokens)
        self.stored: set[int] = set()  # keys of pages whose SWA KV was ever in the tree

    def serve(self, keys: list[int], prompt: int, total: int) -> tuple[int, int, int, list, str]:
        """Match, prefill, decode and cache one request: (hit, kept, match pages, prefill
        chunks, error or None)."""
        cache = self.cache
        path, matched = cache.match(keys[: (prompt - 1) // self.page])
        node = cache.hit_node(path)
        cache.touch_window(node)
        kept = self._kept(keys, node.end, matched)
        run = SWARun(self, keys, node, matched * self.page)
        chunks = run.prefill(prompt, total)
        error = run.finish(prompt, total) if chunks is not None else run.abort()
        return node.end, kept, matched, chunks or [], error

    def _kept(self, keys: list[int], hit: int, matched: int, points: set[int] | None = None) -> int:
        """The hit had no SWA KV been evicted: validate with pages ever live (pages); with
        `points`, only at pages whose key is in it (ever held a recurrent state)."""
        best, run, tombstone = hit, 0, False
        for i in range(matched):
            if keys[i] in self.stored:
                run += 1
                ok = not tombstone or run * self.page >= self.window
                if i + 1 > hit and ok and (points is None or keys[i] in points):
                    best = i + 1
            else:
                run, tombstone = 0, True
        return best


class WindowRun:
    """The running request: its locked node, the depth the tree owns, its position."""

    def __init__(self, replay: SWAReplay, keys: list[int], node: Node) -> None:
        self.replay = replay
        self.cache = replay.cache
        self.keys = keys
        self.node = node
        self.owned = self.pos = node.end * replay.page
        self.cache.lock(node, +1)
        self.cache.current_end = self.owned

    def slid(self, pos: int) -> int:
        """Tokens below this are whole pages out of the window at position `pos`."""
        low = max(0, pos - self.replay.window)
        return low - low % self.replay.page

    def grow(self, new_pos: int, release: bool = True, decode: bool = False) -> bool:
        """Compute up to `new_pos`: KV of every layer for the new tokens, then (`release`)
        free the SWA KV that slid out of the window."""
        if not self.cache.alloc(self.pos, new_pos, self.window_low(), decode):
            return False
        self.pos = new_pos
        if release:
            self.release_slid()
        return True

    def window_low(self) -> int:
        """Where the running request's own SWA KV starts (below it: freed or the tree's)."""
        return max(self.owned, self.slid(self.pos))

    def release_slid(self) -> None:
        """Free the running request's SWA KV that slid out of its window."""
        self.cache.private_swa = _ceil(self.pos, self.replay.page) - max(
            self.owned, self.slid(self.pos)
        )

    def cache_to(self, depth: int, slid: int | None = None) -> Node | None:
        """Insert the sequence up to `depth` tokens (cache_(un)finished_req), its SWA KV
        freed below `slid` (default: what slid out at the current position); returns the
        node the request now ends at, None when nothing was inserted."""
        if depth <= self.owned:
            return None
        cache = self.cache
        page = self.replay.page
        slid = self.slid(self.pos) if slid is None else slid
        node, self.owned = cache.insert_window(
            self.keys[: depth // page], self.owned, slid, self.replay.stored
        )
        cache.lock(node, +1)
        cache.lock(self.node, -1)
        self.node = node
        cache.current_end = self.owned
        self.release_slid()
        return node

    def prefill(self, prompt: int) -> list[int] | None:
        """Prefill chunks (None when a pool cannot hold the request), caching each one."""
        chunks = []
        page = self.replay.page
        while self.pos < prompt:
            c = min(prompt - self.pos, self.replay.budget or prompt)
            if not self.grow(self.pos + c):
                return None
            chunks.append(c)
            self.cache_to(self.pos - self.pos % page)
        return chunks

    def finish(self, prompt: int, total: int) -> str | None:
        if not self.grow(total, decode=True):
            return self.abort()
        self.cache_to(total - total % self.replay.page)
        self.release()
        return None

    def abort(self) -> str:
        self.release()
        return f"SWA pool of {self.cache.swa_tokens} tokens too small for this request"

    def release(self) -> None:
        cache = self.cache
        cache.private_tokens = cache.private_swa = 0
        cache.lock(self.node, -1)
        cache.current_end = 0


# SGLang's estimate of a request's decode tokens is clipped here (CLIP_MAX_NEW_TOKENS)
CLIP_MAX_NEW_TOKENS = 4096

# SGLang frees a decoding request's slid-out SWA KV once this many tokens have slid out
# (SGLANG_SWA_EVICTION_INTERVAL; ScheduleBatch._swa_eviction_trigger)
DECODE_EVICTION_INTERVAL = 128


class SWARun(WindowRun):
    """The running request of FA + SWA on SGLang's unified cache (UnifiedRadixCache with the
    FULL and SWA components). Its SWA KV below `evicted` tokens is freed; it frees only at
    a checkpoint of an unfinished request and during decode, keeping ceil_P(max(W, P))
    tokens (common.free_swa_out_of_window_slots), never while a chunk is computed. The
    SWA branch point: where the full-KV match passes the hit, the first insert that
    reaches its page floor stops there (components/swa.py, prepare_for_caching_req)."""

    def __init__(self, replay: SWAReplay, keys: list[int], node: Node, kv_hit: int) -> None:
        super().__init__(replay, keys, node)
        page = replay.page
        self.evicted = 0  # SGLang starts the cursor at 0, not at the hit
        self.first_pos = self.pos  # where the first prefill chunk starts
        branch = kv_hit - kv_hit % page
        self.branch = branch if branch > self.owned else None
        keep = max(replay.window, page)
        self.keep = -(-keep // page) * page

    def free(self, pre_len: int, interval: int = 1) -> None:
        """Free the SWA KV that slid out of the window at `pre_len` tokens."""
        if pre_len - self.replay.window < self.evicted + interval:
            return
        low = max(self.evicted, self.owned)
        threshold = pre_len - self.keep
        floor = self.retain_floor(pre_len)
        if floor is not None:
            threshold = min(threshold, floor)
        new = max(low, threshold)
        self.evicted = max(low, new - new % self.replay.page)
        self.release_slid()

    def retain_floor(self, pre_len: int) -> int | None:
        """The lowest position a free at `pre_len` may reach besides the window (None: no
        other bound; the all-three cache keeps the window behind its last state)."""
        return None

    def release_slid(self) -> None:
        self.cache.private_swa = _ceil(self.pos, self.replay.page) - max(self.owned, self.evicted)

    def checkpoint(self, key_len: int, finished: bool) -> None:
        """cache_unfinished_req (`finished` False) or cache_finished_req of `key_len` tokens."""
        branch = self.branch
        at_branch = branch is not None and self.owned < branch <= key_len
        if at_branch:
            key_len = branch
        if not finished:  # the key before its page floor: the window ends at its last token
            self.free(key_len - 1)
        self.cache_to(key_len - key_len % self.replay.page, self.evicted)
        if at_branch:
            self.branch = None
            if not finished:
                self.free(self.pos - 1)

    def prefill(self, prompt: int, total: int) -> list[int] | None:
        """Prefill chunks (None when a pool cannot hold the request); a checkpoint after
        each, but the last of a request that finishes with it."""
        chunks = []
        while self.pos < prompt:
            c = min(prompt - self.pos, self.chunk_limit(prompt, total))
            if not self.grow(self.pos + c, release=False):
                return None
            chunks.append(c)
            if self.pos < prompt or total > prompt:
                self.checkpoint(self.pos, finished=False)
        return chunks

    def finish(self, prompt: int, total: int) -> str | None:
        """Decode to `total`, then cache the finished sequence."""
        if not self.decode(prompt, total):
            return self.abort()
        self.checkpoint(total, finished=True)
        self.release()
        return None

    def window_low(self) -> int:
        return max(self.owned, self.evicted)

    def chunk_limit(self, prompt: int, total: int) -> int:
        """The next prefill chunk's limit: the budget, and for the first chunk SGLang's SWA
        prefill budget (prefill_budget.py, SWAPrefillBudget.check_prefill): when the
        request's peak SWA reservation (the extend past one window, plus a window, plus a
        page) can never fit the SWA pool, its chunk is cut to what the pool holds less the
        decode headroom (a window at most, plus a page). Serially nothing else holds SWA
        when a request is admitted, so the whole pool is its room."""
        budget = self.replay.budget or prompt
        pool = self.cache.swa_tokens
        if pool is None or self.pos > self.first_pos:
            return budget
        page, window = self.replay.page, self.replay.window
        extend = _ceil(prompt - self.pos, page)
        max_new = min(total - prompt + 1, CLIP_MAX_NEW_TOKENS)
        needed = max(min(extend, budget) - window, 0) + min(extend + max_new, window) + page
        if needed < pool:
            return budget
        room = pool - min(max_new, window) - page
        room -= room % page
        return min(budget, room) if room > 0 else budget

    def decode(self, prompt: int, total: int) -> bool:
        """Decode steps to `total` (from the second step on, SWA freed once
        DECODE_EVICTION_INTERVAL tokens more have slid out, before the step allocates);
        False when a pool cannot hold them. Steps between two frees allocate at once (the
        same evictions as step by step: nothing is refreshed in between)."""
        window = self.replay.window
        first = prompt + 1  # the second step computes this position
        pos = self.pos
        while pos < total:
            due = max(pos, first, self.evicted + DECODE_EVICTION_INTERVAL + window)
            if due == pos:
                self.free(pos)
                due = max(pos + 1, self.evicted + DECODE_EVICTION_INTERVAL + window)
            end = min(due, total)
            if not self.grow(end, release=False, decode=True):
                return False
            pos = end
        return True


def _ceil(tokens: int, page: int) -> int:
    """`tokens` rounded up to whole pages."""
    return -(-tokens // page) * page
