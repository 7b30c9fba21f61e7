"""SGLang's state placement: the policy resolved into page, grids, pools (Geometry), and
where a prefill extend or a finished sequence leaves a recurrent state. Units: tokens."""

from __future__ import annotations

import math
from dataclasses import dataclass

from analyzer.config.policy import Policy
from analyzer.errors import ConfigError
from analyzer.sim.common.serial import check_unmodelled

# State slots a running request holds besides the tree's: its live state, plus the two
# ping-pong track slots of extra_buffer.
RESERVED_SLOTS = {"no_buffer": 1, "extra_buffer": 3}


@dataclass(frozen=True)
class Geometry:
    """The policy resolved for this engine: page and grids in tokens."""

    page: int
    strategy: str
    grid: int  # extra_buffer prefill track grid C = max(chunk, page)
    decode_grid: int  # extra_buffer decode track grid lcm(C, track interval)
    budget: int | None  # prefill chunk, page aligned
    kv_tokens: int | None
    num_states: int | None
    stateful: bool
    window: int | None  # sliding window W (SWARadixCache), else None
    swa_tokens: int | None  # the SWA KV pool


def geometry(policy: Policy) -> Geometry:
    """Validate the policy for SGLang and resolve its grids (ConfigError naming the key)."""
    check_unmodelled(policy, "sglang", placement="sglang_strategy")
    page = policy.block_size
    chunk = policy.option("sglang_chunk_tokens")
    grid = max(chunk, page)
    if grid % page:
        raise ConfigError(
            f"policy key 'sglang_chunk_tokens': {chunk} must be a multiple of block_size "
            f"{page} when larger (states are tracked on multiples of max of the two)"
        )
    strategy = policy.option("sglang_strategy")
    num_states = policy.option("sglang_num_states")
    stateful = "mamba" in policy.groups
    need = RESERVED_SLOTS[strategy] + 2
    if stateful and num_states is not None and num_states < need:
        raise ConfigError(
            f"policy key 'sglang_num_states': {strategy} needs at least {need} states "
            f"(the running request's slots, its locked state and one new); got {num_states}"
        )
    budget = policy.max_num_batched_tokens
    if budget is not None:
        budget = max(page, budget - budget % page)
    kv_tokens = None if policy.num_blocks is None else policy.num_blocks * page
    swa_tokens = None
    if kv_tokens is not None and policy.sliding_window is not None:
        swa_tokens = int(policy.option("sglang_swa_full_tokens_ratio") * kv_tokens)
    return Geometry(
        page=page,
        strategy=strategy,
        grid=grid,
        decode_grid=math.lcm(grid, policy.option("sglang_track_interval")),
        budget=budget,
        kv_tokens=kv_tokens,
        num_states=num_states,
        stateful=stateful,
        window=policy.sliding_window,
        swa_tokens=swa_tokens,
    )


def track_point(g: Geometry, start: int, extend: int, branch: int | None) -> int | None:
    """Where a prefill extend of `extend` tokens from `start` leaves a state, or None."""
    if g.strategy == "no_buffer" or not g.stateful:
        end = start + extend
        return end - end % g.page
    if branch is not None and start < branch < start + extend and (branch - start) % g.grid == 0:
        return branch
    if extend < g.grid:
        return None
    return start + extend - extend % g.grid


def final_depth(g: Geometry, prompt: int, total: int, tracked: int) -> int:
    """The depth the finished sequence is cached to: its last page (no_buffer), else the last
    tracked state, a decode track when one was passed."""
    if g.strategy == "no_buffer" or not g.stateful:
        return total - total % g.page
    decode = total - total % g.decode_grid
    return decode if decode > max(prompt, tracked) else tracked


def branch_point(g: Geometry, kv_hit: int, hit: int) -> int | None:
    """extra_buffer's branching_seqlen: the matched KV floored to the track grid, when deeper
    than the hit (tokens)."""
    if kv_hit <= hit:
        return None
    return kv_hit - kv_hit % g.grid or None
