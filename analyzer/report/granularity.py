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

from analyzer.config.block_floor import best_block
from analyzer.store.db import load_sql, stored_trace_block


def block_lever(con, run_id: int, policy_json: str) -> str | None:
    """The lever text for run `run_id`'s granularity loss under vLLM: a block size and what
    whole blocks of it would lose, or that no block size the model allows does better; None
    for another engine, a run with no granularity loss, or a model the store cannot price."""
    policy = json.loads(policy_json)
    if policy.get("engine") != "vllm":
        return None
    rows = con.execute(load_sql("report_granularity_requests"), [run_id]).fetchnumpy()
    best = best_block(
        rows["matchable_tokens"],
        rows["lost_granularity_tokens"],
        rows["prompt_tokens"],
        block=int(policy["block_size"]),
        groups=policy.get("groups", []),
        model=policy.get("model"),
        trace_block=stored_trace_block(con),
    )
    if best is None:
        return None
    queried = best.queried_tokens or 1
    lost, size, floor_lost = best.lost_tokens, best.size, best.size_lost_tokens
    unit = "vLLM matches a prefix shared inside earlier prompts in whole blocks"
    if best.recovers:
        return (
            f"the block size (block_size): {unit}, so a finer match unit (prefix_match_unit) "
            "adds hits only where an earlier prompt ended; at block_size "
            f"{size:,} whole blocks of the same shared prefixes would lose {floor_lost:,} "
            f"tokens ({pct(floor_lost / queried)}) instead of {lost:,} ({pct(lost / queried)}) "
            f"(`hpa replay --set block_size={size}` shows what else it changes)"
        )
    return (
        f"none of vLLM's settings: {unit}, a finer match unit (prefix_match_unit) adds hits "
        f"only where an earlier prompt ended, and no block size from {best.first:,} (the "
        f"smallest the model's page allows) to {best.last:,} loses half of it or less"
    )


def pct(x: float) -> str:
    return f"{x:.1%}"
