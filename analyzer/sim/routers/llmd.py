"""llm-d: the default scheduling profile of the llm-d Router (EPP).

Follows llm-d/llm-d-inference-scheduler (Go module llm-d-router) at commit 520af478
(2026-05-17):
- `pkg/epp/config/loader/defaults.go` loadDefaultConfig: queue-scorer weight 2,
  kv-cache-utilization-scorer 2, prefix-cache-scorer 3, max-score picker, one profile;
- `pkg/epp/scheduling/scheduler_profile.go` runScorerPlugins: total = sum of weight *
  clamp01(score), scorers in that order;
- `.../plugins/scheduling/scorer/queuedepth/queue.go` QueueScorer.Score: min-max over the
  candidates of the waiting count, (max - w) / (max - min); all equal -> 1.0;
- `.../scorer/kvcacheutilization/kvcache_utilization.go`: 1 - KV usage;
- `.../scorer/prefix/plugin.go` Score: match_blocks / total_blocks (0 when total is 0);
- `.../requestcontrol/dataproducer/approximateprefix/{hashing,indexer,plugin}.go`: the
  approximate index (below);
- `.../picker/maxscore/picker.go` Pick: shuffle, stable sort by score: a uniform pick
  among the top scores (here `Ties`);
- `.../filter/prefixcacheaffinity/plugin.go` Filter (optional; not in the default profile).

Approximate prefix index (llmd_prefix "approximate"), as hashPrompt / matchLongestPrefix /
indexer.Add do it:
- the prompt's block hashes: the full blocks, then one hash for a partial tail; none at all
  for a prompt shorter than one block; at most llmd_max_prefix_blocks (256) hashes, and a
  truncated prompt has no tail. hpa uses `Request.blocks` for the full blocks (upstream
  hashes 4 characters per token of the request's text) and a key unique to the request for
  the tail, which hpa cannot see: it counts in the total and takes LRU room, never matches;
- match: walk the hashes; stop at the first one no endpoint holds; every endpoint holding
  a hash gets +1 (an endpoint missing a middle block keeps counting);
- after the pick, the chosen endpoint's LRU touches the hashes in order (the head becomes
  the least recent), evicting the least recent beyond its capacity, then every hash is
  marked held by it. Capacity: llmd_lru_blocks, else the endpoint's KV blocks when its LRU
  is first made (autoTune), else 31,250 (unbounded pool).
Precise (llmd_prefix "precise", llm-d-kv-cache with KV events, absolute normalisation since
llm-d-inference-scheduler #1107): min(1, view.cached_blocks / full blocks).

Affinity filter (llmd_affinity_threshold set): with probability llmd_exploration keep all;
else keep the endpoints whose prefix score reaches the threshold, if any. Its TTFT gate is
skipped: hpa has no latency predictions (upstream also skips it without them).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Sequence
from typing import Any

from analyzer.sim.routers import option
from analyzer.sim.routers.base import FleetView, Request, Router, Ties

DEFAULT_LRU_BLOCKS = 31_250  # defaultLRUCapacityPerServer


def queue_scores(waiting: Sequence[int]) -> list[float]:
    """queue-scorer: min-max normalised waiting counts, shorter queue higher; all equal -> 1."""
    lo, hi = min(waiting), max(waiting)
    if hi == lo:
        return [1.0] * len(waiting)
    return [(hi - w) / (hi - lo) for w in waiting]


def kv_scores(kv_usage: Sequence[float]) -> list[float]:
    """kv-cache-utilization-scorer: 1 - usage."""
    return [1.0 - u for u in kv_usage]


def clamp01(score: float) -> float:
    return 0.0 if score < 0 else 1.0 if score > 1 else score


def prompt_hashes(request: Request, max_blocks: int) -> list[Hashable]:
    """The approximate producer's hash list for `request` (see the module docstring)."""
    size = request.block_size
    if request.prompt_tokens < size:
        return []
    total = min(-(-request.prompt_tokens // size), max_blocks)
    keys: list[Hashable] = list(request.blocks[:total])
    keys += [("tail", request.index, i) for i in range(len(keys), total)]
    return keys


class ApproxPrefixIndex:
    """Per-endpoint LRUs of block hashes and the hash -> endpoints map they feed."""

    def __init__(self) -> None:
        self.holders: dict[Hashable, set[int]] = {}
        self.lrus: dict[int, OrderedDict[Hashable, None]] = {}
        self.capacity: dict[int, int] = {}

    def match(self, hashes: Sequence[Hashable], num_replicas: int) -> list[int]:
        """matchLongestPrefix: per endpoint, the hashes it holds until one nobody holds."""
        counts = [0] * num_replicas
        for h in hashes:
            held = self.holders.get(h)
            if not held:
                break
            for r in held:
                counts[r] += 1
        return counts

    def add(self, hashes: Sequence[Hashable], replica: int, capacity_blocks: int) -> None:
        """indexer.Add: touch every hash in the endpoint's LRU, then mark them held."""
        lru = self.lrus.get(replica)
        if lru is None:
            lru = self.lrus[replica] = OrderedDict()
            self.capacity[replica] = capacity_blocks
        cap = self.capacity[replica]
        for h in hashes:
            if h in lru:
                lru.move_to_end(h)
                continue
            lru[h] = None
            if len(lru) > cap:
                old, _ = lru.popitem(last=False)
                held = self.holders.get(old)
                if held is not None:
                    held.discard(replica)
                    if not held:
                        del self.holders[old]
        for h in hashes:
            self.holders.setdefault(h, set()).add(replica)


class LlmdRouter(Router):
    """llm-d default profile: queue 2, kv-cache-utilization 2, prefix-cache 3, max score."""

    def __init__(self, num_replicas: int, knobs: dict[str, Any], ties: Ties) -> None:
        super().__init__(num_replicas, knobs, ties)
        self.w_queue = float(option(knobs, "llmd_queue_weight"))
        self.w_kv = float(option(knobs, "llmd_kv_weight"))
        self.w_prefix = float(option(knobs, "llmd_prefix_weight"))
        self.precise = option(knobs, "llmd_prefix") == "precise"
        self.max_blocks = int(option(knobs, "llmd_max_prefix_blocks"))
        self.lru_blocks = option(knobs, "llmd_lru_blocks")
        self.affinity = option(knobs, "llmd_affinity_threshold")
        self.exploration = float(option(knobs, "llmd_exploration"))
        self.index = ApproxPrefixIndex()

    def prefix_scores(self, request: Request, view: FleetView) -> tuple[list[float], list]:
        """Each replica's prefix-cache score, and the hashes to record after the pick."""
        n = self.num_replicas
        if self.precise:
            blocks = request.blocks
            if not blocks:
                return [0.0] * n, []
            return [min(1.0, view.cached_blocks(r, blocks) / len(blocks)) for r in range(n)], []
        hashes = prompt_hashes(request, self.max_blocks)
        if not hashes:
            return [0.0] * n, hashes
        counts = self.index.match(hashes, n)
        return [c / len(hashes) for c in counts], hashes

    def _filter(self, candidates: list[int], prefix: list[float]) -> list[int]:
        """prefix-cache-affinity filter (its TTFT gate needs predictions hpa lacks)."""
        threshold = self.affinity
        if threshold is None or threshold <= 0 or len(candidates) <= 1:
            return candidates
        if self.ties.random() < self.exploration:
            return candidates
        sticky = [r for r in candidates if prefix[r] >= threshold]
        return sticky or candidates

    def scores(self, request: Request, view: FleetView) -> tuple[list[int], list[float], list]:
        """The candidates after filtering, their weighted totals, and the hashes to record."""
        prefix, hashes = self.prefix_scores(request, view)
        candidates = self._filter(list(range(self.num_replicas)), prefix)
        loads = [view.load(r) for r in candidates]
        queue = queue_scores([ld.num_waiting for ld in loads])
        kv = kv_scores([ld.kv_usage for ld in loads])
        totals = []
        for i, r in enumerate(candidates):
            total = 0.0
            total += self.w_queue * clamp01(queue[i])
            total += self.w_kv * clamp01(kv[i])
            total += self.w_prefix * clamp01(prefix[r])
            totals.append(total)
        return candidates, totals, hashes

    def route(self, request: Request, view: FleetView) -> int:
        candidates, totals, hashes = self.scores(request, view)
        top = max(totals)
        pick = self.ties.pick([r for r, t in zip(candidates, totals, strict=True) if t == top])
        if hashes:
            self.index.add(hashes, pick, self._capacity_blocks(pick, view))
        return pick

    def _capacity_blocks(self, replica: int, view: FleetView) -> int:
        if self.lru_blocks is not None:
            return int(self.lru_blocks)
        total = view.load(replica).kv_blocks_total
        return int(total) if total else DEFAULT_LRU_BLOCKS


ROUTER = LlmdRouter
