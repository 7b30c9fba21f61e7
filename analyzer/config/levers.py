"""Which setting recovers each loss: the lever a reader is pointed to when a loss grew
(`hpa compare`'s sentence) or is the largest (the report's summary). Keyed by the
replay_requests column that counts the loss; None: no setting recovers it."""

from __future__ import annotations

LEVERS: dict[str, str | None] = {
    "unshared_tokens": None,  # the traffic shares less: nothing in the cache to reuse
    "lost_routing_tokens": "the routing policy (routing=prefix_aware keeps a prefix's "
    "requests on one replica)",
    "lost_in_flight_tokens": "prefill throughput (max_num_batched_tokens): the prefix was "
    "still being computed when its reuser arrived",
    "lost_granularity_tokens": "the block size (block_size) or the match unit "
    "(prefix_match_unit): vLLM matches a prefix shared inside earlier prompts in whole "
    "blocks, a finer unit only where an earlier prompt ended",
    "lost_eviction_tokens": "the pool size (num_blocks)",
    "sparse_retention_miss_tokens": "the retention interval (retention_interval) or the "
    "prefill chunking (max_num_batched_tokens): where recurrent states are kept",
    "lost_spec_decode_tokens": "the speculative-decoding setting (spec_decode)",
}


def lever(column: str) -> str | None:
    """The setting that recovers the loss counted in `column`, or None."""
    return LEVERS.get(column)
