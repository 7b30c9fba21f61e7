"""The cache geometry a hash-id trace can express.

A hash-id trace names blocks of its own size (Mooncake 512 tokens, WEKA 64, TraceLab and
Qwen-Bailian 16), so a replay can only match in units that are whole trace blocks. A preset's
geometry often is not (Qwen3-Next's 544-token block on Mooncake): rather than refuse, every
command replays the nearest geometry the trace can express and says so in one line.

    trace blocks 512, block_size 544 -> 1,024 (the smallest multiple of 512 at or above
    544: a Mamba state needs at least 544 tokens of page), retention 0 stays 0
    trace blocks 64, block_size 544, prefix_match_unit 136 -> block_size 576, unit 64
    trace blocks 512, block_size 544, retention_interval 1024 -> block_size 1,024, 1024 kept
    trace blocks 64, block_size 544, retention_interval 4352 -> refused: rounding it to
    4,608 would replay another interval than the one asked for; the error names the
    multiples of 576 nearest it (4,032 or 4,608)

A retention interval is whole blocks of the block the replay runs in, so it is checked here,
once that block is known (not against the preset's: 1024 is no multiple of 544, yet valid on
Mooncake). Memory follows the block (`config.memory.bytes_per_block`): a 1,024-token page
costs 1,024 / 544 of the preset's. Token-id traces are never changed.
"""

from __future__ import annotations

import json

from analyzer.config.policy import Policy
from analyzer.errors import ConfigError
from analyzer.sim.dispatch import make_policy


def fit_policy(policy: Policy, trace_block: int | None) -> tuple[Policy, str | None]:
    """(`policy` in the nearest geometry a trace of `trace_block`-token blocks can express,
    a one-line note of what changed; None when nothing had to). Raises ConfigError for a
    retention interval that is not whole blocks of the block it replays in."""
    unit = policy.prefix_match_unit or policy.block_size
    if trace_block is None or unit % trace_block == 0:
        check_retention(policy)
        return policy, None
    block = -(-policy.block_size // trace_block) * trace_block
    values = json.loads(policy.to_json())
    values["block_size"] = block
    # only what changed is named (a match unit finer than a block that is already whole
    # trace blocks changes the unit alone)
    changes = [f"block_size {policy.block_size} -> {block:,}"] if block != policy.block_size else []
    if policy.prefix_match_unit is not None:
        fitted = _unit(block, trace_block, policy.prefix_match_unit)
        values["prefix_match_unit"] = None if fitted == block else fitted
        changes.append(f"prefix_match_unit {policy.prefix_match_unit} -> {fitted:,}")
    check_retention(policy, trace_block, block)
    try:
        fitted_policy = make_policy(values)
    except ConfigError as exc:
        raise ConfigError(
            f"the trace's blocks are {trace_block} tokens, and {', '.join(changes)} is no "
            f"valid policy either: {exc}"
        ) from None
    note = (
        f"the trace's blocks are {trace_block:,} tokens, so the replay matches in whole "
        f"ones: {', '.join(changes)} (the nearest the trace can express; memory is priced "
        f"at {block:,}-token pages)"
    )
    return fitted_policy, note


def check_retention(
    policy: Policy, trace_block: int | None = None, block: int | None = None
) -> None:
    """Refuse a retention interval that is not whole blocks of the block the replay runs in:
    the policy's, or `block` where a trace of `trace_block`-token blocks changed it (a
    `block` equal to the policy's is the policy's, with its line). Rounding
    it would replay (and print) another interval than the one asked for, and the sweep
    table would show it. The one check of whole blocks (`config.policy` refuses only what
    no block makes valid): `fit_policy` makes it, and a command that replays the policy's
    own block without fitting it (`hpa probe`, whose requests are token ids) calls it."""
    retention = policy.retention_interval
    if block is None or block == policy.block_size:
        if retention and retention % policy.block_size:
            raise ConfigError(
                f"policy key 'retention_interval': {retention} must be a multiple of "
                f"block_size {policy.block_size} on a model with a sparse group"
            )
        return
    if not retention or retention % block == 0:
        return
    lower = retention // block * block
    nearest = f"{lower:,} or {lower + block:,}" if lower else f"{block:,} or {2 * block:,}"
    raise ConfigError(
        f"policy key 'retention_interval': {retention} is not whole {block:,}-token blocks, "
        f"the blocks this trace replays in (its blocks are {trace_block:,} tokens, so "
        f"block_size {policy.block_size} -> {block:,}); give a multiple of {block:,} "
        f"(e.g. {nearest}), or 0 or null"
    )


def _unit(block: int, trace_block: int, wanted: int) -> int:
    """The largest match unit that is whole trace blocks, divides `block` and is at most
    `wanted` (at least one trace block)."""
    best = trace_block
    for k in range(1, block // trace_block + 1):
        unit = k * trace_block
        if unit > max(wanted, trace_block):
            break
        if block % unit == 0:
            best = unit
    return best
