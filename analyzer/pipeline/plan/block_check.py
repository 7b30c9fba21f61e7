"""A plan's line on the block size, where the target is missed at the policy's: vLLM matches a
prefix shared inside earlier prompts in whole blocks, so where prefixes are shared at fixed
points inside prompts (RAGPulse's 512-token chunks against qwen3.5-4b's 528-token page) a
block size whose multiples fall on those points recovers what no pool, retention or match unit
does. The sizes the model allows are floored as the report's lever floors them
(`config/block_floor.py`), from the plan's own attention-only ceiling replay; the best one is
replayed once (the model's groups, every state kept, an unbounded pool) to say whether the
target is within reach there; where it is, the plan is made again at that block size
(`plan_at_block`: every other key as asked), so the answer names the block, the pool and its
memory rather than leave the second plan to the user. The plan searches no other sizes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from analyzer.config.block_floor import best_block
from analyzer.config.policy import Policy
from analyzer.pipeline.plan.evaluate import Evaluator


@dataclass(frozen=True)
class BlockCheck:
    line: str  # the plan's block-size line
    size: int  # the block size named
    reaches: bool  # whether the target is within reach at it (every state kept, unbounded)


def block_check(
    ev: Evaluator,
    rows: dict,
    make: Callable[..., Policy],
    base: dict,
    trace_block: int | None,
) -> BlockCheck | None:
    """The line and its size (None: no block size the model allows loses half the
    granularity loss or less). `rows`: the attention-only ceiling replay at the plan's
    block; `make(**keys)`: the plan's policy with `keys`; `base`: its policy values (groups,
    model, block_size)."""
    columns = ("matchable_tokens", "lost_granularity_tokens", "prompt_tokens")
    each = [np.asarray(rows[c], dtype=np.int64) for c in columns]
    if ev.mask is not None:
        each = [a[ev.mask] for a in each]
    best = best_block(
        *each,
        block=int(base["block_size"]),
        groups=base["groups"],
        model=base.get("model"),
        trace_block=trace_block,
    )
    if best is None or not best.queried_tokens or not best.recovers:
        return None
    block, size, queried = best.block, best.size, best.queried_tokens
    lost, floor_lost = best.lost_tokens, best.size_lost_tokens
    policy = make(block_size=size, retention_interval=None, prefix_match_unit=None)
    ratio = ev.measure(policy, f"block_size={size:,}, every state kept, unbounded")
    reaches = ratio.meets(ev.targets)
    reach = (
        f"reaches {ratio.useful_hit_ratio:.3f}, the target within reach: the plan at "
        f"block_size {size:,} follows (--set block_size={size} makes it alone)"
        if reaches
        else f"reaches {ratio.useful_hit_ratio:.3f}, still short of the target"
    )
    line = (
        f"block size: match granularity loses {lost / queried:.1%} of the prompt tokens in "
        f"whole {block:,}-token blocks, and would lose {floor_lost / queried:.1%} in whole "
        f"{size:,}-token blocks; one replay at block_size {size:,} (the model's groups, every "
        f"state kept, an unbounded pool) {reach}"
    )
    return BlockCheck(line, size, reaches)


def plan_at_block(planner: Any, check: BlockCheck | None) -> Any:
    """The plan `planner` makes again at `check`'s block size, every other key as asked,
    where that size reaches the target (None elsewhere, and within such a plan: it searches
    no third size). Its replays are counted on from the first plan's in the progress."""
    if check is None or not check.reaches or planner.nested:
        return None
    ask = replace(planner.ask, policy={**(planner.ask.policy or {}), "block_size": check.size})
    done, progress = planner.ev.replays, planner.progress
    counted = None if progress is None else lambda n, what: progress(done + n, what)
    return type(planner)(ask, planner.trace, planner.spec, counted, nested=True).run()
