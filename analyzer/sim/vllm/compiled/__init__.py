"""The `vllm` engine's fast paths: the reference's results (`sim/vllm/reference.py`, block by block
in plain Python), computed in closed form (`fast.py`: an unbounded cache without sliding
windows or a drafter) or by compiled loops over arrays (`dense.py`: full attention alone in a
bounded pool; `hybrid.py` over `hybrid_loop.py`, `lookup_loop.py` and `pool_loop.py`: every
other serial layout; `stack_distance.py`: the one-pass LRU capacity curve of `hpa sweep`).
Only the engine's entry point (`analyzer.sim.vllm.reference`) chooses one; the reference never
imports them, and each has a test that compares it with the reference on random traces.
"""

from __future__ import annotations

from analyzer.sim.common.block_hash import HashInterner
from analyzer.sim.vllm.compiled.dense import DenseReplay, dense_applies
from analyzer.sim.vllm.compiled.fast import UnboundedReplay, fast_path_applies
from analyzer.sim.vllm.compiled.hybrid import HybridReplay, hybrid_applies
from analyzer.sim.vllm.layout import CacheLayout


def fast_replay(
    layout: CacheLayout, not_schedulable: str
) -> UnboundedReplay | DenseReplay | HybridReplay | None:
    """The fast path that replays serially in `layout` (closed form, then the dense loop,
    then the hybrid loop), or None where only the reference does. `not_schedulable`: the
    error of a request the pool can never hold (its block count filled in)."""
    interner = HashInterner(ahead=True)  # a replay compares ids, never orders them
    if fast_path_applies(layout):
        return UnboundedReplay(layout, interner)
    if dense_applies(layout):
        return DenseReplay(layout, interner, not_schedulable)
    if hybrid_applies(layout):
        return HybridReplay(layout, interner, not_schedulable)
    return None
