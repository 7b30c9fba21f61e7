"""Bound engines (docs/definitions.md#other-designs): `attention_only` and `oracle`, pure, unbounded
caches.

Both replay serially like the vLLM engine and fill every `SimResult` field; both report
hit = attention match, sparse misses 0, junction 0 and no speculative-decoding loss (they are
upper bounds: `spec_decode` is ignored, i.e. the plain-hash match is used).

- `attention_only`: what a non-hybrid model would reuse. Only the full-attention prefix cache
  exists (sparse groups are dropped); a prefix matches in whole match units
  (`prefix_match_unit`, else `block_size`), capped at prompt_tokens - 1, floored to the unit.
- `oracle`: the policy's hybrid model with a state checkpoint at every junction (every block
  boundary has valid sparse state and every window is resident). It keeps the policy's groups
  and block geometry, so its hit is the full-attention match aligned like vLLM aligns a hybrid
  hit (the match unit when vLLM allows sub-block hits - Mamba, unit < block, no sliding window -
  else the block size). So oracle <= attention_only, equal when the unit is the block size.

Both cache every full block of the computed tokens (prompt + outputs - 1; outputs known only
as a count produce blocks that match nothing), and never evict: `num_blocks` must be null.
`chunks`: the prefill as chunks of at most `max_num_batched_tokens` (one chunk of
prompt - hit without a budget), then one token per decode step (outputs - 1 steps).
"""

from analyzer.sim.bounds.replay import BoundReplay, replay
from analyzer.sim.bounds.replay import match_alignment as hit_alignment

__all__ = ["BoundReplay", "hit_alignment", "replay"]
