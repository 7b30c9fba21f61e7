"""Engine `suffix_replay` (docs/definitions.md#other-designs): SuffixReplay / Tail-Replay, pure.

Reference: docs/engines.md#engine-suffix_replay; the research notes beside the checkout
(`../shared/reference/hybrid-policies.md` section 4, not shipped: arXiv 2609.33477 and its
predecessor 2608.30310, read through abstracts and summaries). Serial replay like the vLLM
engine; all lengths in tokens, pool sizes in blocks (pages) of `block_size` tokens.

- Placement: no recurrent-state checkpoints at all. The full-attention KV of every full page
  of the computed tokens (prompt + outputs - 1; outputs known only as a count match nothing)
  is cached, exactly as a plain prefix cache would.
- Hit rule: h = the deepest page boundary with the KV of every page before it cached (capped
  at prompt - 1, so the last token is always computed) = attention match. The recurrent
  state at h is rebuilt by replaying the last r = min(suffix_replay_tokens, h) matched tokens
  through the recurrent layers, so hit_tokens = h - r, replay_tokens = r and
  sparse_retention_miss_tokens = r, all never kept (no state is ever stored, so nothing is
  evicted). junction = h when r > 0. Without mamba in groups nothing is replayed (r = 0).
- Eviction (`num_blocks` set): LRU over leaf pages (the paper integrates into SGLang's radix
  tree); the anchors (the recent input hidden states the replay starts from) follow their
  page and are not charged to the pool. A request holds ceil((prompt + outputs - 1) / block)
  pages while it runs; one that cannot fit gets `error` and all counters 0.
- `chunks`: prefill of prompt - hit tokens (the replayed tokens included) split by
  max_num_batched_tokens, then one per decode step.

Not modelled: the approximation's quality (the rebuilt state is not exact; the papers report
91-100% of full-prefill quality, which this replay does not weigh in any figure), the replay's
cost beyond its token count (it runs through the linear-attention layers only), anchor
storage and publication delays, layer-wise anchor sparsity, sliding-window groups (a
ConfigError) and speculative decoding (spec_decode must be none).
"""

from analyzer.sim.suffix_replay.replay import SuffixReplay, replay

__all__ = ["SuffixReplay", "replay"]
