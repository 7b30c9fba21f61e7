"""What whole blocks of each size lose of the shared prefixes: the granularity figure both the
report's lever (`report/granularity.py`) and the plan's block-size line (`pipeline/plan/`) give.

vLLM caches a prefix shared inside earlier prompts in whole blocks, so a request's hit at
block B is its shared (scheduled) prefix, capped at the prompt less one token, floored to B
(docs/definitions.md#the-loss-waterfall, L3). The sizes tried are those the model's page
allows, from its smallest up to four times the run's, in steps of `GRANULE_TOKENS` and of the
trace's blocks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from analyzer.config.models import load_model
from analyzer.errors import ConfigError

GRANULE_TOKENS = 16  # the block sizes tried are multiples of this (and of a trace's blocks)
RECOVERED_SHARE = 0.5  # a block named must lose at most this share of the run's loss


def size_step(trace_block: int | None) -> int:
    """The step of the block sizes tried: 16 tokens and whole trace blocks."""
    return math.lcm(GRANULE_TOKENS, trace_block or 1)


def block_sizes(smallest: int, block: int, step: int) -> np.ndarray:
    """The sizes tried: multiples of `step` from `smallest` (rounded up) to four times the
    larger of it and the run's `block`."""
    first = -(-smallest // step) * step
    return np.arange(first, 4 * max(block, first) + 1, step, dtype=np.int64)


def floor_losses(shared: np.ndarray, sizes: np.ndarray) -> list[int]:
    """Per size, the tokens whole blocks of it lose of the `shared` prefixes (one a request)."""
    values, counts = np.unique(
        np.maximum(np.asarray(shared, dtype=np.int64), 0), return_counts=True
    )
    return [int(((values % size) * counts).sum()) for size in sizes]


def smallest_block(groups: list, model: str | None, block: int, step: int) -> int | None:
    """The smallest block vLLM allows the model: a Mamba state fits in one page (`block`
    where no model is named; None where its file is gone)."""
    if "mamba" not in groups:
        return step
    if not model:
        return block
    try:
        return int(load_model(model)["block_size"])
    except ConfigError:  # a model file gone since the run: no block figure
        return None


@dataclass(frozen=True)
class BestBlock:
    """The block size whose whole blocks lose least of a run's shared prefixes."""

    block: int  # the run's block
    lost_tokens: int  # what whole blocks of `block` lose (the run's granularity loss)
    queried_tokens: int
    size: int  # the best size tried
    size_lost_tokens: int  # what whole blocks of `size` would lose
    first: int  # the sizes tried, from `first` (the smallest the model's page allows)
    last: int  # to `last`

    @property
    def recovers(self) -> bool:
        """Another size loses at most `RECOVERED_SHARE` of the run's loss."""
        return self.size != self.block and self.size_lost_tokens <= RECOVERED_SHARE * (
            self.lost_tokens
        )


def best_block(
    matchable: np.ndarray,
    lost_granularity: np.ndarray,
    prompt: np.ndarray,
    *,
    block: int,
    groups: list,
    model: str | None,
    trace_block: int | None,
) -> BestBlock | None:
    """The best block for the requests of a replay at `block` (per request: its matchable
    and granularity-lost tokens, L3 and L2b - L3, and its prompt tokens): their shared
    prefixes are L2b capped at the prompt less one token. None: no granularity loss, or no
    figure of the model's smallest page."""
    matchable, lost_granularity, prompt = (
        np.asarray(a, dtype=np.int64) for a in (matchable, lost_granularity, prompt)
    )
    lost = int(lost_granularity.sum())
    if not lost:
        return None
    step = size_step(trace_block)
    smallest = smallest_block(list(groups), model, block, step)
    if smallest is None:
        return None
    sizes = block_sizes(smallest, block, step)
    losses = floor_losses(np.minimum(matchable + lost_granularity, prompt - 1), sizes)
    best = int(np.argmin(losses))
    return BestBlock(
        block=block,
        lost_tokens=lost,
        queried_tokens=int(prompt.sum()),
        size=int(sizes[best]),
        size_lost_tokens=losses[best],
        first=int(sizes[0]),
        last=int(sizes[-1]),
    )
