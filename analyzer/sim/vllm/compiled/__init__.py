"""The `vllm` engine's fast paths: the reference's results (`sim/vllm/reference.py`, block by block
in plain Python), computed in closed form (`fast.py`: an unbounded cache without sliding
windows or a drafter) or by compiled loops over arrays (`dense.py`: full attention alone in a
bounded pool; `hybrid.py` over `hybrid_loop.py`, `lookup_loop.py` and `pool_loop.py`: every
other serial layout; `stack_distance.py`: the one-pass LRU capacity curve of `hpa sweep`).
Only the engine's entry point (`analyzer.sim.vllm`) chooses one, by the gates that declare
what each models (`analyzer.sim.vllm.gates`); the reference never imports them, and each
has a test that compares it with the reference on random traces.
"""

from __future__ import annotations

from analyzer.sim.common.block_hash import HashInterner
from analyzer.sim.vllm.compiled.dense import DenseReplay
from analyzer.sim.vllm.compiled.fast import UnboundedReplay
from analyzer.sim.vllm.compiled.hybrid import HybridReplay
from analyzer.sim.vllm.gates import CLOSED_FORM, DENSE, SERIAL_PATHS, Gate
from analyzer.sim.vllm.layout import CacheLayout


def serial_gate(layout: CacheLayout) -> Gate | None:
    """The gate (`analyzer.sim.vllm.gates`) of the fast path that replays `layout`
    serially: the closed form, then the dense loop, then the hybrid loop; None where only
    the reference does."""
    for gate in SERIAL_PATHS:
        if gate.admits(layout):
            return gate
    return None


def fast_replay(
    layout: CacheLayout, not_schedulable: str
) -> UnboundedReplay | DenseReplay | HybridReplay | None:
    """The fast path that replays serially in `layout` (closed form, then the dense loop,
    then the hybrid loop), or None where only the reference does. `not_schedulable`: the
    error of a request the pool can never hold (its block count filled in)."""
    gate = serial_gate(layout)
    if gate is None:
        return None
    interner = HashInterner(ahead=True)  # a replay compares ids, never orders them
    if gate is CLOSED_FORM:
        return UnboundedReplay(layout, interner)
    replay = DenseReplay if gate is DENSE else HybridReplay
    return replay(layout, interner, not_schedulable)
