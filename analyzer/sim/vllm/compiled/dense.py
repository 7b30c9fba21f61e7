"""The serial replay of one full-attention group in a bounded pool, as a compiled loop.

Full attention alone, whole-block hashes (match unit = block size), no drafter and a
capacity limit: what `hpa plan` and `hpa sweep` replay over and over to size a dense model's
pool. The pool (block_pool.py) and the manager (managers.py) then reduce to a few arrays,
and one numba loop replays every request with vLLM 0.33's order of operations, as the
block-level replay (`reference.VllmReplay` with `compiled=False`) does in Python:

    lookup: the leading run of prompt blocks resident (cap prompt - 1), the oldest holder
    admission: the whole prompt must fit (hit blocks leaving the free queue count)
    each chunk: fits?, pin the hit, allocate from the queue's head (evicting), hash full blocks
    decode: a block allocated when a token starts one, hashed when one fills
    free: tail first; hashed blocks to the queue's tail, others to its head

Per block: `ref` (requests holding it; 0 = in the free queue), `key` (the hash id it is
cached under, -1 none), the free queue as a doubly linked list (`prev`/`next`, node
`num_blocks` its sentinel), and `after`: the next block holding the same key (vLLM keeps
duplicates; a lookup takes the oldest). `holder[key]` is a key's oldest holder (-1 none).

`tests/sim/vllm/compiled/test_dense.py` checks it against the Python block-level replay, request by
request, on random traces and pools small enough to evict. Units: tokens, blocks.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from functools import cache

import numpy as np

from analyzer.sim.common.block_hash import HashInterner
from analyzer.sim.records import SimRequest, SimResult
from analyzer.sim.vllm.compiled.compiled_input import StepInput, grown, in_steps
from analyzer.sim.vllm.gates import DENSE
from analyzer.sim.vllm.layout import CacheLayout
from analyzer.sim.vllm.reference import failed

# Requests handed to the compiled loop at once: results come out in these steps, so the
# caller sees progress; the answers never depend on it.
STEP_REQUESTS = 4096
# fail[i]: where request i stopped (`done[i]` says after how many chunks or decode steps)
OK, NOT_ADMITTED, PREFILL, DECODE = 0, 1, 2, 3


def dense_applies(layout: CacheLayout) -> bool:
    """Whether this module replays `layout`: one full-attention group, bounded, whole-block
    hashes, no drafter (`gates.DENSE` names what it models)."""
    return DENSE.admits(layout)


class DenseReplay:
    """One bounded full-attention cache, its state kept between `run` calls' steps."""

    def __init__(self, layout: CacheLayout, interner: HashInterner, not_schedulable: str) -> None:
        n = layout.num_blocks
        self.layout = layout
        self.interner = interner
        self.error = not_schedulable.format(n)
        self.ref = np.zeros(n, np.int64)
        self.key = np.full(n, -1, np.int64)
        self.after = np.full(n, -1, np.int64)
        # the free queue: blocks 1..n-1 in order (block 0 is vLLM's null block, never used)
        self.next = np.append(np.arange(1, n + 1), 1).astype(np.int64)  # n: the sentinel
        self.prev = np.append(np.arange(-1, n - 1), n - 1).astype(np.int64)
        self.next[n - 1], self.prev[1] = n, n
        self.num_free = np.asarray([n - 1], np.int64)
        self.holder = np.full(1024, -1, np.int64)
        self.input = StepInput(interner, layout.block_size)

    def run(self, requests: Iterable[SimRequest]) -> Iterator[SimResult]:
        return in_steps(requests, self._step, STEP_REQUESTS)

    def _step(self, requests: list[SimRequest]) -> list[SimResult]:
        """Replay `requests` (in order) in one call of the compiled loop."""
        layout = self.layout
        n = len(requests)
        prompt, outputs, flat, _, offsets = self.input(requests)
        self.holder = grown(self.holder, self.interner.next_id, -1)
        hit, fail, done = (np.zeros(n, np.int64) for _ in range(3))
        budget = layout.max_num_batched_tokens or 0
        kernel = _compiled()
        kernel(
            flat, offsets, prompt, outputs, layout.block_size, budget,
            *(self.ref, self.key, self.after, self.next, self.prev, self.num_free, self.holder),
            hit, fail, done,
        )  # fmt: skip
        columns = (prompt.tolist(), outputs.tolist(), hit.tolist(), fail.tolist(), done.tolist())
        rows = zip(*columns, strict=True)
        return [self._result(r, *row) for r, row in zip(requests, rows, strict=True)]

    def _result(self, sim: SimRequest, prompt: int, outputs: int, hit: int, fail: int, done: int):
        """The SimResult `reference.VllmReplay` builds, from the loop's answers."""
        if prompt < 1:
            return failed(sim.request_id, prompt, "empty prompt")
        if fail == NOT_ADMITTED:
            return failed(sim.request_id, prompt, self.error)
        budget = self.layout.max_num_batched_tokens
        rest = prompt - hit
        if budget is None or rest <= budget:
            chunks = [rest]
        else:
            chunks = [budget] * (rest // budget) + ([rest % budget] if rest % budget else [])
        error = None
        if fail == PREFILL:
            del chunks[done:]
            error = self.error
        elif fail == DECODE:
            chunks += [1] * done
            error = self.error
        elif outputs > 1:
            chunks += [1] * (outputs - 1)
        return SimResult(sim.request_id, prompt, hit, 0, 0, 0, hit, hit, 0, tuple(chunks), error)


# -- the compiled loop (numba; every function below runs compiled) ------------------------------


def _replay(
    flat, offsets, prompt, outputs, B, budget,
    ref, key, after, nxt, prv, num_free, holder,
    hit_out, fail_out, done_out,
):  # pragma: no cover - compiled  # fmt: skip
    blocks = np.empty(64, np.int64)  # the table of the request in flight
    for i in range(prompt.shape[0]):
        P = prompt[i]
        if P < 1:
            continue
        hashes = flat[offsets[i] : offsets[i + 1]]
        blocks, fail, done, hit = _one(
            hashes, P, outputs[i], B, budget, ref, key, after, nxt, prv, num_free, holder, blocks
        )
        hit_out[i], fail_out[i], done_out[i] = hit, fail, done


def _one(
    hashes, P, outputs, B, budget, ref, key, after, nxt, prv, num_free, holder, blocks
):  # pragma: no cover  # noqa: E501
    """One request, lookup to free: (its table, fail, done, hit)."""
    count = min((P - 1) // B, P // B, hashes.shape[0])
    run = 0
    while run < count and holder[hashes[run]] >= 0:
        run += 1
    hit = run * B
    total = -(-(P + max(outputs, 1)) // B) + 1  # the most blocks the table can hold
    if blocks.shape[0] < total:
        blocks = np.empty(2 * total, np.int64)
    for j in range(run):
        blocks[j] = holder[hashes[j]]
    used = run  # table length so far
    # admission: the whole prompt, and this chunk, must fit (vLLM checks only when the free
    # queue could be short: the same answer either way, so always)
    n = P - hit if budget == 0 else min(P - hit, budget)
    evictable = 0
    for j in range(run):
        if ref[blocks[j]] == 0:
            evictable += 1
    if max(-(-P // B) - run, 0) + evictable > num_free[0]:
        return blocks, 1, 0, 0  # NOT_ADMITTED: nothing touched
    if max(-(-(hit + n) // B) - run, 0) + evictable > num_free[0]:
        return blocks, 1, 0, 0
    for j in range(run):  # pin the hit
        b = blocks[j]
        if ref[b] == 0:
            _unlink(b, nxt, prv, num_free)
        ref[b] += 1
    cached = run
    computed, chunks = hit, 0
    while True:  # prefill chunks (the first one was checked above)
        end = computed + n
        used = _allocate(-(-end // B), used, blocks, ref, key, after, nxt, prv, num_free, holder)
        cached = _cache(hashes, min(end // B, hashes.shape[0]), cached, blocks, key, after, holder)
        computed, chunks = end, chunks + 1
        if computed >= P:
            break
        n = P - computed if budget == 0 else min(P - computed, budget)
        if max(-(-(computed + n) // B) - used, 0) > num_free[0]:
            _free(blocks, used, ref, key, nxt, prv, num_free)
            return blocks, 2, chunks, hit  # PREFILL: stopped after `chunks` chunks
    steps = max(outputs, 1) - 1
    c = P
    while c < P + steps:  # decode: positions where a block starts or fills
        tokens = c + 1
        want = -(-tokens // B)
        if want > used:
            if want - used > num_free[0]:
                _free(blocks, used, ref, key, nxt, prv, num_free)
                return blocks, 3, c - P, hit  # DECODE: after c - P steps
            used = _allocate(want, used, blocks, ref, key, after, nxt, prv, num_free, holder)
        if tokens // B > cached:
            cached = _cache(hashes, min(tokens // B, hashes.shape[0]), cached, blocks, key,
                            after, holder)  # fmt: skip
        c = _next_event(c, B)
    _free(blocks, used, ref, key, nxt, prv, num_free)
    return blocks, 0, 0, hit


def _next_event(c, B):  # pragma: no cover - compiled
    """The next decode position after c where anything can change: a block's last slot
    (it fills) or its first (a block is allocated)."""
    r = c % B
    if r == B - 1:
        return c + 1
    if r == 0 and B > 1:
        return c + B - 1
    return c - r + B - 1 if B > 1 else c + 1


def _allocate(want, used, blocks, ref, key, after, nxt, prv, num_free, holder):  # pragma: no cover  # noqa: E501
    """Grow the table to `want` blocks from the free queue's head, evicting what they hold."""
    sentinel = nxt.shape[0] - 1
    while used < want:
        b = nxt[sentinel]
        _unlink(b, nxt, prv, num_free)
        if key[b] >= 0:
            _unmap(b, key, after, holder)
        ref[b] = 1
        blocks[used] = b
        used += 1
    return used


def _cache(hashes, full, cached, blocks, key, after, holder):  # pragma: no cover - compiled
    """Key blocks [cached, full) with their hashes; a key held already gets one more holder."""
    for j in range(cached, full):
        b, h = blocks[j], hashes[j]
        if key[b] >= 0:
            _unmap(b, key, after, holder)
        key[b] = h
        after[b] = -1
        first = holder[h]
        if first < 0:
            holder[h] = b
        else:
            while after[first] >= 0:
                first = after[first]
            after[first] = b
    return max(cached, full)


def _unmap(b, key, after, holder):  # pragma: no cover - compiled
    """Drop block b from its key's holders (an eviction, or a re-key)."""
    h = key[b]
    first = holder[h]
    if first == b:
        holder[h] = after[b]
    else:
        while after[first] != b:
            first = after[first]
        after[first] = after[b]
    key[b], after[b] = -1, -1


def _free(blocks, used, ref, key, nxt, prv, num_free):  # pragma: no cover - compiled
    """Release the table, tail first: hashed blocks to the queue's tail in that order,
    unhashed ones to its head (the first released ends up first)."""
    sentinel = nxt.shape[0] - 1
    heads = 0
    for j in range(used - 1, -1, -1):
        b = blocks[j]
        ref[b] -= 1
        if ref[b] == 0:
            if key[b] >= 0:
                _link(b, prv[sentinel], nxt, prv, num_free)  # to the tail
            else:  # kept, in order, in the table's slots already released (from its end)
                blocks[used - 1 - heads] = b
                heads += 1
    for k in range(heads - 1, -1, -1):
        _link(blocks[used - 1 - k], sentinel, nxt, prv, num_free)  # to the head


def _unlink(b, nxt, prv, num_free):  # pragma: no cover - compiled
    nxt[prv[b]], prv[nxt[b]] = nxt[b], prv[b]
    num_free[0] -= 1


def _link(b, before, nxt, prv, num_free):  # pragma: no cover - compiled
    """Put b in the free queue right after `before` (the sentinel: at the head)."""
    after_b = nxt[before]
    nxt[before], prv[b], nxt[b], prv[after_b] = b, before, after_b, b
    num_free[0] += 1


@cache
def _compiled():
    """The compiled loop (numba, imported on first use like the other kernels)."""
    global _allocate, _cache, _free, _link, _next_event, _one, _unlink, _unmap
    from numba import njit

    jit = njit(cache=True, nogil=True)
    _unlink, _link, _unmap = jit(_unlink), jit(_link), jit(_unmap)
    _allocate, _cache, _free = jit(_allocate), jit(_cache), jit(_free)
    _next_event, _one = jit(_next_event), jit(_one)
    return jit(_replay)
