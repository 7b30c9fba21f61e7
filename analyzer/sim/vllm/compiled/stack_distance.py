"""Every pool capacity from one pass: stack distances over block accesses (Mattson), pure.

For one cache (one partition, requests in arrival order) under an LRU, full-attention-only
policy (groups [full_attention], no speculative decoding, serial replay, any token budget),
`capacity_curve` computes per request the hit tokens for *every* capacity at once.

A token budget (`max_num_batched_tokens`) changes nothing below but the request's `chunks`:
a prefill in several chunks takes the same m blocks from the same queue head, only in several
allocations, and hashing a chunk's blocks moves nothing in the free queue (the request holds
them); so what is cached, evicted and hit is the one-chunk replay's, on every pool that
condition 1 admits (tests/pipeline/test_stack_distance.py compares replays with budgets).

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
from functools import cache

import numpy as np

from analyzer.sim.common.block_hash import HashInterner
from analyzer.sim.common.serial import budget_chunks
from analyzer.sim.records import SimRequest, SimResult
from analyzer.sim.vllm.compiled.compiled_input import StepInput
from analyzer.sim.vllm.reference import failed

INF = np.iinfo(np.int64).max


@dataclass(frozen=True)
class CapacityCurve:
    """Hit tokens of each request at every capacity, from one pass.

    Request r's hittable blocks are `distances[offsets[r] : offsets[r + 1]]`: per block
    (prefix-max'ed, so non-decreasing) the smallest usable capacity C (= num_blocks - 1)
    minus one at which it hits, INF if never. Valid for num_blocks in [min_num_blocks,
    exact_below) (exact_below None = no upper limit).
    """

    block_size: int
    request_ids: tuple[str, ...]
    prompt_tokens: np.ndarray
    output_steps: np.ndarray  # decode steps after the prefill (max(outputs, 1) - 1)
    distances: np.ndarray
    offsets: np.ndarray
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
        """Hit tokens per request with a pool of `num_blocks` (vLLM num_gpu_blocks): the
        blocks of each request's leading run under the capacity."""
        below = np.zeros(len(self.distances) + 1, np.int64)
        np.cumsum(self.distances < num_blocks - 1, out=below[1:])
        return self.block_size * (below[self.offsets[1:]] - below[self.offsets[:-1]])

    def saturation(self) -> int:
        """The smallest num_blocks from which nothing more hits (the curve is flat)."""
        finite = self.distances[self.distances < INF]
        return max(int(finite.max()) + 2 if len(finite) else 2, self.min_num_blocks)

    def results(self, num_blocks: int, budget: int | None = None) -> list[SimResult]:
        """SimResults as the vLLM replay gives them (full attention only: no sparse loss)
        under the policy's `max_num_batched_tokens` `budget` (None: a prompt is one chunk),
        which only splits the prefill into `chunks`: the hits do not depend on it."""
        hits = self.hit_tokens(num_blocks)
        out = []
        for rid, prompt, steps, hit in zip(
            self.request_ids, self.prompt_tokens, self.output_steps, hits, strict=True
        ):
            prompt, hit = int(prompt), int(hit)
            if prompt < 1:  # never admitted, as the replay has it
                out.append(failed(rid, prompt, "empty prompt"))
                continue
            chunks = (prompt - hit,) if budget is None else budget_chunks(hit, (), prompt, budget)
            chunks = tuple(chunks) + (1,) * int(steps)
            out.append(SimResult(rid, prompt, hit, 0, 0, 0, hit, hit, 0, chunks, None))
        return out


def capacity_curve(requests: Sequence[SimRequest], block_size: int) -> CapacityCurve:
    """One pass over `requests` (one cache, arrival order) with blocks of `block_size`.

    Each request's keys are the ids of its first F // B blocks (F = prompt + max(outputs, 1)
    - 1 computed tokens), all interned at once (`compiled_input.StepInput`); the pass over
    them is compiled (`_pass`): 70 M tokens at 16-token blocks in about a second, against
    about 30 s as a Python loop over a dict and a Fenwick tree of Python ints."""
    B = block_size
    requests = list(requests)
    interner = HashInterner()
    prompt, outputs, ids, _, id_offsets = StepInput(interner, B)(requests)
    steps = np.maximum(outputs, 1) - 1
    # An empty prompt is never admitted: it holds and frees no block (and has no ids).
    computed = np.where(prompt >= 1, prompt + steps, 0)
    full = computed // B  # the hashed blocks it frees; its ids hold at least these
    held = -(-computed // B)  # the blocks it holds: + a partial last one
    cap_blocks = np.maximum(prompt - 1, 0) // B
    offsets = np.zeros(len(requests) + 1, np.int64)
    np.cumsum(cap_blocks, out=offsets[1:])
    distances = np.empty(int(offsets[-1]), np.int64)
    dup_capacity = _compiled()(
        ids, id_offsets[:-1], full, held - full, cap_blocks, offsets, interner.next_id, distances
    )
    max_m = int(held.max(initial=1))
    return CapacityCurve(
        block_size=B,
        request_ids=tuple(r.request_id for r in requests),
        prompt_tokens=prompt,
        output_steps=steps,
        distances=distances,
        offsets=offsets,
        min_num_blocks=max_m + 1,
        exact_below=None if dup_capacity == INF else int(dup_capacity) + 1,
    )


# -- the compiled pass (numba) -------------------------------------------------------------------


def _pass(
    keys, starts, counts, partial, cap_blocks, offsets, num_ids, distances
):  # pragma: no cover - compiled
    """The stack-distance pass over every request (module docstring): request r's keys are
    keys[starts[r] :][: counts[r]]; fills `distances` (each request's hittable blocks,
    prefix-max'ed); returns the smallest usable capacity with a duplicate block (INF:
    none). Positions of touches count from 1; a key's last touch is 0 until it has one;
    the Fenwick tree counts the keys' last touches."""
    tree = np.zeros(counts.sum() + 1, np.int64)
    last = np.zeros(num_ids, np.int64)
    dist = np.empty(counts.max() if len(counts) else 0, np.int64)
    T, star_start, minprev, dup = 0, -1, INF, INF
    for r in range(len(counts)):
        a, n = starts[r], counts[r]
        total = _prefix(tree, T)
        for j in range(n):
            t = last[keys[a + j]]
            dist[j] = INF
            if t:
                d = total - _prefix(tree, t)
                if t <= star_start and minprev > t:
                    d += 1
                dist[j] = d
        hittable = distances[offsets[r] : offsets[r + 1]]
        run = -1
        for j in range(cap_blocks[r]):
            run = max(run, dist[j])
            hittable[j] = run
        for j in range(n):  # blocks computed anew (beyond the hit) that are resident
            if dist[j] != INF and j >= np.searchsorted(hittable, dist[j], side="right"):
                dup = min(dup, dist[j] + 1)
        start = T
        for j in range(n - 1, -1, -1):  # freed tail first: block 0 the most recent
            key = keys[a + j]
            T += 1
            prev = last[key]
            if prev:
                _add(tree, prev, -1)
            _add(tree, T, 1)
            last[key] = T
            minprev = min(minprev, prev)
        if partial[r]:
            star_start, minprev = start, INF
    return dup


def _add(tree, i, delta):  # pragma: no cover - compiled
    while i < len(tree):
        tree[i] += delta
        i += i & -i


def _prefix(tree, i):  # pragma: no cover - compiled
    total = 0
    while i > 0:
        total += tree[i]
        i -= i & -i
    return total


@cache
def _compiled():
    global _add, _prefix
    from numba import njit

    jit = njit(cache=True, nogil=True)
    _add, _prefix = jit(_add), jit(_prefix)
    return jit(_pass)
