"""dynamo: NVIDIA Dynamo's KV router (default worker selector), as in ai-dynamo 1.6.1.

Follows ai-dynamo/dynamo `lib/kv-router`, read at the commits the source index holds
(selector 07a6c9ce, sequences 312d3427 / 0b6b9200 / 057096c3) and checked against the
symbols of the ai-dynamo-runtime 1.6.1 wheel (`scheduling::prefill_load::
effective_prefill_tokens`, `SchedulingRequest::potential_decode_blocks_after_admission`,
`PromptRegistry::potential_blocks_and_tokens`, `BlockTracker::acquire_prompt`, ...):
- `scheduling/selector/default.rs` DefaultWorkerScorer::worker_logit, per worker w:

      raw_prefill_blocks = (active_prefill_tokens[w] + uncached + cached) / block_size
      credit_blocks      = overlap_score_credit * overlap_blocks[w]     (host/disk tiers: 0)
      logit[w] = prefill_load_scale * max(0, raw_prefill_blocks - credit_blocks)
                 + decode_blocks[w] + decode_active_request_weight * active_requests[w]

  with cached = overlap_blocks[w] * block_size, uncached = max(0, ISL - cached), so the
  raw term is (active + ISL) / block_size, a float (no ceil); the overlap is not capped
  (only the difference is clamped at 0); the decay of the credit (default 0) is off;
- `scheduling/selector/mod.rs` WorkerSelectionInput::row: the inputs above;
  `decode_blocks` = `WorkerLoadProjection::potential_decode_blocks` (sequences/
  prompt_registry.rs) = the worker's unique active blocks + this request's blocks beyond
  the depth its prefix is already active there (the request's own blocks count);
- `sequences/prefill_tracker.rs`: a routed request adds its effective prefill tokens
  ISL - cached[w] (cached overlap subtracted) to the chosen worker until its prefill
  completes (first token); without a prefill-time model (router_prefill_load_model "none",
  the default) the tokens do not decay;
- `sequences/block_tracker.rs`: active blocks are deduplicated by block hash per worker
  and released when the request finishes (output blocks not tracked: the default);
- pick (`pick_default_worker`): temperature 0 -> lowest logit, ties uniform (reservoir
  sampling, here `Ties`); temperature > 0 -> softmax_sample_index: p ~ exp(-(logit - min)
  / ((max - min) * T)), uniform when all equal, sampled with one uniform draw.

hpa: overlap_blocks[w] = view.cached_blocks(w, Request.blocks) (KV events, no lag); ISL =
prompt_tokens; the request's blocks are `Request.blocks`. Active prefill tokens, active
blocks and active requests are router-local, kept from route / on_first_token /
on_finished as Dynamo's ActiveSequences keeps them. Unseeded (`router_seed` null), a
temperature above 0 takes the lowest logit (lowest index on ties) instead of sampling.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from analyzer.sim.routers import leading_run, option
from analyzer.sim.routers.base import FleetView, Request, Router, Ties


def worker_logit(
    raw_prefill_blocks: float,
    overlap_blocks: float,
    decode_blocks: float,
    active_requests: int,
    *,
    overlap_credit: float = 1.0,
    prefill_load_scale: float = 1.0,
    active_request_weight: float = 0.0,
) -> float:
    """Dynamo's worker cost (default.rs worker_logit, no host/disk tiers, no decay)."""
    adjusted_prefill_blocks = max(0.0, raw_prefill_blocks - overlap_credit * overlap_blocks)
    return (
        prefill_load_scale * adjusted_prefill_blocks
        + decode_blocks
        + active_request_weight * active_requests
    )


def raw_prefill_blocks(
    active_prefill_tokens: int, isl_tokens: int, cached_tokens: int, block_size: int
) -> float:
    """The prompt-side load before the cache credit (mod.rs WorkerSelectionInput::row)."""
    uncached = max(0, isl_tokens - cached_tokens)
    return (active_prefill_tokens + uncached + cached_tokens) / block_size


def softmax_pick(costs: Sequence[float], temperature: float, sample: float) -> int:
    """default.rs softmax_sample_index: range-normalised softmax over costs, lower likelier."""
    lo, hi = min(costs), max(costs)
    if lo == hi:
        probs = [1.0 / len(costs)] * len(costs)
    else:
        scale = -1.0 / ((hi - lo) * temperature)
        weights = [math.exp((c - lo) * scale) for c in costs]
        total = sum(weights)
        probs = [w / total for w in weights]
    cumulative = 0.0
    for row, p in enumerate(probs):
        cumulative += p
        if sample <= cumulative:
            return row
    return len(costs) - 1


class DynamoRouter(Router):
    """Dynamo KV router: lowest prefill-after-overlap plus decode blocks."""

    def __init__(self, num_replicas: int, knobs: dict[str, Any], ties: Ties) -> None:
        super().__init__(num_replicas, knobs, ties)
        self.credit = float(option(knobs, "dynamo_overlap_credit"))
        self.scale = float(option(knobs, "dynamo_prefill_load_scale"))
        self.temperature = float(option(knobs, "dynamo_temperature"))
        self.request_weight = float(option(knobs, "dynamo_active_request_weight"))
        n = num_replicas
        self.prefill_tokens = [0] * n  # active (not yet prefilled) effective prompt tokens
        self.active_blocks: list[dict[int, int]] = [{} for _ in range(n)]  # id -> refcount
        self.active_requests = [0] * n
        self.pending: dict[int, int] = {}  # request index -> prefill tokens it added

    def logits(self, request: Request, view: FleetView) -> tuple[list[float], list[int]]:
        """Each worker's logit for `request`, and its overlap in blocks."""
        blocks = request.blocks
        size = request.block_size
        logits, overlaps = [], []
        for w in range(self.num_replicas):
            overlap = view.cached_blocks(w, blocks)
            active = self.active_blocks[w]
            decode_blocks = len(active) + len(blocks) - leading_run(active, blocks)
            raw = raw_prefill_blocks(
                self.prefill_tokens[w], request.prompt_tokens, overlap * size, size
            )
            logits.append(
                worker_logit(
                    raw,
                    overlap,
                    decode_blocks,
                    self.active_requests[w],
                    overlap_credit=self.credit,
                    prefill_load_scale=self.scale,
                    active_request_weight=self.request_weight,
                )
            )
            overlaps.append(overlap)
        return logits, overlaps

    def route(self, request: Request, view: FleetView) -> int:
        logits, overlaps = self.logits(request, view)
        if self.temperature > 0 and self.ties.rng is not None:
            pick = softmax_pick(logits, self.temperature, self.ties.random())
        else:
            low = min(logits)
            pick = self.ties.pick([w for w, c in enumerate(logits) if c == low])
        added = max(0, request.prompt_tokens - overlaps[pick] * request.block_size)
        self.prefill_tokens[pick] += added
        self.pending[request.index] = added
        active = self.active_blocks[pick]
        for b in request.blocks:
            active[b] = active.get(b, 0) + 1
        self.active_requests[pick] += 1
        return pick

    def on_first_token(self, request: Request, replica: int, t_s: float) -> None:
        added = self.pending.pop(request.index, None)
        if added is not None:
            self.prefill_tokens[replica] -= added

    def on_finished(self, request: Request, replica: int, t_s: float) -> None:
        self.on_first_token(request, replica, t_s)  # aborted before its first token
        active = self.active_blocks[replica]
        for b in request.blocks:
            left = active[b] - 1
            if left:
                active[b] = left
            else:
                del active[b]
        self.active_requests[replica] -= 1


ROUTER = DynamoRouter
