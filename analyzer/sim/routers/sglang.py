"""sglang: SGLang router's `cache_aware` policy with the CLI's defaults.

Follows sgl-project/sglang `sgl-router/src/policies/cache_aware.rs`
CacheAwarePolicy::select_worker (commit 026f853b) and `sgl-router/src/policies/tree.rs`
Tree::{insert, prefix_match, get_smallest_tenant, evict_tenant_by_size} (commit 4d40eec0);
defaults from `sgl-router/py_src/sglang_router/router_args.py` (cache_threshold 0.3,
balance_abs_threshold 64, balance_rel_threshold 1.5, eviction_interval 120 s,
max_tree_size 2**26).

    load[w]     = requests in flight from this router to w (route +1, on_finished -1)
    imbalanced  = max - min > balance_abs  and  max > min * balance_rel
    imbalanced -> the least-loaded worker (first on ties); the tree still records it
    else        -> (matched, tenant) = tree.prefix_match(prompt)
                   match_rate = matched / prompt length
                   match_rate > cache_threshold -> tenant, else tree.get_smallest_tenant()
    then tree.insert(prompt, chosen)

The tree is one radix tree shared by all workers (tenants), each node holding its text and a
last-access time per tenant; a tenant's size is the text of the nodes it holds (every worker
is a tenant from the start, size 0: init_workers inserts ""). prefix_match descends as far
as any tenant's text matches (a partial edge counts), takes a tenant of the deepest node
reached and refreshes that tenant's times up to the root. Every eviction interval a
background thread removes, per tenant over max_tree_size, its least recently used leaves
(whole nodes) until it fits.

hpa's model:
- the unit is the block: the tree's text is `Request.blocks` (one unit per full block)
  where upstream counts characters of the request text; sizes and max_tree_size are blocks;
- "the first tenant in the node's map" (a DashMap: an order fixed by hashing, not by the
  request) becomes the lowest replica index among the node's tenants, and a smallest-tenant
  tie goes to the lowest index too (deterministic equivalents, no randomness);
- access times are a counter that grows with every insert or match (one value per call, as
  upstream's one millisecond timestamp per call); eviction pops the oldest first, ties in
  the order the leaves were queued;
- the match rate and the relative balance test are computed in f32, as upstream's
  CacheAwareConfig (f32 thresholds) compares them;
- the eviction thread becomes a check at each route: for every multiple of the interval
  since the first request's arrival passed by this arrival (simulated time), evict once.
"""

from __future__ import annotations

import heapq
from typing import Any

import numpy as np

from analyzer.sim.common.tree import cut_links
from analyzer.sim.routers import option
from analyzer.sim.routers.base import FleetView, Request, Router, Ties


class Node:
    """A radix-tree node: an edge of units, children by first unit, tenants' access times."""

    __slots__ = ("children", "text", "tenants", "parent")

    def __init__(self, text: tuple, parent: Node | None, tenants: dict[int, int]) -> None:
        self.children: dict[Any, Node] = {}
        self.text = text
        self.tenants = tenants
        self.parent = parent


def _shared(a: tuple, b: tuple, start: int) -> int:
    """Length of the common prefix of `a` and `b[start:]`."""
    n = min(len(a), len(b) - start)
    if n == len(a) and b[start : start + n] == a:
        return n
    i = 0
    while i < n and a[i] == b[start + i]:
        i += 1
    return i


class Tree:
    """tree.rs's multi-tenant approximate radix tree, over tuples of units."""

    def __init__(self) -> None:
        self.root = Node((), None, {})
        self.size: dict[int, int] = {}  # tenant -> units held (tenant_char_count)
        self.clock = 0

    def __del__(self) -> None:
        cut_links(self.root)  # each node goes with its last reference, not at a GC pass

    def _tick(self) -> int:
        self.clock += 1
        return self.clock

    def _attach(self, node: Node, tenant: int, stamp: int) -> None:
        if tenant not in node.tenants:
            self.size[tenant] = self.size.get(tenant, 0) + len(node.text)
        node.tenants[tenant] = stamp

    def insert(self, text: tuple, tenant: int) -> None:
        stamp = self._tick()
        self.root.tenants[tenant] = stamp
        self.size.setdefault(tenant, 0)
        node, i = self.root, 0
        while i < len(text):
            child = node.children.get(text[i])
            if child is None:
                leaf = Node(text[i:], node, {})
                node.children[text[i]] = leaf
                self._attach(leaf, tenant, stamp)
                return
            shared = _shared(child.text, text, i)
            if shared < len(child.text):
                # split: node -> head (the shared part) -> child (the rest)
                head = Node(child.text[:shared], node, dict(child.tenants))
                node.children[text[i]] = head
                child.text = child.text[shared:]
                child.parent = head
                head.children[child.text[0]] = child
                child = head
            self._attach(child, tenant, stamp)
            node, i = child, i + shared

    def prefix_match(self, text: tuple) -> tuple[int, int | None]:
        """(units matched, the tenant of the deepest node reached), refreshing its times."""
        node, i = self.root, 0
        while i < len(text):
            child = node.children.get(text[i])
            if child is None:
                break
            shared = _shared(child.text, text, i)
            i += shared
            node = child
            if shared < len(child.text):
                break
        tenant = min(node.tenants) if node.tenants else None
        if tenant is not None:
            stamp = self._tick()
            walk: Node | None = node
            while walk is not None:
                walk.tenants[tenant] = stamp
                walk = walk.parent
        return i, tenant

    def smallest_tenant(self) -> int | None:
        if not self.size:
            return None
        return min(self.size, key=lambda t: (self.size[t], t))

    def _leaf_tenants(self, node: Node) -> list[int]:
        below = set()
        for child in node.children.values():
            below.update(child.tenants)
        return [t for t in node.tenants if t not in below]

    def evict(self, max_size: int) -> None:
        """evict_tenant_by_size: drop each oversized tenant's least recently used leaves."""
        heap: list[tuple[int, int, int, Node]] = []
        seq = 0
        stack = [self.root]
        while stack:
            node = stack.pop()
            stack.extend(node.children.values())
            for t in self._leaf_tenants(node):
                heap.append((node.tenants[t], seq, t, node))
                seq += 1
        heapq.heapify(heap)
        while heap:
            _, _, tenant, node = heapq.heappop(heap)
            if self.size.get(tenant, 0) <= max_size:
                continue
            if tenant in node.tenants:
                self.size[tenant] = max(0, self.size[tenant] - len(node.text))
                del node.tenants[tenant]
            parent = node.parent
            if parent is None:
                continue
            if not node.children and not node.tenants and node.text:
                parent.children.pop(node.text[0], None)
            if tenant in parent.tenants and tenant in self._leaf_tenants(parent):
                heapq.heappush(heap, (parent.tenants[tenant], seq, tenant, parent))
                seq += 1


class SglangRouter(Router):
    """cache_aware: approximate-tree affinity while balanced, shortest queue otherwise."""

    def __init__(self, num_replicas: int, knobs: dict[str, Any], ties: Ties) -> None:
        super().__init__(num_replicas, knobs, ties)
        self.cache_threshold = float(option(knobs, "sglang_router_cache_threshold"))
        self.balance_abs = int(option(knobs, "sglang_router_balance_abs"))
        self.balance_rel = float(option(knobs, "sglang_router_balance_rel"))
        self.eviction_interval_s = float(option(knobs, "sglang_router_eviction_interval_s"))
        self.max_tree_size = int(option(knobs, "sglang_router_max_tree_size"))
        self.threshold_f32 = np.float32(self.cache_threshold)  # CacheAwareConfig holds f32s
        self.rel_f32 = np.float32(self.balance_rel)
        self.load = [0] * num_replicas
        self.tree = Tree()
        for w in range(num_replicas):
            self.tree.insert((), w)  # init_workers
        self.next_eviction_s: float | None = None

    def _maybe_evict(self, now_s: float) -> None:
        if self.eviction_interval_s <= 0:
            return
        if self.next_eviction_s is None:
            self.next_eviction_s = now_s + self.eviction_interval_s
            return
        if now_s >= self.next_eviction_s:
            self.tree.evict(self.max_tree_size)
            passed = (now_s - self.next_eviction_s) // self.eviction_interval_s + 1
            self.next_eviction_s += passed * self.eviction_interval_s

    def imbalanced(self) -> bool:
        """Both thresholds crossed; the relative one in f32, as upstream compares it."""
        hi, lo = max(self.load), min(self.load)
        return hi - lo > self.balance_abs and np.float32(hi) > np.float32(lo) * self.rel_f32

    def route(self, request: Request, view: FleetView) -> int:
        self._maybe_evict(request.arrival_s)
        text = tuple(request.blocks)
        if self.imbalanced():
            pick = self.load.index(min(self.load))
        else:
            matched, tenant = self.tree.prefix_match(text)
            rate = np.float32(matched) / np.float32(len(text)) if text else np.float32(0)
            hit = rate > self.threshold_f32
            pick = tenant if hit else self.tree.smallest_tenant()
            if pick is None:
                pick = 0
        self.tree.insert(text, pick)
        self.load[pick] += 1
        return pick

    def on_finished(self, request: Request, replica: int, t_s: float) -> None:
        self.load[replica] -= 1


ROUTER = SglangRouter
