"""Engine `trtllm` (docs/definitions.md#other-designs): TensorRT-LLM's block reuse for hybrid Mamba
models, pure.

Reference: docs/engines.md#engine-trtllm; the research notes beside the checkout
(`../shared/reference/hybrid-policies.md` section 5, not shipped: docs/source/features/kvcache.md,
`mamba_cache_manager.py`, the hybrid reuse design). Serial replay like the vLLM engine; all
lengths in tokens, pool sizes in blocks of `block_size` tokens (`tokens_per_block`).

- Blocks: a prompt is cut into blocks of block_size tokens, named by chained hashes (a radix
  tree / hash chain; namespaces never share a block). Only full blocks are reused (partial
  reuse is force-disabled for hybrid models).
- Snapshot placement (groups with mamba): for a prompt of n tokens the prefill stops its
  context chunks at {k * trtllm_interval < n} and at n, plus floor(n / block) * block with
  `trtllm_save_last` (mamba_save_last_snapshot). A stop on a block boundary leaves a reusable
  state snapshot; the prompt end n leaves one only when n is a multiple of block_size.
  trtllm_interval must be a multiple of block_size (else ConfigError); null (the default,
  as in TensorRT-LLM) takes no periodic snapshots.
- Commit limit: blocks are committed for reuse only up to the last snapshot point, so the
  tail of the prompt after it, and all decode blocks, are never reused. Output tokens: the
  documented default `block_reuse_config.policy` is `all_reusable` (commit after every
  context chunk); under the hybrid commit limit that still stops at the last snapshot point
  of the prompt, and decode takes no snapshots, so generated tokens are not cached.
  On a model without mamba (groups = full attention only) every full block of the computed
  tokens (prompt + outputs - 1) is committed, as plain TensorRT-LLM KV reuse does.
- Hit rule: the deepest block position whose KV blocks are all cached and whose last block
  carries a real snapshot (capped at prompt - 1, so the last token is always computed);
  attention match = the cached run of KV blocks. Without mamba, hit = attention match.
- Eviction (`num_blocks` set): LRU over leaf blocks of the tree (prioritized LRU with every
  block at the default priority 35). Capacity: one block per block position and one per
  snapshot; a request holds ceil((prompt + outputs - 1) / block) blocks + 1 live state +
  one per new snapshot while it runs (the blocks it reuses count once). A request that
  cannot fit gets `error` and all counters 0.
- Misses: attention match - hit; `..._evicted_tokens` = the extra hit a snapshot ever stored
  on the matched path would have given, the rest never kept. `chunks`: prefill from the hit
  split at every chunk stop and by max_num_batched_tokens, then one per decode step.

Not modelled: retention priorities and durations, host offloading (`host_cache_size`),
additional snapshot offsets, `per_conversation` reuse and branch snapshots, sliding-window
reuse (groups with sliding_window are a ConfigError), speculative decoding (spec_decode
must be none), beam search, and the prefill cost of the extra chunk boundaries.
"""

from analyzer.sim.trtllm.replay import TrtllmReplay, replay, snapshot_points

__all__ = ["TrtllmReplay", "replay", "snapshot_points"]
