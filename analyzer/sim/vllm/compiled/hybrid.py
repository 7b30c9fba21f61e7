"""The serial block-level replay of vLLM's cache as a compiled loop (hybrid_loop.py).

What it takes: any layout with full attention (dense.py keeps the plainest one, fast.py
the closed form): sliding-window and Mamba (align mode) groups, any number of each, a
bounded pool or none, any retention interval and token budget, sub-block match units,
EAGLE lookahead or the legacy drop. That is what `hpa plan` and `hpa sweep` replay over and
over to size a hybrid model's pool, and what most hybrid layouts replay at all.

It keeps vLLM 0.33's order of operations exactly as the Python managers do (coordinator.py,
managers.py, mamba.py, sliding_window.py, block_pool.py), over arrays (loop_fields.py):
each key's holders and each block's keys as lists of entries, the free queue as a linked
list, the request in flight's tables one row per group. The diagnostics come along: the
attention match, the junction, the sparse-retention miss split into what eviction cost (a
second lookup over the keys each sparse group ever cached) and what was never kept, and
`cached_ever_tokens`.

`tests/sim/vllm/compiled/test_hybrid.py` checks it against the Python block-level replay
(`VllmReplay(..., fast=False)`) request by request on random traces, layouts and pools;
`python -m tests.sim.vllm.fuzz_oracle --hybrid` against vLLM itself. Units: tokens, blocks.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from functools import cache
from hashlib import sha256
from pathlib import Path
from types import FunctionType

import numpy as np

from analyzer.pages import plain_empty
from analyzer.sim.common.block_hash import HashInterner
from analyzer.sim.records import SimRequest, SimResult
from analyzer.sim.vllm.compiled import hybrid_loop, lookup_loop, pool_loop
from analyzer.sim.vllm.compiled import loop_fields as f
from analyzer.sim.vllm.compiled.compiled_input import StepInput, in_steps
from analyzer.sim.vllm.gates import HYBRID, events
from analyzer.sim.vllm.layout import FULL, MAMBA, SWA, CacheLayout, cdiv
from analyzer.sim.vllm.reference import failed

# Requests handed to the compiled loop at once (results come out in these steps).
STEP_REQUESTS = 4096
_TYPES = {FULL: f.FA, SWA: f.SWA, MAMBA: f.MAMBA}


def hybrid_applies(layout: CacheLayout) -> bool:
    """Whether this module replays `layout`: any with full attention (its lookup is
    attention first; `gates.HYBRID` names what it models)."""
    return HYBRID.admits(layout)


class HybridReplay:
    """One cache (one replica) of `layout`; its state is kept between `run` calls' steps."""

    def __init__(self, layout: CacheLayout, interner: HashInterner, not_schedulable: str) -> None:
        self.layout = layout
        self.interner = interner
        self.error = not_schedulable.format(layout.num_blocks)
        self.input = StepInput(interner, layout.hash_block_size, layout.hash_lookahead)
        self.cfg = _config(layout)
        self.events = np.asarray(events(layout), np.int64)
        G = len(layout.group_types)
        # the loop's state (loop_fields.py)
        self.pool = _pool(layout.num_blocks)
        self.st = np.asarray([(layout.num_blocks or 1) - 1, 1, 0, -1, 0], np.int64)
        # int32: per hash id and group, the widest array (entry numbers, flags, counts)
        self.keys = _columns(np.zeros((5, 0), np.int32), 1024, _KEYS_FILL)
        self.req = np.zeros((2, G, 0), np.int64)
        self.mgr = np.zeros((G, 10), np.int64)
        self.scratch = np.zeros(0, np.int64)
        self.nodes = _columns(np.zeros((6, 0), np.int64), 1024, _NODES_FILL)
        self._decodes: tuple[int, ...] = ()

    def run(self, requests: Iterable[SimRequest]) -> Iterator[SimResult]:
        return in_steps(requests, self._step, STEP_REQUESTS)

    def _step(self, requests: list[SimRequest]) -> list[SimResult]:
        """Replay `requests` (in order) in one call of the compiled loop."""
        prompt, outputs, ids, plain, offsets = self.input(requests)
        cstart = self._make_room(prompt, outputs)
        chunks = np.zeros(int(cstart[-1]), np.int64)
        out = np.zeros((len(requests), 9), np.int64)
        state = (self.pool, self.st, self.keys, self.req, self.mgr, self.scratch, self.nodes)
        kernel = _compiled()
        kernel(
            ids, plain, offsets, prompt, outputs, self.cfg, self.events, state, cstart, chunks, out
        )
        return self._results(requests, prompt, outputs, out, chunks, cstart)

    def _make_room(self, prompt: np.ndarray, outputs: np.ndarray) -> np.ndarray:
        """Grow every array this step can reach; the chunks' offsets per request."""
        B, G = self.layout.block_size, len(self.layout.group_types)
        # a table's most slots: prompt and outputs, a draft slot, a speculative state block
        blocks = np.where(prompt >= 1, -(-(prompt + np.maximum(outputs, 1)) // B) + 3, 0)
        width = int(blocks.max(initial=0))
        if width > self.req.shape[2]:
            self.req = np.zeros((2, G, 2 * width), np.int64)
            self.scratch = np.zeros(2 * width, np.int64)
        self.keys = _columns(self.keys, self.interner.next_id * G, _KEYS_FILL)
        # blocks (and entries: each block's key, prompt tails) a step can add
        most = int(G * (blocks.sum() + 4 * len(blocks)))
        if self.layout.num_blocks is None:  # fresh block ids
            self.pool = _columns(self.pool, int(self.st[f.S_FRESH]) + most + 1, _POOL_FILL)
        self.nodes = _columns(self.nodes, int(self.st[f.S_NODE_FRESH]) + most + 1, _NODES_FILL)
        budget = self.layout.max_num_batched_tokens
        room = -(-prompt // B) + 2 + (0 if budget is None else -(-prompt // budget))
        cstart = np.zeros(len(prompt) + 1, np.int64)
        np.cumsum(np.maximum(room, 0), out=cstart[1:])
        return cstart

    def _results(self, requests, prompt, outputs, out, chunks, cstart) -> list[SimResult]:
        """The SimResults `reference.VllmReplay` builds, from the loop's answers."""
        steps = np.maximum(outputs, 1) - 1
        if len(steps) and steps.max() > len(self._decodes):
            self._decodes = (1,) * int(steps.max())
        decodes, error, made = self._decodes, self.error, chunks.tolist()
        track = bool(self.cfg[f.C_TRACK_EVICTED])
        results = []
        columns = (prompt.tolist(), steps.tolist(), out.tolist(), cstart[:-1].tolist())
        for r, p, d, row, at in zip(requests, *columns, strict=True):
            if p < 1:
                results.append(failed(r.request_id, p, "empty prompt"))
                continue
            hit, longest, evicted, junction, fail, done, count, ever, attention = row
            if fail == f.NOT_ADMITTED:
                results.append(failed(r.request_id, p, error))
                continue
            steps_made = decodes[:done] if fail == f.DECODE else () if fail else decodes[:d]
            miss = longest - hit
            results.append(
                SimResult(
                    r.request_id,
                    p,
                    hit,
                    miss,
                    miss - evicted,
                    evicted,
                    attention,
                    longest,
                    junction,
                    tuple(made[at : at + count]) + steps_made,
                    None if fail == f.OK else error,
                    cached_ever_tokens=ever if track else None,
                )  # fmt: skip
            )
        return results


def _config(layout: CacheLayout) -> np.ndarray:
    """The loop's cfg: the layout's sizes, then the group types (loop_fields.C_*)."""
    types, budget = layout.group_types, layout.max_num_batched_tokens
    cfg = np.zeros(f.C_TYPES + len(types), np.int64)
    cfg[f.C_TYPES :] = [_TYPES[t] for t in types]
    cfg[f.C_B] = B = layout.block_size
    cfg[f.C_H] = layout.hash_block_size
    cfg[f.C_G] = len(types)
    cfg[f.C_NFA], cfg[f.C_NSWA] = types.count(FULL), types.count(SWA)
    cfg[f.C_CAP] = -1
    if layout.sliding_window is not None:
        cfg[f.C_W] = layout.sliding_window
        cfg[f.C_NEED] = layout.swa_blocks_for_hit
        if budget is not None:  # SlidingWindowManager.admission_cap
            cfg[f.C_CAP] = cdiv(layout.sliding_window - 1 + 2 * budget, B) + 1
    retention = layout.retention_interval
    cfg[f.C_RETENTION] = -1 if retention is None else retention
    cfg[f.C_BUDGET] = budget or 0
    cfg[f.C_BOUNDED] = layout.num_blocks is not None
    cfg[f.C_FINE] = layout.fine
    # reference.VllmReplay._track_evicted
    cfg[f.C_TRACK_EVICTED] = layout.num_blocks is not None and layout.fine
    if layout.hash_lookahead or layout.eagle_drop:
        cfg[f.C_TRACK_EVICTED] = 0
    cfg[f.C_DROP] = layout.eagle_drop
    cfg[f.C_HYBRID] = layout.hybrid  # several groups, even if unbounded copies collapsed
    cfg[f.C_LOOKAHEAD] = layout.hash_lookahead
    cfg[f.C_DRAFT_SLOTS] = layout.alloc_lookahead
    cfg[f.C_SPEC_BLOCKS] = layout.mamba_spec_blocks
    return cfg


# a new column of the pool (f.REF ... f.PREV), of the keys (HOLDER ... SHADOWS) and of
# the entries (N_KEY ... N_SHADOW)
_POOL_FILL = np.asarray([0, -1, 0, 0, 0], np.int64)
_KEYS_FILL = np.asarray([-1, 0, 0, -1, 0], np.int32)
_NODES_FILL = np.asarray([-1, 0, -1, -1, -1, -1], np.int64)


def _pool(num_blocks: int | None) -> np.ndarray:
    """The pool: blocks 1 .. n - 1 free, in order, column n the free queue's sentinel;
    unbounded: room for fresh ids, no queue."""
    if num_blocks is None:
        return _columns(np.zeros((5, 0), np.int64), 1024, _POOL_FILL)
    n = num_blocks
    pool = np.zeros((5, n + 1), np.int64)
    pool[f.FIRST] = -1
    pool[f.NEXT] = np.append(np.arange(1, n + 1), 1)
    pool[f.PREV] = np.append(np.arange(-1, n - 1), n - 1)
    pool[f.NEXT, n - 1], pool[f.PREV, 1] = n, n
    return pool


def _columns(array: np.ndarray, size: int, fill: np.ndarray) -> np.ndarray:
    """`array` with at least `size` columns (new ones `fill`), at least doubled if grown."""
    if size <= array.shape[1]:
        return array
    grown = plain_empty((array.shape[0], max(size, 2 * array.shape[1])), array.dtype)
    grown[:, : array.shape[1]] = array
    grown[:, array.shape[1] :] = fill[:, None]  # each page written once
    return grown


# the loop's modules: a function's compiled code holds the functions it calls and the
# constants it reads from the others
_LOOP = (f, pool_loop, lookup_loop, hybrid_loop)


@cache
def _compiled():
    """The compiled loop (numba, imported on first use like the other kernels): every
    function of the loop's modules, compiled before the first call resolves them."""
    from numba import njit

    # No reference counting: the loop allocates nothing, and the counts numba keeps on the
    # arrays it passes between these functions (atomic, per call) took half its time.
    jit = njit(cache=True, nogil=True, _nrt=False)
    dispatchers = []
    for module in _LOOP:
        for name, value in vars(module).items():
            if isinstance(value, FunctionType) and value.__module__ == module.__name__:
                dispatchers.append(jit(value))
                setattr(module, name, dispatchers[-1])
    caches = [d._cache for d in dispatchers]  # numba's FunctionCache of each
    fresh_caches(caches, _sources_digest(), "hybrid_loop.sources")
    return hybrid_loop.replay


def _sources_digest() -> str:
    return sha256(b"".join(Path(m.__file__).read_bytes() for m in _LOOP)).hexdigest()


def fresh_caches(caches: list, digest: str, stamp_name: str) -> None:
    """Flush numba's cached code of these functions unless it was compiled from the sources
    `digest` names. numba checks a function's own file only, and these call each other
    across files: an edit of one module alone would leave the others' cached callers
    running its old code. The digest is kept beside the cache (`stamp_name`); a cache
    folder that cannot be written keeps nothing to flush."""
    folder = Path(caches[0].cache_path)
    stamp = folder / stamp_name
    try:
        if stamp.read_text() == digest:
            return
    except OSError:
        pass
    try:
        for function_cache in caches:
            function_cache.flush()
        folder.mkdir(parents=True, exist_ok=True)
        stamp.write_text(digest)
    except OSError:
        pass
