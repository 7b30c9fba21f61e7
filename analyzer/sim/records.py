"""What a replay consumes and produces: one `SimRequest` in, one `SimResult` out, per request.

Pure data, shared by every engine's replay. All lengths are in tokens.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

TokenIds = np.ndarray | Sequence[int]


@dataclass(frozen=True, eq=False, slots=True)
class SimRequest:
    """One request as the replay sees it.

    Either `prompt_token_ids` (token ids, a numpy int array or a list) or `block_hash_ids` with
    `trace_block_size` (a hash-id trace: one chained id per trace block of that many tokens;
    equal ids at equal positions mean equal prefixes) and optionally `prompt_tokens` (exact
    length, the last block may be partial; default `len(block_hash_ids) * trace_block_size`).

    Outputs: `output_token_ids` when the trace has them (decode appends them, so a later prompt
    can match prompt + output), else `output_tokens` (a count): decode then produces tokens
    that match nothing. `namespace` isolates caches (cache_salt, LoRA): requests in different
    namespaces never share a block, from block 0 on. `timestamp_s`: when it arrived (seconds,
    any origin), which only the concurrent schedule reads.
    """

    request_id: str
    prompt_token_ids: TokenIds | None = None
    output_token_ids: TokenIds | None = None
    output_tokens: int = 0
    namespace: Hashable = None
    block_hash_ids: Sequence[int] | None = None
    trace_block_size: int | None = None
    prompt_tokens: int | None = None
    timestamp_s: float | None = None

    @property
    def num_prompt_tokens(self) -> int:
        if self.prompt_token_ids is not None:
            return len(self.prompt_token_ids)
        if self.prompt_tokens is not None:
            return self.prompt_tokens
        if self.block_hash_ids is None:
            return 0
        return len(self.block_hash_ids) * (self.trace_block_size or 0)

    @property
    def num_computed_tokens(self) -> int:
        """Tokens whose KV exists when the request finishes: prompt + outputs - 1 (the last
        sampled token is never fed back), or the prompt alone without outputs."""
        prompt, outputs = self.num_prompt_tokens, self.num_output_tokens
        return prompt + outputs - 1 if outputs > 1 else prompt

    @property
    def num_output_tokens(self) -> int:
        """Output tokens the request samples (ids when known, else the count)."""
        if self.output_token_ids is not None:
            return len(self.output_token_ids)
        return self.output_tokens


class SimResult(NamedTuple):
    """Per-request figures of one replay (docs/definitions.md#figures), all in tokens. Immutable.

    Ordering that always holds: hit <= attention_match_after_spec <= attention_match
    <= prompt_tokens - 1 (0 for an empty or one-token prompt).

    - `hit_tokens`: reused by the hybrid cache (vLLM `prefix_cache_hits` increment).
    - `sparse_retention_miss_tokens`: full attention matched these but a sparse group (Mamba,
      sliding window) had no state there (= attention_match_after_spec - hit_tokens); split into
      `..._evicted_tokens` (the hit had they never been evicted) and `..._never_kept_tokens`.
    - `attention_match_tokens`: what the full-attention group had resident, matched with plain
      hashes (no lookahead, no EAGLE drop), capped at prompt_tokens - 1 and aligned like vLLM.
    - `attention_match_after_spec_tokens`: the same match as vLLM computes it (lookahead hashes
      or EAGLE drop applied); attention_match - this = tokens lost to speculative decoding.
    - `junction_tokens`: vLLM's `shared_prefix_boundary` (hit + miss when the miss is > 0).
    - `chunks`: tokens scheduled per step for this request (prefill chunks, then 1 per decode).
    - `error`: set when vLLM could not schedule the request at all (KV pool too small); the
      counters are then those vLLM recorded (0 when it was never admitted).
    - `note`: a line an engine wants the user to see about its own choices, on the request
      where it took effect (e.g. the alpha Marconi's auto-tuning chose); usually None.
    - `replay_tokens`: replay designs (`suffix_replay`) rebuild recurrent state by
      recomputing the last matched tokens through the recurrent layers; those tokens are not
      hits: they are part of `sparse_retention_miss_tokens` (never kept), counted here too.

    The concurrent schedule (simulated clock, seconds from the earliest arrival) also gives
    `shared_scheduled_tokens` (L2b: the prompt's prefix shared with the tokens the earlier
    requests had scheduled when it was admitted, finished ones whole; the shared prefix
    beyond it was still in flight), `arrival_s`, `first_scheduled_s` (the step
    that first admitted it starts), `first_token_s` and `finished_s` (the steps that sampled
    its first and last token end), and per request
    `num_preemptions`, `hit_total_tokens` (hits over every admission, re-admissions after a
    preemption included) and `recomputed_tokens` (computed before a preemption and not hit
    again at the re-admission), and `held_blocks`: pool blocks in use (held by the requests
    in flight, this one's hit and first chunk included) right after its first admission, for
    a bounded pool. The other fields describe the first admission. A serial replay leaves
    the times None. `cached_ever_tokens`: the prompt's prefix whose full-attention entries
    the earlier requests had ever cached, evicted or not (a bounded vLLM pool with sub-block
    hits sets it; None elsewhere).

    A host KV tier (vLLM's OffloadingConnector, policy key `host_tier_gib`) gives
    `host_hit_tokens`: what the tier added to the GPU hit at the first admission (loaded,
    not computed; `hit_tokens` stays the GPU's own), `host_wait_steps`: the engine steps it
    spent waiting for that load (WAITING_FOR_REMOTE_KVS), and `host_wait_s`: the load's
    time on the link (serial) or the time it waited (concurrent clock); 0 and None
    without a load. What the tier did not give back beyond its hit, at that admission:
    `host_evicted_tokens` (it would have added these had no key ever been evicted) and
    `host_never_stored_tokens` (these too had every chunk computed before been stored), the
    sum of `host_never_stored_no_slot_tokens` (offers dropped for want of a slot),
    `host_never_stored_decode_tokens` (chunks past the prompt under prompt-only) and
    `host_never_stored_sparse_tokens` (sparse groups' unkept boundaries), in that order of
    lookups (docs/definitions.md#the-host-kv-tier).

    A NamedTuple rather than a dataclass: one is built per request, and this is ~4x cheaper.
    """

    request_id: str
    prompt_tokens: int
    hit_tokens: int
    sparse_retention_miss_tokens: int
    sparse_retention_miss_never_kept_tokens: int
    sparse_retention_miss_evicted_tokens: int
    attention_match_tokens: int
    attention_match_after_spec_tokens: int
    junction_tokens: int
    chunks: tuple[int, ...]
    error: str | None = None
    replay_tokens: int = 0
    note: str | None = None
    arrival_s: float | None = None
    shared_scheduled_tokens: int | None = None
    first_scheduled_s: float | None = None
    first_token_s: float | None = None
    finished_s: float | None = None
    num_preemptions: int = 0
    hit_total_tokens: int | None = None
    recomputed_tokens: int = 0
    held_blocks: int | None = None
    cached_ever_tokens: int | None = None
    host_hit_tokens: int = 0
    host_wait_steps: int = 0
    host_wait_s: float | None = None
    host_evicted_tokens: int = 0
    host_never_stored_tokens: int = 0
    host_never_stored_decode_tokens: int = 0
    host_never_stored_sparse_tokens: int = 0
    host_never_stored_no_slot_tokens: int = 0


ResultColumns = dict[str, "np.ndarray | list"]


def result_columns(results: Sequence[SimResult]) -> ResultColumns:
    """Results as one list per SimResult field, in order: what the tables are built from.
    A closed form (`sim.dispatch.replay_from_shared`) gives these columns directly."""
    if not results:
        return {name: [] for name in SimResult._fields}
    return dict(zip(SimResult._fields, (list(c) for c in zip(*results, strict=True)), strict=True))


def match_result(
    request_id: str,
    prompt_tokens: int,
    *,
    hit_tokens: int,
    kept_tokens: int,
    match_tokens: int,
    chunks: tuple[int, ...],
    error: str | None = None,
    replay_tokens: int = 0,
) -> SimResult:
    """The SimResult of an engine without speculative decoding, from three depths (tokens):
    the hit, the hit it would have had if no state had been evicted (`kept_tokens`), and the
    full-attention match. The miss splits and the junction follow
    docs/definitions.md#the-loss-waterfall; `replay_tokens` (replay designs) are part of the
    never-kept miss."""
    miss = match_tokens - hit_tokens
    evicted = kept_tokens - hit_tokens
    return SimResult(
        request_id,
        prompt_tokens,
        hit_tokens,
        miss,
        miss - evicted,
        evicted,
        match_tokens,
        match_tokens,
        match_tokens if miss else 0,
        chunks,
        error,
        replay_tokens,
    )
