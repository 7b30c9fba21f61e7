"""Where vLLM's scheduler ends a prefill chunk (serial mode: one request in flight).

With a Mamba group in align mode a state exists only where a chunk ends, so the chunk ends
decide which states can ever be cached (vLLM `Scheduler._mamba_block_aligned_split`):

    prompt 2176, B 544, junction 1088 (attention matched 1088, Mamba had nothing):
    0 ---- 1088 ---- 1632 ---- 2176
    |chunk |  chunk  |  chunk  |      stops: junction 1088, last cache position 1632

Stops, earliest first, strictly inside the candidate chunk [start, end):
- a non-final chunk ends on a block boundary (floored);
- a chunk starting mid-block stops at the next block boundary;
- `last cache position`: the last block boundary before the prompt's final token;
- with sub-block hits, the prompt's last hash boundary (its "partial tail");
- the request's junction (block-floored), so a state is produced there.
Units: tokens.
"""

from __future__ import annotations

from analyzer.sim.vllm.layout import CacheLayout
from analyzer.sim.vllm.mamba import checkpoint_position
from analyzer.sim.vllm.managers import ReqState


def chunk_tokens(layout: CacheLayout, req: ReqState, start: int, wanted: int) -> int:
    """Tokens the next step schedules for `req` from `start`, `wanted` tokens requested.

    0 means the request cannot make progress (a chunk that cannot reach a block boundary
    within the token budget).
    """
    budget = layout.max_num_batched_tokens
    n = wanted if budget is None else min(wanted, budget)
    if layout.has_mamba:
        n = mamba_split(layout, req, start, n)
    return n


def mamba_split(layout: CacheLayout, req: ReqState, start: int, n: int) -> int:
    """Clip a chunk of `n` tokens from `start` to the first mandatory Mamba stop."""
    prompt, num_tokens = req.prompt, req.num_tokens
    prefill_end = max(prompt, num_tokens - 1)
    if start >= prefill_end:
        return n  # decode: one token at a time, nothing to align
    B = layout.block_size
    drop, look = layout.eagle_drop, layout.hash_lookahead
    end = start + n
    if end < prefill_end:
        # A non-final chunk ends on a block boundary, unless the block is wider than the
        # budget (then it runs sub-block and re-aligns later).
        aligned = end // B * B
        budget = layout.max_num_batched_tokens
        if aligned > start or budget is None or B <= budget:
            end = aligned
    stops = [checkpoint_position(num_tokens, B, drop, look)]
    if start % B:
        stops.append((start // B + 1) * B)
    if layout.fine:
        tail = checkpoint_position(prompt, layout.hash_block_size, drop, look)
        if stops[0] < tail < prompt:
            stops.append(tail)
    junction = req.junction
    if start < junction < end:
        stops.append(start + (junction - start) // B * B)
    end = min((s for s in stops if start < s < end), default=end)
    return max(end - start, 0)
