"""Engine `llamacpp` (docs/definitions.md#other-designs): llama-server context checkpoints on a
hybrid model, pure.

Reference: docs/engines.md#engine-llamacpp; the research notes beside the checkout
(`../shared/reference/hybrid-policies.md` section 7, not shipped), and the semantics of
`tools/server/server-context.cpp` of a 2026 llama.cpp (checkpoint placement, restore,
invalidation, FIFO). Serial replay like the vLLM engine; all lengths in tokens.

- Slots: `llamacpp_slots` per replica (`-np`; default 1; the trace's replica partition
  already separates replicas). A request takes the slot whose memory shares the longest
  prefix with it when that is more than 0.10 of the prompt (--slot-prompt-similarity), else
  the least recently used slot. After a request a slot holds the request's prompt + outputs - 1
  tokens (the last sampled token is never fed back); outputs known only as a count match
  nothing. Namespaces (cache_salt / LoRA) never match each other: a request of another
  namespace takes over the slot.
- Host prompt cache (`llamacpp_cache_tokens` > 0 or null; 0 = off, the default here): when
  the slot would keep too little of its memory (LCP / prompt <= 0.10, the default
  --slot-prompt-similarity, or LCP / memory < 0.5) its state (memory + checkpoints) is saved
  (unless a cached state already holds it; cached states it holds are dropped), then the
  cached state that keeps at least 0.25 of itself and beats the slot on both LCP / itself and
  LCP / prompt is loaded (and leaves the cache), then the oldest states are dropped while the
  cache holds more than `llamacpp_cache_tokens` tokens (one always stays). llama-server
  counts `--cache-ram` in MiB (default 8192, on): divide by the model's bytes per cached token.
- Attention match: the longest common prefix (LCP) of the memory and the new prompt, capped
  at prompt - 1. Token-level: `hit_alignment` is 1 and block_size plays no part (hash-id
  traces compare whole trace blocks, capped at the shorter prompt).
- Hit rule (groups with mamba: the memory cannot be truncated): the live state when the
  prompt extends the whole memory (LCP = memory length < prompt); else the newest checkpoint
  at position <= LCP (<= LCP - 1 when the prompt is a prefix of the memory: one token must be
  computed); else 0 (full re-processing). Checkpoints beyond the reuse point are invalidated.
  With groups = full attention only the memory truncates anywhere: hit = attention match and
  no checkpoints are made.
- Placement (recent builds, no message delimiters): the prefill runs in batches of
  llamacpp_n_batch, broken so that batches end at n - min(n_batch, 4 + n_ubatch) and n - 4
  (n = prompt length). Before a batch runs, a checkpoint of the state at its start is taken
  when the batch ends within n_ubatch of the prompt end (or is the last one), the state is
  not empty, and its position is more than llamacpp_min_step past the newest checkpoint.
  At most llamacpp_max_checkpoints per slot; the oldest goes first (FIFO). n_ubatch is
  clamped to n_batch like llama.cpp does. So a new short user turn that replaces the last
  one re-prefills min(n_batch, n_ubatch + 4) tokens plus the length difference of the turns.
- Misses: attention match - hit; `..._evicted_tokens` = the extra hit a checkpoint ever taken
  on the still-valid prefix (since dropped by the FIFO) would have given; the rest (no
  checkpoint was ever taken there, e.g. skipped by the spacing rule) is never kept.
- `chunks`: the prefill batches, then one per decode step. `num_blocks` must be null.

Not modelled: concurrent slots (requests run one after another, so every slot is idle
when a request arrives), the host cache's byte accounting (tokens here) and
its out-of-memory shrink, idle-slot saving, message-delimiter breaks (`n_before_user`), the
per-slot byte cap, context size / shifting, speculative-decoding checkpoints, SWA memories
(groups with sliding_window are a ConfigError), and the older `--checkpoint-every-n-tokens`
placement.
"""

from analyzer.sim.llamacpp.replay import LlamacppReplay, hit_alignment, replay

__all__ = ["LlamacppReplay", "hit_alignment", "replay"]
