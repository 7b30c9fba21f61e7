"""Helpers for the replay tests: deterministic traces built with numpy."""

from __future__ import annotations

import numpy as np

from analyzer.sim.records import SimRequest


def shared_prefix_requests(
    num_groups: int, group_size: int, prompt_tokens: int, shared_tokens: int, prefix: str = "r"
) -> list[SimRequest]:
    """`num_groups` x `group_size` prompts; each group shares exactly `shared_tokens` tokens.

    Every token id is used once except inside a group's shared prefix, so prompts share exactly
    the intended prefix (the first token after it always differs) and groups share nothing.
    """
    out = []
    next_id = 1
    for g in range(num_groups):
        shared = np.arange(next_id, next_id + shared_tokens, dtype=np.int32)
        next_id += shared_tokens
        for i in range(group_size):
            tail_len = prompt_tokens - shared_tokens
            tail = np.arange(next_id, next_id + tail_len, dtype=np.int32)
            next_id += tail_len
            out.append(SimRequest(f"{prefix}{g}.{i}", np.concatenate([shared, tail])))
    return out
