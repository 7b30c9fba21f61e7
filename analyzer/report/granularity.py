"""Which vLLM setting moves a run's granularity loss, with the figure (the summary's lever).

vLLM caches a prefix shared inside earlier prompts in whole blocks: a finer match unit
(`prefix_match_unit`) adds a sub-block hit only where an earlier prompt ended (the one
partial entry it registers, docs/definitions.md#the-loss-waterfall, L3). So on a trace whose
prefixes are shared at fixed points inside prompts (RAGPulse's 512-token system-prompt chunks
against qwen3.5-4b's 528-token page) no match unit moves the loss, but a block size whose
multiples fall on those points does. L3 at block B is the shared (scheduled) prefix, capped at
the prompt less one token, floored to B: this module floors each measured request's at every
block size the model's page allows, from its smallest up to four times the run's, and names
the best, or says none of them recovers it.
"""

from __future__ import annotations

import json

import numpy as np

from analyzer.config.block_floor import (
    RECOVERED_SHARE,
    block_sizes,
    floor_losses,
    size_step,
    smallest_block,
)
from analyzer.store.db import load_sql, stored_trace_block


def block_lever(con, run_id: int, policy_json: str) -> str | None:
    """The lever text for run `run_id`'s granularity loss under vLLM: a block size and what
    whole blocks of it would lose, or that no block size the model allows does better; None
    for another engine, a run with no granularity loss, or a model the store cannot price."""
    policy = json.loads(policy_json)
    if policy.get("engine") != "vllm":
        return None
    rows = con.execute(load_sql("report_granularity_shared"), [run_id]).fetchnumpy()
    shared = np.asarray(rows["shared"], dtype=np.int64)
    lost = int(np.asarray(rows["lost_granularity_tokens"], dtype=np.int64).sum())
    if not lost or not shared.size:
        return None
    block = int(policy["block_size"])
    step = size_step(stored_trace_block(con))
    smallest = smallest_block(policy.get("groups", []), policy.get("model"), block, step)
    if smallest is None:
        return None
    sizes = block_sizes(smallest, block, step)
    first = int(sizes[0])
    losses = floor_losses(shared, sizes)
    best = int(np.argmin(losses))
    size, floor_lost = int(sizes[best]), losses[best]
    queried = int(con.execute(load_sql("report_granularity_queried"), [run_id]).fetchone()[0]) or 1
    unit = "vLLM matches a prefix shared inside earlier prompts in whole blocks"
    if size != block and floor_lost <= RECOVERED_SHARE * lost:
        return (
            f"the block size (block_size): {unit}, so a finer match unit (prefix_match_unit) "
            "adds hits only where an earlier prompt ended; at block_size "
            f"{size:,} whole blocks of the same shared prefixes would lose {floor_lost:,} "
            f"tokens ({pct(floor_lost / queried)}) instead of {lost:,} ({pct(lost / queried)}) "
            f"(`hpa replay --set block_size={size}` shows what else it changes)"
        )
    return (
        f"none of vLLM's settings: {unit}, a finer match unit (prefix_match_unit) adds hits "
        f"only where an earlier prompt ended, and no block size from {first:,} (the "
        f"smallest the model's page allows) to {int(sizes[-1]):,} loses half of it or less"
    )


def pct(x: float) -> str:
    return f"{x:.1%}"
