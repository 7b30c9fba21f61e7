"""Every pool capacity from one pass: stack distances over block accesses (Mattson), pure.

For one cache (one partition, requests in arrival order) under an LRU, full-attention-only
policy (groups [full_attention], no speculative decoding, no token budget, serial replay),
`capacity_curve` computes per request the hit tokens for *every* capacity at once.

vLLM's pool is not a plain LRU over block hashes, so the distance is not the textbook one.
What the serial replay does (analyzer/sim/vllm), with C = num_blocks - 1 usable blocks:

- At admission nothing is pinned (the previous request freed everything). The hit blocks are
  touched (taken out of the free queue), then the request takes its m = cdiv(F, B) blocks
  (F = prompt + max(outputs, 1) - 1 computed tokens) from the queue's head: empty blocks
  first, then hashed ones oldest first. Nothing is freed before the request ends, so of the
  K cached blocks not hit by the request the min(K, C - m) most recent survive it.
- At the end the request frees its blocks tail first: its F // B full (hashed) blocks go to
  the LRU tail with block 0 the most recent; a partial last block (u = m - F // B, 0 or 1)
  carries no hash and goes to the head (free space, not content).

So, with "touches" = the hashed blocks of each finished request in the order they are freed,
a block k last touched at t survives a later request r' iff |A ∪ R_r'| < C, where A = keys
touched after t (all still resident whenever k is: LRU) and R_r' = the m blocks r' holds. Since
A after r' = A ∪ hashed(R_r'), this is |A_after(r')| + u_r' < C. The distance of k at a
lookup is therefore

    d = max over requests r' between k's last touch and now of (|A_after(r')| + u_r')

and k is resident at capacity C iff d < C. |A| is a Fenwick count of last-touch positions
(Mattson); the u term adds 1 exactly when the latest request with a partial block came after
k's last touch and no key new to A was touched since (a running minimum of the touches'
previous positions). An ancestor block is always touched after its descendants, so d only
grows along a prompt and the hit (a leading run of resident blocks) is B x #{j < cap : d_j < C}.

Exact under these conditions (else the caller must replay capacity by capacity):
1. every request fits: C >= m for every request (smaller pools fail requests: errors);
2. no duplicate blocks: vLLM does not de-duplicate, so a request recomputing a block that is
   still resident (its full last prompt block, never hittable under the prompt - 1 cap, or an
   output block) holds two copies of one hash, and the stale copy takes a slot. The pass
   records the smallest capacity at which that happens (`exact_below`); at and above it the
   curve is not used.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from analyzer.sim.common.hashing import HashInterner, request_hashes
from analyzer.sim.records import SimRequest, SimResult

INF = np.iinfo(np.int64).max


class _Fenwick:
    """Prefix sums over positions 1..n (point updates, O(log n))."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.tree = [0] * (n + 1)

    def add(self, i: int, delta: int) -> None:
        tree, n = self.tree, self.n
        while i <= n:
            tree[i] += delta
            i += i & -i

    def prefix(self, i: int) -> int:
        tree, total = self.tree, 0
        while i > 0:
            total += tree[i]
            i -= i & -i
        return total


@dataclass(frozen=True)
class CapacityCurve:
    """Hit tokens of each request at every capacity, from one pass.

    `distances[r]`: per hittable block of request r (prefix-max'ed, so non-decreasing) the
    smallest usable capacity C (= num_blocks - 1) minus one at which it hits, INF if never.
    Valid for num_blocks in [min_num_blocks, exact_below) (exact_below None = no upper limit).
    """

    block_size: int
    request_ids: tuple[str, ...]
    prompt_tokens: np.ndarray
    output_steps: np.ndarray  # decode steps after the prefill (max(outputs, 1) - 1)
    distances: tuple[np.ndarray, ...]
    min_num_blocks: int
    exact_below: int | None

    def valid(self, num_blocks: int | None) -> bool:
        """True when the curve equals the replay at this pool size."""
        if num_blocks is None:
            return False
        if num_blocks < self.min_num_blocks:
            return False
        return self.exact_below is None or num_blocks < self.exact_below

    def hit_tokens(self, num_blocks: int) -> np.ndarray:
        """Hit tokens per request with a pool of `num_blocks` (vLLM num_gpu_blocks)."""
        usable = num_blocks - 1
        counts = [int(np.searchsorted(d, usable, side="left")) for d in self.distances]
        return self.block_size * np.asarray(counts, dtype=np.int64)

    def saturation(self) -> int:
        """The smallest num_blocks from which nothing more hits (the curve is flat)."""
        finite = [int(d[d < INF].max()) for d in self.distances if len(d) and (d < INF).any()]
        return max(max(finite, default=0) + 2, self.min_num_blocks)

    def results(self, num_blocks: int) -> list[SimResult]:
        """SimResults as the vLLM replay gives them (full attention only: no sparse loss)."""
        hits = self.hit_tokens(num_blocks)
        out = []
        for rid, prompt, steps, hit in zip(
            self.request_ids, self.prompt_tokens, self.output_steps, hits, strict=True
        ):
            prompt, hit = int(prompt), int(hit)
            chunks = (prompt - hit,) + (1,) * int(steps)
            out.append(SimResult(rid, prompt, hit, 0, 0, 0, hit, hit, 0, chunks, None))
        return out


def capacity_curve(requests: Sequence[SimRequest], block_size: int) -> CapacityCurve:
    """One pass over `requests` (one cache, arrival order) with blocks of `block_size`."""
    B = block_size
    interner = HashInterner()
    plans = []
    total_touches = 0
    max_m = 1
    for sim in requests:
        prompt = sim.num_prompt_tokens
        steps = max(sim.num_output_tokens, 1) - 1
        final = prompt + steps
        source, _ = request_hashes(interner, sim, B, 0)
        full = final // B
        keys = list(source.extend(full)[:full])
        m = -(-final // B)
        plans.append((sim.request_id, prompt, steps, keys, m - full, max(prompt - 1, 0) // B))
        total_touches += full
        max_m = max(max_m, m)

    fen = _Fenwick(total_touches)
    last: dict[int, int] = {}
    T = 0
    star_start = -1  # touches before the latest request with a partial block (-1: none)
    minprev = INF  # min previous-touch position of the touches since that request
    distances = []
    dup_capacity = INF  # smallest usable capacity with a duplicate block
    for _rid, _prompt, _steps, keys, partial, cap_blocks in plans:
        total = fen.prefix(T)
        dist = np.full(len(keys), INF, dtype=np.int64)
        for j, key in enumerate(keys):
            t = last.get(key)
            if t is None:
                continue
            d = total - fen.prefix(t)
            if t <= star_start and minprev > t:
                d += 1
            dist[j] = d
        hittable = np.maximum.accumulate(dist[:cap_blocks]) if cap_blocks else dist[:0]
        distances.append(hittable)
        # Blocks this request computes anew (beyond its hit) that are resident: duplicates.
        for j in range(len(keys)):
            if dist[j] == INF:
                continue
            hit_from = int(np.searchsorted(hittable, dist[j], side="right"))
            if j >= hit_from:
                # resident at every capacity C > dist[j], but recomputed while hit < j + 1
                # blocks; the first capacity where both hold:
                dup_capacity = min(dup_capacity, int(dist[j]) + 1)
        start = T
        for key in reversed(keys):  # freed tail first: block 0 ends up the most recent
            T += 1
            prev = last.get(key, 0)
            if prev:
                fen.add(prev, -1)
            fen.add(T, 1)
            last[key] = T
            if prev < minprev:
                minprev = prev
        if partial:
            star_start = start
            minprev = INF

    return CapacityCurve(
        block_size=B,
        request_ids=tuple(p[0] for p in plans),
        prompt_tokens=np.asarray([p[1] for p in plans], dtype=np.int64),
        output_steps=np.asarray([p[2] for p in plans], dtype=np.int64),
        distances=tuple(distances),
        min_num_blocks=max_m + 1,
        exact_below=None if dup_capacity == INF else dup_capacity + 1,
    )
